"""rollout --engine replay on multi-turn traces: tool output prefilled between turns (or decoded)."""

import json

import pytest

from samspec_bench import cli
from samspec_bench.data import load_tokenizer
from trace_fixtures import write_tool_dump

ROOFLINE = "roofline:hardware=H100,model=Qwen3-8B,tp=1"


@pytest.fixture(scope="module")
def dump(tmp_path_factory, qwen3_tokenizer_dir):
    d = tmp_path_factory.mktemp("tools")
    info = write_tool_dump(d, load_tokenizer(qwen3_tokenizer_dir), steps=[1], prompts=4, n=4)
    calls = sum(tool for pieces in info["pieces"].values() for _, tool in pieces)
    return d, info["steps"][1], calls


def _run(tmp_path, traces, tok, *args) -> dict:
    out = tmp_path / "r.json"
    cli.main(["rollout", "--engine", "replay", "--traces", str(traces), "--tokenizer", str(tok), "-k", "3",
              "--output", str(tmp_path / "r"), "--json", str(out), *args])
    return json.loads(out.read_text())


def test_tool_turns_are_prefilled_not_decoded(dump, qwen3_tokenizer_dir, tmp_path, capsys):
    d, counts, calls = dump
    res = _run(tmp_path, d, qwen3_tokenizer_dir)
    tools = res["metrics"]["workload"]["tool_output"]
    assert tools["tool_tokens"] == counts["tool"] and tools["mode"] == "prefill"
    off = res["metrics"]["arms"]["off"]
    # every generated token is emitted once, no tool token is
    assert off["emitted"] == counts["generated"]
    assert off["turns"]["tool_calls"] == calls and off["turns"]["tool_tokens_prefilled"] == counts["tool"]
    always = res["metrics"]["arms"]["always k=3"]
    assert always["emitted"] == counts["generated"] and always["accepted"] > 0
    out = capsys.readouterr().out
    assert f"tool output: {counts['tool']:,} of {counts['tool'] + counts['generated']:,} response tokens" in out
    assert f"{calls} tool call(s) in {counts['responses']} response(s) prefilled between turns" in out


def test_tool_output_decoded_on_request(dump, qwen3_tokenizer_dir, tmp_path):
    d, counts, _ = dump
    res = _run(tmp_path, d, qwen3_tokenizer_dir, "--tool-output", "decode")
    off = res["metrics"]["arms"]["off"]
    assert off["emitted"] == counts["generated"] + counts["tool"] and "turns" not in off


def test_tool_latency_idles_the_engine_and_is_in_the_total(dump, qwen3_tokenizer_dir, tmp_path):
    d, _, _ = dump
    fast = _run(tmp_path / "a", d, qwen3_tokenizer_dir, "--step-model", ROOFLINE)
    slow = _run(tmp_path / "b", d, qwen3_tokenizer_dir, "--step-model", ROOFLINE, "--tool-latency-s", "2")
    f_off, s_off = (r["metrics"]["arms"]["off"] for r in (fast, slow))
    assert "idle_s" not in f_off and s_off["idle_s"] >= 2.0   # every request waits for its first tool at least
    assert s_off["total_s"] == pytest.approx(s_off["head_s"] + s_off["tail_s"])
    assert s_off["total_s"] >= f_off["total_s"] + 2.0


def test_drawn_lengths_stretch_the_turns_with_the_profiles(dump, qwen3_tokenizer_dir, tmp_path):
    d, _, calls = dump
    res = _run(tmp_path, d, qwen3_tokenizer_dir, "--length-dist", "lognormal:600:0.5", "--draws", "1")
    off = res["metrics"]["arms"]["off"]
    total = res["metrics"]["workload"]["response_tokens"]
    assert off["turns"]["tool_calls"] >= calls // 2
    assert off["emitted"] + off["turns"]["tool_tokens_prefilled"] <= total


