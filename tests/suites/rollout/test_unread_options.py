"""Nothing silent: `rollout` options that a run would not read (exit 0, the same figures) are
refused in one line naming the option and the fix (UserError, exit 2); where something does read
them they still run (suites/rollout/unread_options.py)."""

import json

import pytest
from click.testing import CliRunner

from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout.command import profile_command
from samspec_bench.suites.rollout.unread_options import refuse_other_profiler

OUTPUT_OPTIONS = ("output", "json_path", "resume")


def _defaults(**over):
    """Every parameter of the click command at its click default (what `samspec-bench run` fills)."""
    params = {p.name: p.default for p in ro.command.params if p.name not in OUTPUT_OPTIONS}
    params.update(over)
    return params


def _refused(over: dict, needle: str) -> str:
    with pytest.raises(UserError) as e:
        ro.build_config(**_defaults(**over))
    msg = str(e.value)
    assert needle in msg and "\n" not in msg, msg
    return msg


# ---------- refused: read by nothing ----------

@pytest.mark.parametrize("over, needle", [
    ({"arms": "off", "ks": "5"}, "-k 5"),
    ({"arms": "off", "drafter": "sam"}, "--drafter sam"),
    ({"arms": "off", "sources": "group"}, "--sources group"),
    ({"arms": "off", "sources": "own,group"}, "--sources own,group"),
    ({"strategy": "seed", "ks": "5"}, "-k 5"),                      # --strategy alone: the arms are off
    ({"strategy": "seed", "drafter": "sam"}, "--drafter sam"),
    ({"preset": "histospec-qwen3-14b", "ks": "5"}, "-k 5"),         # the preset's strategy, no source arm
    ({"arms": "off,always", "spec_threshold": "8", "tail_threshold": 4}, "--spec-threshold 8"),
    ({"arms": "off", "spec_threshold": "8", "tail_threshold": 4}, "--spec-threshold 8"),
    ({"arms": "off,always", "spec_threshold": "4,8"}, "--spec-threshold 4,8"),
    ({"temperature": 0.5}, "--temperature 0.5"),
    ({"top_p": 0.9}, "--top-p 0.9"),
    ({"ignore_eos": False}, "--no-ignore-eos"),
    ({"block_size": 32}, "--block-size 32"),
    ({"draws": 3}, "--draws 3"),
    ({"length_dist": "fixed:100", "draws": 2}, "--draws 2"),
    ({"seed": 3}, "--seed 3"),
    ({"length_dist": "fixed:100", "seed": 3}, "--seed 3"),
])
def test_a_replay_refuses_what_it_would_not_read(shared_data, over, needle):
    msg = _refused({"data_dir": str(shared_data), **over}, needle)
    assert "drop" in msg or "instead" in msg   # the fix is named


@pytest.mark.parametrize("over, needle", [
    ({"traces": "t.jsonl"}, "--traces t.jsonl"),
    ({"tokenizer": "tok"}, "--tokenizer tok"),
    ({"arms": "off", "drafter": "sam"}, "--drafter sam"),
    ({"arms": "off", "sources": "group"}, "--sources group"),
    ({"block_size": 32}, "--block-size 32"),
    ({"data_dir": "/no/such/dir"}, "--data-dir /no/such/dir"),
    ({"on_error": "skip"}, "--on-error skip"),
    ({"history_includes_validation": True}, "--history-includes-validation with --engine reference"),
])
def test_a_measured_engine_refuses_what_it_would_not_read(over, needle):
    _refused({"engine": "reference", **over}, needle)


def test_a_data_dir_that_is_not_there_is_refused_even_when_traces_and_tokenizer_are_given(shared_data):
    tr = shared_data / "traces" / "qwen25math_math_100x8.jsonl"
    _refused({"data_dir": "/no/such/dir", "traces": str(tr), "tokenizer": str(shared_data / "tokenizers" / "qwen3")},
             "--data-dir /no/such/dir")


# ---------- kept: something reads them ----------

@pytest.mark.parametrize("over", [
    {"arms": "off,threshold", "spec_threshold": "4", "ks": "3"},
    {"arms": "off,always", "ks": "5", "drafter": "sam", "sources": "own,group"},
    {"arms": "off", "ks": "3", "sources": "own"},                  # the defaults' values, given
    {"arms": "off", "spec_threshold": "8"},                        # the off arm's tail: running <= 8
    {"arms": "off,always", "spec_threshold": "8"},                 # the always arm's tail too
    {"arms": "off", "sources": "history"},                         # every arm replays the traces' last RL step
    {"strategy": "seed"},
    {"strategy": "seed", "spec_threshold": "6"},                    # the strategy's tail (no threshold switch)
    {"preset": "seed-qwen3-32b"},                                   # the preset's own threshold and k
    {"preset": "seed-qwen3-32b", "spec_threshold": "4", "ks": "5"},
    {"preset": "histospec-qwen3-14b", "ks": "16"},                  # the preset's own k, given again
    {"length_dist": "lognormal:32:0.8", "draws": 3, "seed": 5},
    {"dev_split": 0.5, "seed": 3},                                  # the seed splits the prompts
    {"draws": 1},
    {"kv_capacity_tokens": 4096, "block_size": 32},
    {"sensitivity": True, "length_dist": "lognormal:32:0.8", "block_size": 32},   # its KV rows cut blocks
    {"threads": 2},                                                 # `samspec-bench run` profiles the replay with it
])
def test_a_replay_keeps_what_it_reads(shared_data, over):
    assert isinstance(ro.build_config(**_defaults(data_dir=str(shared_data), **over)), ro.RolloutConfig)


