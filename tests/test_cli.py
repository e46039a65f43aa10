"""The command line: fast help without heavy imports, every listed command loads."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from samspec_bench.cli import group
from samspec_bench.commands import COMMANDS


def test_help_imports_no_torch_vllm_or_lm_eval():
    code = ("import sys\nfrom samspec_bench.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'vllm', 'lm_eval', 'transformers') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out
    for name in COMMANDS:
        assert name in out


def test_every_listed_command_loads_and_has_help():
    runner = CliRunner()
    for name in COMMANDS:
        res = runner.invoke(group, [name, "--help"])
        assert res.exit_code == 0, (name, res.output)
        assert "--json" in res.output or "--output" in res.output, name


def test_unknown_command_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "samspec_bench.cli", "frobnicate"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "frobnicate" in proc.stderr
