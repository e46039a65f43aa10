"""The statistics of the exactness audit: pure numpy/scipy, no torch.

One step is exact if and only if, for every position j, the emitted token Y_j among the
trials whose prefix Y_<j equals the draft prefix x_<j is distributed as the target row j (the
bonus row at j = k). Each trial's emitted tokens Y_0..Y_A are first continued after the last
emitted one by fresh draws from the target rows (what the next decode steps produce), giving
Y_0..Y_k (`complete`). For per-token verification and deterministic drafts this is "the token
emitted at j after j acceptances is distributed as p_j"; stated on the completed sequence it
also holds for block verification, whose acceptance of position j depends on later positions.

The number of accepted drafts A is tested against the per-token rule's law P(A = j) =
a_0 ... a_{j-1} (1 - a_j), P(A = k) = prod a (`acceptance_law`), with a_j = p_j(x_j) for
deterministic drafts and a_j = sum_x min(p_j, q_j) with probabilities: informational, since
block verification accepts more by design without being lossy.

Each distribution test (one position of one template, or one acceptance-count histogram)
partitions the vocabulary into cells (`partition`: tokens with expected count >= 5 alone;
rarer tokens merged, in increasing order of probability, into cells of expected count >= 5;
zero-probability tokens apart) and applies three criteria, each at the level a it is given
(the audit passes a = alpha / (3 * number of tests), Bonferroni over the whole battery of
one sampler):

* total-variation distance between the empirical and the expected cell frequencies against
  bound(n) = 1/2 sum_c sqrt(P_c (1 - P_c) / n) + sqrt(ln(1/a) / (2 n)) (`tv_bound`): the
  first term bounds E[TV] (Jensen), the second is McDiarmid's deviation for a statistic that
  moves by at most 1/n per sample; the bound shrinks like sqrt(cells / n);
* Pearson's chi-square test on the same cells (p-value < a fails);
* the largest single-cell deviation (exact two-sided binomial tail, Bonferroni over the
  cells), which catches a bias concentrated on one token (typically the draft token) that the
  chi-square statistic dilutes over many cells.

A token of probability 0 emitted, or an id outside the vocabulary, fails the test outright.

Over-acceptance (`overacceptance_test`): when A >= j the first j emitted tokens are the drafts,
so an exact sampler has P(A >= j) <= P(Y_<j = X_<j) <= sum over x_<j of min(prod p_i(x_i),
prod q_i(x_i)) (the best coupling of the emitted and the drafted prefixes; with deterministic
drafts prod_{i<j} p_i(x_i)). A one-sided binomial test of each bound decides: accepting less
is legal (block verification, or a sampler that never accepts), accepting more is proof of
loss.

Power (`detectable_shift`, `detectable_excess`): for each test, the smallest deviation it
detects with 80 % power at the n it had, from the exact binomial law of the criterion alone
(the other criteria only add power): for a distribution test, the largest over its cells of
the smallest change of that cell's probability (up, or down as far as the cell has mass)
that the largest-cell criterion catches; a change of d in one token's probability is a loss of
d in total variation. For an over-acceptance test, the smallest excess of P(A >= j) over its
bound.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
from scipy.special import bdtr, bdtrc
from scipy.stats import binom, chi2

def partition(p: np.ndarray, n: int, min_expected: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Cells for a test with n samples: cell id per token (-1 for p = 0) and cell probabilities.
    Tokens with n p >= min_expected are cells of their own; the others, in increasing order of
    p, are merged into consecutive groups of expected count >= min_expected."""
    V = p.size
    cell = np.full(V, -1, dtype=np.int64)
    pos = p > 0
    e = n * p
    big = np.nonzero(pos & (e >= min_expected))[0]
    cell[big] = np.arange(big.size)
    m = big.size
    small = np.nonzero(pos & (e < min_expected))[0]
    if small.size:
        order = small[np.argsort(p[small], kind="stable")]
        eo = e[order]
        # Pre-groups by cumulative expectation (vectorised), then merge consecutive pre-groups
        # greedily until each cell reaches min_expected (a loop over at most n / min_expected).
        pre = (np.floor((np.cumsum(eo) - eo) / min_expected)).astype(np.int64)
        sums = np.bincount(pre, weights=eo)
        merged = np.empty(sums.size, dtype=np.int64)
        gid, acc = 0, 0.0
        for i, s in enumerate(sums.tolist()):
            merged[i] = gid
            acc += s
            if acc >= min_expected:
                gid, acc = gid + 1, 0.0
        ng = int(merged[-1]) + 1
        if acc < min_expected and ng > 1 and acc > 0:   # a short tail joins the previous cell
            merged[merged == ng - 1] = ng - 2
            ng -= 1
        g = merged[pre]
        if ng == 1 and eo.sum() < min_expected and m > 0:
            cell[order] = int(cell[big[np.argmin(e[big])]])  # too little mass: join the rarest cell
        else:
            cell[order] = m + g
            m += ng
    probs = np.bincount(cell[pos], weights=p[pos], minlength=m)
    return cell, probs


