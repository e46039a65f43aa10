"""What a finished run prints, the same in every suite that has nothing of its own to add."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterable

from samspec_bench.results import emit_json, load_result


def print_and_emit(lines: Iterable[str], result_path: str | os.PathLike, json_path: str | None) -> None:
    """A finished run's terminal lines and its folder, then its `--json`: with `--json -` the
    lines go to stderr, so stdout holds the JSON alone."""
    stream = sys.stderr if json_path == "-" else sys.stdout
    for line in lines:
        print(line, file=stream)
    folder = Path(result_path).parent
    print(f"results: {folder}", file=stream)
    emit_json(load_result(folder), json_path)
