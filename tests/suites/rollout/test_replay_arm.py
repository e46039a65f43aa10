"""How `rollout --engine replay` reads a verl run's dumps (suites/rollout/replay_arm.py): lines
with verl's validation shape ('reward' equal to 'score', as some reward managers also write in
every rollout line) are validation generations, left out beside rollouts or replayed without RL
steps alone, and said with the option that brings them back; --history-includes-validation
replays them as RL steps, as accept's option of the same name does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from samspec_bench.bench.engines.replay import EMULATED_STEPS
from samspec_bench.data import load_tokenizer
from samspec_bench.errors import UserError
from samspec_bench.reports.suite_headlines import SUITE_SUMMARIZERS
from samspec_bench.results import INPUT_FILES
from samspec_bench.suites import rollout as ro
from trace_fixtures import grouped_rows, write_verl_dump

OPTION = "--history-includes-validation"


def _with_reward(folder: Path, steps: list[int]) -> None:
    """The step files' lines carry the score again as 'reward' (a reward manager that stores it)."""
    for step in steps:
        f = folder / f"{step}.jsonl"
        rows = [json.loads(x) for x in f.read_text().splitlines()]
        f.write_text("".join(json.dumps({**r, "reward": r["score"]}) + "\n" for r in rows))


@pytest.fixture(scope="module")
def dumps(traces_dir, qwen3_tokenizer_dir, tmp_path_factory) -> dict[str, Path]:
    """Two verl rollout folders of steps 1-4 (2 prompts x 2 responses a step): in 'mixed' steps 3
    and 4 carry reward == score, in 'shaped' every step does."""
    tok = load_tokenizer(qwen3_tokenizer_dir)
    out = {}
    for name, shaped in (("mixed", [3, 4]), ("shaped", [1, 2, 3, 4])):
        folder = tmp_path_factory.mktemp("verl") / name
        write_verl_dump(folder, tok, grouped_rows(traces_dir / "qwen25math_math_100x8.jsonl", 4), batch=2, n=2,
                        epochs=2)
        _with_reward(folder, shaped)
        out[name] = folder
    return out


def _rollout(traces: Path, tok: Path, out: Path, *extra) -> tuple[dict, str]:
    res = CliRunner().invoke(ro.command, ["--traces", str(traces), "--tokenizer", str(tok), "--sources", "history",
                                          "--arms", "off,always", "--output", str(out), "--json", str(out) + ".json",
                                          *extra])
    assert res.exit_code == 0, (res.output, res.exception)
    return json.loads(Path(str(out) + ".json").read_text()), res.output


def test_validation_shaped_steps_beside_rollouts_are_left_out_and_said_with_the_option(dumps, qwen3_tokenizer_dir,
                                                                                     tmp_path):
    result, out = _rollout(dumps["mixed"], qwen3_tokenizer_dir, tmp_path / "a")
    w = result["metrics"]["workload"]
    v = w["validation"]
    assert (v["responses"], v["excluded"], v["rollout_responses"], v["included"]) == (8, 8, 8, False)
    assert sorted(Path(f).name for f in v["files"]) == ["3.jsonl", "4.jsonl"]
    assert w["history"]["steps"].startswith("RL steps from the traces: step 2 is the rollout, the 1 earlier")
    line = next(x for x in out.splitlines() if x.startswith("validation generations:"))
    assert "8 left out, 8 rollout responses replayed" in line and OPTION in line
    assert "'reward' = 'score' in every line look the same" in line
    heads = {h["name"]: h for h in SUITE_SUMMARIZERS["rollout"](result)[0]}   # the report says it too
    head = heads["verl validation generations in the traces"]
    assert head["value"] == 8 and head["note"].startswith("8 left out; left out") and OPTION in head["note"]
    # the files left out are read too: their sha256 is kept for --resume
    saved = json.loads((next((tmp_path / "a").iterdir()) / "config.json").read_text())
    assert {Path(f).name for f in saved[INPUT_FILES]} == {"1.jsonl", "2.jsonl", "3.jsonl", "4.jsonl"}
    # asked for: steps 3 and 4 are RL steps again, step 4 the rollout
    result, out = _rollout(dumps["mixed"], qwen3_tokenizer_dir, tmp_path / "b", OPTION)
    w = result["metrics"]["workload"]
    assert w["validation"]["included"] and w["validation"]["excluded"] == 0
    assert w["history"]["steps"].startswith("RL steps from the traces: step 4 is the rollout, the 3 earlier")
    assert result["config"]["history_includes_validation"] is True
    line = next(x for x in out.splitlines() if x.startswith("validation generations:"))
    assert f"replayed with their steps as RL steps ({OPTION})" in line and "look the same" not in line


def test_a_run_of_validation_shaped_steps_alone_gets_its_steps_back_with_the_option(dumps, qwen3_tokenizer_dir,
                                                                                  tmp_path):
    result, out = _rollout(dumps["shaped"], qwen3_tokenizer_dir, tmp_path / "a")
    w = result["metrics"]["workload"]
    assert w["validation"]["responses"] == 16 and not w["validation"]["included"]
    assert w["history"]["steps"] == EMULATED_STEPS   # no RL step left: each group's halves stand in
    line = next(x for x in out.splitlines() if x.startswith("validation generations:"))
    assert "validation generations only" in line and OPTION in line
    result, out = _rollout(dumps["shaped"], qwen3_tokenizer_dir, tmp_path / "b", OPTION)
    w = result["metrics"]["workload"]
    assert w["validation"]["included"]
    assert w["history"]["steps"].startswith("RL steps from the traces: step 4 is the rollout, the 3 earlier")
    # the option is part of the run's identity: a resume without it is refused, naming it
    folder = next((tmp_path / "b").iterdir())
    res = CliRunner().invoke(ro.command, ["--traces", str(dumps["shaped"]), "--tokenizer", str(qwen3_tokenizer_dir),
                                          "--sources", "history", "--arms", "off,always", "--output",
                                          str(tmp_path / "b"), "--resume", str(folder)])
    assert isinstance(res.exception, UserError) and "history_includes_validation = True" in str(res.exception)


def test_the_option_with_no_validation_generations_says_it_included_nothing(dumps, qwen3_tokenizer_dir, tmp_path,
                                                                          small):
    result, out = _rollout(small, qwen3_tokenizer_dir, tmp_path / "a", OPTION)
    v = result["metrics"]["workload"]["validation"]
    assert (v["responses"], v["included"]) == (0, True)
    assert f"validation generations: none among the traces, so {OPTION} includes nothing" in out
    result, out = _rollout(small, qwen3_tokenizer_dir, tmp_path / "b")
    assert result["metrics"]["workload"]["validation"] is None and "validation generations" not in out
