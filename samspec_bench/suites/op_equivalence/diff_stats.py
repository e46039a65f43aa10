"""The numbers of op-equivalence: how far apart two paths' scores of the same tokens are.

a = decode path, b = verify path. "Sampled tokens" are the tokens whose logprobs both paths
report (the sequence's tokens at model level, tokens drawn from a at kernel level).
  logprob_diff_max / mean / p99   |log p_a(x) - log p_b(x)| of the sampled tokens
  exact_zero_fraction             fraction of those differences that are exactly 0
  logprob_diff_non_finite         positions whose difference is NaN or infinite (a path scored
                                  NaN / -inf): counted, since they make max / mean / p99 non-finite
  argmax_flip_rate                positions whose argmax differs
  kl_mean / kl_max                KL(a || b) of the full distributions, nats (float64, rows renormalised)
  full_logprob_diff_max, full_exact_zero_fraction   over every vocabulary entry
  rollout_probs_diff_max / mean / std, rollout_actor_probs_pearson_corr
                                  verl's names: |p_a(x) - p_b(x)| and Pearson(p_a(x), p_b(x))
  output_diff_max / mean, output_exact_zero_fraction   (kernel level) attention outputs
  histogram                       the sampled-token differences in log10 bins plus an exact-zero bin
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

HIST_EDGES = [float(x) for x in range(-10, 1)]   # log10 |diff| bin edges: 1e-10 .. 1


def histogram(d) -> dict[str, Any]:
    """Counts of |diff| in log10 bins (HIST_EDGES; below the first edge goes to the first bin,
    above the last to the last) plus the exact zeros and the non-finite (NaN, inf) apart: the
    counts add up to the positions."""
    d = np.asarray(d, dtype=np.float64)
    finite = np.isfinite(d)
    zero = int((d == 0).sum())
    nz = d[finite & (d > 0)]
    logs = np.clip(np.log10(nz), HIST_EDGES[0], HIST_EDGES[-1] - 1e-12) if nz.size else nz
    counts, _ = np.histogram(logs, bins=HIST_EDGES)
    return {"zero": zero, "log10_edges": HIST_EDGES, "counts": [int(c) for c in counts],
            "non_finite": int((~finite).sum())}


def pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    """Pearson correlation of two equally long series; None where it is undefined (fewer than
    two values, or a constant series)."""
    if a.size > 1 and a.std() > 0 and b.std() > 0:
        return float(np.corrcoef(a, b)[0, 1])
    return None


def sampled_token_metrics(d: np.ndarray, pa: np.ndarray, pb: np.ndarray) -> dict[str, Any]:
    """The metrics of the sampled tokens alone: d = |log p_a(x) - log p_b(x)|, pa / pb = p_a(x) /
    p_b(x), one entry per position. None for every value when there is no position."""
    empty = not d.size
    pdiff = np.abs(pa - pb)
    return {
        "logprob_diff_max": None if empty else float(d.max()),
        "logprob_diff_mean": None if empty else float(d.mean()),
        "logprob_diff_p99": None if empty else float(np.quantile(d, 0.99)),
        "exact_zero_fraction": None if empty else float((d == 0).mean()),
        "logprob_diff_non_finite": int((~np.isfinite(d)).sum()),
        "rollout_probs_diff_max": None if empty else float(pdiff.max()),
        "rollout_probs_diff_mean": None if empty else float(pdiff.mean()),
        "rollout_actor_probs_pearson_corr": pearson(pa, pb),
        "histogram": histogram(d),
    }


def sampled_summary(lp_a: Sequence[Sequence[float]], lp_b: Sequence[Sequence[float]], flips: int,
                    compared: int) -> dict[str, Any]:
    """The comparison where only the sampled tokens' logprobs are known (an engine that returns
    top-n logprobs, not full distributions). lp_a / lp_b: per request, the logprobs of the same
    tokens under a and b; flips of `compared` positions chose another token under b."""
    a = np.concatenate([np.asarray(x, dtype=np.float64) for x in lp_a]) if len(lp_a) else np.zeros(0)
    b = np.concatenate([np.asarray(x, dtype=np.float64) for x in lp_b]) if len(lp_b) else np.zeros(0)
    with np.errstate(invalid="ignore"):   # -inf - -inf: NaN, counted in logprob_diff_non_finite
        d = np.abs(a - b)
    return {"positions": int(d.size), **sampled_token_metrics(d, np.exp(a), np.exp(b)),
            "argmax_flip_rate": flips / compared if compared else None}


class Accumulator:
    """Collects the per-position comparison of two paths' full distributions and summarises it."""

    def __init__(self):
        self.tok_diff: list = []      # |lp_a(x) - lp_b(x)| float64
        self.pa: list = []            # p_a(x)
        self.pb: list = []
        self.kl: list = []
        self.flips = 0
        self.rows = 0
        self.full_zero = 0
        self.full_total = 0
        self.full_max = 0.0
        self.out_max = 0.0            # kernel level: attention output differences
        self.out_sum = 0.0
        self.out_zero = 0
        self.out_total = 0

    def add(self, lp_a, lp_b, tokens) -> None:
        """lp_a, lp_b: float32 log-probabilities [N, V] of the two paths (torch, on any one device);
        tokens [N]. Computed where lp_a lives; only the per-position values come to the CPU."""
        import torch  # the tensors are torch's

        a, b = lp_a.double(), lp_b.double()
        idx = tokens.reshape(-1, 1).to(device=a.device, dtype=torch.long)
        ta, tb = a.gather(1, idx)[:, 0], b.gather(1, idx)[:, 0]
        self.tok_diff.append((ta - tb).abs().cpu().numpy())
        self.pa.append(ta.exp().cpu().numpy())
        self.pb.append(tb.exp().cpu().numpy())
        # KL in float64 on renormalised rows: float32 normalisation error (~1e-7) would otherwise
        # dominate the second-order KL of nearly equal distributions.
        na, nb = a - torch.logsumexp(a, -1, keepdim=True), b - torch.logsumexp(b, -1, keepdim=True)
        pa_full = na.exp()
        both = torch.isfinite(a) & torch.isfinite(b)
        term = torch.where(pa_full > 0, pa_full * (na - torch.where(both, nb, na)), torch.zeros_like(a))
        kl = term.sum(-1).clamp_min(0)
        # mass of a where b is -inf (impossible under b): KL is infinite there
        kl = torch.where(((pa_full > 0) & ~torch.isfinite(b)).any(-1), torch.full_like(kl, math.inf), kl)
        self.kl.append(kl.cpu().numpy())
        self.flips += int((a.argmax(-1) != b.argmax(-1)).sum())
        self.rows += a.shape[0]
        same = (lp_a == lp_b)
        self.full_zero += int(same.sum())
        self.full_total += same.numel()
        d = (a - b).abs()
        d = torch.where(both, d, torch.where(torch.isinf(a) & torch.isinf(b) & (a == b), torch.zeros_like(d),
                                             torch.full_like(d, math.inf)))
        self.full_max = max(self.full_max, float(d.max())) if d.numel() else self.full_max

    def add_outputs(self, out_a, out_b) -> None:
        """Attention outputs of the two kernels (torch tensors of one shape)."""
        d = (out_a.double() - out_b.double()).abs()
        self.out_max = max(self.out_max, float(d.max()))
        self.out_sum += float(d.sum())
        self.out_zero += int((d == 0).sum())
        self.out_total += d.numel()

    def summary(self) -> dict[str, Any]:
        if not self.rows:
            return {"positions": 0}
        d = np.concatenate(self.tok_diff)
        pa, pb = np.concatenate(self.pa), np.concatenate(self.pb)
        kl = np.concatenate(self.kl)
        pdiff = np.abs(pa - pb)
        finite_kl = kl[np.isfinite(kl)]
        out = {
            "positions": int(d.size),
            **sampled_token_metrics(d, pa, pb),
            "argmax_flip_rate": self.flips / self.rows,
            "kl_mean": float(kl.mean()) if np.all(np.isfinite(kl)) else math.inf,
            "kl_max": float(kl.max()),
            "kl_infinite_positions": int((~np.isfinite(kl)).sum()),
            "kl_mean_finite": float(finite_kl.mean()) if finite_kl.size else None,
            "full_logprob_diff_max": self.full_max,
            "full_exact_zero_fraction": self.full_zero / self.full_total,
            "rollout_probs_diff_std": float(pdiff.std(ddof=1)) if pdiff.size > 1 else 0.0,
        }
        if out["rollout_actor_probs_pearson_corr"] is None and np.array_equal(pa, pb):
            out["rollout_actor_probs_pearson_corr"] = 1.0   # identical paths: perfectly correlated
        if self.out_total:
            out.update({"output_diff_max": self.out_max, "output_diff_mean": self.out_sum / self.out_total,
                        "output_exact_zero_fraction": self.out_zero / self.out_total})
        return out


def apply_gate(cfg: Any, rows: dict[str, dict]) -> dict[str, Any] | None:
    """--tolerance: the rows whose cfg.tolerance_metric exceeds cfg.tolerance (NaN fails; a row
    without the metric is listed in not_measured, and a gate that measured no row at all, every
    pair skipped, does not pass). None without a tolerance."""
    if cfg.tolerance is None:
        return None
    failed, not_measured = [], []
    for key, r in rows.items():
        v = r.get(cfg.tolerance_metric)
        if v is None:
            not_measured.append(key)
        elif not (v <= cfg.tolerance):
            failed.append({"row": key, "value": v})
    measured = len(rows) - len(not_measured)
    return {"metric": cfg.tolerance_metric, "tolerance": cfg.tolerance, "passed": not failed and measured > 0,
            "failed": failed, "measured": measured, "not_measured": not_measured}
