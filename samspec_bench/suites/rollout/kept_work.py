"""A simulated rollout's finished work, kept as it finishes: every simulated draw (the run's
draws, each sensitivity row's draws) is one line of draws.jsonl in the run folder, so Ctrl-C or
SIGTERM loses at most the draw in flight and `rollout --resume FOLDER` simulates only the rest.

Keys name a draw by where it sits in the run, not by what it computed: a scope ("all", "dev",
"heldout", "sensitivity"), then the draw's seed, or for the sensitivity table the index of its
simulation call. The run's settings and input files are checked on --resume (command.py), so
the same settings make the same calls in the same order and an index names the same draw.

Every value passes through `to_jsonable` whether it was just computed or read back, so a
resumed run's figures are those an uninterrupted one gives (a non-finite figure is None in
both, as it is in result.json). A line read back that is not a whole draw of the shape its
family's others have (a hand edit: a value of another type, a figure as text or removed) is
simulated again and counted (`ignored_records`), never used.
"""

from __future__ import annotations

import contextlib
import time
from contextvars import ContextVar
from typing import Any, Callable, Iterator

import click

from samspec_bench.results import (CONFIG_FILE, INPUT_FILES, RunDir, check_resume, check_same_files, file_sha256,
                                   to_jsonable, torn_tail)

DRAWS_FILE = "draws.jsonl"
IDENTITY_IGNORED = ("threads",)   # how fast a replay runs, not what it computes
# settings added after run folders were made, with what those runs did: such a folder resumes
# when this call asks for the same
ADDED_SETTINGS = {"history_includes_validation": False, "on_error": "stop", "length_rank_share": 0.0}


class KeptWork:
    """The draws of one run folder: those read back from an interrupted run and the new ones,
    appended as each finishes."""

    def __init__(self, run_dir: RunDir, resumed: bool, identity: dict[str, Any] | None = None):
        self.run_dir = run_dir
        self.resumed = resumed
        self.identity = identity or {}
        self.done: dict[str, Any] = {}
        self.ignored = 0   # lines that are not a whole, well-formed draw (damaged by hand): redone
        if resumed:   # a torn last line (the draw in flight) is not a whole record: it is redone
            self.done, self.ignored = read_kept(run_dir)
        self.reused = 0
        self.computed = 0
        self._calls: dict[str, int] = {}

    @classmethod
    def start(cls, config: dict[str, Any], output: str, resume: str | None, suite: str) -> "KeptWork":
        """The run folder: a new one under `output` with the settings saved, or the --resume
        folder once its settings match these (else a one-line UserError, exit 2)."""
        identity = to_jsonable({k: v for k, v in config.items() if k not in IDENTITY_IGNORED})
        if resume is not None:
            check_resume(resume, suite, identity, config_name=CONFIG_FILE, added=ADDED_SETTINGS)
        kept = cls(RunDir(output, suite, resume), resume is not None, identity)
        if resume is None:
            kept.run_dir.write_json(CONFIG_FILE, identity)
        return kept

    def check_files(self, files: list[str]) -> None:
        """The input files' sha256: saved with the settings, or (--resume) refused when one changed
        since the run began (its kept draws were simulated from the old file)."""
        shas = {f: file_sha256(f) for f in files}
        if self.resumed:
            check_same_files(self.run_dir.saved_config(CONFIG_FILE) or {}, shas, self.run_dir.path)
        else:
            self.run_dir.write_json(CONFIG_FILE, {**self.identity, INPUT_FILES: shas})

    def next_call(self, scope: str) -> int:
        """The index of the next simulation call in `scope` (0, 1, ...)."""
        n = self._calls.get(scope, 0)
        self._calls[scope] = n + 1
        return n

    def get(self, key: str, compute: Callable[[], Any]) -> Any:
        if key in self.done:
            self.reused += 1
            return self.done[key]
        value = to_jsonable(compute())
        self.run_dir.append_sample({"key": key, "value": value}, DRAWS_FILE)
        self.done[key] = value
        self.computed += 1
        return value

    def describe(self) -> dict[str, Any]:
        return {"file": DRAWS_FILE, "kept_from_earlier": self.reused, "simulated_now": self.computed,
                "ignored_records": self.ignored}


def _shape(x: Any) -> Any:
    """A kept value's structure: numbers and None alike (a figure may be non-finite in one draw),
    a KV block as a whole (its note and per-instance counts vary by draw)."""
    if isinstance(x, dict):
        return ("dict", tuple(sorted((k, ("kv",) if k == "kv" and isinstance(v, dict) else _shape(v))
                                     for k, v in x.items())))
    if isinstance(x, list):
        return ("list", tuple(_shape(v) for v in x))
    if x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)):
        return ("n",)
    return (type(x).__name__,)


