"""Which requests run long: --length-rank-share, and how drafting changes with a response's length.

A replay with drawn lengths (--length-dist) gives each request a length drawn apart from the
recorded response it replays: a short recorded response may be stretched to the workload's
longest. That is neutral only where draftability does not change with length. Where it does,
the tail (the last, longest requests) drafts as the average response and not as the long ones.
So the replay measures it (`drafting_by_length`): per arm, the Spearman rank correlation between
a recorded response's length and its tokens per step on the always-speculating walk of its
profile. Negative: longer responses draft worse, and independent lengths flatter the tail.

`--length-rank-share R` (0..1) makes the draw follow the recorded order: request q's normal
score (the copula's z, config.draw_lengths) becomes sqrt(R) s_q + sqrt(1 - R) z_q, s_q the
normal score of its recorded length among the run's requests (`normal_scores`). Each length
keeps --length-dist's distribution over the workload; R = 1 puts the drawn lengths in the
recorded order (equal recorded lengths draw equal lengths), R = 0 draws as without it.

A replay is read by its fields (replay_arm.Replay: pairs, idx, profiles); no suite module is
imported."""

from __future__ import annotations

from statistics import NormalDist
from typing import Any, Sequence

import numpy as np

from samspec_bench.bench.simulation.profiles import walk_profile

MIN_RESPONSES = 3   # a rank correlation of fewer is not reported
UNCAPPED = 1 << 30  # the walk's k: the profile's drafts as drafted


def mid_ranks(x: Sequence[float]) -> np.ndarray:
    """Ranks 1..n of x, tied values sharing the mean of their ranks."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=float)
    ranks[order] = np.arange(1, len(x) + 1, dtype=float)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def normal_scores(x: Sequence[float]) -> np.ndarray:
    """Phi^-1((mid-rank - 1/2) / n) of each value: standard normal scores in x's order."""
    n = len(x)
    if not n:
        return np.zeros(0)
    inv = NormalDist().inv_cdf
    return np.array([inv(float(r)) for r in (mid_ranks(x) - 0.5) / n])


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson's on mid-ranks); None where either side is constant."""
    rx, ry = mid_ranks(x), mid_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = float(np.sqrt((rx ** 2).sum() * (ry ** 2).sum()))
    return float((rx * ry).sum() / den) if den > 0 else None


def recorded_scores(rep: Any) -> np.ndarray:
    """The normal score of each request's recorded response length (rep.idx order)."""
    return normal_scores([len(rep.pairs[j][1]) for j in rep.idx])


def tokens_per_step(drafted: np.ndarray, accepted: np.ndarray) -> float | None:
    """Tokens per decode step of a response's always-speculating walk (profiles.walk_profile, at
    the profile's own draft lengths); None for an empty one."""
    emitted = walk_profile(drafted, accepted, UNCAPPED)[3]
    return sum(emitted) / len(emitted) if emitted else None


def drafting_by_length(rep: Any, settings: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arm with a profile: the Spearman correlation between the recorded length of each
    distinct response the run replays and its tokens per step (`tokens_per_step`), with the
    number of responses; arms sharing a profile share the figure."""
    used = sorted(set(int(j) for j in rep.idx))
    lengths = [len(rep.pairs[j][1]) for j in used]
    out: dict[str, dict[str, Any]] = {}
    for s in settings:
        prof = rep.profiles.get(s.get("profile")) if s.get("profile") is not None else None
        if prof is None:
            continue
        tps = [tokens_per_step(*prof[j][:2]) for j in used]
        keep = [(n, t) for n, t in zip(lengths, tps) if t is not None]
        rho = spearman(*zip(*keep)) if len(keep) >= MIN_RESPONSES else None
        out[s["label"]] = {"spearman": rho, "responses": len(keep)}
    return out


def drafting_line(by_arm: dict[str, dict[str, Any]], label: str | None, rank_share: float = 0.0) -> str | None:
    """One terminal line: how the named arm's drafting changes with the recorded length, and how
    the run's drawn lengths (`rank_share`) take it up."""
    got = by_arm.get(label) if label else None
    if not got or got.get("spearman") is None:
        return None
    rho = got["spearman"]
    how = ("longer recorded responses draft worse" if rho < -0.05 else
           "longer recorded responses draft better" if rho > 0.05 else "drafting barely changes with length")
    drawn = (f"drawn lengths take {rank_share:g} of their rank from it (--length-rank-share)" if rank_share
             else "drawn lengths ignore it (independent of the recorded response; --length-rank-share orders them)")
    return (f"{how} ({label}: Spearman {rho:+.2f} between a response's recorded length and its tokens per step, "
            f"{got['responses']} responses); {drawn}")
