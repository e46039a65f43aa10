"""`accept` refuses in one line what it would otherwise ignore or run on nothing: --corpus
without a corpus source, two verify costs at once, traces whose every response is tool output."""

import json

import pytest
from click.testing import CliRunner

from samspec_bench.cli import group
from samspec_bench.errors import UserError


@pytest.fixture
def small(shared_data, tmp_path):
    src = shared_data / "traces" / "qwen25math_math_100x8.jsonl"
    p = tmp_path / "small.jsonl"
    p.write_text("".join(src.read_text().splitlines(keepends=True)[:4]))
    return p


def _accept(shared_data, tmp_path, *args):
    return CliRunner().invoke(group, ["accept", "--data-dir", str(shared_data), "-k", "3", "--output",
                                      str(tmp_path / "out"), *map(str, args)])


@pytest.mark.parametrize("extra, needle", [
    (["--corpus", "SMALL"], "--corpus is read only for a source with 'corpus' (--sources own)"),
    (["--verify-cost-ratio", "1.2", "--engine-profile", "PROFILE"], "give one of them"),
])
def test_options_that_would_be_ignored_are_refused(shared_data, tmp_path, small, extra, needle):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"verify_cost_ratio": 1.3}))
    extra = [str(small) if x == "SMALL" else str(prof) if x == "PROFILE" else x for x in extra]
    res = _accept(shared_data, tmp_path, "--traces", small, *extra)
    assert isinstance(res.exception, UserError) and needle in str(res.exception), res.output
    assert not (tmp_path / "out").exists()
    other = tmp_path / "other.jsonl"   # a corpus must be other traces than the replayed ones
    other.write_text("".join((shared_data / "traces" / "qwen25math_math_100x8.jsonl").read_text()
                             .splitlines(keepends=True)[8:12]))
    ok = _accept(shared_data, tmp_path, "--traces", small, "--sources", "own,corpus", "--corpus", other,
                 "--verify-cost-ratio", "1.2")
    assert ok.exit_code == 0, ok.output


def test_traces_of_tool_output_only_are_refused(shared_data, tmp_path):
    p = tmp_path / "tool.jsonl"
    p.write_text(json.dumps({"id": "a", "group": "g", "prompt": "What is 12*7?",
                             "response": "\n```output\n84\n```\n"}) + "\n")
    res = _accept(shared_data, tmp_path, "--traces", p)
    assert isinstance(res.exception, UserError), res.output
    assert "all 1 response(s) are tool output" in str(res.exception) and "\n" not in str(res.exception)
    decoded = _accept(shared_data, tmp_path, "--traces", p, "--tool-output", "decode")
    assert decoded.exit_code == 0, decoded.output


def test_an_unknown_corpus_file_names_no_option_it_cannot_take(shared_data, tmp_path, small):
    """--trace-format sets how --traces are read, not --corpus: the corpus's unknown-format error
    lists the formats without sending the user to it; --traces' error keeps the hint."""
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"question": "a", "answer": "b"}) + "\n")
    res = _accept(shared_data, tmp_path, "--traces", small, "--sources", "own,corpus", "--corpus", qa)
    assert isinstance(res.exception, UserError) and "not a known trace format" in str(res.exception), res.output
    assert "--trace-format" not in str(res.exception) and str(qa) in str(res.exception)
    res = _accept(shared_data, tmp_path, "--traces", qa)
    assert isinstance(res.exception, UserError) and "--trace-format" in str(res.exception), res.output


def test_stepless_traces_beside_verl_steps_are_refused_for_history(shared_data, tmp_path):
    """A plain file in a verl rollout folder has no RL step: history would replay it as a step
    before every verl step, its text the first step's history, silently; refused with a history
    source, replayed as before without one."""
    folder = tmp_path / "rollouts"
    folder.mkdir()
    prompt, response = "user\nWhat is 12*7?\nassistant\n", "12*7 = 84, so the answer is 84."
    (folder / "20.jsonl").write_text(json.dumps({"input": prompt, "output": response, "gts": None, "score": 1.0,
                                                 "step": 20}) + "\n")
    (folder / "other_run.jsonl").write_text(json.dumps({"prompt": prompt, "response": response}) + "\n")
    res = _accept(shared_data, tmp_path, "--traces", folder, "--sources", "own,history")
    assert isinstance(res.exception, UserError), res.output
    msg = str(res.exception)
    assert "other_run.jsonl" in msg and "1 response(s) carry no RL step" in msg and "\n" not in msg
    assert not (tmp_path / "out").exists()
    assert _accept(shared_data, tmp_path, "--traces", folder).exit_code == 0
