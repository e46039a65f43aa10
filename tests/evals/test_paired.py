"""Paired statistics: hand-computed cases and scipy cross-checks."""

import math

import numpy as np
import pytest
from scipy import stats

from samspec_bench.evals.paired import (agreement, compare, first_divergence, mcnemar_exact,
                                        min_detectable_difference, paired_bootstrap_ci, problem_means,
                                        problem_stderr, sign_flip_test, verdict)


def _pairs(n11, n01, n10, n00):
    """off/on 0-1 arrays with the given cell counts (n01: off right, on wrong)."""
    a = [1] * n11 + [1] * n01 + [0] * n10 + [0] * n00
    b = [1] * n11 + [0] * n01 + [1] * n10 + [0] * n00
    return np.array(a, float), np.array(b, float)


def test_mcnemar_hand_computed():
    a, b = _pairs(10, 1, 6, 3)
    r = mcnemar_exact(a, b)
    assert (r["n01"], r["n10"], r["discordant"]) == (1, 6, 7)
    # P(X <= 1 | Bin(7, 1/2)) = (1 + 7) / 128; two-sided doubles it
    assert r["p_value"] == pytest.approx(2 * 8 / 128)
    a, b = _pairs(3, 0, 5, 0)
    assert mcnemar_exact(a, b)["p_value"] == pytest.approx(2 / 32)
    a, b = _pairs(4, 3, 3, 4)
    assert mcnemar_exact(a, b)["p_value"] == 1.0
    a, b = _pairs(5, 0, 0, 5)
    assert mcnemar_exact(a, b)["p_value"] == 1.0


@pytest.mark.parametrize("n01,n10", [(0, 1), (2, 9), (7, 7), (12, 30), (40, 25)])
def test_mcnemar_matches_scipy_binomtest(n01, n10):
    a, b = _pairs(20, n01, n10, 11)
    p = stats.binomtest(min(n01, n10), n01 + n10, 0.5).pvalue
    assert mcnemar_exact(a, b)["p_value"] == pytest.approx(p, rel=1e-12)


def test_mcnemar_rejects_non_binary():
    with pytest.raises(ValueError):
        mcnemar_exact([0.5, 1], [1, 1])


def test_sign_flip_hand_computed():
    # d = [1, 0.5]: sums over signs 1.5, 0.5, -0.5, -1.5; |S| >= 1.5 in 2 of 4
    r = sign_flip_test([0, 0.5], [1, 1])
    assert r["method"] == "exact" and r["nonzero"] == 2
    assert r["p_value"] == pytest.approx(0.5)
    # d = [1, 1, 1]: only all-plus and all-minus reach |S| = 3
    assert sign_flip_test([0, 0, 0], [1, 1, 1])["p_value"] == pytest.approx(2 / 8)
    assert sign_flip_test([1, 0], [1, 0])["p_value"] == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_sign_flip_equals_mcnemar_for_binary(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, 40).astype(float)
    b = np.where(rng.random(40) < 0.3, 1 - a, a)
    assert sign_flip_test(a, b)["p_value"] == pytest.approx(mcnemar_exact(a, b)["p_value"], abs=1e-12)


def test_sign_flip_k_samples_matches_scipy_permutation_test():
    rng = np.random.default_rng(1)
    a = (rng.random((12, 4)) < 0.5).astype(float)
    b = (rng.random((12, 4)) < 0.7).astype(float)
    d = problem_means(b) - problem_means(a)
    ref = stats.permutation_test((d,), lambda x, axis: np.sum(x, axis=axis), permutation_type="samples",
                                 alternative="two-sided", n_resamples=np.inf)
    assert sign_flip_test(a, b)["p_value"] == pytest.approx(ref.pvalue, rel=1e-9)


def test_sign_flip_monte_carlo_close_to_exact():
    rng = np.random.default_rng(2)
    a = (rng.random((16, 3)) < 0.5).astype(float)
    b = (rng.random((16, 3)) < 0.6).astype(float)
    exact = sign_flip_test(a, b)
    mc = sign_flip_test(a, b, exact_max=0, iters=40000, seed=3)
    assert exact["method"] == "exact" and mc["method"].startswith("monte_carlo")
    assert mc["p_value"] == pytest.approx(exact["p_value"], abs=0.015)


def test_problem_means_ignores_missing():
    assert problem_means([[1, np.nan, 0], [1, 1, 1]]).tolist() == [0.5, 1.0]


def test_problem_stderr_is_clustered_by_problem():
    # 3 problems x K=2: per-problem means 0.5, 1, 0 (mean 0.5); deviations 0, .5, -.5:
    # sd (ddof 1) = sqrt((0 + .25 + .25) / 2) = .5, stderr = .5 / sqrt(3)
    x = np.array([[1, 0], [1, 1], [0, 0]], float)
    assert problem_stderr(x) == pytest.approx(0.5 / math.sqrt(3))
    # not the stderr of 6 independent samples: sd([1,0,1,1,0,0]) = sqrt(.3), / sqrt(6)
    assert problem_stderr(x) != pytest.approx(math.sqrt(0.3) / math.sqrt(6))
    # a missing sample: the problem's mean is over the samples it has (1, 1/2, 0 -> same sd)
    assert problem_stderr(np.array([[1, np.nan], [1, 0], [0, 0]])) == pytest.approx(0.5 / math.sqrt(3))
    assert math.isnan(problem_stderr([1.0]))
    r = compare({0: [1, 0], 1: [1, 1], 2: [0, 0]}, {0: [1, 1], 1: [1, 1], 2: [0, 1]}, iters=100)
    assert r["stderr_off"] == pytest.approx(0.5 / math.sqrt(3))
    # on: means 1, 1, .5 -> mean 5/6, sd sqrt(((1/6)^2 * 2 + (1/3)^2) / 2) = sqrt(1/12)
    assert r["stderr_on"] == pytest.approx(math.sqrt(1 / 12) / math.sqrt(3))


