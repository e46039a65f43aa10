"""What `samspec-bench run` keeps on disk: `<output>/run-<timestamp>/run_state.json` (the
settings, each step's status, arguments and run directory; rewritten after every step, so that
`--resume DIR` knows what is finished) and each step's run directories under runs/<step>/."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from samspec_bench.errors import UserError
from samspec_bench.results import atomic_write_text, found_suite, make_unique_dir, read_json

STATE_FILE = "run_state.json"
STATE_FORMAT = 1


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_state(out: Path, state: dict) -> None:
    """run_state.json, written whole (a temp name unique to the process, then a rename)."""
    atomic_write_text(Path(out) / STATE_FILE, json.dumps(state, indent=2, sort_keys=False) + "\n")


def read_state(run_dir: str | Path) -> dict:
    p = Path(run_dir) / STATE_FILE
    if not p.is_file():
        found, how = found_suite(run_dir) if Path(run_dir).is_dir() else (None, "")
        what = f" (a `samspec-bench {found}` run folder, by {how})" if found else ""
        raise UserError(f"--resume {run_dir}: no {STATE_FILE} there{what}; pass a directory written by "
                        "`samspec-bench run`")
    # the run's settings are in no other file: it cannot be rebuilt; its step results stay reportable
    state = read_json(p, "start a new run without --resume (`samspec-bench report` still reads this run's step results)")
    if not isinstance(state, dict):
        raise UserError(f"{p}: holds a JSON {type(state).__name__}, not a run state; start a new run")
    if state.get("format") != STATE_FORMAT:
        raise UserError(f"{p}: written by another version of samspec-bench; start a new run")
    if not isinstance(state.get("settings"), dict) or not isinstance(state.get("steps"), dict):
        raise UserError(f"{p}: no 'settings' or 'steps': the file is damaged; start a new run")
    return state


def new_run_dir(root: Path) -> Path:
    """A new, empty `<root>/run-<timestamp>[-n]`: made with an exclusive mkdir, so two runs
    started in the same second on one --output get their own."""
    return make_unique_dir(root, "run")


def run_dirs(step_dir: Path) -> list[Path]:
    return sorted((p for p in step_dir.iterdir() if p.is_dir()), key=lambda p: p.name) if step_dir.is_dir() else []


def finished_new(step_dir: Path, before: list[str]) -> Path | None:
    """The newest run directory with a result.json that was not there before the step."""
    new = [p for p in run_dirs(step_dir) if p.name not in before and (p / "result.json").is_file()]
    return new[-1] if new else None


def partial(step_dir: Path) -> Path | None:
    """The newest run directory of an interrupted step (no result.json yet)."""
    cands = [p for p in run_dirs(step_dir) if not (p / "result.json").is_file()]
    return cands[-1] if cands else None