@pytest.mark.parametrize("over", [
    {"temperature": 0.5, "top_p": 0.9, "ignore_eos": False, "seed": 3},
    {"arms": "off", "ks": "5", "spec_threshold": "8,16"},   # its own profile measures them (no --step-model)
    {"kv_capacity_tokens": 4096, "block_size": 32},
    {"data_dir": None},
])
def test_a_measured_engine_keeps_what_it_reads(over):
    assert ro.build_config(**_defaults(engine="reference", **over)).engine == "reference"


# ---------- the CLI: exit 2, one line naming the option; the legitimate runs run ----------

def _cli(argv, capsys) -> tuple[int, str]:
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    return code, capsys.readouterr().err


@pytest.mark.parametrize("extra, needle", [
    (["--arms", "off", "-k", "5"], "-k 5"),
    (["--arms", "off", "--spec-threshold", "4,8"], "--spec-threshold 4,8"),
    (["--temperature", "0.7"], "--temperature 0.7"),
    (["--block-size", "32"], "--block-size 32"),
    (["--draws", "3", "--seed", "1"], "--draws 3"),
    (["--data-dir", "/no/such/dir"], "--data-dir /no/such/dir"),
])
def test_the_command_exits_2_naming_the_option(shared_data, tmp_path, capsys, extra, needle):
    base = [] if "--data-dir" in extra else ["--data-dir", str(shared_data)]   # an option is given once
    argv = ["rollout", *base, "--prompts", "4", "--output", tmp_path / "o", *extra]
    code, err = _cli(argv, capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, needle", [
    (["--engine", "torch", "-k", "5", "--tokens", "8"], "--tokens / -k with --engine torch"),
    (["--engine", "torch", "--engine-arg", "tensor_parallel_size=2"], "--engine-arg"),
    (["--grid-q", "1,4,9", "--layers", "2"], "--grid-q / --layers with --engine reference"),
    (["--engine", "vllm", "--out-jsonl", "p.jsonl"], "--out-jsonl with --engine vllm"),
])
def test_rollout_profile_refuses_the_other_profilers_options(tmp_path, capsys, argv, needle):
    code, err = _cli(["rollout", "profile", *argv, "--output", tmp_path / "p.json"], capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("argv", [
    ["--engine", "torch", "--grid-q", "1,4", "--layers", "2", "--tree-paths", "4", "--seed", "1", "--threads", "2"],
    ["--engine", "reference", "-k", "3,5", "--batch-sizes", "1,4", "--tokens", "8", "--prompt-pad", "0"],
    ["--engine", "torch", "-k", "3", "--tokens", "24"],   # the defaults' values, given
])
def test_rollout_profile_keeps_its_own_profilers_options(argv):
    ctx = profile_command.make_context("profile", list(argv))
    defaults = profile_command.make_context("profile", [], resilient_parsing=True).params
    refuse_other_profiler(ctx.params["engine_name"], ctx.params["engine_name"] == "torch", ctx.params, defaults)




@pytest.mark.parametrize("extra, arms", [
    (["--arms", "off,threshold", "--spec-threshold", "4", "-k", "3"], {"off", "threshold<=4 k=3"}),
    (["--strategy", "seed"], {"off", "seed"}),
    (["--arms", "off", "--spec-threshold", "8"], {"off"}),
])
def test_the_legitimate_runs_still_run(small, tmp_path, extra, arms):
    res = CliRunner().invoke(ro.command, ["--traces", str(small), "--output", str(tmp_path / "o"),
                                          "--json", str(tmp_path / "r.json"), *extra])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "r.json").read_text())["metrics"]["arms"]
    assert set(got) == arms
    if extra[-1] == "8":
        assert got["off"]["tail_threshold"] == 8   # read: the off arm's tail definition


def test_a_preset_run_with_its_own_thresholds_still_runs(small, tmp_path):
    res = CliRunner().invoke(ro.command, ["--preset", "seed-qwen3-32b", "--traces", str(small), "--no-sensitivity",
                                          "--output", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "threshold<=8 k=3" in res.output


def test_block_size_cuts_a_roofline_s_device_memory(shared_data, tmp_path):
    """With a roofline (it knows the device memory) --block-size is read without
    --kv-capacity-tokens: blocks of 131,072 tokens, a few in the capacity, let only a few requests run at once."""
    def run(block):
        out = tmp_path / f"b{block}"
        res = CliRunner().invoke(ro.command, [
            "--engine", "replay", "--data-dir", str(shared_data), "--prompts", "4", "--group-size", "4",
            "--max-num-seqs", "16", "--arms", "off", "--block-size", str(block),
            "--step-model", "roofline:hardware=H100,model=Qwen/Qwen3-8B,tp=1,mode=graph", "--output", str(out)])
        assert res.exit_code == 0, res.output
        return json.loads(next(out.rglob("result.json")).read_text())["metrics"]["arms"]["off"]

    small, big = run(16), run(1 << 17)
    cap = small["kv"]["capacity_tokens"]
    assert cap is not None and cap // (1 << 17) < 16          # fewer blocks than requests
    assert big["total_s"] > 2 * small["total_s"]               # so fewer requests run at once
