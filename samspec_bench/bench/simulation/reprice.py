"""One simulated schedule priced by another step-time model: schedules do not depend on step
times, so a simulation with `StepTimeModel.constant(1.0)` (clock = step count) can be timed
by any model afterwards (the measured rollout prices engine schedules this way)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.bench.simulation.scheduler import SimResult


def reprice(result: SimResult, step_model: StepTimeModel) -> SimResult:
    """The same schedule timed with another step-time model. Schedules do not depend on step
    times, so one simulation with `StepTimeModel.constant(1.0)` (clock = step count) can be
    priced with any model; `result` must come from such a run."""
    t = step_model.predict_steps(result.steps)
    clock = np.cumsum(t)
    steps = dict(result.steps, time_s=t, clock_s=clock)

    def at(step_clock):
        f = np.asarray(step_clock, dtype=float)
        out = np.full(f.shape, np.nan)
        ok = np.isfinite(f)
        out[ok] = clock[np.round(f[ok]).astype(np.int64) - 1]
        return out

    if result.num_steps and not np.isclose(result.makespan_s, result.num_steps):
        raise ValueError("reprice needs a simulation run with StepTimeModel.constant(1.0)")
    return replace(result, steps=steps, finish_time_s=at(result.finish_time_s),
                   first_token_time_s=at(result.first_token_time_s),
                   makespan_s=float(clock[-1]) if clock.size else 0.0)
