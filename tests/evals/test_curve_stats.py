"""Curve statistics (samspec_bench.evals.curve_stats): alignment, the fixed-b HAC interval
(coverage checked by simulation, against the independent-steps interval it replaces), TOST
verdicts, the final window, speed ratios, smoothing, margins."""

from __future__ import annotations

import math

import numpy as np
import pytest

from samspec_bench.errors import UserError
from samspec_bench.evals.curve_stats import (DIFFERENT, EQUIVALENT, INCONCLUSIVE, Aligned, Margin, align,
                                             bandwidth, combine, compare_curves, compare_difference, compare_ratio,
                                             ema, final_window_size, hac_mean, null_t, parse_margin)


def ar1(n: int, rho: float, rng: np.random.Generator, sd: float = 1.0) -> np.ndarray:
    e = rng.normal(0, sd * math.sqrt(1 - rho * rho), n)
    x = np.empty(n)
    x[0] = rng.normal(0, sd)
    for t in range(1, n):
        x[t] = rho * x[t - 1] + e[t]
    return x


def pair(diff: np.ndarray, rng, level: float = 1.0) -> Aligned:
    """A baseline curve (a learning-curve shape around `level`) and B = A + diff."""
    n = diff.size
    a = level * (1 - 0.5 * np.exp(-np.arange(n) / 20)) + rng.normal(0, 0.01 * level, n)
    return Aligned(np.arange(1, n + 1), a, a + diff)


def test_align_common_steps_and_range():
    al = align([1, 2, 3, 5, 8], [10, 20, 30, 50, 80], [2, 3, 4, 5, 9], [0.2, 0.3, 0.4, 0.5, 0.9])
    assert al.steps.tolist() == [2, 3, 5] and al.a.tolist() == [20, 30, 50] and al.b.tolist() == [0.2, 0.3, 0.5]
    al = align([1, 2, 3, 5], [1, 2, 3, 5], [1, 2, 3, 5], [1, 2, 3, 5], step_range=(2, 3))
    assert al.steps.tolist() == [2, 3]
    assert align([1], [1], [2], [2]).n == 0


def test_hac_sees_autocorrelation():
    rng = np.random.default_rng(2)
    x = ar1(200, 0.9, rng)
    mi = hac_mean(x)
    assert mi.rho1 > 0.7 and mi.n_eff < 60 and mi.lags == bandwidth(200) == 100
    assert mi.se > 2 * x.std() / math.sqrt(x.size)
    iid = hac_mean(rng.normal(size=200))
    assert iid.n_eff > 3 * mi.n_eff


def _reference_t(x: np.ndarray, lags: int) -> np.ndarray:
    """mean / sqrt(Omega / n) per row, Omega the Bartlett long-run variance written out as plain
    lagged sums (no FFT): the textbook formula the package's statistic must agree with."""
    n = x.shape[1]
    d = x - x.mean(axis=1, keepdims=True)
    omega = (d * d).sum(axis=1) / n
    for j in range(1, lags + 1):
        omega += 2 * (1 - j / (lags + 1)) * (d[:, j:] * d[:, :-j]).sum(axis=1) / n
    return x.mean(axis=1) / np.sqrt(np.maximum(omega, 0) / n)


def test_fixed_b_null_distribution_matches_a_direct_simulation():
    n, lags = 50, bandwidth(50)
    t = null_t(n, lags)
    assert lags == 25 and t.size >= 19000 and np.all(np.diff(t) >= 0)
    ref = np.abs(_reference_t(np.random.default_rng(123).standard_normal((6000, n)), lags))
    for q in (0.80, 0.90, 0.95):
        # quantiles of |T| agree within the Monte Carlo error of 6000 draws (a few per cent)
        assert float(np.quantile(np.abs(t), q)) == pytest.approx(float(np.quantile(ref, q)), rel=0.06), q
    assert float(np.quantile(ref, 0.90)) > 1.645 * 1.3        # heavier tails than the normal at b = 0.5
    assert null_t(n, lags) is t                               # cached


@pytest.mark.parametrize("rho, n, floor", [(0.0, 30, 0.85), (0.7, 100, 0.82)])
def test_interval_coverage(rho, n, floor):
    """90% intervals of the mean of AR(1) noise (true mean 0): the fixed-b HAC interval covers
    near its level; on autocorrelated noise the independent-steps interval does not."""
    rng = np.random.default_rng(3)
    reps, covered, naive_covered = 300, 0, 0
    for _ in range(reps):
        x = ar1(n, rho, rng)
        lo, hi = hac_mean(x).ci(0.90)
        covered += lo <= 0 <= hi
        half = 1.645 * x.std(ddof=1) / math.sqrt(x.size)
        naive_covered += abs(x.mean()) <= half
    assert floor <= covered / reps <= 0.96
    if rho > 0:
        assert naive_covered / reps < 0.70 and covered > naive_covered + 0.1 * reps


