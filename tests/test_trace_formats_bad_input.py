"""Bad input to the trace readers, found by an audit: nothing is dropped silently. Two lm-eval
runs of one task are both read (documents keyed per file); a document's line that repeats it
with other responses, an empty lm-eval response, two verl files for one step and a plain line's
optional field of the wrong type are refused in one line naming file:line (exit 2), or skipped
and counted with --on-error skip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.trace_formats import expand, prompt_group, read_any

TEXT = "the answer is 42. the answer is 42. so the answer is 42."


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Path:
    from samspec_bench.models.checkpoints import _byte_tokenizer   # a tokenizer without a model

    d = tmp_path_factory.mktemp("tok")
    _byte_tokenizer().save_pretrained(d)
    return d


def cli(argv: list, capsys) -> tuple[int, str, str]:
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    out = capsys.readouterr()
    return code, out.out, out.err


def accept(traces, tok, tmp_path, capsys, *extra) -> tuple[int, str, str]:
    return cli(["accept", "--engine", "replay", "--traces", traces, "--tokenizer", tok, "--output",
                tmp_path / "out", "--workers", "1", "--no-progress", *extra], capsys)


def lm_eval_line(doc_id: int, prompt: str, resps: list[str], flt: str = "none") -> dict:
    return {"doc_id": doc_id, "doc": {"q": prompt}, "target": "42",
            "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": {"until": ["Q:"]}}},
            "resps": [resps], "filtered_resps": [r[-4:] for r in resps], "filter": flt}


def write_lines(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def two_gsm8k_runs(d: Path, models: tuple[str, str] = ("org/model-a", "org/model-a")) -> list[Path]:
    """Two lm-eval runs of gsm8k in one folder (dates differ, the second run's prompts differ),
    3 documents x 2 repeats each, with a results_<date>.json naming each run's model."""
    files = []
    for date, model, lead in zip(("2025-01-01T00-00-00", "2025-02-02T00-00-00"), models, ("", "Other: ")):
        rows = [lm_eval_line(i, f"{lead}Q{i}: what is six times seven?", [f"{TEXT} r{i}.{j}" for j in range(2)])
                for i in range(3)]
        files.append(write_lines(d / f"samples_gsm8k_{date}.jsonl", rows))
        (d / f"results_{date}.json").write_text(json.dumps({"results": {}, "model_name": model}))
    return files


# --- 1. two lm-eval runs of one task: both read -------------------------------------------------------

def test_two_lm_eval_runs_of_one_task_are_both_read(tmp_path):
    first, second = two_gsm8k_runs(tmp_path / "lm")
    traces, formats = read_any(tmp_path / "lm")
    assert set(formats.values()) == {"lm-eval"} and len(formats) == 2
    assert len(traces.records) == 2 * 3 * 2 and not traces.skipped
    assert {r.source for r in traces.records} == {first, second}
    assert len({r.id for r in traces.records}) == 12          # every response its own id
    groups = {r.group for r in traces.records}
    assert len(groups) == 6                                    # a run's document is its own group
    assert all(len({r.prompt for r in traces.records if r.group == g}) == 1 for g in groups)
    assert {r.dataset for r in traces.records} == {"gsm8k"}
    # one run alone keeps the task's plain names
    alone, _ = read_any(first)
    assert {r.group for r in alone.records} == {"gsm8k:0", "gsm8k:1", "gsm8k:2"}


def test_each_lm_eval_run_takes_the_model_of_its_own_results_file(tmp_path):
    first, second = two_gsm8k_runs(tmp_path / "lm", models=("org/model-a", "org/model-b"))
    traces, _ = read_any(tmp_path / "lm")
    assert {r.model for r in traces.records if r.source == first} == {"org/model-a"}
    assert {r.model for r in traces.records if r.source == second} == {"org/model-b"}


def test_accept_counts_both_lm_eval_runs(tmp_path, tok, capsys):
    two_gsm8k_runs(tmp_path / "lm")
    code, out, err = accept(tmp_path / "lm", tok, tmp_path, capsys)
    printed = (out + err).replace("\n", " ")
    assert code == 0, err
    assert "12 responses, 0 lines skipped" in printed and "lm-eval 2 file(s), 12 response(s)" in printed


# --- other filters of a document: read once; a line with other responses: refused ----------------------

def test_lm_eval_other_filters_read_once_other_responses_refused(tmp_path):
    p = tmp_path / "samples_gsm8k_2025-01-01T00-00-00.jsonl"
    same = [lm_eval_line(0, "Q0", ["a0", "b0"], "strict-match"), lm_eval_line(0, "Q0", ["a0", "b0"], "flexible"),
            lm_eval_line(1, "Q1", ["a1", "b1"], "strict-match")]
    write_lines(p, same)
    traces, _ = read_any(p)
    assert [(r.line, r.response) for r in traces.records] == [(1, "a0"), (1, "b0"), (3, "a1"), (3, "b1")]
    write_lines(p, same + [lm_eval_line(0, "Q0", ["c0", "d0"], "other")])
    with pytest.raises(UserError) as e:
        read_any(p)
    msg = str(e.value)
    assert f"{p}:4: doc_id 0 repeats line 1 with other responses" in msg and "\n" not in msg
    assert "--on-error skip" in msg
    traces, _ = read_any(p, on_error="skip")
    assert len(traces.records) == 4 and [(s[1]) for s in traces.skipped] == [4]


# --- 2. an empty lm-eval response: refused as verl's and plain's are ------------------------------------

def test_empty_lm_eval_response_is_refused_naming_file_and_line(tmp_path, tok, capsys):
    p = write_lines(tmp_path / "lm" / "samples_gsm8k_2025-01-01T00-00-00.jsonl",
                    [lm_eval_line(0, "Q0", [TEXT, TEXT]), lm_eval_line(1, "Q1", [TEXT, "", TEXT, ""])])
    with pytest.raises(UserError) as e:
        read_any(p)
    msg = str(e.value)
    assert f"{p}:2: the response is empty" in msg and "2 of the 4 in 'resps'" in msg and "\n" not in msg
    traces, _ = read_any(p, on_error="skip")
    assert len(traces.records) == 2 and [s[1] for s in traces.skipped] == [2]
    code, _, err = accept(tmp_path / "lm", tok, tmp_path, capsys)
    errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]   # after the progress line
    assert code == 2 and len(errors) == 1 and f"{p}:2: the response is empty" in errors[0]
    code, out, err = accept(tmp_path / "lm", tok, tmp_path, capsys, "--on-error", "skip")
    assert code == 0, err
    assert "2 responses, 1 lines skipped" in (out + err).replace("\n", " ")


