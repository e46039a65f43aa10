"""Where a command writes is checked when the option is read (samspec_bench/output_paths.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from samspec_bench.errors import UserError
from samspec_bench.output_paths import check_output_file, check_output_root

# /proc takes no new files, even from root (for whom a chmod'ed folder stays writable)
UNWRITABLE = Path("/proc")
needs_proc = pytest.mark.skipif(not UNWRITABLE.is_dir(), reason="needs Linux /proc: a folder nobody can write in")


@needs_proc
def test_a_file_in_a_folder_nobody_can_write_in_is_refused_naming_the_option():
    with pytest.raises(UserError, match=r"^--json /proc/samspec-x\.json: cannot write in /proc \(.*\); give a path"):
        check_output_file("/proc/samspec-x.json", "--json")
    with pytest.raises(UserError, match=r"^--output /proc/samspec-runs: cannot write in /proc "):
        check_output_root("/proc/samspec-runs", "--output")


def test_a_folder_that_does_not_exist_yet_is_checked_at_its_nearest_existing_parent(tmp_path):
    assert check_output_file(tmp_path / "a" / "b" / "r.json") == tmp_path / "a" / "b" / "r.json"
    assert check_output_root(tmp_path / "runs" / "x") == tmp_path / "runs" / "x"
    assert not (tmp_path / "a").exists() and not (tmp_path / "runs").exists()   # the check creates nothing
    assert list(tmp_path.iterdir()) == []   # and its probe file is gone


def test_a_file_in_the_way_is_named(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match=r"f is a file, not a directory"):
        check_output_file(tmp_path / "f" / "r.json")
    with pytest.raises(UserError, match=r"is a file, not a directory; give a directory for the run folders"):
        check_output_root(tmp_path / "f")


@needs_proc
def test_the_run_does_not_start_when_its_json_cannot_be_written(tmp_path):
    prom = tmp_path / "m.prom"
    prom.write_text("vllm:spec_decode_num_drafts_total 8\nvllm:spec_decode_num_draft_tokens_total 24\n"
                    "vllm:spec_decode_num_accepted_tokens_total 6\n")
    out = tmp_path / "runs"
    res = subprocess.run([sys.executable, "-m", "samspec_bench.cli", "spec-metrics", str(prom), "--output", str(out),
                          "--json", "/proc/samspec-x.json"], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.strip().splitlines()   # one line: the option, the path, why, the fix
    assert re.fullmatch(r"error: --json /proc/samspec-x\.json: cannot write in /proc \(.+\); "
                        r"give a path in a directory you can write in", line), line
    assert not out.exists()   # refused before the run wrote its folder