@pytest.mark.parametrize("args, says", [
    (["--tool-latency-s", "1"], "--tool-latency-s 1 prices tool calls in seconds"),
    (["--strategy", "arctic:divided=64", "--dp", "2", "--step-model", ROOFLINE], "a divided rollout moves requests"),
])
def test_tool_options_refused_where_unread(dump, qwen3_tokenizer_dir, tmp_path, capsys, args, says):
    d, _, _ = dump
    with pytest.raises(SystemExit) as e:
        _run(tmp_path, d, qwen3_tokenizer_dir, *args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_tool_options_on_traces_without_tool_output_are_refused(small, qwen3_tokenizer_dir, tmp_path, capsys):
    for args, says in ((["--tool-output", "decode"], "--tool-output decode replays tool output as generated"),
                       (["--tool-latency-s", "0.5", "--step-model", ROOFLINE], "no response the run replays")):
        with pytest.raises(SystemExit) as e:
            _run(tmp_path, small, qwen3_tokenizer_dir, *args)
        err = capsys.readouterr().err
        assert e.value.code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_a_measured_engine_refuses_the_tool_options(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["rollout", "--engine", "reference", "--tool-latency-s", "1", "--output", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--tool-latency-s 1 with --engine reference" in err


def test_executor_output_blocks_are_prefilled_by_default(traces_dir, qwen3_tokenizer_dir, tmp_path):
    tora = tmp_path / "tora.jsonl"
    with (traces_dir / "tora70b_gsm8k.jsonl").open() as f:
        tora.write_text("".join(next(f) for _ in range(6)))
    res = _run(tmp_path, tora, qwen3_tokenizer_dir)
    off = res["metrics"]["arms"]["off"]
    assert off["turns"]["tool_calls"] > 0


def test_multi_turn_rollout_sharded_by_verls_agent_loop(dump, qwen3_tokenizer_dir, tmp_path, capsys):
    d, counts, calls = dump
    res = _run(tmp_path, d, qwen3_tokenizer_dir, "--dp", "2", "--dp-shard", "agent-loop:3", "--step-model", ROOFLINE,
               "--tool-latency-s", "0.5")
    dp = res["metrics"]["workload"]["dp"]
    assert dp["requests_per_instance"] == [8, 8] and "3 agent-loop worker chunks" in dp["rule_text"]
    off = res["metrics"]["arms"]["off"]
    assert off["emitted"] == counts["generated"] and off["turns"]["tool_calls"] == calls
    with pytest.raises(SystemExit) as e:
        _run(tmp_path / "g", d, qwen3_tokenizer_dir, "--dp", "2", "--dp-shard", "agent-loop", "--sources", "group")
    assert e.value.code == 2 and "cannot share a drafter" in capsys.readouterr().err


def test_tool_latency_measured_in_the_users_verl_log(dump, qwen3_tokenizer_dir, shared_data, tmp_path, capsys):
    d, _, _ = dump
    log = tmp_path / "console.log"   # two steps: 1.2 s over 1 round, 2.0 s over 3 rounds -> 0.8 s a round
    log.write_text("step:1 - timing_s/agent_loop/tool_calls/mean:np.float64(1.2) - num_turns/mean:np.float64(4.0)\n"
                   "step:2 - timing_s/agent_loop/tool_calls/mean:np.float64(2.0) - num_turns/mean:np.float64(8.0)\n")
    res = _run(tmp_path, d, qwen3_tokenizer_dir, "--step-model", ROOFLINE, "--tool-latency-s", f"from:{log}")
    assert res["config"]["tool_latency_s"] == pytest.approx(0.8)
    assert res["config"]["tool_latency_from"]["steps"] == 2
    assert res["metrics"]["arms"]["off"]["idle_s"] >= 0.8
    assert "each tool round taking 0.800 s (MEASURED by verl's agent loop in" in capsys.readouterr().out


@pytest.mark.parametrize("drafter", ["sam-fixed", "sam"])
def test_rollout_keeps_the_tokens_per_step_accept_replays_turn_by_turn(dump, qwen3_tokenizer_dir, tmp_path, drafter):
    # accept replays each model turn as its own request (suites/accept/turns.py); the rollout walks
    # whole responses with tool text skipped (tool_turns.py, profile_walk.py): two implementations,
    # one answer. `sam` (the evidence policy) learns from each step's emitted tokens, so its
    # profile has to learn along the same walk, turn by turn, to give accept's drafts
    d, _, _ = dump
    rolled = _run(tmp_path / "r", d, qwen3_tokenizer_dir, "--drafter", drafter)["metrics"]["arms"]["always k=3"]
    out = tmp_path / "a.json"
    cli.main(["accept", "--engine", "replay", "--traces", str(d), "--tokenizer", str(qwen3_tokenizer_dir),
              "--drafter", drafter, "-k", "3", "--sources", "own", "--output", str(tmp_path / "a"),
              "--json", str(out)])
    accepted = json.loads(out.read_text())["metrics"][f"{drafter} k=3 own"]
    assert accepted["drafted_per_step"] > 0.5
    assert rolled["tokens_per_step"] == pytest.approx(accepted["tokens_per_step"], abs=1e-12)
    # and the drafted tokens: no response reaches --max-response-len, so the engine never knows
    # where one ends and drafts k at a turn's last tokens too, as accept's replay does
    assert rolled["drafted_per_step"] == pytest.approx(accepted["drafted_per_step"], abs=1e-12)
