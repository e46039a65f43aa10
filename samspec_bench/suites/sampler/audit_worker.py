"""A user's sampler (`--audit module:function`) audited in a worker process, under a time limit
per call (`--audit-timeout`).

Why a process: a Python thread stuck in a sampler cannot be stopped, a process can be killed.
Why one process per audited sampler, running its whole audit: only the spec string, the config
and the battery (numpy arrays) go in and a JSON-able record comes out, so no tensor, generator
or CUDA memory crosses the boundary; torch's start-up (seconds) is paid once per sampler, not
once per call. Before and after every call of the sampler the worker tells the parent through a
pipe (which phase, which call); the parent waits on that pipe and kills the worker when one call
has outlasted the limit, or finds it gone when it crashed, and the audit is ERROR with one line
naming the case, the call and the limit. The other audits go on.

The worker starts when the run resolves its samplers: it imports the user's module there (spawned,
so with the parent's sys.path), and a module that does not load, or not within LOAD_LIMIT_S plus
the per-call limit, is bad input (exit 2) before any audit runs; then it waits for its turn. It
ignores Ctrl-C (the parent stops it), dies with the parent however the parent went (a lifeline
pipe; on Linux also the kernel's parent-death signal, which works inside C code), and sends the
sampler's prints to stderr (stdout may carry `--json -`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import wait
from typing import Callable, Optional

import torch

from samspec_bench.errors import UserError, one_line
from samspec_bench.results import to_jsonable
from samspec_bench.suites.sampler.adapters import resolve_audit
from samspec_bench.suites.sampler.audit import audit
from samspec_bench.suites.sampler.battery import Case
from samspec_bench.suites.sampler.config import BUILTIN_AUDITS, NEGATIVE_CONTROLS, SamplerConfig

LOAD_LIMIT_S = 120.0   # importing torch and the user's module in the worker, on top of the per-call limit
_PR_SET_PDEATHSIG = 1


def isolated(spec: str, cfg: SamplerConfig) -> bool:
    """Whether this sampler runs in a worker: a user's module:function, unless the limit is off."""
    return spec not in BUILTIN_AUDITS and cfg.audit_timeout > 0


@dataclasses.dataclass
class _Call:
    phase: str
    number: int
    started: float


class AuditWorker:
    """The parent's handle on one worker: `loaded()`, then `run(progress)` -> the audit record;
    `close()` (idempotent) stops it."""

    def __init__(self, spec: str, explicit: bool, cfg: SamplerConfig, cases: list[Case]):
        ctx = mp.get_context("spawn")   # fork would copy torch's threads and any CUDA state
        self.spec, self.limit = spec, float(cfg.audit_timeout)
        self.meta = {"name": spec, "target": spec, "description": "user-supplied sampler",
                     "negative_control": spec in NEGATIVE_CONTROLS}
        self._conn, child_conn = ctx.Pipe()
        lifeline_in, self._lifeline = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=child_main, name=f"samspec-audit {spec}", daemon=True,
                                 args=(child_conn, lifeline_in, spec, explicit, cfg, cases))
        self._proc.start()
        child_conn.close()
        lifeline_in.close()
        self._closed = False

    def loaded(self) -> None:
        """Wait until the worker has loaded the sampler; UserError (and stopped) when it cannot."""
        limit = LOAD_LIMIT_S + self.limit
        msg = self._next(time.monotonic() + limit)
        if msg is not None and msg[0] == "loaded":
            self.meta = msg[1]
            return
        self.close()
        if msg is None:
            raise UserError(f"--audit {self.spec}: loading it took longer than {limit:g} s; fix what its import "
                            "waits for, or raise --audit-timeout")
        if msg[0] == "user_error":
            raise UserError(msg[1])
        raise UserError(f"--audit {self.spec}: its worker process ended while loading it ({msg[1]}); "
                        "check that the module imports in a fresh Python")

    def run(self, progress=None) -> dict:
        """Run the audit; the record, ERROR when a call outlasted the limit or the worker died."""
        t0 = time.monotonic()
        task, call = None, None
        self._conn.send(("go",))
        while True:
            msg = self._next(None if call is None else call.started + self.limit)
            if msg is None:
                return self._error(t0, progress, task, f"{call.phase}, call {call.number}: no result after "
                                   f"{self.limit:g} s (--audit-timeout {self.limit:g}); the sampler was stopped")
            kind = msg[0]
            if kind == "call":
                call = _Call(msg[1], msg[2], time.monotonic())
            elif kind == "returned":
                call = None
            elif kind == "task" and progress is not None:
                task = progress.add_task(msg[1], total=msg[2])
            elif kind == "advance" and task is not None:
                progress.advance(task, msg[1])
            elif kind == "record":
                self._stop(progress, task)
                return msg[1]
            elif kind == "died":
                where = f"{call.phase}, call {call.number}" if call is not None else "between calls"
                return self._error(t0, progress, task, f"{where}: the worker process running the sampler "
                                   f"ended ({msg[1]})")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join()
        self._conn.close()
        self._lifeline.close()

    def _next(self, deadline: Optional[float]):
        """The worker's next message; None when the deadline came first; ("died", how) when the
        worker ended without another message."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = wait([self._conn, self._proc.sentinel], timeout)
        if not ready:
            return None
        if self._conn.poll():
            try:
                return self._conn.recv()
            except (EOFError, OSError):
                pass
        self._proc.join(5)   # its pipe closed: it is ending (or closed the pipe itself: stopped below)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        return ("died", _exit_text(self._proc.exitcode))

    def _stop(self, progress, task) -> None:
        self.close()
        if task is not None:
            progress.update(task, visible=False)

    def _error(self, t0: float, progress, task, reason: str) -> dict:
        self._stop(progress, task)
        return dict(self.meta, verdict="ERROR", error=reason, seconds=time.monotonic() - t0)


def _exit_text(code: Optional[int]) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


# --- the worker side ----------------------------------------------------------------------------

class _ProgressPipe:
    """The progress calls `audit` makes, sent to the parent's progress bar."""

    def __init__(self, conn):
        self.conn = conn

    def add_task(self, description: str, total: int) -> int:
        self.conn.send(("task", description, total))
        return 0

    def advance(self, task: int, n: int) -> None:
        self.conn.send(("advance", n))

    def update(self, task: int, **fields) -> None:
        pass   # the parent hides its task when the record arrives


