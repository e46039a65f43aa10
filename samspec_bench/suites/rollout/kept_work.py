"""A simulated rollout's finished work, kept as it finishes: every simulated draw (the run's
draws, each sensitivity row's draws) is one line of draws.jsonl in the run folder, so Ctrl-C or
SIGTERM loses at most the draw in flight and `rollout --resume FOLDER` simulates only the rest.

Keys name a draw by where it sits in the run, not by what it computed: a scope ("all", "dev",
"heldout", "sensitivity"), then the draw's seed, or for the sensitivity table the index of its
simulation call. The run's settings and input files are checked on --resume (command.py), so
the same settings make the same calls in the same order and an index names the same draw.

Every value passes through `to_jsonable` whether it was just computed or read back, so a
resumed run's figures are those an uninterrupted one gives (a non-finite figure is None in
both, as it is in result.json).
"""

from __future__ import annotations

import contextlib
import time
from contextvars import ContextVar
from typing import Any, Callable, Iterator

import click

from samspec_bench.results import (CONFIG_FILE, INPUT_FILES, RunDir, check_resume, check_same_files, file_sha256,
                                   to_jsonable)

DRAWS_FILE = "draws.jsonl"
IDENTITY_IGNORED = ("threads",)   # how fast a replay runs, not what it computes


class KeptWork:
    """The draws of one run folder: those read back from an interrupted run and the new ones,
    appended as each finishes."""

    def __init__(self, run_dir: RunDir, resumed: bool, identity: dict[str, Any] | None = None):
        self.run_dir = run_dir
        self.resumed = resumed
        self.identity = identity or {}
        self.done: dict[str, Any] = {}
        if resumed:   # a torn last line (the draw in flight) is not a whole record: it is redone
            self.done = {r["key"]: r["value"] for r in run_dir.samples(DRAWS_FILE)
                         if isinstance(r.get("key"), str) and "value" in r}
        self.reused = 0
        self.computed = 0
        self._calls: dict[str, int] = {}

    @classmethod
    def start(cls, config: dict[str, Any], output: str, resume: str | None, suite: str) -> "KeptWork":
        """The run folder: a new one under `output` with the settings saved, or the --resume
        folder once its settings match these (else a one-line UserError, exit 2)."""
        identity = to_jsonable({k: v for k, v in config.items() if k not in IDENTITY_IGNORED})
        if resume is not None:
            check_resume(resume, suite, identity, config_name=CONFIG_FILE)
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
        return {"file": DRAWS_FILE, "kept_from_earlier": self.reused, "simulated_now": self.computed}


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
