"""Nothing is silent: an `accept` option that nothing in the run would read is
refused in one line naming it (exit 2, nothing written), while the same option where something
reads it keeps running. Each refused case ran to exit 0 with results identical to the run
without the option before it was refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samspec_bench import cli
from samspec_bench.errors import UserError
from samspec_bench.suites.accept.command import command as accept_command
from samspec_bench.suites.accept.config import AcceptConfig, refuse_ignored

QWEN = "qwen25math_math_100x8.jsonl"
TINY = "builtin:tiny-qwen3"


@pytest.fixture(scope="module")
def small(traces_dir, tmp_path_factory) -> Path:
    """Two groups of eight responses: a run of a few seconds."""
    p = tmp_path_factory.mktemp("ignored") / "small.jsonl"
    p.write_text("".join((traces_dir / QWEN).read_text().splitlines(keepends=True)[:16]))
    return p


def accept(argv: list, capsys) -> tuple[int, str, str]:
    try:
        cli.main(["accept", *map(str, argv)])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    got = capsys.readouterr()
    return code, got.out, got.err


def replay(shared_data, small, out) -> list:
    return ["--data-dir", shared_data, "--traces", small, "--workers", "1", "--no-progress", "--output", out]


@pytest.mark.parametrize("extra, needle", [
    (["--ngram-min", "3", "--ngram-max", "4"], "--ngram-min/--ngram-max set the ngram drafter, which --drafter sam "
                                               "does not run"),
    (["--ngram-max", "7", "--drafter", "sam,sam-fixed"], "--ngram-min/--ngram-max"),
    (["--sam-min-match", "3", "--drafter", "ngram"], "--sam-min-match sets the sam / sam-fixed drafters"),
    (["--sam-min-match", "3", "--drafter", "ngram", "--strategy", "seed"], "--sam-min-match"),   # its own options
    (["--history-window", "4"], "--history-window / --history-budget-mb size the history source"),
    (["--history-budget-mb", "64", "--sources", "own,group", "--strategy", "seer"], "--history-budget-mb"),
    (["--group-order", "sequential"], "--group-order sequential orders a group source"),
    (["--group-order", "sequential", "--sources", "own,history", "--strategy", "histospec"], "--group-order"),
    (["--benchmark", "aime25"], "--benchmark/--max-tokens choose the built-in prompts"),
    (["--max-tokens", "64"], "--engine replay replays the traces' recorded responses"),
    (["--engine-arg", "tensor_parallel_size=2"], "--engine-arg: the replay engine takes no vLLM engine arguments"),
    (["--split-seed", "5"], "--split-seed 5 seeds the --dev-split split"),
])
def test_an_option_nothing_reads_is_refused(shared_data, small, tmp_path, capsys, extra, needle):
    code, _, err = accept(replay(shared_data, small, tmp_path / "o") + extra, capsys)
    assert code == 2, err
    assert needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


def test_a_data_dir_that_is_not_there_is_refused_even_beside_traces_and_tokenizer(small, qwen3_tokenizer_dir,
                                                                                  tmp_path, capsys):
    for bad in (tmp_path / "missing", small):   # no such path; a file
        code, _, err = accept(["--data-dir", bad, "--traces", small, "--tokenizer", qwen3_tokenizer_dir,
                               "--no-progress", "--output", tmp_path / "o"], capsys)
        assert code == 2 and f"--data-dir {bad}: no such directory" in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("extra, label", [
    (["--ngram-min", "3", "--ngram-max", "4", "--drafter", "sam,ngram"], "ngram k=3 own"),
    (["--ngram-min", "2", "--ngram-max", "5"], "sam k=3 own"),   # the defaults given: harmless
    (["--sam-min-match", "3", "--drafter", "sam-fixed,ngram"], "sam-fixed k=3 own"),
    (["--history-window", "4", "--history-budget-mb", "64", "--sources", "own,history"], "sam k=3 own+history"),
    (["--history-window", "4", "--strategy", "histospec"], "histospec: sam k=16 own+history"),
    (["--group-order", "sequential", "--sources", "own,group"], "sam k=3 own+group(sequential)"),
    (["--group-order", "sequential", "--strategy", "seer"], "seer: sam-fixed k=8 own+group(sequential)"),
    (["--group-order", "concurrent", "--benchmark", "gsm8k", "--max-tokens", "256", "--split-seed", "0"],
     "sam k=3 own"),
    (["--dev-split", "0.5", "--split-seed", "5"], "sam k=3 own"),
])
def test_the_same_options_where_they_are_read_still_run(shared_data, small, tmp_path, capsys, extra, label):
    code, out, err = accept(replay(shared_data, small, tmp_path / "o") + extra + ["--json", "-"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert label in result["metrics"], sorted(result["metrics"])
    if label == "ngram k=3 own":   # read: the drafter runs with them
        assert result["metrics"]["ngram k=3 own"]["options"] == {"min_n": 3, "max_n": 4}


def test_sam_min_match_changes_what_sam_fixed_drafts(shared_data, small, tmp_path, capsys):
    """Read where it is allowed: the records differ from the default's."""
    runs = {}
    for m in ("1", "4"):
        code, out, err = accept(replay(shared_data, small, tmp_path / m) + ["--drafter", "sam-fixed", "--sam-min-match",
                                                                           m, "--json", "-"], capsys)
        assert code == 0, err
        runs[m] = json.loads(out)["metrics"]["sam-fixed k=3 own"]
    assert runs["4"]["options"] == {"l_threshold": 4}
    assert runs["4"]["counts"] != runs["1"]["counts"]