def tv_bound(P: np.ndarray, n: int, alpha: float) -> float:
    """Bound on the TV distance of n samples over cells of probabilities P, exceeded with
    probability at most alpha when the samples follow P."""
    if n <= 0:
        return float("inf")
    var = np.clip(P * (1 - P), 0, None)  # P may exceed 1 by rounding when all mass is in one cell
    return float(0.5 * np.sqrt(var / n).sum() + math.sqrt(math.log(1.0 / alpha) / (2 * n)))


POWER = 0.8


def _cdf(k: np.ndarray, n: int, p: np.ndarray) -> np.ndarray:
    """P(Bin(n, p) <= k), 0 for k < 0 (scipy.special's ufunc: the power bisection calls it often)."""
    k = np.broadcast_to(np.asarray(k, dtype=np.float64), np.shape(p))
    return np.where(k < 0, 0.0, bdtr(np.maximum(k, 0), n, p))


def _sf(k: np.ndarray, n: int, p: np.ndarray) -> np.ndarray:
    """P(Bin(n, p) > k), 1 for k < 0."""
    k = np.broadcast_to(np.asarray(k, dtype=np.float64), np.shape(p))
    return np.where(k < 0, 1.0, bdtrc(np.maximum(k, 0), n, p))


def _bisect(f, lo: np.ndarray, hi: np.ndarray, iters: int = 32) -> np.ndarray:
    """Smallest x in [lo, hi] with f(x) true, f monotone (false .. true); hi where f(hi) is
    false is returned as inf."""
    lo, hi = np.asarray(lo, dtype=np.float64).copy(), np.asarray(hi, dtype=np.float64).copy()
    ok_hi = f(hi)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        m = f(mid)
        hi = np.where(m, mid, hi)
        lo = np.where(m, lo, mid)
    return np.where(ok_hi, hi, np.inf)


def detectable_shift(P: np.ndarray, n: int, alpha: float, power: float = POWER) -> np.ndarray:
    """Per cell of probability P (n samples, the test at level alpha over P.size cells): the
    smallest change d of the cell's probability that the largest-cell criterion detects with
    the given power, in either direction (a downward change of up to P; inf: never)."""
    P = np.clip(np.asarray(P, dtype=np.float64), 0.0, 1.0)
    if n <= 0 or P.size < 2:
        return np.full(P.shape, np.inf)
    side = alpha / (2 * P.size)
    c_lo = binom.ppf(side, n, P) - 1          # largest count with cdf < side (-1: none)
    c_hi = binom.isf(side, n, P) + 1          # smallest count with sf(count - 1) <= side

    def pw(Pa):
        Pa = np.clip(Pa, 0.0, 1.0)
        return _cdf(c_lo, n, Pa) + _sf(c_hi - 1, n, Pa) >= power

    up = _bisect(lambda d: pw(P + d), np.zeros_like(P), 1.0 - P)
    down = _bisect(lambda d: pw(P - d), np.zeros_like(P), P.copy())
    return np.maximum(up, np.minimum(down, P))


def detectable_excess(b: float, n: int, level: float, power: float = POWER) -> float:
    """Smallest excess e such that P(A >= j) = b + e makes the one-sided binomial test at
    `level` fail with the given power (inf: never within [b, 1])."""
    if n <= 0 or b >= 1.0:
        return float("inf")
    c = binom.isf(level, n, b) + 1            # smallest count with sf(count - 1) <= level
    if c > n:
        return float("inf")
    return float(_bisect(lambda e: _sf(np.full(1, c - 1), n, np.minimum(b + e, 1.0)) >= power,
                         np.zeros(1), np.full(1, 1.0 - b))[0])


