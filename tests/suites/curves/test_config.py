"""curves' build_config checks its run paths before any is read: a path that is not there is one
line naming it (and --run where it came that way) and what to pass, when the options are read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs.formats import KNOWN
from samspec_bench.suites import curves

REPO = Path(__file__).resolve().parents[3]


def _params(**over) -> dict:
    """Every parameter of the click command at its default, `over` on top."""
    ctx = curves.command.make_context("curves", [], resilient_parsing=True)
    p = {k: v for k, v in ctx.params.items() if k not in ("output", "json_path")}
    return {**p, **over}


def _log(path: Path) -> Path:
    path.write_text("step,critic/score/mean\n" + "".join(f"{s},0.5\n" for s in range(1, 21)), encoding="utf-8")
    return path


def test_a_missing_run_is_refused_by_build_config(tmp_path):
    a, b = _log(tmp_path / "a.csv"), _log(tmp_path / "b.csv")
    missing = tmp_path / "no" / "such.log"
    with pytest.raises(UserError) as e:
        curves.build_config(**_params(runs=(str(a), str(missing))))
    assert str(e.value) == f"{missing}: no such file or folder; pass an existing training log ({KNOWN})"
    with pytest.raises(UserError) as e:   # given with --run (a `run` config's `curves: {runs: [...]}`)
        curves.build_config(**_params(runs=(str(a),), extra_runs=(str(missing),)))
    assert str(e.value).startswith(f"--run {missing}: no such file or folder; pass an existing training log")
    assert curves.build_config(**_params(runs=(str(a),), extra_runs=(str(b),))).runs == [str(a), str(b)]


def test_a_missing_run_exits_2_in_one_line_before_a_good_one_is_read(tmp_path):
    """The good run is not a log at all: read first, it would be the one named."""
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)))
    missing = tmp_path / "missing.log"
    proc = subprocess.run([sys.executable, "-m", "samspec_bench.cli", "curves", str(junk), str(missing),
                           "--output", str(tmp_path / "out")], capture_output=True, text=True, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith(f"error: {missing}: no such file or folder")
    assert not (tmp_path / "out").exists()