def _numbers_only(shape: Any) -> bool:
    """Every leaf of `shape` a number or None (or a KV block)."""
    if shape[0] == "dict":
        return all(_numbers_only(v) for _, v in shape[1])
    if shape[0] == "list":
        return all(_numbers_only(v) for v in shape[1])
    return shape[0] in ("n", "kv")


def _record_ok(rec: Any, seed: int | None) -> bool:
    """A draw's record as draws.draw_record writes it: its seed, every arm's figures (numbers or
    None, its KV block), the phases of every arm and the baseline's of some."""
    if not isinstance(rec, dict) or set(rec) != {"seed", "arms", "phases", "baseline"}:
        return False
    arms, phases, base = rec["arms"], rec["phases"], rec["baseline"]
    return (type(rec["seed"]) is int and (seed is None or rec["seed"] == seed)
            and isinstance(arms, dict) and bool(arms) and all(isinstance(a, dict) for a in arms.values())
            and isinstance(phases, dict) and set(phases) == set(arms) and isinstance(base, dict)
            and set(base) <= set(arms) and all(isinstance(v, list) and v for v in (*phases.values(), *base.values()))
            and _numbers_only(_shape(rec)))


def _value_ok(key: str, value: Any) -> bool:
    """A kept value fits its key: a draw's record (the run's draws) or a non-empty list of them
    (a sensitivity call's rounds of one seed), the first of the key's seed."""
    family, sep, seed = key.rpartition("/seed=")
    if not sep or not family or not seed.lstrip("-").isdigit():
        return False
    if family.split("/", 1)[0] == "sensitivity":
        return isinstance(value, list) and bool(value) and _record_ok(value[0], int(seed)) and all(
            _record_ok(r, None) for r in value[1:])
    return _record_ok(value, int(seed))


def read_kept(run_dir: RunDir) -> tuple[dict[str, Any], int]:
    """The kept draws of an interrupted run and how many lines were not used: lines that are not
    a whole record, a value that does not fit its key, a key given twice (the last line is used),
    and draws whose structure differs from the rest of their family (a figure removed by hand:
    the structure most of the family's draws share is kept, none of a family split evenly)."""
    lines = 0
    done: dict[str, Any] = {}
    path = run_dir.file(DRAWS_FILE)
    if path.exists():
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = sum(1 for line in f if line.strip())
    for r in run_dir.samples(DRAWS_FILE, said=False):   # counted below, with the records that do not fit
        key, value = r.get("key"), r.get("value")
        if isinstance(key, str) and _value_ok(key, value):
            done.pop(key, None)   # a key given twice: the later line stands
            done[key] = value
    families: dict[str, dict[Any, list[str]]] = {}
    for key, value in done.items():
        families.setdefault(key.rpartition("/seed=")[0], {}).setdefault(_shape(value), []).append(key)
    for shapes in families.values():
        sizes = sorted((len(keys) for keys in shapes.values()), reverse=True)
        unique = len(sizes) == 1 or sizes[0] > sizes[1]
        for keys in shapes.values():
            if not unique or len(keys) != sizes[0]:
                for key in keys:
                    del done[key]
    # a torn last line (the draw in flight when the run was stopped) is expected: not counted
    return done, max(0, lines - len(done) - torn_tail(path))


_ACTIVE: ContextVar[KeptWork | None] = ContextVar("samspec_kept_work", default=None)
_SCOPE: ContextVar[str] = ContextVar("samspec_kept_scope", default="all")


@contextlib.contextmanager
def keeping(kept: KeptWork | None) -> Iterator[KeptWork | None]:
    """Draws simulated inside are kept in (and read back from) `kept`."""
    token = _ACTIVE.set(kept)
    try:
        yield kept
    finally:
        _ACTIVE.reset(token)


@contextlib.contextmanager
def scope(name: str) -> Iterator[None]:
    """Keys inside are under `name` (the dev and held-out halves of a --dev-split run draw the
    same seeds on different prompts)."""
    token = _SCOPE.set(name)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def call_index() -> int | None:
    """The next simulation call's index in the current scope (None: nothing is kept)."""
    kept = _ACTIVE.get()
    return None if kept is None else kept.next_call(_SCOPE.get())


def kept_draw(what: str, compute: Callable[[], Any], label: str | None = None) -> Any:
    """`compute()` as JSON values, kept under the current scope and `what` (read back when an
    interrupted run finished it). `label`: the progress line's words (none when omitted)."""
    kept = _ACTIVE.get()
    key = f"{_SCOPE.get()}/{what}"
    if kept is not None and key in kept.done:
        if label:
            click.echo(f"rollout: {label}: kept from the interrupted run", err=True)
        return kept.get(key, compute)
    t0 = time.perf_counter()
    value = to_jsonable(compute()) if kept is None else kept.get(key, compute)
    if label:
        click.echo(f"rollout: {label}: simulated in {time.perf_counter() - t0:.1f} s", err=True)
    return value
