"""Statistics for "did this change learning?" on two training curves logged per step.

Two runs are aligned by step (`align`: the steps both logged, optionally inside a step range).
Per learning metric the per-step difference d_t = b_t - a_t (run B minus the baseline A) is
summarised by its mean over the aligned steps, with an interval that respects the
autocorrelation of training curves (neighbouring steps share a policy, so they are far from
independent): a HAC interval with fixed-b critical values (`hac_mean`).

- Long-run variance: Newey-West's Bartlett-kernel estimate
  Omega = g0 + 2 sum_{j<=L} (1 - j/(L+1)) g_j (g_j: the lag-j autocovariance), with a bandwidth
  of half the series, L = ceil(n / 2) (b = L/n = 0.5).
- Critical values: with a bandwidth that is a fixed fraction of n, the t statistic
  mean / sqrt(Omega / n) does not become normal; it has the "fixed-b" distribution of Kiefer
  and Vogelsang (2005, Econometric Theory 21(6), "A new asymptotic theory for
  heteroskedasticity-autocorrelation robust tests"), which depends only on b and the kernel.
  It is simulated here for the actual n and L on independent Gaussian steps (seeded, cached),
  so short series get their exact small-sample null distribution. Fixed-b intervals keep their
  coverage on persistent series far better than a normal quantile with a data-chosen
  bandwidth: tests/evals/test_curve_stats.py measures it on AR(1) noise.
- The effective number of independent steps, n g0 / Omega (at most n), is reported to say
  why an interval is wide; it does not enter the interval.

Equivalence is two one-sided tests (TOST, Schuirmann 1987) against a margin delta: EQUIVALENT
when the 1 - 2 alpha interval lies inside (-delta, +delta) (both one-sided tests reject at
alpha); DIFFERENT when that interval lies entirely outside [-delta, +delta] (the difference
exceeds the margin, the mirror test at the same alpha); otherwise INCONCLUSIVE: too few steps,
an interval wider than the margin band, or one that straddles a margin. A margin is absolute
(in the metric's unit) or relative (a fraction of the baseline's mean |value| over the
compared steps).

A mean over the whole common range can hide a late divergence, so `compare_curves` judges the
whole range and its final quarter (when the range has enough steps): DIFFERENT if either is,
EQUIVALENT only if both are.

Speed metrics are ratios B/A of the means over the aligned steps (ratio of total time for
per-step timings), with a 1 - alpha interval from the delta method on the same fixed-b HAC
variance, on the log scale. A rate (tokens per second) is compared as total tokens over total
time (`compare_rate`), not as the mean of its per-step values: a mean of per-step rates weighs
the fast steps more than the slow ones, and on runs whose step times vary (a pipelined run)
it overstates the gain (1.79x where total tokens over total time give 1.33x on the shared verl
runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from samspec_bench.errors import UserError

EQUIVALENT, DIFFERENT, INCONCLUSIVE = "EQUIVALENT", "DIFFERENT", "INCONCLUSIVE"
VERDICTS = (EQUIVALENT, DIFFERENT, INCONCLUSIVE)
BANDWIDTH_FRACTION = 0.5      # b = L / n
NULL_DRAWS = 10000            # simulated t statistics per (n, L)


@dataclass(frozen=True)
class Margin:
    """Equivalence margin: `value` in the metric's unit, or a fraction of the baseline's mean
    |value| when `relative`."""
    value: float
    relative: bool = False

    def absolute(self, baseline_level: float) -> float:
        return self.value * abs(baseline_level) if self.relative else self.value

    def describe(self) -> str:
        return f"±{self.value * 100:g}% of the baseline mean" if self.relative else f"±{self.value:g}"

    def record(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"


def parse_margin(text: str, where: str = "--margin") -> Margin:
    """'0.05' (absolute, the metric's unit) or '10%' (of the baseline's mean |value|)."""
    t = str(text).strip()
    try:
        if t.endswith("%"):
            v = float(t[:-1]) / 100.0
            rel = True
        else:
            v = float(t)
            rel = False
    except ValueError:
        raise UserError(f"{where} {text!r}: give a number in the metric's unit (0.05) or a percentage of the "
                        "baseline (10%)") from None
    if not (v > 0 and math.isfinite(v)):
        raise UserError(f"{where} {text!r}: the margin must be > 0")
    return Margin(v, rel)


@dataclass
class Aligned:
    steps: np.ndarray
    a: np.ndarray
    b: np.ndarray

    @property
    def n(self) -> int:
        return int(self.steps.size)

    def tail(self, k: int) -> "Aligned":
        return Aligned(self.steps[-k:], self.a[-k:], self.b[-k:])


def align(a_steps, a_values, b_steps, b_values, step_range: tuple[int | None, int | None] | None = None) -> Aligned:
    """The steps both curves logged (inside step_range, inclusive), with both values there."""
    a_steps, b_steps = np.asarray(a_steps), np.asarray(b_steps)
    common = np.intersect1d(a_steps, b_steps)
    if step_range is not None:
        lo, hi = step_range
        if lo is not None:
            common = common[common >= lo]
        if hi is not None:
            common = common[common <= hi]
    ia = np.searchsorted(a_steps, common)
    ib = np.searchsorted(b_steps, common)
    return Aligned(common, np.asarray(a_values, float)[ia], np.asarray(b_values, float)[ib])


def autocovariances(x: np.ndarray, max_lag: int) -> np.ndarray:
    """g_0..g_max_lag of each row (divided by n, the positive semi-definite form)."""
    x = np.atleast_2d(np.asarray(x, float))
    x = x - x.mean(axis=1, keepdims=True)
    n = x.shape[1]
    f = np.fft.rfft(x, 2 * n, axis=1)
    ac = np.fft.irfft(f * np.conj(f), 2 * n, axis=1)[:, : max_lag + 1] / n
    return ac


def bartlett_omega(x: np.ndarray, lags: int) -> np.ndarray:
    """Newey-West long-run variance of each row with `lags` Bartlett lags (>= 0 by construction)."""
    g = autocovariances(x, lags)
    w = 1 - np.arange(lags + 1) / (lags + 1)
    om = g[:, 0] + 2 * (g[:, 1:] * w[1:]).sum(axis=1)
    return np.maximum(om, 0.0)


def bandwidth(n: int) -> int:
    return max(1, min(n - 1, math.ceil(BANDWIDTH_FRACTION * n)))


@lru_cache(maxsize=256)
def null_t(n: int, lags: int) -> np.ndarray:
    """Sorted t statistics mean / sqrt(Omega / n) of independent N(0, 1) series of length n
    with `lags` Bartlett lags: the statistic's distribution when the true mean is 0."""
    rng = np.random.default_rng(20050 + 7919 * n + lags)
    out = []
    chunk = max(1, min(NULL_DRAWS, 2_000_000 // max(n, 1)))
    done = 0
    while done < NULL_DRAWS:
        k = min(chunk, NULL_DRAWS - done)
        x = rng.standard_normal((k, n))
        om = bartlett_omega(x, lags)
        with np.errstate(divide="ignore", invalid="ignore"):
            out.append(x.mean(axis=1) / np.sqrt(om / n))
        done += k
    t = np.concatenate(out)
    t = t[np.isfinite(t)]
    return np.sort(np.concatenate([t, -t]))     # the null is symmetric: use both signs


@dataclass
class MeanInterval:
    """The mean of a series with its fixed-b HAC standard error and null distribution."""
    mean: float
    se: float
    n: int
    n_eff: float
    lags: int
    rho1: float
    null: np.ndarray | None = field(default=None, repr=False)   # sorted null t statistics

    def critical(self, level: float) -> float:
        """c with P(|T| <= c) = level under the null."""
        if self.null is None or self.null.size == 0:
            return math.nan
        return float(np.quantile(np.abs(self.null), level))

    def ci(self, level: float) -> tuple[float, float]:
        c = self.critical(level)
        if not (math.isfinite(self.se) and math.isfinite(c)):
            return (math.nan, math.nan)
        return self.mean - c * self.se, self.mean + c * self.se

    def _tail(self, t: float) -> float:
        """P(T >= t) under the null."""
        k = self.null.size - np.searchsorted(self.null, t, side="left")
        return float(k / self.null.size)

    def p_above(self, value: float) -> float:
        """One-sided p-value of H0: true mean <= value (small: the mean is above value)."""
        if not (self.se > 0) or self.null is None:
            return 0.0 if self.mean > value else 1.0
        return self._tail((self.mean - value) / self.se)

    def p_below(self, value: float) -> float:
        """One-sided p-value of H0: true mean >= value."""
        if not (self.se > 0) or self.null is None:
            return 0.0 if self.mean < value else 1.0
        return self._tail((value - self.mean) / self.se)


def hac_mean(x) -> MeanInterval:
    """Mean of x with the Bartlett-kernel HAC standard error at bandwidth ceil(n/2) and the
    fixed-b null distribution for that n."""
    x = np.asarray(x, float)
    n = x.size
    if n == 0:
        return MeanInterval(math.nan, math.nan, 0, 0.0, 0, 0.0)
    mean = float(x.mean())
    if n < 3:
        return MeanInterval(mean, math.nan, n, float(n), 0, 0.0)
    lags = bandwidth(n)
    g = autocovariances(x, 1)[0]
    rho = float(g[1] / g[0]) if g[0] > 0 else 0.0
    omega = float(bartlett_omega(x, lags)[0])
    se = math.sqrt(omega / n)
    n_eff = min(float(n), n * g[0] / omega) if omega > 0 else float(n)
    return MeanInterval(mean, se, n, n_eff, lags, rho, null_t(n, lags))


def compare_difference(al: Aligned, margin: Margin, *, alpha: float = 0.05, min_steps: int = 10) -> dict:
    """Mean difference B - A over the aligned steps, its intervals, TOST and the verdict."""
    out: dict = {"steps": al.n, "first_step": int(al.steps[0]) if al.n else None,
                 "last_step": int(al.steps[-1]) if al.n else None}
    if al.n == 0:
        return {**out, "verdict": INCONCLUSIVE, "reason": "no common steps"}
    d = al.b - al.a
    level = float(np.mean(np.abs(al.a)))
    delta = margin.absolute(level)
    mi = hac_mean(d)
    ci_tost = mi.ci(1 - 2 * alpha)
    out.update({"mean_a": float(al.a.mean()), "mean_b": float(al.b.mean()), "diff": mi.mean,
                "relative_diff": mi.mean / level if level > 0 else None, "se": mi.se,
                "ci_tost": list(ci_tost), "ci95": list(mi.ci(0.95)), "tost_level": 1 - 2 * alpha,
                "margin": delta, "margin_spec": margin.record(), "baseline_level": level,
                "n_eff": mi.n_eff, "lags": mi.lags, "rho1": mi.rho1,
                "critical_value": mi.critical(1 - 2 * alpha)})
    if al.n < min_steps:
        return {**out, "verdict": INCONCLUSIVE, "reason": f"too few steps ({al.n} < {min_steps})",
                "p_equivalent": None, "p_different": None}
    if not (delta > 0):
        return {**out, "verdict": INCONCLUSIVE, "reason": "zero margin (the baseline's mean is 0; give an absolute "
                                                          "--margin)", "p_equivalent": None, "p_different": None}
    p_eq = max(mi.p_above(-delta), mi.p_below(delta))
    p_diff = mi.p_above(delta) if mi.mean >= 0 else mi.p_below(-delta)
    out["p_equivalent"], out["p_different"] = p_eq, p_diff
    lo, hi = ci_tost
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return {**out, "verdict": INCONCLUSIVE, "reason": "no interval"}
    if -delta < lo and hi < delta:
        return {**out, "verdict": EQUIVALENT, "reason": "interval inside the margin"}
    if lo > delta or hi < -delta:
        return {**out, "verdict": DIFFERENT, "reason": "interval outside the margin"}
    if hi - lo > 2 * delta:
        return {**out, "verdict": INCONCLUSIVE,
                "reason": f"interval wider than the margin band ({mi.n_eff:.1f} effective steps)"}
    return {**out, "verdict": INCONCLUSIVE, "reason": "interval straddles the margin"}


def final_window_size(n: int, fraction: float = 0.25, min_steps: int = 10) -> int | None:
    """Steps in the final window, or None when the range is too short to split off one with
    at least min_steps / 2 (and at least 5) steps."""
    k = max(math.ceil(n * fraction), max(5, min_steps // 2))
    return k if fraction > 0 and n >= 2 * k else None


def combine(verdicts: list[str]) -> str:
    """DIFFERENT if any is, EQUIVALENT if all are, else INCONCLUSIVE (none: INCONCLUSIVE)."""
    if not verdicts:
        return INCONCLUSIVE
    if DIFFERENT in verdicts:
        return DIFFERENT
    if all(v == EQUIVALENT for v in verdicts):
        return EQUIVALENT
    return INCONCLUSIVE


def compare_curves(al: Aligned, margin: Margin, *, alpha: float = 0.05, min_steps: int = 10,
                   final_fraction: float = 0.25) -> dict:
    """The whole common range and its final window; the metric's verdict combines both."""
    whole = compare_difference(al, margin, alpha=alpha, min_steps=min_steps)
    k = final_window_size(al.n, final_fraction, min_steps)
    final = None
    if k is not None:
        final = compare_difference(al.tail(k), margin, alpha=alpha, min_steps=min(min_steps, k))
    judged = [whole["verdict"]] + ([final["verdict"]] if final else [])
    verdict = combine(judged)
    if whole["reason"].startswith(("too few", "no common")):
        verdict, reason = INCONCLUSIVE, whole["reason"]
    elif verdict == DIFFERENT:
        where = [name for name, w in (("whole range", whole), ("final window", final))
                 if w is not None and w["verdict"] == DIFFERENT]
        reason = "difference beyond the margin over the " + " and the ".join(where)
    elif verdict == EQUIVALENT:
        reason = "inside the margin over the whole range" + (" and the final window" if final else "")
    else:
        w = whole if whole["verdict"] != EQUIVALENT else final
        reason = (w["reason"] + (" (final window)" if w is final else "")) if w else whole["reason"]
    return {"verdict": verdict, "reason": reason, "whole": whole, "final": final,
            "final_note": None if final else f"no final window: {al.n} common steps"}


def compare_ratio(al: Aligned, *, alpha: float = 0.05) -> dict:
    """mean(B) / mean(A) over the aligned steps with a 1 - alpha interval (delta method:
    ratio - R = mean(b - R a) / mean(a) to first order, its fixed-b HAC interval taken on the
    log scale)."""
    out: dict = {"steps": al.n, "first_step": int(al.steps[0]) if al.n else None,
                 "last_step": int(al.steps[-1]) if al.n else None}
    if al.n < 3:
        return {**out, "ratio": None, "ci": None, "reason": "fewer than 3 common steps"}
    ma, mb = float(al.a.mean()), float(al.b.mean())
    out.update({"mean_a": ma, "mean_b": mb, "level": 1 - alpha})
    if not (ma > 0 and mb > 0):
        return {**out, "ratio": None, "ci": None, "reason": "a mean that is not positive"}
    ratio = mb / ma
    z = hac_mean((al.b - ratio * al.a) / ma)
    half = z.critical(1 - alpha) * z.se / ratio
    return {**out, "ratio": ratio, "ci": [ratio * math.exp(-half), ratio * math.exp(half)], "n_eff": z.n_eff}


def compare_rate(steps, tokens_a, time_a, tokens_b, time_b, *, alpha: float = 0.05) -> dict:
    """(sum tokens_b / sum time_b) / (sum tokens_a / sum time_a) over the given steps with a
    1 - alpha interval: the delta method on the log scale, where the ratio's per-step influence is
    tb/mean(tb) - sb/mean(sb) - ta/mean(ta) + sa/mean(sa), its fixed-b HAC interval."""
    steps = np.asarray(steps)
    ta, sa, tb, sb = (np.asarray(x, float) for x in (tokens_a, time_a, tokens_b, time_b))
    n = int(steps.size)
    out: dict = {"steps": n, "first_step": int(steps[0]) if n else None, "last_step": int(steps[-1]) if n else None}
    if n < 3:
        return {**out, "ratio": None, "ci": None, "reason": "fewer than 3 common steps"}
    means = [float(x.mean()) for x in (ta, sa, tb, sb)]
    if not all(m > 0 for m in means):
        return {**out, "ratio": None, "ci": None, "reason": "a total that is not positive"}
    mta, msa, mtb, msb = means
    rate_a, rate_b = mta / msa, mtb / msb
    ratio = rate_b / rate_a
    z = hac_mean(tb / mtb - sb / msb - ta / mta + sa / msa)
    half = z.critical(1 - alpha) * z.se
    return {**out, "rate_a": rate_a, "rate_b": rate_b, "level": 1 - alpha, "ratio": ratio,
            "ci": [ratio * math.exp(-half), ratio * math.exp(half)], "n_eff": z.n_eff}


def ema(values, weight: float) -> np.ndarray:
    """TensorBoard's smoothing: an exponential moving average with the start-up bias removed
    (weight 0 = raw values)."""
    x = np.asarray(values, float)
    if weight <= 0 or x.size == 0:
        return x.copy()
    out = np.empty_like(x)
    acc = 0.0
    for i, v in enumerate(x):
        acc = weight * acc + (1 - weight) * v
        out[i] = acc / (1 - weight ** (i + 1))
    return out
