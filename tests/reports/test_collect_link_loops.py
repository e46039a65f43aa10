"""`samspec-bench report md|html RESULTS` with a symbolic link loop (a folder linking to itself,
to a folder above it, or a chain of links that never ends) in or as what it is given: the loop is
named, never "no result.json found" or "no such directory". Beside readable runs it is left out
and listed (on stderr, in the report and its JSON); with nothing readable left, one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samspec_bench.cli import main
from samspec_bench.reports.collect import collect

from report_runs import make_run


def _report(args, tmp_path: Path, capsys, kind: str = "md") -> tuple[int, str, str, Path]:
    out = tmp_path / f"r.{kind}"
    capsys.readouterr()
    code = 0
    try:
        main(["report", kind, *map(str, args), "-o", str(out), "--json", str(tmp_path / "r.json")])
    except SystemExit as e:
        code = e.code
    return code, out.read_text() if out.is_file() else "", capsys.readouterr().err, tmp_path / "r.json"


@pytest.mark.parametrize("kind", ["md", "html"])
def test_a_loop_in_a_run_folder_beside_its_result_is_named_and_the_run_reported(tmp_path, capsys, kind):
    run = make_run(tmp_path / "results", "toy", {"x": 1.0})
    (run / "loop").symlink_to(".")
    code, page, err, js = _report([tmp_path / "results"], tmp_path, capsys, kind)
    assert code == 0, err
    line = (f"report: left out {run / 'loop'}: a symbolic link loop (it points to ., its own folder): not followed; "
            "remove the link")
    assert line in err.splitlines(), err
    assert str(run / "loop") in page and "symbolic link loop" in page
    (u,) = json.loads(js.read_text())["unreadable"]
    assert u["path"] == str(run / "loop") and u["reason"].startswith("a symbolic link loop")
    assert [r.path for r in collect([tmp_path / "results"]).runs] == [run]


@pytest.mark.parametrize("target, why", [(".", "its own folder"), ("..", "a folder above it")])
def test_a_folder_holding_only_a_loop_is_one_line_naming_the_loop(tmp_path, capsys, target, why):
    d = tmp_path / "only"
    d.mkdir()
    (d / "loop").symlink_to(target)
    code, _, err, _ = _report([d], tmp_path, capsys)
    err = err.strip()
    assert code == 2 and "\n" not in err and err.startswith(f"error: {d}: no result.json found in it, and "
                                                            f"{d / 'loop'} is a symbolic link loop"), err
    assert why in err


def test_a_given_path_that_is_a_link_loop_is_named_not_missing(tmp_path, capsys):
    (tmp_path / "d1").symlink_to("d2")
    (tmp_path / "d2").symlink_to("d1")
    code, _, err, _ = _report([tmp_path / "d1"], tmp_path, capsys)
    err = err.strip()
    assert code == 2 and "\n" not in err, err
    assert err.startswith(f"error: {tmp_path / 'd1'}: a symbolic link loop (it points to d2, a chain of links "
                          "that never ends)"), err
    assert "no such directory" not in err


def test_a_result_json_that_is_a_link_loop_is_named(tmp_path, capsys):
    d = tmp_path / "run"
    d.mkdir()
    (d / "result.json").symlink_to("result.json")
    code, _, err, _ = _report([d], tmp_path, capsys)
    err = err.strip()
    assert code == 2 and "\n" not in err and f"{d / 'result.json'}: a symbolic link loop" in err, err
