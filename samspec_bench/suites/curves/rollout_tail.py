"""How much of a run's rollout its slowest sample spans, as verl measured it: per step, the
slowest sample's generation time (`timing_s/agent_loop/slowest/generate_sequences`, verl's
agent loop) over the step's rollout time (`timing_s/gen`). Near 1, the rollout waits on one
long sample (the long tail SAM's tail speed-up is about); a run without the agent loop's
timers has none (None)."""

from __future__ import annotations

from typing import Any

import numpy as np

from samspec_bench.evals.training_logs import TrainingRun

SLOWEST = ("timing_s/agent_loop/slowest/generate_sequences", "agent_loop/slowest/generate_sequences")
GEN = ("timing_s/gen", "timing/gen")


def slowest_share(run: TrainingRun) -> dict[str, Any] | None:
    """The per-step share's median [min, max] over the steps that log both (steps with a
    rollout time of 0 or less left out and counted), or None."""
    slow = next((run.series[t] for t in SLOWEST if t in run.series), None)
    gen = next((run.series[t] for t in GEN if t in run.series), None)
    if slow is None or gen is None:
        return None
    steps = np.intersect1d(slow.steps, gen.steps)
    g = gen.at(steps)
    ok = g > 0
    if not ok.any():
        return None
    share = slow.at(steps)[ok] / g[ok]
    return {"median": float(np.median(share)), "min": float(share.min()), "max": float(share.max()),
            "steps": int(ok.sum()), "steps_without_rollout_time": int((~ok).sum()),
            "tags": [next(t for t in SLOWEST if t in run.series), next(t for t in GEN if t in run.series)]}


def share_text(share: dict[str, Any] | None) -> str:
    if not share:
        return ""
    return (f"; slowest sample {100 * share['median']:.0f} % of {share['tags'][1]} (median over {share['steps']} steps "
            f"[{100 * share['min']:.0f}, {100 * share['max']:.0f}] %, measured by verl's agent loop)")