@pytest.mark.usefixtures("needs_lm_eval")
def test_problem_stderr_with_one_sample_is_lm_evals_stderr_of_the_mean():
    from lm_eval.api.metrics import mean_stderr   # sample sd / sqrt(n)
    y = [1, 0, 0, 1, 1, 1, 0]
    assert problem_stderr(np.array(y, float)) == pytest.approx(mean_stderr(y))


def test_bootstrap_ci_constant_and_vs_scipy():
    a = np.zeros(30)
    b = np.ones(30)
    assert paired_bootstrap_ci(a, b) == (1.0, 1.0)
    rng = np.random.default_rng(4)
    a = (rng.random(200) < 0.5).astype(float)
    b = np.where(rng.random(200) < 0.2, 1 - a, a)
    lo, hi = paired_bootstrap_ci(a, b, iters=20000, seed=5)
    ref = stats.bootstrap((b - a,), np.mean, method="percentile", n_resamples=20000, random_state=6).confidence_interval
    assert lo == pytest.approx(ref.low, abs=0.01) and hi == pytest.approx(ref.high, abs=0.01)
    assert lo <= (b - a).mean() <= hi


def test_min_detectable_difference_formula():
    a = np.array([1, 0, 1, 1, 0, 1, 0, 0] * 2, float)   # 16 problems: above the exact test's floor (6 / 16)
    b = np.array([1, 1, 0, 1, 0, 1, 1, 0] * 2, float)
    d = b - a
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    m = min_detectable_difference(a, b)
    assert m["mdd"] == pytest.approx(z * np.std(d, ddof=1) / math.sqrt(len(d)))
    # no discordant problems: the unpaired bound with the pooled accuracy
    a = np.array([1, 1, 0, 0] * 4, float)
    m = min_detectable_difference(a, a)
    assert m["mdd"] == pytest.approx(z * math.sqrt(2 * 0.5 * 0.5) / 4)
    assert "no discordant" in m["basis"]
    # power check by simulation: a true difference of mdd is detected about 80% of the time (z-test)
    rng = np.random.default_rng(7)
    n, sd = 400, 0.5
    mdd = z * sd / math.sqrt(n)
    hits = 0
    for _ in range(2000):
        d = rng.normal(mdd, sd, n)
        hits += abs(d.mean() / (d.std(ddof=1) / math.sqrt(n))) > stats.norm.ppf(0.975)
    assert hits / 2000 == pytest.approx(0.8, abs=0.04)


def test_mdd_never_below_what_the_exact_test_can_detect():
    # 5 problems, all flipped: McNemar's smallest p-value is 2 / 2^5 = 0.0625 >= 0.05, so no
    # difference is detectable; the normal approximation alone claimed 88.6 points
    r = compare({i: [1] for i in range(5)}, {i: [0] for i in range(5)}, iters=200)
    assert r["p_value"] == pytest.approx(0.0625) and r["mdd"] == math.inf
    assert "100-point" in r["verdict"] and "88.6" not in r["verdict"]
    assert "no discordant" not in r["mdd_basis"] and "every problem differs by the same -1" in r["mdd_basis"]
    assert "6 problems or more" in r["mdd_basis"]
    # 8 problems: significance needs 6 discordant one way, a difference of 6 / 8 at least
    a = np.array([1, 0, 1, 1, 0, 1, 0, 0], float)
    b = np.array([1, 1, 0, 1, 0, 1, 1, 0], float)
    m = min_detectable_difference(a, b)
    assert m["mdd"] == pytest.approx(0.75) and "floor" in m["basis"]
    assert min_detectable_difference(a[:1], b[:1])["basis"].startswith("one problem")


def test_verdict_texts():
    assert verdict(0.0, 0.7, 0.052).startswith("no detectable difference at this sample size")
    assert "5.2 points" in verdict(0.0, 0.7, 0.052)
    assert "100-point" in verdict(0.0, 1.0, 1.4)
    assert "lower by 12.0 points" in verdict(-0.12, 0.001, 0.05)


def test_compare_joins_by_document():
    off = {"a": [1], "b": [0], "c": [1], "d": [0], "x": [1]}
    on = {"d": [1], "c": [1], "b": [1], "a": [0], "y": [0]}
    r = compare(off, on, iters=2000)
    assert r["n"] == 4 and r["dropped"] == 2 and r["num_samples"] == 1
    assert r["acc_off"] == 0.5 and r["acc_on"] == 0.75 and r["diff"] == pytest.approx(0.25)
    assert r["test"]["test"] == "mcnemar_exact" and (r["test"]["n01"], r["test"]["n10"]) == (1, 2)
    assert r["p_value"] == pytest.approx(1.0)
    assert r["ci95"][0] <= 0.25 <= r["ci95"][1]
    # a failed sample (None) in one arm drops that problem
    r = compare({"a": [None], "b": [1]}, {"a": [1], "b": [1]})
    assert r["n"] == 1 and r["dropped"] == 1
    # K > 1 uses the sign-flip test
    r = compare({"a": [1, 0], "b": [1, 1]}, {"a": [1, 1], "b": [0, 1]})
    assert r["num_samples"] == 2 and r["test"]["test"] == "sign_flip"
    assert compare({}, {})["n"] == 0


def test_first_divergence_and_agreement():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    ag = agreement([([1, 2], [1, 2]), ([1, 2], [1, 3]), ([4], [5])])
    assert ag["identical"] == 1 and ag["identical_fraction"] == pytest.approx(1 / 3)
    assert ag["first_divergence"] == [1, 0]