def test_model_engine_options_are_refused_where_nothing_reads_them(small, tmp_path, capsys):
    base = ["--engine", "reference", "--model", TINY, "--no-progress", "--output", tmp_path / "o"]
    for extra, needle in (
            (["--any-model"], "--any-model lets replayed traces of other models in, and --engine reference generates"),
            (["--engine-arg", "max_num_seqs=4"], "--engine-arg: the reference engine takes no vLLM engine arguments"),
            (["--traces", small, "--max-tokens", "12"], "--engine reference generates from the traces' prompts"),
            (["--traces", small, "--benchmark", "aime25"], "--benchmark/--max-tokens")):
        code, _, err = accept(base + extra, capsys)
        assert code == 2 and needle in err, (extra, err)
    assert not (tmp_path / "o").exists()


def test_built_in_prompts_take_benchmark_and_max_tokens(tmp_path, capsys):
    code, out, err = accept(["--engine", "reference", "--model", TINY, "--benchmark", "aime25", "--limit-groups", "1",
                             "--max-tokens", "6", "--no-progress", "--output", tmp_path / "o", "--json", "-"], capsys)
    assert code == 0, err
    prompts = json.loads(out)["inputs"]["builtin_prompts"]
    assert prompts["benchmark"] == "aime25" and prompts["max_tokens"] == 6


def test_an_engine_that_runs_drafters_by_name_reads_fewer_options():
    """vLLM runs its own ngram method (prompt_lookup 2..5) and sam-fixed with its own
    l_threshold: there --ngram-min and --sam-min-match without 'sam' are refused; 'sam' takes it."""
    vllm = dict(traces=["t.jsonl"], tokenizer="tok", engine="vllm")
    with pytest.raises(UserError, match="runs its own ngram method.*speculative_config"):
        refuse_ignored(AcceptConfig(**vllm, drafters=["sam", "ngram"], ngram_min=3))
    with pytest.raises(UserError, match=r"--sam-min-match sets the sam drafter \(--engine vllm runs sam-fixed"):
        refuse_ignored(AcceptConfig(**vllm, drafters=["sam-fixed"], sam_min_match=3))
    refuse_ignored(AcceptConfig(**vllm, drafters=["sam", "sam-fixed"], sam_min_match=3))
    refuse_ignored(AcceptConfig(**vllm, drafters=["ngram"], engine_args={"max_num_seqs": 4}))
    refuse_ignored(AcceptConfig(**vllm, engine_args={"max_num_seqs": 4}, any_model=False))


def test_the_defaults_refuse_ignored_compares_with_are_the_commands():
    """refuse_ignored compares with AcceptConfig's defaults: they must be the click options'."""
    fields = AcceptConfig.__dataclass_fields__
    click_defaults = {p.name: p.default for p in accept_command.params}
    for name in ("ngram_min", "ngram_max", "sam_min_match", "history_window", "history_budget_mb", "group_order",
                 "benchmark", "max_tokens", "split_seed"):
        assert fields[name].default == click_defaults[name], name