def test_verdicts():
    rng = np.random.default_rng(5)
    m = Margin(0.05)
    same = compare_difference(pair(ar1(120, 0.5, rng, 0.01), rng), m)
    assert same["verdict"] == EQUIVALENT and same["p_equivalent"] < 0.05
    apart = compare_difference(pair(0.15 + ar1(120, 0.5, rng, 0.01), rng), m)
    assert apart["verdict"] == DIFFERENT and apart["p_different"] < 0.05 and apart["diff"] > 0.1
    noisy = compare_difference(pair(ar1(120, 0.95, rng, 0.2), rng), m)
    assert noisy["verdict"] == INCONCLUSIVE and "wider" in noisy["reason"]
    short = compare_difference(pair(ar1(6, 0.5, rng, 0.001), rng), m)
    assert short["verdict"] == INCONCLUSIVE and "too few" in short["reason"]
    edge = compare_difference(pair(0.05 + ar1(120, 0.3, rng, 0.01), rng), m)
    assert edge["verdict"] == INCONCLUSIVE and "straddles" in edge["reason"]


def test_tost_p_value_agrees_with_the_interval():
    rng = np.random.default_rng(6)
    for shift in np.linspace(0, 0.08, 9):
        r = compare_difference(pair(shift + ar1(100, 0.6, rng, 0.02), rng), Margin(0.05))
        # the same simulated null gives the interval and the p-values: they agree up to its resolution
        if abs(r["p_equivalent"] - 0.05) > 0.002:
            assert (r["verdict"] == EQUIVALENT) == (r["p_equivalent"] < 0.05)
        if abs(r["p_different"] - 0.05) > 0.002:
            assert (r["verdict"] == DIFFERENT) == (r["p_different"] < 0.05)


def test_relative_margin_scales_with_the_baseline():
    rng = np.random.default_rng(7)
    diff = 3.0 + ar1(100, 0.3, rng, 0.5)             # +3 on a level of ~100: 3%
    for level, verdict in ((100.0, EQUIVALENT), (10.0, DIFFERENT)):
        r = compare_difference(pair(diff, rng, level=level), Margin(0.10, relative=True))
        assert r["verdict"] == verdict
        assert r["margin"] == pytest.approx(0.10 * r["baseline_level"])


def test_final_window_catches_a_late_divergence():
    rng = np.random.default_rng(8)
    n = 120
    d = ar1(n, 0.5, rng, 0.005)
    d[90:] += 0.2                                  # equal for 3/4 of training, then apart
    r = compare_curves(pair(d, rng), Margin(0.05))
    assert r["final"]["verdict"] == DIFFERENT and r["verdict"] == DIFFERENT
    assert r["final"]["first_step"] == 91 and r["final"]["steps"] == 30
    off = compare_curves(pair(d, rng), Margin(0.05), final_fraction=0)
    assert off["final"] is None and off["verdict"] == off["whole"]["verdict"]


def test_final_window_size():
    assert final_window_size(100) == 25
    assert final_window_size(15) == 5
    assert final_window_size(9) is None
    assert final_window_size(100, fraction=0) is None


def test_combine():
    assert combine([EQUIVALENT, EQUIVALENT]) == EQUIVALENT
    assert combine([EQUIVALENT, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([INCONCLUSIVE, DIFFERENT]) == DIFFERENT
    assert combine([]) == INCONCLUSIVE


def test_speed_ratio():
    rng = np.random.default_rng(9)
    a = 100 + 10 * ar1(150, 0.5, rng)
    b = 0.8 * a + 3 * rng.normal(size=a.size)
    r = compare_ratio(Aligned(np.arange(a.size), a, b))
    assert r["ratio"] == pytest.approx(b.mean() / a.mean())
    lo, hi = r["ci"]
    assert lo < 0.8 < hi and hi < 1
    same = compare_ratio(Aligned(np.arange(a.size), a, a + rng.normal(0, 3, a.size)))
    assert same["ci"][0] < 1 < same["ci"][1]
    assert compare_ratio(Aligned(np.arange(1), a[:1], b[:1]))["ratio"] is None


def test_ema():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert ema(x, 0).tolist() == x.tolist()
    assert np.allclose(ema(np.full(10, 5.0), 0.9), 5.0)         # the start-up bias is removed
    # by hand: acc = 0.5, 1.25, 2.125, 3.0625 divided by 1 - 0.5^i = 0.5, 0.75, 0.875, 0.9375
    assert ema(x, 0.5).tolist() == pytest.approx([1.0, 5 / 3, 17 / 7, 49 / 15])


def test_parse_margin():
    assert parse_margin("0.05") == Margin(0.05, False)
    assert parse_margin("10%") == Margin(0.10, True)
    assert Margin(0.1, True).absolute(-50) == pytest.approx(5)
    for bad in ("-1", "0", "abc", "%"):
        with pytest.raises(UserError):
            parse_margin(bad)
