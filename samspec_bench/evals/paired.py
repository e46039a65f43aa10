"""Paired statistics for "does turning SAM on change accuracy?".

Both arms run the same problems, so the comparison is paired by problem: per problem i the
correctness without SAM (K samples, a_i in [0, 1] as the mean) and with it (b_i); the
difference is mean(b) - mean(a) ("on minus off"). Functions here take per-problem arrays
(shape [n] for one sample, [n, K] for K samples, values 0/1 or NaN for a missing sample).

- `paired_bootstrap_ci`: percentile interval of the mean difference, resampling problems.
- `mcnemar_exact`: K = 1, binary: the exact binomial test on discordant pairs.
- `sign_flip_test`: the K-sample generalisation: a paired permutation test on per-problem
  mean differences d_i (each d_i's sign flips under H0: SAM on/off exchangeable per problem);
  exact enumeration over nonzero d_i when there are at most `exact_max` of them, Monte Carlo
  otherwise. With K = 1 and exact enumeration it equals McNemar's exact test.
- `min_detectable_difference`: the smallest difference a two-sided level-alpha test detects
  with the given power (normal approximation with the paired SD of d_i), never below what the
  exact test can detect at all with n problems (`exact_floor`).
- `problem_stderr`: standard error of pass@1 (the mean over problems of the per-problem mean
  over K samples), clustered by problem: sd of the per-problem means / sqrt(n). For K = 1 it
  is lm-eval's stderr of the mean; for K > 1 lm-eval's per-run stderr (and one over all n*K
  samples as if independent) is not the stderr of the mean over K.
- `compare`: all of the above plus a plain-words verdict.
"""

from __future__ import annotations

import itertools
import math
from statistics import NormalDist
from typing import Any, Mapping, Sequence

import numpy as np

from samspec_bench.metrics import first_divergence


def _as2d(x) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise ValueError(f"expected per-problem values of shape [n] or [n, K], got {a.shape}")
    return a


def problem_means(x) -> np.ndarray:
    """Per-problem mean over the samples that exist (NaN = missing)."""
    a = _as2d(x)
    with np.errstate(invalid="ignore"):
        return np.nanmean(a, axis=1) if np.isnan(a).any() else a.mean(axis=1)


def problem_stderr(x) -> float:
    """Standard error of mean(problem_means(x)): sample sd (ddof 1) of the per-problem
    means / sqrt(n). NaN with fewer than two problems."""
    m = problem_means(x)
    m = m[~np.isnan(m)]
    if len(m) < 2:
        return math.nan
    return float(np.std(m, ddof=1) / math.sqrt(len(m)))


