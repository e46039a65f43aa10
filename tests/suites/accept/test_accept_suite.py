"""`samspec-bench accept`: the command end to end on small subsets of the real traces, its
outputs (result.json, responses.jsonl, figure), bad input, --json, --resume, a corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samspec_bench import cli
from samspec_bench.metrics import ResponseSteps, total_counts
from samspec_bench.bench.draft_config import DraftConfig
from samspec_bench.bench.engines.replay import ReplayEngine, response_key
from samspec_bench.errors import UserError
from samspec_bench.sam.drafters import arctic_available

QWEN = "qwen25math_math_100x8.jsonl"
TORA = "tora70b_gsm8k.jsonl"
METRICS = ("tokens_per_step", "acceptance_length", "draft_hit_rate", "acceptance_rate", "per_position_acceptance")


def _head(src: Path, dst: Path, n: int) -> Path:
    with src.open(encoding="utf-8") as f:
        dst.write_text("".join(next(f) for _ in range(n)), encoding="utf-8")
    return dst


@pytest.fixture(scope="module")
def subset(traces_dir, tmp_path_factory) -> Path:
    """Two groups of 8 sampled responses and 6 single greedy responses, in a directory."""
    d = tmp_path_factory.mktemp("subset")
    _head(traces_dir / QWEN, d / QWEN, 16)
    _head(traces_dir / TORA, d / TORA, 6)
    return d


def run_cli(args, capsys, expect_exit: int | None = None):
    if expect_exit is None:
        cli.main(args)
    else:
        with pytest.raises(SystemExit) as e:
            cli.main(args)
        assert e.value.code == expect_exit
    return capsys.readouterr()


def base_args(subset, tok, out) -> list[str]:
    return ["accept", "--engine", "replay", "--traces", str(subset), "--tokenizer", str(tok),
            "--output", str(out), "--no-progress"]


def only_run(out: Path) -> Path:
    runs = sorted(out.glob("accept-*"))
    assert len(runs) == 1
    return runs[0]


def read_jsonl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_sweep_end_to_end(subset, qwen3_tokenizer_dir, tmp_path, capsys):
    out = tmp_path / "res"
    got = run_cli(base_args(subset, qwen3_tokenizer_dir, out) +
                  ["--drafter", "sam,ngram", "-k", "1,3", "--sources", "own,group", "--bins", "128,256,512",
                   "--json", str(tmp_path / "r.json")], capsys)
    run = only_run(out)
    result = json.loads((run / "result.json").read_text())
    assert json.loads((tmp_path / "r.json").read_text())["metrics"] == result["metrics"]
    assert result["suite"] == "accept" and result["config"]["engine"] == "replay"
    labels = ["sam k=1 own", "sam k=1 own+group(concurrent)", "sam k=3 own", "sam k=3 own+group(concurrent)",
              "ngram k=1 own", "ngram k=3 own"]
    assert sorted(result["metrics"]) == sorted(labels)
    assert set(result["unsupported"]) == {"ngram k=1 own+group(concurrent)", "ngram k=3 own+group(concurrent)"}
    assert result["inputs"]["responses"] == 22 and result["inputs"]["skipped_lines"] == 0
    assert result["inputs"]["prompt_formats"][str(subset / QWEN)] == {"chat_template": 16}
    assert result["inputs"]["prompt_formats"][str(subset / TORA)] == {"raw": 6}
    assert result["cost_model"]["verify_cost_ratio"]["3"]["source"] == "assumption"
    assert "sam k=3 own" in got.out and "tokens_per_step" in got.out and "assumed" in got.out
    # the 6 ToRA responses are one per prompt: their groups give the group source nothing, said and counted
    gs = result["group_source"]
    assert (gs["groups"], gs["groups_with_one_response"]) == (8, 6)
    assert gs["note"].startswith("group source: 6 of 8 groups have one response, and there the group source holds "
                                 "nothing beyond the response's own text")
    assert f"note: {gs['note']}" in " ".join(got.out.split())

    records = read_jsonl(run / "responses.jsonl")
    # one record per request: 16 single-turn responses, 6 ToRA responses of two model turns (test_accept_turns)
    assert len(records) == 28 * len(labels) and result["inputs"]["requests"] == 28
    for label, m in result["metrics"].items():
        for name in METRICS:
            assert name in m
        recs = [r for r in records if r["config"] == label]
        assert len({r["key"] for r in recs}) == 28 and m["responses"] == 22 and m["requests"] == 28
        steps = [ResponseSteps.from_record(r) for r in recs]
        c = total_counts(steps)
        assert m["counts"] == c.metrics()["counts"]
        assert m["tokens_per_step"] == pytest.approx(c.tokens / c.steps)
        assert m["speedup_estimate"] == pytest.approx(m["tokens_per_step"])  # assumed ratio 1.0
        assert c.tokens == sum(r["response_tokens"] - 1 for r in recs)
        rows = result["tables"]["binned"][label]
        assert [r["label"] for r in rows] == ["[0, 128)", "[128, 256)", "[256, 512)", "[512, inf)"]
        assert sum(r["counts"]["steps"] for r in rows) == m["counts"]["steps"]
        assert sum(r["counts"]["accepted"] for r in rows) == m["counts"]["accepted"]
        per_file = result["tables"]["by_file"][label]
        assert sorted(per_file) == sorted([str(subset / QWEN), str(subset / TORA)])
        for key in ("steps", "tokens", "drafts", "accepted"):
            assert sum(f["counts"][key] for f in per_file.values()) == m["counts"][key]
    # sam without sharing equals the replay engine on the same responses (which the replay
    # tests hold to the brute-force oracle)
    from samspec_bench.data import load_tokenizer, read_traces, tokenize_traces

    items = tokenize_traces(read_traces(subset), load_tokenizer(qwen3_tokenizer_dir))
    direct = {}
    for _, chunk in ReplayEngine(workers=1).run(items, [(DraftConfig("sam", 3), range(len(items)))]):
        direct.update({response_key(items[i]): rs for i, rs in chunk})
    for r in records:
        if r["config"] == "sam k=3 own" and r["file"] == str(subset / QWEN):   # single-turn: whole responses
            rs = direct[r["key"]]
            assert r["step_accepted"] == "".join(map(str, rs.accepted.tolist()))
            assert r["steps"] == rs.steps and r["prompt_tokens"] == rs.prompt_len
    for name in ("acceptance_vs_position.png", "acceptance_vs_position.svg"):
        assert (run / name).stat().st_size > 1000 and name in result["figures"]


def test_json_to_stdout_and_sequential_order(subset, qwen3_tokenizer_dir, tmp_path, capsys):
    got = run_cli(base_args(subset, qwen3_tokenizer_dir, tmp_path) +
                  ["--sources", "group", "--group-order", "sequential", "--verify-cost-ratio", "1.25",
                   "--json", "-"], capsys)
    result = json.loads(got.out)  # stdout holds the JSON only; the table went to stderr
    m = result["metrics"]["sam k=3 own+group(sequential)"]
    assert m["group_order"] == "sequential" and m["verify_cost_ratio"] == 1.25
    c = m["counts"]
    assert m["speedup_estimate"] == pytest.approx(c["tokens"] / (c["steps"] - c["drafts"] + 1.25 * c["drafts"]))
    assert "tokens_per_step" in got.err


def test_engine_profile_sets_the_verify_cost(subset, qwen3_tokenizer_dir, tmp_path, capsys):
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps({"verify_cost_ratio": {"3": 1.2, "5": 1.3}}))
    args = base_args(subset, qwen3_tokenizer_dir, tmp_path / "o") + ["--engine-profile", str(prof), "--json", "-"]
    result = json.loads(run_cli(args + ["-k", "3,5"], capsys).out)
    assert result["metrics"]["sam k=5 own"]["verify_cost_ratio"] == 1.3
    assert result["cost_model"]["verify_cost_ratio"]["3"]["source"].startswith("engine profile")
    got = run_cli(args + ["-k", "8"], capsys, expect_exit=2)  # the profile has no ratio for k=8
    assert "k=8" in got.err


def test_measured_verify_cost_prices_the_sam_draft_length(subset, qwen3_tokenizer_dir, tmp_path, capsys):
    """A measured verify cost sets the evidence policy's cost per draft token, (r - 1) / k: a
    dearer verify drafts fewer tokens; the assumed ratio leaves the default policy alone."""
    def run(extra, out):
        args = base_args(subset, qwen3_tokenizer_dir, tmp_path / out) + ["--drafter", "sam,ngram", "--json", "-"]
        return json.loads(run_cli(args + extra, capsys).out)["metrics"]

    cheap = run(["--verify-cost-ratio", "1.3"], "cheap")
    dear = run(["--verify-cost-ratio", "3.4"], "dear")
    assumed = run([], "assumed")
    assert cheap["sam k=3 own"]["options"]["length"] == "evidence:cost=0.1"
    assert dear["sam k=3 own"]["options"]["length"] == "evidence:cost=0.8"
    assert "length" not in assumed["sam k=3 own"]["options"]
    assert "length" not in cheap["ngram k=3 own"]["options"]    # only sam's policy is priced
    assert dear["sam k=3 own"]["drafted_per_step"] < cheap["sam k=3 own"]["drafted_per_step"]
    assert dear["ngram k=3 own"]["drafted_per_step"] == cheap["ngram k=3 own"]["drafted_per_step"]


def test_resume_continues_and_reproduces(subset, qwen3_tokenizer_dir, tmp_path, capsys):
    out = tmp_path / "res"
    args = base_args(subset, qwen3_tokenizer_dir, out) + ["-k", "3,5", "--sources", "own,group"]
    run_cli(args, capsys)
    run = only_run(out)
    first = json.loads((run / "result.json").read_text())
    lines = (run / "responses.jsonl").read_text().splitlines(keepends=True)
    # an interruption: a few records written, the last one torn, no result
    (run / "responses.jsonl").write_text("".join(lines[:30]) + lines[30][:25])
    (run / "result.json").unlink()
    got = run_cli(args + ["--resume", str(run)], capsys)
    again = json.loads((run / "result.json").read_text())
    assert again["metrics"] == first["metrics"]
    assert again["tables"] == first["tables"]
    assert again["resumed_responses"] > 0
    assert "resuming" in got.err
    # the torn line stays apart: every response of every configuration can be read back
    text = (run / "responses.jsonl").read_text()
    recs = [json.loads(x) for x in text.splitlines() if x.startswith("{") and x.endswith("}")]
    assert len({(r["config"], r["key"]) for r in recs}) == 28 * 4   # 28 requests: 16 + 6 ToRA responses of two model turns
    # other options cannot continue that run
    got = run_cli(args[:-4] + ["-k", "8", "--sources", "own,group", "--resume", str(run)], capsys, expect_exit=2)
    assert "num_spec_tokens" in got.err and "--resume" in got.err


def test_resume_refuses_traces_changed_since_the_run_started(traces_dir, qwen3_tokenizer_dir, tmp_path, capsys):
    # records are keyed by file and line: an edited trace file would have its old records reused
    src = tmp_path / "traces"
    src.mkdir()
    trace = _head(traces_dir / QWEN, src / QWEN, 16)
    out = tmp_path / "res"
    args = base_args(src, qwen3_tokenizer_dir, out)
    run_cli(args, capsys)
    run = only_run(out)
    (run / "result.json").unlink()
    lines = trace.read_text(encoding="utf-8").splitlines(keepends=True)
    rows = [json.loads(x) for x in lines]
    rows[3]["response"] = rows[3]["response"][: len(rows[3]["response"]) // 2]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    got = run_cli(args + ["--resume", str(run)], capsys, expect_exit=2)
    line = got.err.strip().splitlines()[-1]   # after the progress lines: one error line
    assert line.startswith("error: --resume") and f"{trace} changed since the run started" in line
    assert "start a new run" in line
    assert not (run / "result.json").exists()
    # a file added to the traces folder is named too
    _head(traces_dir / TORA, src / TORA, 2)
    trace.write_text("".join(lines), encoding="utf-8")
    got = run_cli(args + ["--resume", str(run)], capsys, expect_exit=2)
    assert f"{src / TORA} is read now and was not then" in got.err
    # the files as they were: the run continues
    (src / TORA).unlink()
    run_cli(args + ["--resume", str(run)], capsys)
    assert (run / "result.json").is_file()


def test_a_resume_with_options_missing_says_to_give_them_again(subset, qwen3_tokenizer_dir, tmp_path, capsys,
                                                                monkeypatch):
    # --resume does not read the run's options back: the error says so beside what is wrong
    monkeypatch.setenv("SAMSPEC_DATA_DIR", str(tmp_path / "nowhere"))   # no traces to fall back on
    got = run_cli(["accept", "--resume", str(tmp_path / "run")], capsys, expect_exit=2)
    (line,) = got.err.strip().splitlines()
    assert "needs recorded responses" in line
    assert line.endswith(f"(--resume {tmp_path / 'run'}: give the run's options again, as its config.json lists them)")
    # an option given and wrong: its own error, no hint
    got = run_cli(["accept", "--engine", "replay", "--traces", str(subset), "--tokenizer", str(qwen3_tokenizer_dir),
                   "-k", "0", "--resume", str(tmp_path / "run")], capsys, expect_exit=2)
    assert "--num-spec-tokens 0" in got.err and "give the run's options again" not in got.err


def _bad_traces(traces_dir: Path, tmp: Path) -> Path:
    good = (traces_dir / TORA).read_text(encoding="utf-8").splitlines()[:3]
    row = json.loads(good[0])
    lines = [good[0],
             "{not json",                                                   # line 2
             json.dumps({k: v for k, v in row.items() if k != "group"}),    # line 3: lacks a field
             json.dumps({**row, "id": "empty", "response": ""}),            # line 4: empty response
             json.dumps({"id": "big", "group": "g", "prompt_ids": [1, 2],
                         "response_ids": [5, 10 ** 7]}),                    # line 5: beyond the vocabulary
             good[1], good[2]]
    p = tmp / "bad.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_bad_lines_stop_naming_file_and_line(traces_dir, qwen3_tokenizer_dir, tmp_path, capsys):
    bad = _bad_traces(traces_dir, tmp_path)
    got = run_cli(["accept", "--traces", str(bad), "--tokenizer", str(qwen3_tokenizer_dir),
                   "--output", str(tmp_path / "o"), "--no-progress"], capsys, expect_exit=2)
    assert f"{bad}:2" in got.err and "--on-error skip" in got.err
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_bad_lines_are_skipped_and_counted(traces_dir, qwen3_tokenizer_dir, tmp_path, capsys):
    bad = _bad_traces(traces_dir, tmp_path)
    got = run_cli(["accept", "--traces", str(bad), "--tokenizer", str(qwen3_tokenizer_dir), "--on-error", "skip",
                   "--output", str(tmp_path / "o"), "--no-progress", "--json", "-"], capsys)
    result = json.loads(got.out)
    assert result["inputs"]["skipped_lines"] == 4
    assert sorted(s["line"] for s in result["inputs"]["skipped"]) == [2, 3, 4, 5]
    assert all(s["file"] == str(bad) for s in result["inputs"]["skipped"])
    assert "vocabulary" in next(s["reason"] for s in result["inputs"]["skipped"] if s["line"] == 5)
    assert result["inputs"]["responses"] == 3
    assert result["metrics"]["sam k=3 own"]["responses"] == 3
    for line in (2, 3, 4, 5):
        assert f"{bad}:{line}" in got.err


@pytest.mark.parametrize("extra, message", [
    (["-k", "0"], "--num-spec-tokens"),
    (["-k", "3,x"], "--num-spec-tokens"),
    (["--drafter", "sam,medusa"], "medusa"),
    (["--sources", "own,friends"], "--sources"),
    (["--sources", "corpus"], "--corpus"),
    (["--bins", "log2:100:200"], "--bins"),
    (["--verify-cost-ratio", "-1"], "--verify-cost-ratio"),
    (["--engine", "vllm"], "vllm"),
])
def test_bad_options_exit_2_with_one_line(subset, qwen3_tokenizer_dir, tmp_path, capsys, extra, message):
    args = base_args(subset, qwen3_tokenizer_dir, tmp_path / "o")
    if "--engine" in extra:   # an option is given once: the case's engine replaces replay
        del args[1:3]
    got = run_cli(args + extra, capsys, expect_exit=2)
    assert message in got.err
    assert len([x for x in got.err.splitlines() if x.startswith("error")]) <= 1


@pytest.mark.skipif(arctic_available(), reason="arctic-inference is installed here")
def test_suffix_unavailable_is_reported(subset, qwen3_tokenizer_dir, tmp_path, capsys):
    got = run_cli(base_args(subset, qwen3_tokenizer_dir, tmp_path / "o") + ["--drafter", "suffix"], capsys,
                  expect_exit=2)
    assert "arctic-inference" in got.err
    got = run_cli(base_args(subset, qwen3_tokenizer_dir, tmp_path / "o2") + ["--drafter", "sam,suffix",
                                                                             "--json", "-"], capsys)
    result = json.loads(got.out)
    assert list(result["metrics"]) == ["sam k=3 own"]
    assert "arctic-inference" in result["unsupported"]["suffix k=3 own"]


def test_static_corpus_source(traces_dir, subset, qwen3_tokenizer_dir, tmp_path, capsys):
    # an "earlier RL step" that holds the replayed responses (distinct questions, one response
    # each): the whole context always occurs in exactly one corpus document, its own
    corpus = _head(traces_dir / TORA, tmp_path / "earlier_step.jsonl", 40)
    replayed = subset / TORA
    args = ["accept", "--traces", str(replayed), "--tokenizer", str(qwen3_tokenizer_dir), "--output",
            str(tmp_path / "o"), "--no-progress", "--sources", "own,corpus", "--corpus", str(corpus),
            # whole responses: with tool output prefilled, a draft at a model turn's end runs on into
            # the ```output block and is rejected there (test_accept_turns.py)
            "--tool-output", "decode", "--drafter", "sam-fixed,sam", "--json", "-"]
    result = json.loads(run_cli(args, capsys).out)
    assert result["inputs"]["corpus"]["documents"] == 40
    # so the baseline (the longest match's continuation) drafts the true continuation at every
    # step, clipped at the response's end
    own, withc = result["metrics"]["sam-fixed k=3 own"], result["metrics"]["sam-fixed k=3 own+corpus"]
    assert withc["acceptance_rate"] == 1.0 and withc["draft_hit_rate"] == 1.0
    assert withc["tokens_per_step"] >= own["tokens_per_step"]
    # the evidence policy reads the corpus too: more tokens per step than from the own context
    own, withc = result["metrics"]["sam k=3 own"], result["metrics"]["sam k=3 own+corpus"]
    assert withc["tokens_per_step"] > own["tokens_per_step"]
    # the replayed traces themselves cannot serve as the corpus
    got = run_cli(args[:-4] + ["--corpus", str(replayed)], capsys, expect_exit=2)
    assert "also a replayed trace" in got.err


def test_limit_groups_and_response_position(subset, qwen3_tokenizer_dir, tmp_path, capsys):
    got = run_cli(base_args(subset, qwen3_tokenizer_dir, tmp_path) +
                  ["--limit-groups", "1", "--position", "response", "--json", "-"], capsys)
    result = json.loads(got.out)
    assert result["inputs"]["responses"] == 8 + 1  # one group of 8, one single response
    assert result["position_basis"] == "response"
    rows = result["tables"]["binned"]["sam k=3 own"]
    # response positions start at 1: the first bin [0, 64) holds steps of every response
    assert rows[0]["counts"]["steps"] > 0 and rows[0]["lo"] == 0


def test_help_lists_the_command(capsys):
    assert "accept" in run_cli(["--help"], capsys).out
    assert "--num-spec-tokens" in run_cli(["accept", "--help"], capsys).out


@pytest.mark.slow
def test_accept_on_the_reference_engine_counts_every_decode_step(tmp_path, traces_dir):
    """The model engine path: the model writes its own responses, so the counts are checked
    against their definitions rather than against the trace."""
    from samspec_bench.models.checkpoints import resolve_model
    from samspec_bench.suites.accept import AcceptConfig, run

    cfg = AcceptConfig(engine="reference", model="builtin:tiny-qwen3",
                       traces=[str(traces_dir / "tora70b_gsm8k.jsonl")],
                       tokenizer=str(resolve_model("builtin:tiny-qwen3")),
                       drafters=["sam", "ngram"], num_spec_tokens=[3], limit_groups=3)
    result, run_dir = run(cfg, tmp_path, progress=False)
    rows = [json.loads(line) for line in (run_dir / "responses.jsonl").read_text().splitlines()]
    assert {r["config"] for r in rows} == {"sam k=3 own", "ngram k=3 own"}
    for r in rows:
        steps = ResponseSteps.from_record(r)
        assert all(a <= d <= 3 for a, d in zip(steps.accepted, steps.drafted))
        assert sum(steps.emitted) == steps.response_len - 1  # every token after the first is a decode step


def test_accept_verifies_draft_trees_on_the_reference_engine(tmp_path, capsys):
    """`--strategy NAME:paths=W` runs where a model verifies the trees: drafted tokens per step
    count the trees' nodes, acceptance stays below them, every token after the first is a
    decode step; the replay engine refuses the strategy in one line."""
    monkey_args = ["accept", "--model", "builtin:tiny-qwen3", "--engine", "reference", "--benchmark", "gsm8k",
                   "--limit-groups", "2", "--max-tokens", "24", "-k", "4", "--strategy",
                   "evidence:k=4@own,evidence:k=4:paths=4@own", "--output", str(tmp_path / "o"), "--no-progress",
                   "--json", str(tmp_path / "r.json")]
    run_cli(monkey_args, capsys)
    result = json.loads((tmp_path / "r.json").read_text())
    tree = result["metrics"]["evidence:k=4:paths=4@own: sam k=4 own"]
    chain = result["metrics"]["evidence:k=4@own: sam k=4 own"]
    assert tree["strategy"] == "evidence:k=4:paths=4@own" and tree["responses"] == 2
    assert chain["responses"] == 2
    recs = [r for r in read_jsonl(only_run(tmp_path / "o") / "responses.jsonl") if "paths" in r["config"]]
    assert len(recs) == 2 and any(max(ResponseSteps.from_record(r).drafted) > 4 for r in recs)   # a wider tree
    for r in recs:
        steps = ResponseSteps.from_record(r)
        assert all(a <= min(d, 4) for a, d in zip(steps.accepted, steps.drafted))   # one path's tokens kept
        assert max(steps.drafted) <= 16 and sum(steps.emitted) == steps.response_len - 1
    err = run_cli(["accept", "--engine", "replay", "--traces", str(tmp_path / "none.jsonl"), "--tokenizer",
                   str(tmp_path), "--strategy", "arctic:paths=4", "--output", str(tmp_path / "x")], capsys, 2).err
    assert "--engine reference" in err and len(err.strip().splitlines()) == 1


def test_suite_contract_build_config_and_execute(subset, qwen3_tokenizer_dir, tmp_path, capsys):
    """`run` (and any caller) builds the config from the command's options by name, as click
    converts them, and calls execute: the same run as the command line."""
    import inspect

    from samspec_bench.suites import accept

    assert accept.SUITE == "accept"
    names = {p.name for p in accept.command.params} - {"output", "json_path", "resume"}
    params = inspect.signature(accept.build_config).parameters
    assert set(params) == names and all(p.default is inspect.Parameter.empty for p in params.values())
    ctx = accept.command.make_context("accept", ["--traces", str(subset / TORA), "--tokenizer",
                                                 str(qwen3_tokenizer_dir), "-k", "2,3", "--no-progress"])
    cfg = accept.build_config(**{k: v for k, v in ctx.params.items() if k in names})
    assert cfg.num_spec_tokens == [2, 3] and cfg.progress is False
    assert accept.execute(cfg, output=tmp_path / "a", json_path=str(tmp_path / "a.json")) == 0
    run_cli(["accept", "--traces", str(subset / TORA), "--tokenizer", str(qwen3_tokenizer_dir), "-k", "2,3",
             "--no-progress", "--output", str(tmp_path / "b"), "--json", str(tmp_path / "b.json")], capsys)
    a, b = (json.loads((tmp_path / f"{x}.json").read_text()) for x in "ab")
    assert a["config"] == b["config"] and a["metrics"] == b["metrics"]
    assert "progress" not in a["config"]   # how a run is shown is not what it computed
    with pytest.raises(UserError, match="--sam-min-match"):
        accept.build_config(**{**{k: v for k, v in ctx.params.items() if k in names}, "sam_min_match": 0})


# --- the user's model and the user's rollouts ----------------------------------------------------------

from trace_fixtures import grouped_rows, write_lm_eval_samples, write_verl_dump  # noqa: E402

from samspec_bench.bench.engines.replay import EMULATED_STEPS  # noqa: E402
from samspec_bench.data import load_tokenizer  # noqa: E402

SIDE = ("own", "own+group", "own+history", "own+group+history")


@pytest.fixture(scope="module")
def verl_dump(traces_dir, qwen3_tokenizer_dir, tmp_path_factory) -> Path:
    """A verl rollout_data_dir: 4 prompts, 2 a step, 4 responses each, 2 epochs (steps 1-4;
    steps 3 and 4 see the prompts of steps 1 and 2 again)."""
    d = tmp_path_factory.mktemp("verl") / "rollout_data_dir"
    write_verl_dump(d, load_tokenizer(qwen3_tokenizer_dir), grouped_rows(traces_dir / QWEN, 4), batch=2, n=4,
                    epochs=2)
    return d


def _metric_counts(result, label, step):
    rows = {r["step"]: r for r in result["tables"]["by_step"][label]}
    return rows[step]["counts"]


def test_verl_dump_replays_step_by_step_with_group_and_history(verl_dump, qwen3_tokenizer_dir, tmp_path, capsys):
    got = run_cli(["accept", "--traces", str(verl_dump), "--tokenizer", str(qwen3_tokenizer_dir), "--sources",
                   "own,group,history,group+history", "--output", str(tmp_path / "o"), "--no-progress",
                   "--json", str(tmp_path / "r.json")], capsys)
    result = json.loads((tmp_path / "r.json").read_text())
    inp = result["inputs"]
    assert set(inp["trace_formats"].values()) == {"verl"} and len(inp["trace_formats"]) == 4
    assert inp["responses"] == 32 and inp["steps"] == "RL steps from the traces (4 steps)"
    assert inp["models"]["unstated"] and not inp["models"]["models"]   # verl dumps name no model
    labels = {"own": "sam k=3 own", "group": "sam k=3 own+group(concurrent)", "history": "sam k=3 own+history",
              "both": "sam k=3 own+group+history(concurrent)"}
    for label in labels.values():
        assert [r["step"] for r in result["tables"]["by_step"][label]] == [1, 2, 3, 4]
    # epoch 1 (steps 1, 2): nothing earlier, so history changes nothing
    for step in (1, 2):
        assert _metric_counts(result, labels["history"], step) == _metric_counts(result, labels["own"], step)
        assert _metric_counts(result, labels["both"], step) == _metric_counts(result, labels["group"], step)
    hist = result["engine"]["history"]["by_configuration"][labels["history"]]
    assert hist["replayed_with_history"] == 16 and hist["responses_added"] == 32
    # side by side, one row per drafter and k
    (row,) = result["tables"]["sources"]
    assert all(row[s] is not None for s in SIDE) and row[SIDE[2]]["label"] == labels["history"]
    assert "draft sources side by side" in got.out and "16/32 responses had earlier responses" in got.out
    run = only_run(tmp_path / "o")
    recs = read_jsonl(run / "responses.jsonl")
    assert {r["step"] for r in recs} == {1, 2, 3, 4}


def test_single_step_traces_emulate_an_earlier_step(subset, qwen3_tokenizer_dir, tmp_path, capsys):
    got = run_cli(["accept", "--traces", str(subset / QWEN), "--tokenizer", str(qwen3_tokenizer_dir),
                   "--sources", "own,history", "--output", str(tmp_path), "--no-progress", "--json", "-"], capsys)
    result = json.loads(got.out)
    assert result["inputs"]["steps"] == EMULATED_STEPS
    assert result["engine"]["steps"] == EMULATED_STEPS
    own, hist = "sam k=3 own", "sam k=3 own+history"
    assert _metric_counts(result, hist, 0) == _metric_counts(result, own, 0)   # the earlier half has no history
    h = result["engine"]["history"]["by_configuration"][hist]
    assert h["replayed_with_history"] == 8 and h["responses_held"] == 16
    # without a history source nothing is split
    plain = json.loads(run_cli(base_args(subset, qwen3_tokenizer_dir, tmp_path / "p") + ["--json", "-"], capsys).out)
    assert plain["inputs"]["steps"] is None and "by_step" not in plain["tables"]


def test_replay_with_model_refuses_other_models_traces(subset, qwen3_tokenizer_dir, tmp_path, capsys):
    args = base_args(subset, qwen3_tokenizer_dir, tmp_path / "o") + ["--model", "Qwen3-8B"]
    got = run_cli(args, capsys, expect_exit=2)
    assert "responses of 'Qwen2.5-Math-Instruct (size unstated)', not of --model Qwen/Qwen3-8B" in got.err
    assert "--any-model" in got.err and not (tmp_path / "o").exists()
    result = json.loads(run_cli(args + ["--any-model", "--json", "-"], capsys).out)
    assert result["config"]["model"] == "Qwen/Qwen3-8B" and result["config"]["any_model"] is True
    assert "Qwen2.5-Math-Instruct (size unstated)" in result["inputs"]["models"]["models"][str(subset / QWEN)]


def test_replay_with_a_cached_hub_model_uses_its_tokenizer(traces_dir, qwen3_tokenizer_dir, tmp_path, monkeypatch,
                                                          capsys):
    """--model Qwen3-8B from the local Hugging Face cache (only its tokenizer files are needed to
    replay), on traces that name that model."""
    cache = tmp_path / "hub"
    snap = cache / "models--Qwen--Qwen3-8B" / "snapshots" / ("c" * 40)
    snap.mkdir(parents=True)
    for f in qwen3_tokenizer_dir.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (cache / "models--Qwen--Qwen3-8B" / "refs").mkdir()
    (cache / "models--Qwen--Qwen3-8B" / "refs" / "main").write_text("c" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = [json.loads(x) for x in (traces_dir / QWEN).read_text(encoding="utf-8").splitlines()[:8]]
    trace = tmp_path / "mine.jsonl"
    trace.write_text("".join(json.dumps({**r, "model": "Qwen/Qwen3-8B"}) + "\n" for r in rows), encoding="utf-8")
    result = json.loads(run_cli(["accept", "--engine", "replay", "--model", "Qwen3-8B", "--traces", str(trace),
                                 "--output", str(tmp_path / "o"), "--no-progress", "--json", "-"], capsys).out)
    assert result["inputs"]["tokenizer"] == str(snap) and result["inputs"]["responses"] == 8
    # not cached: one line with the id and the command that downloads the tokenizer
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    got = run_cli(["accept", "--engine", "replay", "--model", "Qwen3-8B", "--traces", str(trace), "--output",
                   str(tmp_path / "o2"), "--no-progress"], capsys, expect_exit=2)
    assert 'hf download Qwen/Qwen3-8B --include "tokenizer*"' in got.err and len(got.err.strip().splitlines()) == 1


def test_model_without_engine_runs_the_model(tmp_path, monkeypatch, capsys):
    import importlib.util

    from samspec_bench.suites.accept.config import choose_engine

    monkeypatch.chdir(tmp_path)   # from any directory: no shared data here
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert choose_engine(None) == ("replay", None)
    engine, why = choose_engine("builtin:tiny-qwen3")
    if importlib.util.find_spec("vllm") is None:
        assert engine == "reference" and "vLLM does not import here" in why
    got = run_cli(["accept", "--model", "Qwen3-8B"], capsys, expect_exit=2)
    assert got.err.strip() == (f"error: model Qwen/Qwen3-8B: its weights are not in the Hugging Face "
                               f"cache ({tmp_path / 'hub'}) and HF_HUB_OFFLINE is set: download it where the hub is "
                               "reachable: hf download Qwen/Qwen3-8B")
    got = run_cli(["accept"], capsys, expect_exit=2)
    assert "needs recorded responses: pass --traces" in got.err and "--model MODEL" in got.err


def test_model_engine_on_the_builtin_prompts(tmp_path, monkeypatch, capsys):
    """A fresh install: `accept --model M --engine reference` generates from a built-in benchmark set."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    got = run_cli(["accept", "--model", "builtin:tiny-qwen3", "--engine", "reference", "--benchmark", "aime25",
                   "--limit-groups", "2", "--max-tokens", "12", "--sources", "own,history", "--output",
                   str(tmp_path / "o"), "--no-progress", "--json", "-"], capsys)
    result = json.loads(got.out)
    assert result["inputs"]["builtin_prompts"]["benchmark"] == "aime25"
    assert result["inputs"]["builtin_prompts"]["prompts"] == 2 and result["inputs"]["responses"] == 2
    assert list(result["metrics"]) == ["sam k=3 own"]
    assert "--engine replay only" in result["unsupported"]["sam k=3 own+history"]
    recs = read_jsonl(only_run(tmp_path / "o") / "responses.jsonl")
    assert len(recs) == 2 and all(0 < r["response_tokens"] <= 12 for r in recs)
    assert "prompts from the built-in aime25 set (first 2)" in got.err


