"""One verl RL step in the step files of two folders (two runs passed together, a resumed job
that dumped into a new folder): merged as one step, never silently: counted per step with its
folders, and said in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from samspec_bench.data import load_tokenizer
from samspec_bench.errors import UserError
from samspec_bench.trace_formats import merged_steps_line, read_any, read_rl_steps, steps_in_folders
from trace_fixtures import grouped_rows, write_verl_dump

QWEN = "qwen25math_math_100x8.jsonl"


@pytest.fixture(scope="module")
def two_runs(traces_dir, qwen3_tokenizer_dir, tmp_path_factory) -> Path:
    """run_a: steps 1-2, 2 prompts x 2 responses a step; run_b: steps 1-4, 1 prompt x 2 a step."""
    root = tmp_path_factory.mktemp("two_runs")
    tok = load_tokenizer(qwen3_tokenizer_dir)
    groups = grouped_rows(traces_dir / QWEN, 4)
    write_verl_dump(root / "run_a", tok, groups, batch=2, n=2, epochs=1)
    write_verl_dump(root / "run_b", tok, groups, batch=1, n=2, epochs=1)
    return root


def test_a_step_in_two_folders_is_counted_with_its_folders(two_runs):
    a, b = two_runs / "run_a", two_runs / "run_b"
    traces, formats = read_any([a, b])
    info = steps_in_folders(traces.records, formats)
    assert info == {"merged_steps": 2, "merged": [{"step": 1, "folders": [str(a), str(b)], "responses": [4, 2]},
                                                  {"step": 2, "folders": [str(a), str(b)], "responses": [4, 2]}]}
    line = merged_steps_line(info)
    assert line.startswith(f"verl step 1, 2 found in 2 folders ({a}, {b}): their rows were merged as one step each")
    assert "history" in line and "pass one run's folder" in line and "\n" not in line
    # one folder alone: nothing merged, nothing said
    alone, formats = read_any(b)
    assert steps_in_folders(alone.records, formats) is None and merged_steps_line(None) is None


def test_the_rollout_reader_says_it_in_its_note(two_runs):
    counts: dict = {}
    _, note = read_rl_steps([two_runs / "run_a", two_runs / "run_b"], counts=counts)
    assert note.startswith("verl step 1, 2 found in 2 folders")
    assert counts["merged_steps"] == 2 and [m["step"] for m in counts["merged_step_folders"]] == [1, 2]
    assert read_rl_steps(two_runs / "run_b")[1] is None


def test_the_line_names_the_first_steps_and_counts_the_rest():
    info = {"merged_steps": 6, "merged": [{"step": s, "folders": ["A", "B"], "responses": [1, 1]}
                                          for s in range(3, 9)]}
    assert merged_steps_line(info).startswith("verl step 3, 4, 5, 6 (and 2 more) found in 2 folders (A, B):")


def test_a_validation_folder_included_on_purpose_is_said_as_such(two_runs, tmp_path):
    """accept --history-includes-validation keeps validation generations' steps: a merge with them
    is what was asked for, so the line names them and gives no advice to split them off."""
    a, b, val = two_runs / "run_a", two_runs / "run_b", tmp_path / "val"
    shutil.copytree(b, val)   # a folder named val: verl validation generations (trace_formats.validation)
    traces, formats = read_any([a, val])
    assert all(r.validation for r in traces.records if r.source.parent == val)
    info = steps_in_folders(traces.records, formats)
    assert info["validation_folders"] == [str(val)] and info["merged_steps"] == 2
    line = merged_steps_line(info)
    assert f"{val}: verl validation generations, their rounds included as history by --history-includes-validation" \
        in line and "pass one run's" not in line and "\n" not in line
    # two rollout folders merged besides: splitting those is still advised
    traces, formats = read_any([a, b, val])
    line = merged_steps_line(steps_in_folders(traces.records, formats))
    assert "included as history" in line and line.endswith("pass one run's rollout folder to keep the rollout "
                                                            "folders apart")


def test_a_copy_of_a_step_under_another_name_in_one_folder_is_refused(two_runs, tmp_path):
    """'3 (copy).jsonl' beside 3.jsonl holds the same step by its lines' 'step': both read would
    count the step's responses twice, silently (the names alone do not say it)."""
    d = tmp_path / "run"
    shutil.copytree(two_runs / "run_b", d)
    shutil.copy(d / "3.jsonl", d / "3 (copy).jsonl")
    with pytest.raises(UserError, match=r"run: 3\.jsonl and 3 \(copy\)\.jsonl both hold step 3 .*keep one of them"):
        read_any(d)
    with pytest.raises(UserError, match="both hold step 3"):
        read_any([d / "3.jsonl", d / "3 (copy).jsonl"])
    (d / "3 (copy).jsonl").unlink()
    assert len(read_any(d)[0].records) == 8
