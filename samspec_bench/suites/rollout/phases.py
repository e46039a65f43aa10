"""The rollout suite's statistics, as pure functions of per-step tables (the columns of
`bench.simulation.scheduler.STEP_COLUMNS`, measured or simulated): the head / tail split,
completion-time tails, each arm's metrics, its speedups over the off baseline, the best
setting, and the tail's acceptance by token position.

The tail is the steps with nobody waiting and at most T requests in the batch (T = the arm's
threshold, or the tail threshold of an always-on arm); the head is the rest, so head + tail =
total. Speedups compare phases defined the same way: the baseline's tail uses the arm's T.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

POSITION_EDGES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)   # token-position bins of the tail


def tail_mask(steps: Mapping[str, np.ndarray], T: int) -> np.ndarray:
    """Which steps are the tail: nobody waiting and at most T running."""
    return (np.asarray(steps["num_waiting"]) == 0) & (np.asarray(steps["num_running"]) <= T)


def phase_split(steps: Mapping[str, np.ndarray], T: int) -> dict[str, float]:
    tail = tail_mask(steps, T)
    t = steps["time_s"]
    return {"total_s": float(t.sum()), "head_s": float(t[~tail].sum()), "tail_s": float(t[tail].sum()),
            "tail_steps": int(tail.sum()), "head_steps": int((~tail).sum())}


def completion_stats(finish) -> dict[str, float]:
    """Percentiles, makespan, mean and straggler ratio (makespan / mean) of the requests'
    completion times; unfinished (non-finite) ones left out, {} when none finished."""
    f = np.asarray(finish, dtype=float)
    f = f[np.isfinite(f)]
    if not f.size:
        return {}
    return {"p50_s": float(np.percentile(f, 50)), "p90_s": float(np.percentile(f, 90)),
            "p99_s": float(np.percentile(f, 99)), "makespan_s": float(f.max()), "mean_s": float(f.mean()),
            "straggler_ratio": float(f.max() / f.mean()) if f.mean() > 0 else None}


def arm_metrics(steps: Mapping[str, np.ndarray], finish, T: int) -> dict[str, Any]:
    """One arm's phases, step counts, drafted / accepted / emitted tokens, preemptions and
    completion times."""
    m = phase_split(steps, T)
    m["tail_threshold"] = T
    m["steps"] = int(len(steps["time_s"]))
    m["spec_steps"] = int(steps["speculative"].sum())
    d, a, e = (int(steps[c].sum()) for c in ("num_drafted", "num_accepted", "num_emitted"))
    m.update(drafted=d, accepted=a, emitted=e, acceptance_rate=(a / d) if d else None)
    if "num_preempted" in steps:
        m["preemptions"] = int(np.sum(steps["num_preempted"]))
    m["completion"] = completion_stats(finish)
    return m


def ratio(a, b):
    """a / b, None where b is missing or not positive."""
    return a / b if b and b > 0 else None


def add_speedups(metrics: dict[str, dict], settings, off_steps, default_T: int) -> None:
    """Speedups of every non-off arm in `metrics` (in place): the off baseline's time over the
    arm's, overall and per phase, the baseline split with the arm's own tail threshold.
    `default_T` is unused (kept for callers)."""
    for s in settings:
        if s["arm"] == "off":
            continue
        m = metrics[s["label"]]
        base = phase_split(off_steps, m["tail_threshold"])
        m["speedup_overall"] = ratio(base["total_s"], m["total_s"])
        m["speedup_head"] = ratio(base["head_s"], m["head_s"])
        m["speedup_tail"] = ratio(base["tail_s"], m["tail_s"])
        m["baseline_phases"] = base
        m["time_saved_fraction"] = 1 - m["total_s"] / base["total_s"] if base["total_s"] else None


def best_setting(metrics: dict[str, dict]) -> str | None:
    """The speculating arm with the shortest total time (None when only off ran)."""
    cands = [(m["total_s"], lbl) for lbl, m in metrics.items() if lbl != "off"]
    return min(cands)[1] if cands else None


def bin_label(i: int, edges=POSITION_EDGES) -> str:
    """Bin i of the position edges as '[lo,hi)' (the last one '[lo,inf)')."""
    lo = 0 if i == 0 else edges[i - 1]
    return f"[{lo},{edges[i]})" if i < len(edges) else f"[{lo},inf)"


def tail_acceptance_rows(ta: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """The tail's drafted / accepted tokens by position bin (a simulation's `tail_acceptance`
    with POSITION_EDGES), bins without drafts left out."""
    return [{"bin": bin_label(i), "drafted": int(ta["drafted"][i]), "accepted": int(ta["accepted"][i]),
             "acceptance_rate": ratio(int(ta["accepted"][i]), int(ta["drafted"][i]))}
            for i in range(len(ta["drafted"])) if ta["drafted"][i]]