# --- 3. two verl files for one step ---------------------------------------------------------------------

def _verl_step(path: Path, step: int, n: int = 2) -> Path:
    return write_lines(path, [{"input": f"q{i}", "output": TEXT, "score": 1.0, "step": step} for i in range(n)])


@pytest.mark.parametrize("fmt", ["auto", "verl"])
def test_two_verl_files_for_one_step_are_refused(tmp_path, fmt):
    d = tmp_path / "dump"
    _verl_step(d / "1.jsonl", 1)
    _verl_step(d / "03.jsonl", 3)
    _verl_step(d / "3.jsonl", 3)
    with pytest.raises(UserError) as e:
        expand(d, fmt)
    msg = str(e.value)
    assert "03.jsonl and 3.jsonl are both step 3" in msg and str(d) in msg and "\n" not in msg
    with pytest.raises(UserError, match="03.jsonl and 3.jsonl are both step 3"):
        read_any([d / "03.jsonl", d / "3.jsonl"])       # named one by one


def test_accept_refuses_two_verl_files_for_one_step(tmp_path, tok, capsys):
    d = tmp_path / "dump"
    _verl_step(d / "03.jsonl", 3)
    _verl_step(d / "3.jsonl", 3)
    code, _, err = accept(d, tok, tmp_path, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "03.jsonl and 3.jsonl are both step 3" in err
    assert not (tmp_path / "out").exists()


def test_a_trace_file_given_twice_is_refused(tmp_path):
    d = tmp_path / "dump"
    _verl_step(d / "1.jsonl", 1)
    with pytest.raises(UserError, match=r"1.jsonl is given twice"):
        read_any([d, d / "1.jsonl"])


# --- 4. a plain line's optional field of the wrong type ---------------------------------------------------

@pytest.mark.parametrize("extra, reason", [
    ({"system": 5}, "'system' is int (5): the system prompt must be a string or null"),
    ({"system": ["be brief"]}, "'system' is list"),
    ({"model": {"name": "x"}}, "'model' is dict"),
    ({"group": 1.5}, "'group' is float (1.5)"),
    ({"id": True}, "'id' is bool (True)"),
    ({"step": "3"}, "'step' is '3', not an integer"),
])
def test_plain_optional_field_of_the_wrong_type_is_refused(tmp_path, extra, reason):
    p = write_lines(tmp_path / "rollouts.jsonl", [{"prompt": "p", "response": "a"},
                                                  {"prompt": "p", "response": "b", **extra}])
    with pytest.raises(UserError) as e:
        read_any(p)
    msg = str(e.value)
    assert f"{p}:2: " in msg and reason in msg and "\n" not in msg
    traces, _ = read_any(p, on_error="skip")
    assert len(traces.records) == 1 and [s[1] for s in traces.skipped] == [2]


def test_plain_optional_fields_of_the_right_types_are_kept(tmp_path):
    p = write_lines(tmp_path / "rollouts.jsonl", [
        {"prompt": "p", "response": "b", "system": None, "id": None, "step": None},
        {"prompt": "p", "response": "a", "system": "be brief", "id": 7, "group": "g", "model": "org/m", "step": 2}])
    b, a = read_any(p)[0].records
    assert (a.system, a.id, a.group, a.model, a.step) == ("be brief", "7", "g", "org/m", 2)
    assert b.system is None and b.step is None and b.group == prompt_group("p") and b.id == "rollouts:1"