def distribution_test(samples: np.ndarray, p: np.ndarray, alpha: float, min_n: int = 20,
                      power: bool = False) -> dict:
    """Empirical law of `samples` against the expected probabilities p at level alpha: TV
    against its bound, chi-square and the largest single-cell deviation (see module doc).
    power=True adds `mdd`, the smallest one-token change (= TV) detected with 80 % power."""
    samples = np.asarray(samples, dtype=np.int64)
    n = int(samples.size)
    V = p.size
    res = {"n": n, "alpha": alpha}
    if n < min_n:
        res.update(skipped=True, passed=True, reason=f"only {n} samples reached this position")
        return res
    invalid = int(((samples < 0) | (samples >= V)).sum())
    ok = samples[(samples >= 0) & (samples < V)]
    counts = np.bincount(ok, minlength=V)
    impossible = int(counts[p == 0].sum())
    cell, P = partition(p, n)
    valid_cells = cell[ok]
    O = np.bincount(valid_cells[valid_cells >= 0], minlength=P.size).astype(np.float64)
    tv = 0.5 * (np.abs(O / n - P).sum() + (impossible + invalid) / n)
    bound = tv_bound(P, n, alpha)
    if P.size > 1:
        E = n * P
        stat = float(((O - E) ** 2 / E).sum())
        p_chi2 = float(chi2.sf(stat, P.size - 1))
        # Largest single-cell deviation: exact two-sided binomial tail per cell, Bonferroni over
        # the cells (the chi-square statistic dilutes a bias concentrated on one token).
        Pc = np.clip(P, 0.0, 1.0)
        tails = np.minimum(binom.cdf(O, n, Pc), binom.sf(O - 1, n, Pc))
        p_cell = float(min(1.0, 2 * tails.min() * P.size))
    else:
        stat, p_chi2, p_cell = 0.0, 1.0, 1.0
    pval = min(p_chi2, p_cell)
    dev = counts / n - p
    top = np.argsort(-np.abs(dev))[:3]
    res.update(
        skipped=False, cells=int(P.size), tv=float(tv), bound=bound, chi2=stat, p_chi2=p_chi2, p_max_cell=p_cell,
        p_value=pval, impossible=impossible, invalid=invalid,
        passed=bool(impossible == 0 and invalid == 0 and tv <= bound and pval >= alpha),
        top_deviations=[{"token": int(t), "observed": float(counts[t] / n), "expected": float(p[t])} for t in top],
    )
    if power:
        res["mdd"] = float(detectable_shift(P, n, alpha).max()) if P.size > 1 else None
    return res


def acceptance_law(a: np.ndarray) -> np.ndarray:
    """P(A = j), j = 0..k, for per-position acceptance probabilities a (independent positions)."""
    k = a.size
    out = np.zeros(k + 1)
    run = 1.0
    for j in range(k):
        out[j] = run * (1 - a[j])
        run *= a[j]
    out[k] = run
    return np.clip(out, 0, None)