def test_lm_eval_samples_replay(traces_dir, qwen3_tokenizer_dir, tmp_path, capsys):
    out = write_lm_eval_samples(tmp_path / "lm", grouped_rows(traces_dir / QWEN, 3), repeats=4)
    args = ["accept", "--engine", "replay", "--traces", str(out), "--tokenizer", str(qwen3_tokenizer_dir),
            "--sources", "own,group", "--output", str(tmp_path / "o"), "--no-progress", "--json", "-"]
    result = json.loads(run_cli(args + ["--model", "Qwen/Qwen2.5-Math-7B-Instruct"], capsys).out)
    assert result["inputs"]["responses"] == 12 and set(result["inputs"]["trace_formats"].values()) == {"lm-eval"}
    assert result["metrics"]["sam k=3 own+group(concurrent)"]["responses"] == 12
    keys = {r["key"] for r in read_jsonl(only_run(tmp_path / "o") / "responses.jsonl") if r["sources"] == "own"}
    assert len(keys) == 12 and all("#" in k for k in keys)   # four responses on one line: distinct keys
    got = run_cli(args[:-5] + ["--model", "Qwen3-8B", "--output", str(tmp_path / "o2"), "--no-progress"], capsys,
                  expect_exit=2)
    assert "not of --model Qwen/Qwen3-8B" in got.err


