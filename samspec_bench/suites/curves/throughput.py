"""perf/throughput across runs. verl logs tokens per second per GPU (perf/total_num_tokens /
(perf/time_per_step x n_gpus), verl/trainer/ppo/metric_utils.py), so the ratio of its per-step
means says little when the runs used different GPU counts, and overstates a gain when step
times vary (a mean of per-step rates weighs fast steps more). Compared, best first:

- total: both runs log perf/total_num_tokens and a step time (perf/time_per_step, timing_s/step):
  total tokens over total time on the common steps (`compare_rate`), tokens/s of all GPUs
  together; no GPU count needed (the per-GPU ratio is added where both counts are known);
- per GPU x GPUs: both GPU counts known (the log: run.setup; or --gpus RUN=N): the ratio of the
  per-step means times GPUs B / GPUs A (a mean of per-step rates, said so);
- not normalised: neither: the per-GPU ratio as logged, marked `not normalised`, never called
  faster or slower, counted on the comparison and printed.
Fewer than 3 common steps give no ratio by any route: said as such (not computed), never as a
missing key or GPU count.
"""

from __future__ import annotations

import numpy as np

from samspec_bench.evals.curve_stats import align, compare_rate, compare_ratio
from samspec_bench.evals.training_logs import Series, TrainingRun

TOKENS = ("perf/total_num_tokens",)
STEP_TIME = ("perf/time_per_step", "timing_s/step", "timing/step")
NOT_NORMALISED = "not normalised"


MIN_STEPS = 3      # compare_rate and compare_ratio give no ratio on fewer common steps


def _first(run: TrainingRun, tags: tuple[str, ...]) -> str | None:
    """The first of `tags` the run logged (at any finite step)."""
    return next((t for t in tags if len(run.series.get(t) or ())), None)


def _few_steps(tb: str, n: int, totals: str | None) -> str:
    """The caveat of a throughput with no ratio for want of steps: neither --gpus nor logging
    more keys would give one."""
    return (f"{tb} not compared: " + (f"{totals} are logged, but " if totals else "")
            + f"the runs share only {n} step(s) of {'them' if totals else 'it'} ({MIN_STEPS} needed for a ratio); "
              "compare runs with more steps")


def _common(series: list[Series], step_range) -> np.ndarray:
    steps = series[0].steps
    for s in series[1:]:
        steps = np.intersect1d(steps, s.steps)
    lo, hi = step_range or (None, None)
    if lo is not None:
        steps = steps[steps >= lo]
    if hi is not None:
        steps = steps[steps <= hi]
    return steps


def _scaled(ci, k: float):
    return None if ci is None else [ci[0] * k, ci[1] * k]


def compare_throughput(base: TrainingRun, run: TrainingRun, ta: str, tb: str, gpus: dict[str, tuple],
                       step_range=None, alpha: float = 0.05) -> dict:
    """The throughput entry of one comparison. `gpus`: label -> (count or None, where it came from)."""
    (ga, src_a), (gb, src_b) = gpus[base.label], gpus[run.label]
    known = ga is not None and gb is not None
    info = {"gpus_a": ga, "gpus_b": gb, "gpus_source_a": src_a, "gpus_source_b": src_b}
    tok = [_first(r, TOKENS) for r in (base, run)]
    tim = [_first(r, STEP_TIME) for r in (base, run)]
    totals, shared = None, 0       # both runs log tokens and a step time: the keys, their common steps
    if all(tok) and all(tim):
        parts = [base.series[tok[0]], base.series[tim[0]], run.series[tok[1]], run.series[tim[1]]]
        steps = _common(parts, step_range)
        totals, shared = f"{tok[0]} and {tim[0]}", int(steps.size)
        res = compare_rate(steps, *(p.at(steps) for p in parts), alpha=alpha)
        out = {**res, **info, "normalised": True, "unit": "tokens/s (all GPUs)", "basis": "total",
               "mean_a": res.get("rate_a"), "mean_b": res.get("rate_b"),
               "how": f"sum {tok[0]} / sum {tim[0]}"}
        if known and res.get("ratio") is not None:
            out["per_gpu_ratio"] = res["ratio"] * ga / gb
            out["per_gpu_ci"] = _scaled(res["ci"], ga / gb)
        if shared >= MIN_STEPS:
            return out
    # a tag every value of which was NaN/inf has no Series (the comparison calls it diverged)
    a, b = (r.series.get(t) or Series(np.zeros(0, dtype=np.int64), np.zeros(0)) for r, t in ((base, ta), (run, tb)))
    res = compare_ratio(align(a.steps, a.values, b.steps, b.values, step_range), alpha=alpha)
    if res["steps"] < MIN_STEPS:    # no ratio by any route: say so, not which keys or counts to add
        if totals:
            return {**out, "caveat": _few_steps(tb, shared, totals)}
        res["caveat"] = _few_steps(tb, res["steps"], None)
    # the totals' route was not taken: why, in the words of the caveat and of `how`
    why = (f"{totals} logged at only {shared} common step(s)" if totals
           else "perf/total_num_tokens or a step time not logged")
    if known:
        k = gb / ga
        return {**res, **info, "normalised": True, "unit": "tokens/s (all GPUs)", "basis": "per GPU x GPUs",
                "per_gpu_ratio": res.get("ratio"), "per_gpu_ci": res.get("ci"),
                "ratio": None if res.get("ratio") is None else res["ratio"] * k, "ci": _scaled(res.get("ci"), k),
                "mean_a": None if res.get("mean_a") is None else res["mean_a"] * ga,
                "mean_b": None if res.get("mean_b") is None else res["mean_b"] * gb,
                "how": f"{ta} x GPUs ({ga} in {base.label}, {gb} in {run.label}): mean of the per-step rates "
                       f"({why})"}
    unknown = " and ".join(lab for lab, g in ((base.label, ga), (run.label, gb)) if g is None)
    ratio = res.get("ratio")
    fix = (f"or log {totals} at more steps both runs share: now {shared}" if totals
           else "or log perf/total_num_tokens and perf/time_per_step")
    return {**res, **info, "normalised": False, "unit": "tokens/s/GPU", "basis": "per GPU",
            "per_gpu_ratio": ratio, "per_gpu_ci": res.get("ci"),
            "how": "per GPU, as logged",
            "caveat": res.get("caveat") or (
                f"{tb} is tokens/s per GPU and the GPU count of {unknown} is unknown: cannot normalise"
                + (f"; {ratio:.3g} is the per-GPU ratio, not the runs' throughput ratio" if ratio else "")
                + f"; give --gpus {unknown.split(' and ')[0]}=N ({fix})")}
