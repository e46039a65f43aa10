"""What `samspec-bench run` keeps on disk: `<output>/run-<timestamp>/run_state.json` (the
settings, each step's status, arguments and run directory; rewritten after every step, so that
`--resume DIR` knows what is finished) and each step's run directories under runs/<step>/."""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Iterable

from samspec_bench.errors import UserError
from samspec_bench.results import atomic_write_text, found_suite, load_result, make_unique_dir, read_json

STATE_FILE = "run_state.json"
STATE_FORMAT = 1
STATUSES = ("done", "failed", "skipped", "running")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_state(out: Path, state: dict) -> None:
    """run_state.json, written whole (a temp name unique to the process, then a rename)."""
    atomic_write_text(Path(out) / STATE_FILE, json.dumps(state, indent=2, sort_keys=False) + "\n")


def read_state(run_dir: str | Path) -> dict:
    """run_state.json, checked as a file: whole JSON, an object of this format with 'settings'
    and 'steps' objects. What a resume reads from them is checked by check_shape."""
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
        raise UserError(damaged(run_dir, "no 'settings' or 'steps' object"))
    return state


def damaged(run_dir: str | Path, what: str) -> str:
    """The one-line message for a run_state.json whose content is wrong."""
    return f"{STATE_FILE} in {run_dir}: {what}; the file is damaged: start a new run (or fix the file)"


def _kind(value: Any) -> str:
    return "null" if value is None else f"a JSON {type(value).__name__} ({json.dumps(value)[:40]})"


def _optional(obj: dict, key: str, types: tuple, where: str, want: str) -> str | None:
    """What is wrong with obj[key] (absent or null is fine), or None."""
    v = obj.get(key)
    if v is None or (isinstance(v, types) and not isinstance(v, bool)):
        return None
    return f"{where}{key} is {_kind(v)}, not {want}"


def _settings_problem(s: dict, step_names: Iterable[str]) -> str | None:
    if "model" not in s:
        return "settings has no 'model'"
    for key in ("model", "engine", "device", "data_dir", "config_file"):
        bad = _optional(s, key, (str,), "settings.", "a string or null")
        if bad:
            return bad
    bad = _optional(s, "sections", (dict,), "settings.", "an object") or \
        _optional(s, "not_used", (dict,), "settings.", "an object")
    if bad:
        return bad
    for name, sec in (s.get("sections") or {}).items():
        if not isinstance(sec, (dict, bool)):
            return f"settings.sections.{name} is {_kind(sec)}, not an object of options or false"
    steps = s.get("steps")
    if steps is not None:
        if not isinstance(steps, list) or not steps or not all(isinstance(x, str) for x in steps):
            return f"settings.steps is {_kind(steps)}, not a list of step names or null"
        unknown = [x for x in steps if x not in step_names]
        if unknown:
            return f"settings.steps names {unknown[0]!r}, not a step of this build ({', '.join(step_names)})"
    return None


def _step_problem(name: str, st: Any, step_names: Iterable[str]) -> str | None:
    if name not in step_names:
        return f"steps has {name!r}, not a step of this build ({', '.join(step_names)})"
    if not isinstance(st, dict):
        return f"steps.{name} is {_kind(st)}, not an object with the step's status"
    if st.get("status") not in STATUSES:
        return f"steps.{name}.status is {_kind(st.get('status'))}, not one of {', '.join(STATUSES)}"
    where = f"steps.{name}."
    bad = (_optional(st, "run_dir", (str,), where, "a folder inside the run")
           or _optional(st, "reason", (str,), where, "a string")
           or _optional(st, "args", (list,), where, "a list")
           or _optional(st, "notes", (list,), where, "a list of strings")
           or _optional(st, "exit_code", (int,), where, "an integer"))
    if bad:
        return bad
    rd = st.get("run_dir")
    if rd is not None and (os.path.isabs(rd) or os.path.normpath(rd).split(os.sep)[0] in ("..", ".")):
        return f"steps.{name}.run_dir {rd!r} is not a folder inside the run"
    if not all(isinstance(n, str) for n in st.get("notes") or []):
        return f"steps.{name}.notes is {_kind(st.get('notes'))}, not a list of strings"
    return None


def _threads_problem(t: Any) -> str | None:
    if t is None:
        return None
    if not isinstance(t, dict) or isinstance(t.get("threads"), bool) or not isinstance(t.get("threads"), int) \
            or t["threads"] < 1:
        return f"threads is {_kind(t)}, not an object with the run's torch threads (an integer >= 1)"
    if "cores" in t and not all(isinstance(t.get(k), (int, float)) and not isinstance(t.get(k), bool)
                                for k in ("cores", "load_avg_1m")):
        return f"threads is {_kind(t)}: cores and load_avg_1m must be numbers"
    return None


def check_shape(state: dict, run_dir: str | Path, step_names: Iterable[str]) -> None:
    """What a resume reads from the state, checked before it is used: the settings (model,
    engine, device, data_dir, config_file strings or null; sections; the step list, of names in
    `step_names`), every step's record (a known step, an object with a known status, run_dir
    inside the run), the torch threads and the notes. A UserError naming what is wrong."""
    names = tuple(step_names)
    problem = _settings_problem(state["settings"], names)
    for name, st in state["steps"].items():
        problem = problem or _step_problem(str(name), st, names)
    problem = problem or _threads_problem(state.get("threads"))
    notes = state.get("notes")
    if problem is None and notes is not None and not (isinstance(notes, list)
                                                      and all(isinstance(n, str) for n in notes)):
        problem = f"notes is {_kind(notes)}, not a list of strings"
    if problem:
        raise UserError(damaged(run_dir, problem))


def result_problem(run_dir: Path, report: bool = True) -> str | None:
    """Why a step's run folder does not read back as a finished result (None: it does): gone,
    no result.json, or a result.json that reports cannot load (truncated, not an object, another
    schema, ...); with report=False, only that it is whole JSON holding an object (what a later
    step's plan reads from it)."""
    if not run_dir.is_dir():
        return f"its run folder {run_dir} is gone"
    if not (run_dir / "result.json").is_file():
        return f"its run folder {run_dir} has no result.json"
    try:
        if report:
            load_result(run_dir)
        elif not isinstance(read_json(run_dir / "result.json", "run the step again"), dict):
            return "its result.json holds no JSON object"
    except UserError as e:
        what = str(e)
        prefix = f"{run_dir / 'result.json'}: "
        what = what[len(prefix):] if what.startswith(prefix) else what
        return f"its result.json is damaged ({what.split('; ')[0]})"
    return None


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
