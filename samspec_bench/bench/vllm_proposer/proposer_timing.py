"""The drafter's own time inside vLLM's step, measured where it runs (the engine's worker
process): `time.perf_counter` around every `propose` call. A CPU drafter runs inside the
step, between the sampler and the next schedule, so its time adds to every step's wall time.

- `ProposeTimes`: per-call times (seconds), rows and drafted tokens, taken by the caller
  (through `SamWorkerExtension`) after each generate call.
- `wrap_propose`: the same timing around another drafter's `propose` (vLLM's ngram, suffix),
  installed on the drafter instance, so every method's proposer is measured the same way.
- `summary`: the figures reported (ms per step, share of the generate call's wall time, the
  offline fit of a draft token's cost and the cost the proposer fitted online, cost=auto).

No vLLM import here: tested without it.
"""

from __future__ import annotations

import time
from typing import Any

from samspec_bench.bench.vllm_proposer.online_cost import draft_token_cost, least_squares

MAX_CALLS = 1_000_000   # per-call times nobody takes are dropped beyond this (oldest half first)


class ProposeTimes:
    """Per-call proposer times since the last `take` (propose_s: seconds; rows: rows of the
    persistent batch passed; drafted: draft tokens returned) and totals since start-up."""

    __slots__ = ("start_s", "propose_s", "rows", "drafted", "cost", "total_s", "total_calls")

    def __init__(self):
        self.start_s: list[float] = []      # perf_counter at each call: the intervals are the steps' wall times
        self.propose_s: list[float] = []
        self.rows: list[int] = []
        self.drafted: list[int] = []
        self.cost: list[float | None] = []  # the online-fitted draft token cost in force at the call (None: not used)
        self.total_s = 0.0
        self.total_calls = 0

    def add(self, dt: float, rows: int, drafted: int, start: float | None = None, cost: float | None = None) -> None:
        if len(self.propose_s) >= MAX_CALLS:
            half = MAX_CALLS // 2
            del self.start_s[:half], self.propose_s[:half], self.rows[:half], self.drafted[:half], self.cost[:half]
        self.start_s.append(time.perf_counter() - dt if start is None else start)
        self.propose_s.append(dt)
        self.rows.append(rows)
        self.drafted.append(drafted)
        self.cost.append(cost)
        self.total_s += dt
        self.total_calls += 1

    def take(self) -> dict[str, Any]:
        out = {"start_s": self.start_s, "propose_s": self.propose_s, "rows": self.rows, "drafted": self.drafted,
               "cost": self.cost, "total_s": self.total_s, "total_calls": self.total_calls}
        self.start_s, self.propose_s, self.rows, self.drafted, self.cost = [], [], [], [], []
        return out


def wrap_propose(drafter: Any) -> ProposeTimes | None:
    """Time `drafter.propose` (an instance attribute wraps the bound method; idempotent).
    Returns the drafter's ProposeTimes, or None when it has no propose."""
    have = getattr(drafter, "_samspec_times", None)
    if have is not None:
        return have
    inner = getattr(drafter, "propose", None)
    if inner is None or not callable(inner):
        return None
    times = ProposeTimes()

    def propose(*args, **kwargs):
        t0 = time.perf_counter()
        drafts = inner(*args, **kwargs)
        dt = time.perf_counter() - t0
        try:   # lists of lists (ngram, suffix, custom_class); a tensor of drafts counts its size
            rows, drafted = len(drafts), sum(len(d) for d in drafts)
        except TypeError:
            rows, drafted = 0, int(getattr(drafts, "numel", lambda: 0)())
        times.add(dt, rows, drafted, t0)
        return drafts

    drafter.propose = propose
    drafter._samspec_times = times
    return times


def summary(calls: dict[str, Any] | None, wall_s: float, engine_steps: int) -> dict[str, Any] | None:
    """The proposer's figures for one generate call (measured): its time per propose call
    (one call per engine step with decode rows) and its share of the call's wall time."""
    if not calls or not isinstance(calls.get("propose_s"), list):
        return None
    ts = sorted(calls["propose_s"])
    n = len(ts)
    total = sum(ts)
    return {"source": "measured: time.perf_counter around propose, in vLLM's worker process",
            "propose_calls": n, "engine_steps": engine_steps,
            "total_s": total,
            "ms_per_call_mean": 1e3 * total / n if n else None,
            "ms_per_call_median": 1e3 * ts[n // 2] if n else None,
            "ms_per_call_max": 1e3 * ts[-1] if n else None,
            "us_per_row_mean": 1e6 * total / sum(calls["rows"]) if sum(calls.get("rows") or [0]) else None,
            "step_wall_ms_mean": 1e3 * wall_s / engine_steps if engine_steps else None,
            "share_of_wall_time": total / wall_s if wall_s > 0 else None,
            "verify_cost": verify_cost(calls), "online_cost": online_cost(calls)}


def online_cost(calls: dict[str, Any], points: int = 64) -> dict[str, Any] | None:
    """The draft token cost the proposer fitted online (`online_cost.OnlineDraftCost`, spec
    cost=auto) over one generate call: the value at its end, its range, and at most `points`
    (propose call, cost) pairs; None where no call used it."""
    series = [(i, c) for i, c in enumerate(calls.get("cost") or []) if c is not None]
    if not series:
        return None
    every = max(1, -(-len(series) // points))
    sampled = series[::every]
    if sampled[-1] != series[-1]:
        sampled.append(series[-1])
    vals = [c for _, c in series]
    return {"final": vals[-1], "min": min(vals), "max": max(vals), "calls": len(vals),
            "series": [[i, c] for i, c in sampled], "unit": "decode steps per draft token",
            "source": "fitted online in vLLM's worker from measured step intervals (decayed least squares)"}


def verify_cost(calls: dict[str, Any], min_steps: int = 20) -> dict[str, Any] | None:
    """The step's wall time against the tokens it verified, fitted over one generate call:
    interval between consecutive propose calls = a + b * (rows + tokens drafted at the
    earlier call), least squares over the steps whose batch kept its rows. b is the marginal
    time of one draft token; in decode steps (what an accepted draft token saves a request)
    it is b * rows / (a + b * rows), the `cost` of the evidence draft length policy. None
    without variation in the drafted tokens (no drafting) or with too few steps."""
    start, rows, drafted = calls.get("start_s") or [], calls.get("rows") or [], calls.get("drafted") or []
    xs, ys = [], []
    for i in range(1, len(start)):
        if rows[i] == rows[i - 1] and rows[i] > 0:
            xs.append(rows[i] + drafted[i - 1])
            ys.append(start[i] - start[i - 1])
    fit = least_squares(xs, ys) if len(xs) >= min_steps else None
    if fit is None:
        return None
    a, b = fit
    r = sorted(rows)[len(rows) // 2]
    return {"source": "fit: step interval (measured) = a + b * verified tokens, over the call's steps",
            "fixed_ms": 1e3 * a, "ms_per_verified_token": 1e3 * b, "steps": len(xs), "median_rows": r,
            "draft_token_cost_decode_steps": draft_token_cost(a, b, r)}