def test_trace_format_errors_exit_2(tmp_path, qwen3_tokenizer_dir, capsys):
    (tmp_path / "rollouts.jsonl").write_text(json.dumps({"input": "q", "output": "a"}) + "\n")
    got = run_cli(["accept", "--traces", str(tmp_path), "--trace-format", "verl", "--tokenizer",
                   str(qwen3_tokenizer_dir), "--output", str(tmp_path / "o"), "--no-progress"], capsys, expect_exit=2)
    assert "holds no verl step files" in got.err and len(got.err.strip().splitlines()) == 1


def test_a_limited_run_resumes_and_one_saved_before_the_rule_is_refused(traces_dir, qwen3_tokenizer_dir, tmp_path,
                                                                       capsys):
    """--limit-groups: a run folder records which rule it kept groups by; it resumes, and one saved
    without the rule (an older samspec-bench) is refused in one line, before any replay."""
    src = tmp_path / "traces"
    src.mkdir()
    _head(traces_dir / QWEN, src / QWEN, 16)
    out = tmp_path / "res"
    args = base_args(src, qwen3_tokenizer_dir, out) + ["--limit-groups", "1"]
    run_cli(args, capsys)
    run = only_run(out)
    result = json.loads((run / "result.json").read_text())
    assert result["inputs"]["limit"]["groups"] == 1
    (run / "result.json").unlink()
    run_cli(args + ["--resume", str(run)], capsys)
    assert (run / "result.json").is_file()
    saved = json.loads((run / "config.json").read_text())
    del saved["limit_groups_per"]
    (run / "config.json").write_text(json.dumps(saved))
    got = run_cli(args + ["--resume", str(run)], capsys, expect_exit=2)
    assert "--limit-groups 1 kept the first 1 groups of each step file" in got.err and "start a new run" in got.err
