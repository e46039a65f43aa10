"""The audit's statistics (samspec_bench.suites.sampler.exactness_stats), called directly: cases whose
answer is known analytically (exact binomial tails, the chi-square law of one degree of
freedom, the bound's formula, the acceptance law), and the battery's seeded checks."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from samspec_bench.suites.sampler.battery import dist
from samspec_bench.suites.sampler.exactness_stats import (acceptance_law, acceptance_test, complete, detectable_excess,
                                                detectable_shift, distribution_test, overacceptance_bounds,
                                                overacceptance_test, partition, position_tests, tv_bound, tv_curve)


def _counts(*per_token: int) -> np.ndarray:
    """Samples with exactly these counts of tokens 0, 1, ... (order does not matter to the test)."""
    return np.repeat(np.arange(len(per_token)), per_token)


# ------------------------------------------------------------------------- moved from test_sampler_suite.py


def test_partition_cells_have_enough_expectation():
    rng = np.random.default_rng(0)
    p = rng.random(5000) ** 6
    p[:100] = 0
    p /= p.sum()
    cell, P = partition(p, 2000)
    assert (cell[:100] == -1).all() and (cell[100:] >= 0).all()
    assert abs(P.sum() - 1) < 1e-12
    assert (2000 * P >= 5 - 1e-9).all()
    cell, P = partition(np.array([0.5, 0.5 - 1e-4, 1e-4]), 100)  # a tiny token joins the rarest cell
    assert P.size == 2 and abs(P.sum() - 1) < 1e-12


def test_distribution_test_accepts_exact_and_rejects_biased_samples():
    rng = np.random.default_rng(1)
    p = dist("zipf", 300, rng)
    exact = rng.choice(300, size=5000, p=p)
    r = distribution_test(exact, p, 1e-4)
    assert r["passed"] and r["tv"] < r["bound"] and r["p_value"] > 1e-4
    q = p.copy()
    top = int(np.argmax(p))
    q[top] *= 1.25
    q /= q.sum()
    biased = rng.choice(300, size=5000, p=q)
    r = distribution_test(biased, p, 1e-4)
    assert not r["passed"] and r["p_value"] < 1e-4
    assert r["top_deviations"][0]["token"] == top
    p0 = p.copy()
    p0[5] = 0
    p0 /= p0.sum()
    r = distribution_test(np.concatenate([rng.choice(300, 999, p=p0), [5]]), p0, 1e-4)
    assert r["impossible"] == 1 and not r["passed"]


def test_bound_shrinks_with_n_and_acceptance_law():
    P = np.full(10, 0.1)
    b = [tv_bound(P, n, 1e-5) for n in (100, 1000, 10000)]
    assert b[0] > b[1] > b[2] and b[2] < 0.05
    # All the mass in one cell (rounding may put its probability just above 1): a finite bound.
    p = np.zeros(50)
    p[3], p[7] = 0.999999, 1e-6
    r = distribution_test(np.full(60, 3), p / p.sum() * (1 + 1e-15), 1e-6)
    assert r["cells"] == 1 and np.isfinite(r["bound"]) and r["passed"]
    law = acceptance_law(np.array([0.5, 0.8, 1.0]))
    assert np.allclose(law, [0.5, 0.1, 0.0, 0.4]) and abs(law.sum() - 1) < 1e-12


# ------------------------------------------------------------------------- known answers


def test_fair_coin_exactly_at_its_mean_passes_with_p_one():
    r = distribution_test(_counts(500, 500), np.array([0.5, 0.5]), 1e-3)
    assert r["passed"] and not r["skipped"]
    assert r["n"] == 1000 and r["cells"] == 2
    assert r["tv"] == 0.0 and r["chi2"] == 0.0
    assert r["p_chi2"] == pytest.approx(1.0) and r["p_max_cell"] == 1.0


def test_count_inside_the_bound_passes_with_the_chi2_one_dof_p_value():
    # 520 / 480 of a fair coin: 1.26 sigma. chi2 = 2 * 20^2 / 500 = 1.6, and for one degree of
    # freedom P(chi2 > x) = erfc(sqrt(x / 2)).
    r = distribution_test(_counts(520, 480), np.array([0.5, 0.5]), 1e-3)
    assert r["chi2"] == pytest.approx(1.6)
    assert r["p_chi2"] == pytest.approx(math.erfc(math.sqrt(0.8)), rel=1e-9)   # 0.2059
    assert r["tv"] == pytest.approx(0.02)
    assert r["tv"] < r["bound"] and r["passed"]


def test_count_far_outside_the_bound_fails_on_every_criterion():
    # 700 / 300 of a fair coin: 12.6 sigma. The largest-cell p-value is the exact two-sided
    # binomial tail, Bonferroni over the 2 cells: 2 cells * 2 sides * P(Bin(1000, 1/2) >= 700).
    r = distribution_test(_counts(700, 300), np.array([0.5, 0.5]), 1e-3)
    tail = Fraction(sum(math.comb(1000, k) for k in range(700, 1001)), 2 ** 1000)
    assert r["p_max_cell"] == pytest.approx(float(4 * tail), rel=1e-6, abs=0)
    assert r["chi2"] == pytest.approx(160.0)
    assert r["p_chi2"] == pytest.approx(math.erfc(math.sqrt(80.0)), rel=1e-6, abs=0)
    assert r["tv"] == pytest.approx(0.2) and r["tv"] > r["bound"]
    assert r["p_value"] == min(r["p_chi2"], r["p_max_cell"]) < 1e-30
    assert not r["passed"]
    # both tokens are off by 0.2 (a tie): the two largest deviations, either order
    assert sorted((d["token"], d["observed"]) for d in r["top_deviations"]) == [(0, pytest.approx(0.7)),
                                                                             (1, pytest.approx(0.3))]


def test_bound_is_the_stated_formula():
    # 1/2 sum_c sqrt(P_c (1 - P_c) / n) + sqrt(ln(1/alpha) / (2 n))
    P, n, a = np.array([0.5, 0.3, 0.2]), 800, 1e-4
    expected = 0.5 * sum(math.sqrt(x * (1 - x) / n) for x in P) + math.sqrt(math.log(1 / a) / (2 * n))
    assert tv_bound(P, n, a) == pytest.approx(expected, rel=1e-12)
    assert tv_bound(P, 0, a) == math.inf
    # a smaller alpha (more tests in the battery) widens the bound
    assert tv_bound(P, n, 1e-8) > tv_bound(P, n, 1e-4)


def test_invalid_and_impossible_tokens_fail_and_count_in_tv():
    p = np.array([0.5, 0.5, 0.0])
    # one id outside the vocabulary: half a count on each side of the TV sum
    r = distribution_test(np.concatenate([_counts(500, 499), [3]]), p, 1e-3)
    assert r["invalid"] == 1 and r["impossible"] == 0 and not r["passed"]
    assert r["tv"] == pytest.approx(0.5 * (0.0 + 0.001 + 0.001))
    # one token of probability 0: fails whatever the other criteria say
    r = distribution_test(_counts(500, 499, 1), p, 1e-3)
    assert r["impossible"] == 1 and r["invalid"] == 0 and not r["passed"]
    assert r["tv"] < r["bound"] and r["p_value"] > 1e-3


def test_too_few_samples_is_skipped_not_failed():
    r = distribution_test(_counts(19), np.array([0.5, 0.5]), 1e-3)
    assert r["skipped"] and r["passed"] and r["n"] == 19
    assert "tv" not in r


def test_partition_keeps_frequent_tokens_alone_and_merges_rare_ones():
    p = np.array([0.5, 0.3, 0.1, 0.05, 0.03, 0.02, 0.0])
    cell, P = partition(p, 100)          # expected counts 50, 30, 10, 5, 3, 2, 0
    assert cell.tolist() == [0, 1, 2, 3, 4, 4, -1]
    assert np.allclose(P, [0.5, 0.3, 0.1, 0.05, 0.05])
    # rare tokens of expected counts 4, 4, 2: one cell (a short tail joins the previous cell)
    p = np.array([0.9, 0.04, 0.04, 0.02])
    cell, P = partition(p, 100)
    assert cell.tolist() == [0, 1, 1, 1] and np.allclose(P, [0.9, 0.1])


@pytest.mark.parametrize("a, law", [
    ([], [1.0]),
    ([0.3], [0.7, 0.3]),
    ([0.5, 0.5, 0.5], [0.5, 0.25, 0.125, 0.125]),
    ([1.0, 0.0, 0.9], [0.0, 1.0, 0.0, 0.0]),
])
def test_acceptance_law_is_the_per_token_rule(a, law):
    assert np.allclose(acceptance_law(np.array(a, dtype=float)), law)


def test_acceptance_test_exact_counts_pass_and_all_accepted_fails():
    label = {"case": "c", "template": "t"}
    r = acceptance_test(_counts(500, 250, 250), np.array([0.5, 0.5]), 1e-3, label)
    assert r["passed"] and r["informational"] and r["kind"] == "acceptance"
    assert r["expected_mean_accepted"] == pytest.approx(0.75) and r["observed_mean_accepted"] == pytest.approx(0.75)
    r = acceptance_test(np.full(1000, 2), np.array([0.5, 0.5]), 1e-3, label)
    assert not r["passed"] and r["observed_mean_accepted"] == 2.0


def test_complete_continues_after_the_last_emitted_token():
    # point-mass target rows: the continuation is known
    targets = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    out = np.array([[1, -1, -1],    # rejected at 0: positions 1 and 2 continue from rows 1 and 2
                    [0, 1, -1],     # rejected at 1: position 2 continues from row 2
                    [0, 0, 1]])     # all accepted, bonus emitted: unchanged
    A = (out != -1).sum(1) - 1
    Y = complete(out, A, targets, np.random.default_rng(0))
    assert Y.tolist() == [[1, 2, 0], [0, 1, 0], [0, 0, 1]]


def test_position_tests_condition_on_the_draft_prefix():
    # Draft 0 at position 0. Among the trials that emitted 0 there, position 1 is exactly the
    # target (500 / 500); the others always emit 0 at position 1 and must not enter its test.
    targets = np.array([[0.5, 0.5], [0.5, 0.5]])
    Y = np.stack([np.r_[np.zeros(1000, int), np.ones(1000, int)],
                  np.r_[_counts(500, 500), np.zeros(1000, int)]], axis=1)
    tests = position_tests(Y, np.zeros((2000, 1), int), targets, 1e-3, {"case": "c", "template": "t"})
    assert [t["position"] for t in tests] == [0, 1] and [t["kind"] for t in tests] == ["token", "bonus"]
    assert tests[0]["n"] == 2000 and tests[0]["passed"]
    assert tests[1]["n"] == 1000 and tests[1]["tv"] == 0.0 and tests[1]["passed"]


def test_tv_curve_grows_n_and_shrinks_the_bound():
    rng = np.random.default_rng(2)
    p = np.array([0.2, 0.3, 0.5])
    c = tv_curve(rng.choice(3, size=5000, p=p), p, 1e-3)
    assert c["n"][0] == 20 and c["n"][-1] == 5000 and c["n"] == sorted(set(c["n"]))
    assert all(b1 > b2 for b1, b2 in zip(c["bound"], c["bound"][1:]))
    assert tv_curve(np.zeros(19, int), p, 1e-3) == {"n": [], "tv": [], "bound": []}


# ------------------------------------------------------------------------- over-acceptance


def test_overacceptance_bound_of_deterministic_drafts_is_the_product():
    target = np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
    b = overacceptance_bounds(target, np.array([0, 1]))
    assert b == pytest.approx([0.5, 0.4])


def test_overacceptance_bound_with_draft_probabilities_is_the_best_coupling():
    # sum over prefixes of min(prod p, prod q), checked by brute force; the per-token rule's
    # acceptance prod sum min(p_i, q_i) stays under it
    rng = np.random.default_rng(3)
    target = rng.dirichlet(np.ones(3), size=3)
    q = rng.dirichlet(np.ones(3), size=2)
    b = overacceptance_bounds(target, q=q)
    for j in (1, 2):
        brute = sum(min(np.prod([target[i, x[i]] for i in range(j)]), np.prod([q[i, x[i]] for i in range(j)]))
                    for x in itertools.product(range(3), repeat=j))
        assert b[j - 1] == pytest.approx(brute, rel=1e-6)
    assert np.prod(np.minimum(target[:2], q).sum(1)) <= b[1] + 1e-12
    # beyond max_terms prefixes: no bound
    assert overacceptance_bounds(target, q=q, max_terms=5) == [pytest.approx(b[0]), None]


def test_overacceptance_test_is_one_sided():
    label = {"case": "c", "template": "t"}
    bounds = [0.5, 0.25]
    at = np.repeat([0, 1, 2], [500, 250, 250])          # exactly at the bounds
    r = overacceptance_test(at, bounds, 1e-3, label)
    assert r["passed"] and r["kind"] == "over-acceptance" and not r.get("informational")
    below = np.zeros(1000, dtype=int)                   # never accepting is legal
    assert overacceptance_test(below, bounds, 1e-3, label)["passed"]
    above = np.repeat([0, 1, 2], [400, 250, 350])       # P(A >= 1) = 0.6 > 0.5: 6.3 sigma
    r = overacceptance_test(above, bounds, 1e-3, label)
    # P(A >= 2) = 0.35 against 0.25 is the more extreme level (7.3 sigma against 6.3)
    assert not r["passed"] and r["worst_level"] == 2 and r["excess"] == pytest.approx(0.1)
    tail1 = float(sum(Fraction(math.comb(1000, k)) * Fraction(1, 2 ** 1000) for k in range(600, 1001)))
    tail2 = float(sum(Fraction(math.comb(1000, k)) * Fraction(1, 4) ** k * Fraction(3, 4) ** (1000 - k)
                      for k in range(350, 1001)))
    assert [lv["p_value"] for lv in r["levels"]] == [pytest.approx(tail1, rel=1e-6), pytest.approx(tail2, rel=1e-6)]
    assert r["p_value"] == pytest.approx(2 * tail2, rel=1e-6)    # Bonferroni over the 2 levels
    assert all(lv["mdd"] > 0 for lv in r["levels"])


# ------------------------------------------------------------------------- power


def _cell_power(P: np.ndarray, n: int, alpha: float, c: int, Pa: float) -> float:
    """Power of the largest-cell criterion for cell c when its probability is Pa, by summing
    the binomial law over every count the criterion rejects (as distribution_test computes it)."""
    from scipy.stats import binom

    O = np.arange(n + 1)
    tails = np.minimum(binom.cdf(O, n, P[c]), binom.sf(O - 1, n, P[c]))
    reject = 2 * tails * P.size < alpha
    return float(binom.pmf(O, n, Pa)[reject].sum())


def test_detectable_shift_is_where_the_power_reaches_80_percent():
    P, n, alpha = np.array([0.6, 0.3, 0.1]), 400, 1e-3
    d = detectable_shift(P, n, alpha)
    for c in range(3):
        up_ok = _cell_power(P, n, alpha, c, P[c] + d[c]) >= 0.8 - 1e-9
        down_ok = d[c] >= P[c] or _cell_power(P, n, alpha, c, P[c] - d[c]) >= 0.8 - 1e-9
        assert up_ok and down_ok
        # a shift 10 % smaller is missed in one direction at least
        e = 0.9 * d[c]
        assert min(_cell_power(P, n, alpha, c, P[c] + e), _cell_power(P, n, alpha, c, max(0.0, P[c] - e))) < 0.8
    # four times the samples halve it (about: the binomial is discrete)
    assert detectable_shift(P, 4 * n, alpha).max() == pytest.approx(d.max() / 2, rel=0.15)


def test_detectable_excess_is_where_the_one_sided_test_reaches_80_percent():
    from scipy.stats import binom

    b, n, level = 0.9, 2000, 1e-5
    e = detectable_excess(b, n, level)
    crit = next(m for m in range(n + 1) if binom.sf(m - 1, n, b) < level)
    assert binom.sf(crit - 1, n, b + e) >= 0.8 - 1e-9 and binom.sf(crit - 1, n, b + 0.9 * e) < 0.8
    assert detectable_excess(1.0, n, level) == math.inf


def test_position_tests_carry_their_power():
    rng = np.random.default_rng(4)
    targets = np.array([[0.98, 0.01, 0.01], [0.5, 0.3, 0.2]])
    Y = np.stack([rng.choice(3, 5000, p=targets[0]), rng.choice(3, 5000, p=targets[1])], axis=1)
    tests = position_tests(Y, np.zeros((5000, 1), int), targets, 1e-4, {"case": "c", "template": "t"})
    assert 0 < tests[0]["mdd"] < tests[1]["mdd"] < 0.1   # a peaked position is the cheaper one to test