def paired_bootstrap_ci(a, b, *, iters: int = 10000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(b) - mean(a), resampling problems (pairs kept)."""
    d = problem_means(b) - problem_means(a)
    n = len(d)
    if n == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(iters, n))
    means = d[idx].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def mcnemar_exact(a, b) -> dict[str, Any]:
    """McNemar's exact test for paired binary outcomes (one sample per problem).
    n01: correct without SAM, wrong with; n10: wrong without, correct with.
    p = two-sided exact binomial p-value of min(n01, n10) out of n01 + n10 at 1/2."""
    a = np.asarray(a, dtype=float).ravel()
    b = np.asarray(b, dtype=float).ravel()
    if a.shape != b.shape:
        raise ValueError("a and b must have one value per problem each")
    if not np.all(np.isin(a, (0, 1))) or not np.all(np.isin(b, (0, 1))):
        raise ValueError("McNemar's test needs 0/1 outcomes")
    n01 = int(np.sum((a == 1) & (b == 0)))
    n10 = int(np.sum((a == 0) & (b == 1)))
    n = n01 + n10
    if n == 0:
        p = 1.0
    else:
        k = min(n01, n10)
        # P(X <= k) for X ~ Bin(n, 1/2), doubled (the distribution is symmetric)
        tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
        p = min(1.0, 2 * tail)
    return {"test": "mcnemar_exact", "n01": n01, "n10": n10, "discordant": n, "p_value": p}


def sign_flip_test(a, b, *, iters: int = 100000, exact_max: int = 20, seed: int = 0) -> dict[str, Any]:
    """Paired permutation (sign-flip) test of mean(b) - mean(a) on per-problem means.
    Two-sided: p = P(|sum of sign-flipped d| >= |sum d|)."""
    d = problem_means(b) - problem_means(a)
    nz = d[d != 0]
    m = len(nz)
    obs = abs(float(nz.sum()))
    tol = 1e-9 * max(1.0, obs)
    if m == 0:
        return {"test": "sign_flip", "method": "exact", "nonzero": 0, "p_value": 1.0}
    if m <= exact_max:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=m)))
        stats = np.abs(signs @ nz)
        p = float(np.mean(stats >= obs - tol))
        method = "exact"
    else:
        rng = np.random.default_rng(seed)
        hits = 0
        done = 0
        chunk = 10000
        while done < iters:
            c = min(chunk, iters - done)
            signs = rng.choice((1.0, -1.0), size=(c, m))
            hits += int(np.sum(np.abs(signs @ nz) >= obs - tol))
            done += c
        p = (hits + 1) / (iters + 1)
        method = f"monte_carlo({iters})"
    return {"test": "sign_flip", "method": method, "nonzero": m, "p_value": p}


def _norm_ppf(q: float) -> float:
    return NormalDist().inv_cdf(q)


def exact_floor(alpha: float) -> int:
    """The fewest discordant problems an exact paired test (McNemar's, the sign flip) can call
    significant at level alpha: all of them one way gives its smallest p-value, 2 / 2^m < alpha."""
    m = 1
    while 2.0 ** (1 - m) >= alpha:
        m += 1
    return m


def min_detectable_difference(a, b, *, alpha: float = 0.05, power: float = 0.8, num_samples: int = 1) -> dict[str, Any]:
    """Smallest |difference| detectable with `power` by a two-sided level-`alpha` paired test:
    (z_{1-alpha/2} + z_{power}) * sd(d) / sqrt(n). When every d_i is the same (sd 0 says nothing:
    no discordant problem, or all differ alike, or one problem), the unpaired bound sqrt(2 p (1 - p))
    with the pooled accuracy p stands in (p = 1/2 when p is 0 or 1), which is conservative for
    positively correlated arms. Never below what the exact test can detect at all: `exact_floor`
    problems of n changed by 1 / num_samples each; with fewer than `exact_floor` problems nothing
    is detectable (mdd inf)."""
    d = problem_means(b) - problem_means(a)
    n = len(d)
    if n == 0:
        return {"mdd": math.nan, "sd": math.nan, "basis": "no problems"}
    z = _norm_ppf(1 - alpha / 2) + _norm_ppf(power)
    sd = float(np.std(d, ddof=1)) if n > 1 else 0.0
    basis = "paired sd of per-problem differences"
    if sd == 0.0:
        p = float(np.mean(np.concatenate([problem_means(a), problem_means(b)])))
        if p <= 0.0 or p >= 1.0:
            p = 0.5
        sd = math.sqrt(2 * p * (1 - p))
        why = ("one problem" if n == 1 else "no discordant problems" if not np.any(d) else
               f"every problem differs by the same {float(d[0]):+g} (sd 0)")
        basis = f"{why}: unpaired bound sqrt(2p(1-p))"
    mdd = z * sd / math.sqrt(n)
    floor = exact_floor(alpha)
    if n < floor:
        mdd = math.inf
        basis += (f"; with {n} problem(s) the exact test's smallest p-value, 2^(1-n) = {2.0 ** (1 - n):.3g}, is not "
                  f"below {alpha}: no difference is detectable ({floor} problems or more are needed)")
    elif floor / (n * max(num_samples, 1)) > mdd:
        mdd = floor / (n * max(num_samples, 1))
        basis += f"; raised to the exact test's floor: {floor} of {n} problems changed, all one way"
    return {"mdd": mdd, "sd": sd, "basis": basis, "alpha": alpha, "power": power}


def verdict(diff: float, p_value: float, mdd: float, *, alpha: float = 0.05, power: float = 0.8) -> str:
    pts = lambda x: f"{100 * x:.1f}"
    if math.isnan(p_value):
        return "no paired problems: nothing to compare"
    if p_value < alpha:
        way = "higher" if diff > 0 else "lower"
        return (f"accuracy with SAM is {way} by {pts(abs(diff))} points (p = {p_value:.3g} < {alpha}): "
                "a detectable difference; check the sampler and the verify path")
    if not mdd < 1.0:
        return (f"no detectable difference at this sample size (p = {p_value:.3g}); with so few problems "
                f"not even a 100-point difference is detectable with {int(round(power * 100))}% power")
    return (f"no detectable difference at this sample size (p = {p_value:.3g}); the smallest difference "
            f"detectable with {int(round(power * 100))}% power is {pts(mdd)} points")


def compare(off: Mapping[Any, Sequence[float]], on: Mapping[Any, Sequence[float]], *, alpha: float = 0.05,
            power: float = 0.8, iters: int = 10000, seed: int = 0) -> dict[str, Any]:
    """Join per-problem correctness (doc -> list of K sample scores, None/NaN = missing) by
    document and compare. Problems missing in either arm (or with no sample) are dropped and counted."""
    keys = [k for k in off if k in on]
    dropped = len(set(off) ^ set(on))
    rows_a, rows_b, kept = [], [], []
    for key in keys:
        xa = np.array([np.nan if v is None else float(v) for v in off[key]], dtype=float)
        xb = np.array([np.nan if v is None else float(v) for v in on[key]], dtype=float)
        if np.all(np.isnan(xa)) or np.all(np.isnan(xb)):
            dropped += 1
            continue
        rows_a.append(np.nanmean(xa))
        rows_b.append(np.nanmean(xb))
        kept.append((xa, xb))
    n = len(rows_a)
    a = np.array(rows_a)
    b = np.array(rows_b)
    k = max((max(len(x), len(y)) for x, y in kept), default=0)
    out: dict[str, Any] = {"n": n, "dropped": dropped, "num_samples": k, "alpha": alpha}
    if n == 0:
        out.update({"acc_off": math.nan, "acc_on": math.nan, "diff": math.nan, "ci95": [math.nan, math.nan],
                    "stderr_off": math.nan, "stderr_on": math.nan,
                    "p_value": math.nan, "mdd": math.nan})
        out["verdict"] = verdict(math.nan, math.nan, math.nan)
        return out
    diff = float(b.mean() - a.mean())
    out.update({"acc_off": float(a.mean()), "acc_on": float(b.mean()), "diff": diff,
                "stderr_off": problem_stderr(a), "stderr_on": problem_stderr(b),
                "ci95": list(paired_bootstrap_ci(a, b, iters=iters, seed=seed))})
    binary = k == 1 and np.all(np.isin(a, (0, 1))) and np.all(np.isin(b, (0, 1)))
    if binary:
        test = mcnemar_exact(a, b)
    else:
        test = sign_flip_test(a, b, seed=seed)
    out["test"] = test
    out["p_value"] = test["p_value"]
    m = min_detectable_difference(a, b, alpha=alpha, power=power, num_samples=k)
    out["mdd"] = m["mdd"]
    out["mdd_basis"] = m["basis"]
    out["verdict"] = verdict(diff, test["p_value"], m["mdd"], alpha=alpha, power=power)
    return out


def agreement(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> dict[str, Any]:
    """Greedy runs: fraction of identical outputs and where the others first diverge."""
    pos = [first_divergence(x, y) for x, y in pairs]
    div = [p for p in pos if p is not None]
    return {"n": len(pairs), "identical": len(pairs) - len(div),
            "identical_fraction": (len(pairs) - len(div)) / len(pairs) if pairs else math.nan,
            "first_divergence": div,
            "first_divergence_median": float(np.median(div)) if div else None}
