"""The results format: run directories, appended samples, resume, schema checks."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np
import pytest

from samspec_bench.errors import UserError
from samspec_bench.results import RunDir, drop_torn_tail, load_result, to_jsonable
from samspec_bench.suites.run_output import print_and_emit


@dataclass
class Cfg:
    k: int
    path: object


def test_samples_are_appended_and_survive_a_torn_last_line(tmp_path):
    run = RunDir(tmp_path, "accept")
    run.append_sample({"id": 1, "x": np.float32(0.5)})
    run.append_sample({"id": 2, "x": np.int64(3)})
    with open(run.file("samples.jsonl"), "a") as f:
        f.write('{"id": 3, "x"')  # a crash mid-write
    resumed = RunDir(tmp_path, "accept", resume=run.path)
    assert [s["id"] for s in resumed.samples()] == [1, 2]
    assert resumed.path == run.path
    resumed.append_sample({"id": 3, "x": 1})
    # the torn line was cut off before the append: every line is a whole record
    lines = run.file("samples.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == [1, 2, 3]


def test_damaged_sample_lines_are_counted_said_and_kept_in_the_result(tmp_path, capsys):
    run = RunDir(tmp_path, "accept")
    run.append_sample({"id": 1})
    with open(run.file("samples.jsonl"), "a") as f:
        f.write('{"id": 2, "x\n[1, 2]\n\n')   # a damaged line and a list: not records; a blank line: nothing
    run.append_sample({"id": 3})
    with open(run.file("samples.jsonl"), "a") as f:
        f.write('{"id": 4')   # torn by a stop: expected, not counted
    resumed = RunDir(tmp_path, "accept", resume=run.path)
    assert [s["id"] for s in resumed.samples()] == [1, 3]
    assert [s["id"] for s in resumed.samples()] == [1, 3]   # read twice: said once
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 line(s) are not whole records" in err[0] and "samples.jsonl" in err[0]
    assert resumed.damaged_lines == {"samples.jsonl": 2}
    assert json.loads(resumed.write_result({}, {}).read_text())["damaged_lines"] == {"samples.jsonl": 2}
    assert list(resumed.samples("other.jsonl")) == [] and "damaged_lines" not in json.loads(
        RunDir(tmp_path, "accept").write_result({}, {}).read_text())


def test_drop_torn_tail_cuts_only_the_unfinished_line(tmp_path):
    p = tmp_path / "a.jsonl"
    assert drop_torn_tail(p) == 0                      # absent
    p.write_bytes(b'{"a": 1}\n{"a": 2}\n')
    assert drop_torn_tail(p) == 0 and p.read_bytes() == b'{"a": 1}\n{"a": 2}\n'
    p.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": ')
    assert drop_torn_tail(p) == 6 and p.read_bytes() == b'{"a": 1}\n{"a": 2}\n'
    p.write_bytes(b'{"a": ' + b"x" * 200_000)         # one torn line longer than the read block
    assert drop_torn_tail(p) == 200_006 and p.read_bytes() == b""


def test_two_runs_in_the_same_second_get_distinct_directories(tmp_path):
    a, b = RunDir(tmp_path, "s"), RunDir(tmp_path, "s")
    assert a.path != b.path and a.path.is_dir() and b.path.is_dir()


def test_result_round_trip_and_schema_guard(tmp_path):
    run = RunDir(tmp_path, "drafters")
    run.write_result(Cfg(3, tmp_path), {"v": np.array([1.0, math.inf])}, {"t": [{"a": 1}]}, ["f.png"])
    data = load_result(run.path)
    assert data["config"] == {"k": 3, "path": str(tmp_path)}
    assert data["metrics"]["v"] == [1.0, None]  # non-finite floats become null, valid JSON
    assert data["environment"]["packages"]["numpy"] == np.__version__
    data["schema_version"] = 99
    (run.path / "result.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="schema_version"):
        load_result(run.path)


def test_bad_resume_and_missing_result_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="--resume"):
        RunDir(tmp_path, "x", resume=tmp_path / "nope")
    with pytest.raises(UserError, match="no result.json"):
        load_result(tmp_path)


def test_to_jsonable_handles_numpy_and_nested_values():
    assert to_jsonable({"a": (np.int32(1), [np.float64(2.5)])}) == {"a": [1, [2.5]]}


# --- nothing half-written is trusted (issue 18) ------------------------------------------------

def test_atomic_write_replaces_whole_and_leaves_no_temp(tmp_path, monkeypatch):
    from samspec_bench.results import atomic_write_text

    target = tmp_path / "r.json"
    atomic_write_text(target, "old\n")
    real_replace = os.replace

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    # the error names the file asked for and why, not the temp file beside it
    with pytest.raises(UserError, match=r"^--json .*r\.json: cannot be written \(No space left on device\)") as e:
        atomic_write_text(target, "new\n", option="--json")
    assert ".tmp" not in str(e.value)
    monkeypatch.setattr(os, "replace", real_replace)
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["r.json"]
    (tmp_path / "d").mkdir()
    with pytest.raises(UserError, match=r"--json .*: is a directory"):
        atomic_write_text(tmp_path / "d", "x", option="--json")
    assert not list((tmp_path / "d").iterdir()) and sorted(p.name for p in tmp_path.iterdir()) == ["d", "r.json"]


def test_stale_temp_of_a_dead_writer_is_removed_on_resume(tmp_path):
    run = RunDir(tmp_path, "accept")
    dead = run.file(".result.json.999999999.1.0123abcd.tmp")
    dead.write_text("half")
    RunDir(tmp_path, "accept", resume=run.path)
    assert not dead.exists()


def test_resume_refuses_other_suites_and_damaged_settings(tmp_path):
    from samspec_bench.results import check_resume

    run = RunDir(tmp_path, "sampler")
    with pytest.raises(UserError, match=r"a `samspec-bench sampler` run folder \(samspec_run.json says so\), not accept"):
        RunDir(tmp_path, "accept", resume=run.path)
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    with pytest.raises(UserError, match=r"not a samspec-bench run folder .*it holds notes.txt"):
        check_resume(other, "accept")
    acc = RunDir(tmp_path, "accept")
    with pytest.raises(UserError, match="no config.json there"):
        check_resume(acc.path, "accept", {"k": 3})
    acc.write_json("config.json", {"k": 3, "traces": ["a"]})
    assert check_resume(acc.path, "accept", {"k": 3, "traces": ["a"]}) == {"k": 3, "traces": ["a"]}
    with pytest.raises(UserError, match=r"the run used k = 3, this call 5"):
        check_resume(acc.path, "accept", {"k": 5, "traces": ["a"]})
    acc.file("config.json").write_text('{"k": 3, "tra')
    with pytest.raises(UserError, match="not valid JSON"):
        check_resume(acc.path, "accept", {"k": 3})
    legacy = tmp_path / "drafters-20260101-120000-2"     # a folder from before the marker
    legacy.mkdir()
    with pytest.raises(UserError, match="drafters` run folder \\(its name says so\\)"):
        check_resume(legacy, "accept")


@pytest.mark.parametrize("text, match", [
    ('{"suite": "accu', r"result.json: not valid JSON .*--resume .*: its result.json is damaged .*leave out --resume"),
    ("", r"result.json: empty .*its result.json is damaged"),
    ('{"x": 1}', r"not a samspec-bench run folder \(no samspec_run.json, no result.json naming a suite; it holds result.json"),
])
def test_resume_of_a_folder_whose_result_json_is_damaged_says_so(tmp_path, text, match):
    """Not "no result.json ... it holds result.json": the file there is named as damaged."""
    from samspec_bench.results import check_resume

    d = tmp_path / "old"
    d.mkdir()
    (d / "result.json").write_text(text)
    with pytest.raises(UserError, match=match) as e:
        check_resume(d, "accuracy")
    assert "no samspec_run.json or result.json" not in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("result", [{"suite": "curves", "schema_version": 1}, {"schema_version": 1, "metrics": {}},
                                    {"suite": "", "schema_version": 1, "metrics": {}}])
def test_load_result_refuses_a_result_without_suite_or_metrics(tmp_path, result):
    (tmp_path / "result.json").write_text(json.dumps(result))
    with pytest.raises(UserError, match=r"result.json: no '(metrics|suite)'.*: the file is damaged"):
        load_result(tmp_path)


def test_failed_commands_leave_no_empty_run_folder_but_keep_samples(tmp_path):
    from samspec_bench.results import created_mark, discard_unfinished

    mark = created_mark()
    empty = RunDir(tmp_path / "res", "accept")
    empty.write_json("config.json", {"k": 3})
    kept = RunDir(tmp_path / "res", "accept")
    kept.append_sample({"id": 1})
    done = RunDir(tmp_path / "res", "accept")
    done.write_result({}, {})
    assert discard_unfinished(mark) == [empty.path]
    assert kept.path.is_dir() and done.path.is_dir() and not empty.path.exists()
    mark = created_mark()
    RunDir(tmp_path / "fresh", "accept")
    discard_unfinished(mark)
    assert not (tmp_path / "fresh").exists()              # the root it made for itself goes too


def test_a_resumed_folder_is_named_when_interrupted_and_never_removed(tmp_path):
    from samspec_bench.results import created_mark, discard_unfinished, kept_unfinished

    first = RunDir(tmp_path / "res", "accept")
    first.write_json("config.json", {"k": 3})
    first.append_sample({"id": 1})
    mark = created_mark()   # a new command resumes it, and is interrupted
    again = RunDir(tmp_path / "res", "accept", resume=first.path)
    assert discard_unfinished(mark) == [] and kept_unfinished(mark) == [again.path]
    bare = RunDir(tmp_path / "bare", "accept")
    bare.write_json("config.json", {"k": 3})
    mark = created_mark()   # resumed before any sample was kept: the user's folder stays
    RunDir(tmp_path / "x", "accept", resume=bare.path)
    assert discard_unfinished(mark) == [] and bare.path.is_dir() and kept_unfinished(mark) == []


@pytest.mark.parametrize("change, match", [
    (lambda d: [d], "holds a JSON list"),
    (lambda d: {**d, "metrics": []}, "'metrics' is a JSON list"),
    (lambda d: {**d, "figures": "a.png"}, "'figures' is a JSON str"),
    (lambda d: {k: v for k, v in d.items() if k != "suite"}, "no 'suite'"),
])
def test_load_result_names_what_is_damaged(tmp_path, change, match):
    run = RunDir(tmp_path, "drafters")
    run.write_result({}, {"v": 1})
    data = json.loads(run.file("result.json").read_text())
    run.file("result.json").write_text(json.dumps(change(data)))
    with pytest.raises(UserError, match=match):
        load_result(run.path)


def test_option_checks_name_the_option_and_the_range():
    from samspec_bench.errors import int_at_least, int_list, number_in

    assert int_at_least(3, "--n") == 3 and int_at_least(None, "--n", optional=True) is None
    for bad in (0, -1, True, "x", 2.5, None):
        with pytest.raises(UserError, match=r"^--n .*give an integer >= 1$"):
            int_at_least(bad, "--n")
    with pytest.raises(UserError, match=r"^-k 40: give an integer in 1\.\.34$"):
        int_at_least(40, "-k", 1, 34)
    assert number_in(0.5, "--p", 0, 1, lo_open=True) == 0.5
    for bad in (0, 1.5, "x"):
        with pytest.raises(UserError, match=r"^--p .*give a number in \(0, 1\]$"):
            number_in(bad, "--p", 0, 1, lo_open=True)
    for bad in (float("nan"), float("inf")):   # inf is above any lower end: the message says finite
        with pytest.raises(UserError, match=r"^--p .*give a finite number in \(0, 1\]$"):
            number_in(bad, "--p", 0, 1, lo_open=True)
    with pytest.raises(UserError, match="in 1..8"):
        int_list("2,9", "--b", 1, 8)


def test_print_and_emit_keeps_stdout_for_the_json_alone(tmp_path, capsys):
    """`--json -`: the run's lines and folder go to stderr and stdout parses as the result;
    without it the lines are on stdout."""
    path = RunDir(tmp_path, "demo").write_result({"a": 1}, {"m": 2.5}, {})
    print_and_emit(["line one"], path, "-")
    out, err = capsys.readouterr()
    assert json.loads(out)["metrics"] == {"m": 2.5}
    assert err.splitlines() == ["line one", f"results: {path.parent}"]
    print_and_emit(["line one"], path, None)
    out, err = capsys.readouterr()
    assert out.splitlines() == ["line one", f"results: {path.parent}"] and err == ""


def test_a_setting_newer_than_the_folder_matches_what_older_runs_did(tmp_path):
    from samspec_bench.results import check_resume

    old = RunDir(tmp_path, "rollout")
    old.write_json("config.json", {"k": 3})   # saved before `strict` existed; those runs were not strict
    assert check_resume(old.path, "rollout", {"k": 3, "strict": False}, added={"strict": False}) == {"k": 3}
    with pytest.raises(UserError, match="the run used strict = False, this call True"):
        check_resume(old.path, "rollout", {"k": 3, "strict": True}, added={"strict": False})
    with pytest.raises(UserError, match="the run used strict = None, this call False"):   # not declared: refused
        check_resume(old.path, "rollout", {"k": 3, "strict": False})
