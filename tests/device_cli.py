"""What the device tests (`*_cuda.py`) share: a CLI call that shows the whole traceback when a
command fails, and short real prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from samspec_bench.cli import group

PROMPTS = ("A baker made 48 muffins and sold 3/4 of them. How many muffins are left?",
           "What is 17 times 23? Show your work.",
           "A rectangle has a perimeter of 30 cm and a length of 9 cm. What is its area?")


def run_cli(args: list[str], json_path: Path) -> dict[str, Any]:
    """Run `samspec-bench ARGS --json json_path`; the result dict. An exception propagates with
    its traceback (catch_exceptions=False), a non-zero exit fails with the command's output."""
    res = CliRunner().invoke(group, [*map(str, args), "--json", str(json_path)], catch_exceptions=False)
    assert res.exit_code == 0, f"samspec-bench {' '.join(map(str, args))} exited {res.exit_code}:\n{res.output}"
    return json.loads(json_path.read_text())


def prompts_file(directory: Path) -> Path:
    path = directory / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    return path


def device_type(result: dict[str, Any]) -> str:
    """The device type a result.json records (environment.device.type)."""
    return result["environment"]["device"]["type"]
