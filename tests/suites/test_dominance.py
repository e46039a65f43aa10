"""`samspec-bench dominance` (suites/dominance.py): what --limit-groups keeps, the same with and
without --anchors (the command's run folder, resume and gate: tests/bench/test_draft_dominance.py)."""

from __future__ import annotations

from collections import Counter

from click.testing import CliRunner

from samspec_bench.bench import draft_dominance
from samspec_bench.cli import group
from samspec_bench.data import load_tokenizer
from samspec_bench.errors import UserError
from samspec_bench.suites import dominance
from samspec_bench.suites import dominance_anchors as anchors
from trace_fixtures import grouped_rows, write_verl_dump

GRPO = "qwen25math_math_100x8.jsonl"


def test_limit_groups_keeps_the_first_groups_of_each_step_file_with_and_without_anchors(
        traces_dir, qwen3_tokenizer_dir, tmp_path, monkeypatch):
    """A verl folder of two step files, two prompts each with two responses: --limit-groups 1 is
    the first prompt of each step file (as accept reads it), in both paths; the path without
    --anchors kept the first prompt of the whole folder."""
    d = tmp_path / "rollout_data_dir"
    write_verl_dump(d, load_tokenizer(qwen3_tokenizer_dir), grouped_rows(traces_dir / GRPO, 4), batch=2, n=2,
                    epochs=1)   # 1.jsonl: prompts 1-2, 2.jsonl: prompts 3-4
    replayed = []

    def cell(items, k, source, sam_length, limit, *rest):   # no replay: what the cell's units hold
        units = draft_dominance.units(items, source == "group", limit)
        replayed.append({(items[int(key)].source.name, items[int(key)].group) for u in units for key, *_ in u})
        m = {"tokens_per_step": 1.0, "drafted_per_step": 1.0, "verify_tokens_per_token": 1.0,
             "acceptance_rate": 0.5, "steps": 1}
        return {"k": k, "source": source, "sam": m, "sam_fixed": m, "suffix": m, "dominates": True}
    monkeypatch.setattr(draft_dominance, "replay_cell", cell)
    monkeypatch.setattr(dominance, "arctic_available", lambda: True)
    res = CliRunner().invoke(group, ["dominance", "--traces", str(d), "--tokenizer", str(qwen3_tokenizer_dir), "-k",
                                     "2", "--limit-groups", "1", "--output", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert len(replayed) == 2   # own and group
    kept = {(it.source.name, it.group) for it in anchors.load_items(d, str(qwen3_tokenizer_dir), 1)}
    assert replayed[0] == replayed[1] == kept
    assert Counter(name for name, _ in kept) == {"1.jsonl": 1, "2.jsonl": 1}   # one prompt of each step file


def test_the_help_says_what_limit_groups_keeps():
    text = " ".join(CliRunner().invoke(group, ["dominance", "--help"]).output.split())
    assert "first N groups (prompts) of each trace file" in text and "of each step file" in text


def test_a_missing_traces_path_is_said_before_arctic_is_asked_for(tmp_path, monkeypatch):
    monkeypatch.setattr(dominance, "arctic_available", lambda: False)
    missing = tmp_path / "no_such.jsonl"
    res = CliRunner().invoke(group, ["dominance", "--traces", str(missing), "-k", "2",
                                     "--output", str(tmp_path / "runs")])
    assert isinstance(res.exception, UserError), res.output
    assert str(res.exception).startswith(f"--traces {missing}: no such file or folder")

