"""`accept` refuses in one line what it would otherwise ignore or run on nothing: --corpus
without a corpus source, two verify costs at once, traces whose every response is tool output."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from samspec_bench.cli import group
from samspec_bench.data import LIMIT_GROUPS_PER, load_tokenizer
from samspec_bench.errors import UserError
from samspec_bench.suites.accept.inputs import check_limit_meaning
from trace_fixtures import grouped_rows, verl_input, write_verl_dump


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


def test_one_rl_step_in_two_folders_is_merged_and_said(shared_data, qwen3_tokenizer_dir, tmp_path):
    """Two verl runs passed together (or a resumed job's new folder) share steps 1 and 2: replayed
    as one step each, as a validation folder not known as one must be, but counted in the JSON
    and said in one line on stderr naming the steps and both folders."""
    tok = load_tokenizer(qwen3_tokenizer_dir)
    groups = grouped_rows(shared_data / "traces" / "qwen25math_math_100x8.jsonl", 4)
    a, b = tmp_path / "run_a", tmp_path / "run_b"
    write_verl_dump(a, tok, groups, batch=2, n=2, epochs=1)   # steps 1-2
    write_verl_dump(b, tok, groups, batch=1, n=2, epochs=1)   # steps 1-4
    res = _accept(shared_data, tmp_path, "--traces", a, "--traces", b, "--sources", "own,history", "--json", "-")
    assert res.exit_code == 0, res.output
    inputs = json.loads(res.stdout)["inputs"]
    assert inputs["merged_steps"] == 2
    assert inputs["merged_step_folders"] == [{"step": s, "folders": [str(a), str(b)], "responses": [4, 2]}
                                             for s in (1, 2)]
    (line,) = [ln for ln in res.stderr.splitlines() if "found in 2 folders" in ln]
    assert f"verl step 1, 2 found in 2 folders ({a}, {b}): their rows were merged as one step each" in line
    alone = _accept(shared_data, tmp_path / "b", "--traces", b, "--sources", "own,history", "--json", "-")
    assert alone.exit_code == 0, alone.output
    assert json.loads(alone.stdout)["inputs"]["merged_steps"] == 0 and "found in" not in alone.stderr


# each verl step file's prompts in its (shuffled) order: no two steps share their first two prompts
SHUFFLED_STEPS = {1: [0, 1, 2, 3], 2: [4, 5, 0, 1], 3: [6, 7, 2, 4]}


def _shuffled_verl(folder, tok, groups) -> None:
    """A verl rollout folder of three step files whose prompts recur in shuffled order (verl
    shuffles the batch each step), two responses a prompt at each step, other responses each time."""
    folder.mkdir()
    for step, order in SHUFFLED_STEPS.items():
        lines = [{"input": verl_input(tok, groups[p][0]), "output": row["response"], "gts": None, "score": 1.0,
                  "step": step} for p in order for row in groups[p][2 * step - 2: 2 * step]]
        (folder / f"{step}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_limit_groups_keeps_the_same_prompts_at_every_step_of_a_verl_folder(shared_data, qwen3_tokenizer_dir,
                                                                            tmp_path):
    """--limit-groups on a verl folder: the kept prompts are the same at every step they appear in
    (the first N of each step file would be other prompts each step), so the history source finds
    earlier steps' responses; each step's count is said on stderr."""
    tok = load_tokenizer(qwen3_tokenizer_dir)
    groups = grouped_rows(shared_data / "traces" / "qwen25math_math_100x8.jsonl", 8)
    folder = tmp_path / "rollouts"
    _shuffled_verl(folder, tok, groups)
    res = _accept(shared_data, tmp_path, "--traces", folder, "--sources", "history", "--limit-groups", "2",
                  "--json", "-")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    prompt_of = {verl_input(tok, g[0]): i for i, g in enumerate(groups)}
    kept = {}   # step -> prompts replayed (the responses file: file and line)
    (run,) = (tmp_path / "out").iterdir()
    for rec in map(json.loads, (run / "responses.jsonl").read_text().splitlines()):
        line = json.loads(Path(rec["file"]).read_text().splitlines()[rec["line"] - 1])
        kept.setdefault(line["step"], set()).add(prompt_of[line["input"]])
    every = set().union(*kept.values())
    assert all(kept.get(s, set()) == every & set(order) for s, order in SHUFFLED_STEPS.items()), kept
    assert sum(map(len, kept.values())) >= 2 * 3
    (hist,) = out["engine"]["history"]["by_configuration"].values()
    assert hist["replayed_with_history"] > 0   # a kept prompt's earlier responses
    (said,) = [ln for ln in res.stderr.splitlines() if ln.startswith("--limit-groups 2:")]
    assert "the same prompts at every RL step" in said
    assert all(f"{s}: {len(kept.get(s, ()))} of 4" in said for s in SHUFFLED_STEPS), said


def test_a_run_of_the_old_limit_groups_meaning_is_not_resumed():
    """An accept or dominance folder whose --limit-groups kept the first N groups of each step
    file (no `limit_groups_per` of today's meaning) cannot be continued: refused in one line."""
    saved = {"limit_groups": 3, "traces": ["/r/rollouts"]}
    with pytest.raises(UserError) as e:
        check_limit_meaning(saved, "runs/accept-1")
    msg = str(e.value)
    assert msg.startswith("--resume runs/accept-1: this run's --limit-groups 3 kept the first 3 groups of each step")
    assert "start a new run (leave out --resume)" in msg and "\n" not in msg
    check_limit_meaning({**saved, "limit_groups_per": LIMIT_GROUPS_PER}, "x")   # today's meaning
    check_limit_meaning({**saved, "limit_groups": None}, "x")                   # no limit
    check_limit_meaning({**saved, "traces": []}, "x")                           # built-in prompts
