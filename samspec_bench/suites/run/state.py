"""What `samspec-bench run` keeps on disk: `<output>/run-<timestamp>/run_state.json` (the
settings, each step's status, arguments and run directory; rewritten after every step, so that
`--resume DIR` knows what is finished) and each step's run directories under runs/<step>/."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from samspec_bench.errors import UserError

STATE_FILE = "run_state.json"
STATE_FORMAT = 1


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_state(out: Path, state: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(out / STATE_FILE)


def read_state(run_dir: str | Path) -> dict:
    p = Path(run_dir) / STATE_FILE
    if not p.is_file():
        raise UserError(f"--resume {run_dir}: no {STATE_FILE} there; pass a directory written by `samspec-bench run`")
    try:
        state = json.loads(p.read_text(encoding="utf-8"))
    except ValueError:
        raise UserError(f"{p}: not valid JSON; delete the run directory and start a new run") from None
    if state.get("format") != STATE_FORMAT:
        raise UserError(f"{p}: written by another version of samspec-bench; start a new run")
    return state


def new_run_dir(root: Path) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = root / f"run-{stamp}", 1
    while path.exists():
        n += 1
        path = root / f"run-{stamp}-{n}"
    return path


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