def complete(out: np.ndarray, A: np.ndarray, targets: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The step's emitted tokens, continued after the last emitted one by fresh draws from the
    target rows (what the following decode steps would produce): [n, k + 1]."""
    k1 = targets.shape[0]
    Y = out[:, :k1].copy()
    for j in range(1, k1):
        m = A + 1 <= j
        if m.any():
            Y[m, j] = rng.choice(targets.shape[1], size=int(m.sum()), p=targets[j])
    return Y


def position_tests(Y: np.ndarray, drafts: np.ndarray, targets: np.ndarray, alpha_t: float, label: dict) -> list[dict]:
    """For each position j: the law of Y_j among the trials whose completed prefix Y_<j equals
    the draft prefix, against the target row j. This is the exactness criterion of one step
    for any verification rule (per-token or block): drafts that agree with the sequence so far
    must leave the next token distributed as the target."""
    tests = []
    same = np.ones(Y.shape[0], dtype=bool)
    for j in range(targets.shape[0]):
        toks = Y[same, j]
        r = distribution_test(toks, targets[j], alpha_t, power=True)
        r.update(label, kind="bonus" if j == targets.shape[0] - 1 else "token", position=j)
        r["_samples"], r["_expected"] = toks, targets[j]
        tests.append(r)
        if j < drafts.shape[1]:
            same &= Y[:, j] == drafts[:, j]
    return tests


def acceptance_test(A: np.ndarray, a: np.ndarray, alpha_t: float, label: dict) -> dict:
    """Accepted-draft counts against the per-token rule's law P(A = j) = a_0..a_{j-1}(1 - a_j).
    Informational for third-party samplers (block verification accepts more by design, and
    stays exact); required of this project's samplers."""
    k = a.size
    law = acceptance_law(a)
    r = distribution_test(np.clip(A, 0, k), law, alpha_t)
    r.update(label, kind="acceptance", position=None, informational=True,
             expected_mean_accepted=float((law * np.arange(k + 1)).sum()),
             observed_mean_accepted=float(A.mean()) if A.size else None)
    r["_samples"], r["_expected"] = np.clip(A, 0, k), law
    return r


def overacceptance_bounds(target: np.ndarray, drafts: Optional[np.ndarray] = None, q: Optional[np.ndarray] = None,
                          max_terms: int = 1 << 20) -> list:
    """b_j, j = 1..k: the largest P(A >= j) of an exact sampler (module doc). Deterministic
    drafts: prod_{i<j} p_i(x_i). Draft probabilities: sum over the V^j prefixes of min(prod p,
    prod q), None where V^j > max_terms. Probabilities are rounded to float32 first (what the
    sampler sees)."""
    f32 = lambda a: np.asarray(a, dtype=np.float32).astype(np.float64)  # noqa: E731
    k = target.shape[0] - 1
    if q is None:
        px = f32(target[np.arange(k), drafts])
        return [float(v) for v in np.cumprod(px)]
    out, P, Q = [], np.ones(1), np.ones(1)
    for j in range(k):
        if P.size * target.shape[1] > max_terms:
            out += [None] * (k - j)
            break
        P = np.outer(P, f32(target[j])).ravel()
        Q = np.outer(Q, f32(q[j])).ravel()
        out.append(float(min(1.0, np.minimum(P, Q).sum())))
    return out


def overacceptance_test(A: np.ndarray, bounds: list, alpha_t: float, label: dict) -> dict:
    """One-sided binomial test of P(A >= j) <= bounds[j - 1] for each j with a bound,
    Bonferroni over j. Fails (proof of loss) when more trials accepted j drafts than an exact
    sampler can. Each j records its bound, the observed fraction, its p-value and `mdd`, the
    smallest excess of P(A >= j) detected with 80 % power."""
    n = int(A.size)
    js = [j for j, b in enumerate(bounds, 1) if b is not None]
    res = dict(label, kind="over-acceptance", position=None, n=n, alpha=alpha_t)
    if not js or n == 0:
        res.update(skipped=True, passed=True, reason="no bound" if not js else "no trials", levels=[])
        return res
    level = alpha_t / len(js)
    levels = []
    for j in js:
        b = min(1.0, bounds[j - 1])
        m = int((A >= j).sum())
        pv = float(binom.sf(m - 1, n, b)) if m > 0 else 1.0
        levels.append({"accepted_at_least": j, "bound": b, "observed": m / n, "p_value": pv,
                       "mdd": detectable_excess(b, n, level)})
    worst = min(levels, key=lambda r: r["p_value"])
    p_value = min(1.0, worst["p_value"] * len(js))
    res.update(skipped=False, p_value=p_value, passed=bool(p_value >= alpha_t), levels=levels,
               excess=worst["observed"] - worst["bound"], worst_level=worst["accepted_at_least"],
               mdd=max(r["mdd"] for r in levels))
    return res


def tv_curve(samples: np.ndarray, p: np.ndarray, alpha: float, points: int = 12) -> dict:
    """TV and its bound on the first m samples, m on a geometric grid (the figure's curve)."""
    n = samples.size
    if n < 20:
        return {"n": [], "tv": [], "bound": []}
    ns = np.unique(np.geomspace(20, n, points).astype(int))
    tvs, bounds = [], []
    for m in ns:
        r = distribution_test(samples[:m], p, alpha, min_n=1)
        tvs.append(r["tv"])
        bounds.append(r["bound"])
    return {"n": ns.tolist(), "tv": tvs, "bound": bounds}
