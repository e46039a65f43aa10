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
"""

from __future__ import annotations

import math

import numpy as np
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


def distribution_test(samples: np.ndarray, p: np.ndarray, alpha: float, min_n: int = 20) -> dict:
    """Empirical law of `samples` against the expected probabilities p at level alpha: TV
    against its bound, chi-square and the largest single-cell deviation (see module doc)."""
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
        r = distribution_test(toks, targets[j], alpha_t)
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