class _CallReporter:
    """Wraps the sampler: every call is announced (phase, number) and its return reported."""

    def __init__(self, conn):
        self.conn, self.current, self.calls = conn, "loading", 0

    def phase(self, name: str) -> None:
        self.current, self.calls = name, 0

    def wrap(self, fn: Optional[Callable]) -> Optional[Callable]:
        if fn is None:
            return None

        def call(inputs):
            self.calls += 1
            self.conn.send(("call", self.current, self.calls))
            try:
                out = fn(inputs)
                ids = getattr(out, "token_ids", out)
                # on an accelerator the queued work finishes here, inside the limit
                return ids.cpu() if isinstance(ids, torch.Tensor) else ids
            finally:
                self.conn.send(("returned",))
        return call


def _die_with_parent(lifeline) -> None:
    """Exit when the parent is gone, however it went (a killed parent cannot stop its worker)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass

    def watch():
        try:
            lifeline.recv()
        except (EOFError, OSError):
            pass
        os._exit(1)
    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def child_main(conn, lifeline, spec: str, explicit: bool, cfg: SamplerConfig, cases: list[Case]) -> None:
    """The worker: load the sampler, say so, wait for the turn, run the audit, send the record."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(lifeline)
    os.dup2(2, 1)
    try:
        a = resolve_audit(spec, explicit)
    except UserError as e:
        conn.send(("user_error", one_line(e)))
        return
    except Exception as e:  # noqa: BLE001 - whatever the user's module raised, said on one line
        conn.send(("user_error", f"--audit {spec}: loading it raised {type(e).__name__}: {one_line(e)}; "
                                 "fix the module"))
        return
    conn.send(("loaded", {"name": a.name, "target": a.target, "description": a.description, "style": a.style,
                          "shape": a.shape, "negative_control": a.name in NEGATIVE_CONTROLS}))
    try:
        conn.recv()   # the turn; EOF: the parent is done with this worker
    except EOFError:
        return
    calls = _CallReporter(conn)
    a = dataclasses.replace(a, fn=calls.wrap(a.fn), logits_fn=calls.wrap(a.logits_fn))
    rec = audit(a, cfg, cases, _ProgressPipe(conn), on_phase=calls.phase)
    conn.send(("record", to_jsonable(rec)))
