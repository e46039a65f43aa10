"""How sure a dominance cell is, and what it shows outside its dev split.

A cell's margin (SAM minus the anchor, in tokens per step and in drafted tokens per step) is a
ratio of sums over the trace's responses, and responses to one prompt are alike. Its interval
is a paired percentile bootstrap over prompt groups: a resample draws groups with replacement,
sums both drafters' counts over them (the same groups for both: paired) and takes the two
margins. The interval shows how much the margin moves with the prompts a trace happens to
hold; it does not cover what the replay order adds (a shared acceptance record learns from
earlier groups, and a resample keeps each group's counts as replayed in order).

`--dev-share F` splits each trace: the first round(F x groups) prompt groups in file order are
the dev side (where choices were made), the rest held out. Every unit is still replayed in file
order (a shared record learns from both sides, as one serving proposer would); the counts are
then summed per side.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Hashable, Sequence

import numpy as np

from samspec_bench.dev_split import dev_count
from samspec_bench.metrics import AcceptanceCounts

RESAMPLES = 2000
LEVEL = 0.95
SEED = 0   # fixed: a cell's interval is the same every run
UNIT = "prompt group"


def cluster_sums(counts: Sequence[AcceptanceCounts], clusters: Sequence[Hashable],
                 keep: set | None = None) -> np.ndarray:
    """Per prompt group (first-seen order), the units' (tokens, steps, drafted) summed; only the
    groups in `keep` when given."""
    sums: "OrderedDict[Hashable, list[int]]" = OrderedDict()
    for c, key in zip(counts, clusters):
        if keep is not None and key not in keep:
            continue
        s = sums.setdefault(key, [0, 0, 0])
        s[0] += c.tokens
        s[1] += c.steps
        s[2] += c.drafted
    return np.asarray(list(sums.values()), dtype=np.float64).reshape(-1, 3)


def _quantiles(x: np.ndarray, level: float) -> list[float] | None:
    x = x[np.isfinite(x)]
    if not x.size:
        return None
    lo, hi = np.quantile(x, [(1 - level) / 2, 1 - (1 - level) / 2])
    return [float(lo), float(hi)]


def margin_interval(sam: np.ndarray, anchor: np.ndarray, resamples: int = RESAMPLES, level: float = LEVEL,
                    seed: int = SEED) -> dict:
    """The paired bootstrap of SAM minus the anchor over prompt groups (rows of `cluster_sums`,
    the same groups in the same order for both). `holds`: the whole interval is on SAM's side
    (tokens per step >= 0 and drafted tokens per step <= 0), as the point dominance is read;
    `dominating_share`: the share of resamples in which SAM dominates."""
    sam, anchor = np.asarray(sam, dtype=np.float64), np.asarray(anchor, dtype=np.float64)
    if sam.shape != anchor.shape:
        raise ValueError(f"paired counts differ in shape: {sam.shape} against {anchor.shape}")
    n = len(sam)
    out: dict = {"unit": UNIT, "groups": n, "resamples": resamples, "level": level, "seed": seed}
    if n < 2:
        return {**out, "tokens_per_step_diff": None, "drafted_per_step_diff": None, "dominating_share": None,
                "holds": None, "note": f"{n} prompt group(s): no interval"}
    weights = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)
    s, a = weights @ sam, weights @ anchor
    with np.errstate(divide="ignore", invalid="ignore"):   # a resample of groups without steps: left out, counted
        tokens = s[:, 0] / s[:, 1] - a[:, 0] / a[:, 1]
        drafted = s[:, 2] / s[:, 1] - a[:, 2] / a[:, 1]
    ok = np.isfinite(tokens) & np.isfinite(drafted)
    t_iv, d_iv = _quantiles(tokens[ok], level), _quantiles(drafted[ok], level)
    holds = None if t_iv is None or d_iv is None else bool(t_iv[0] >= 0 and d_iv[1] <= 0)
    share = float(np.mean((tokens[ok] >= 0) & (drafted[ok] <= 0))) if ok.any() else None
    return {**out, "tokens_per_step_diff": t_iv, "drafted_per_step_diff": d_iv, "dominating_share": share,
            "holds": holds, "resamples_without_steps": int((~ok).sum())}


def dev_groups(clusters: Sequence[Hashable], share: float) -> set:
    """The dev side of `--dev-share`: the first round(share x groups) prompt groups in file order,
    at least one and at most all but one (a trace of one group has no held-out side: empty)."""
    order = list(OrderedDict.fromkeys(clusters))
    if len(order) < 2:
        return set()
    return set(order[:dev_count(len(order), share)])


def summary(counts: AcceptanceCounts) -> dict:
    """A drafter's figures in a cell row (counts, not time)."""
    return {"tokens_per_step": counts.tokens_per_step, "drafted_per_step": counts.drafted_per_step,
            "verify_tokens_per_token": counts.verify_tokens_per_token, "acceptance_rate": counts.acceptance_rate,
            "steps": counts.steps}


def side_summary(counts: Sequence[AcceptanceCounts], clusters: Sequence[Hashable], keep: set) -> dict:
    """`summary` of the units whose prompt group is in `keep`."""
    total = AcceptanceCounts()
    for c, key in zip(counts, clusters):
        if key in keep:
            total = total + c
    return summary(total)


def fmt_interval(iv: dict | None) -> str:
    """' [lo, hi]' of the tokens-per-step margin for the terminal row, '' without one."""
    if not iv or not iv.get("tokens_per_step_diff"):
        return ""
    lo, hi = iv["tokens_per_step_diff"]
    dlo, dhi = iv["drafted_per_step_diff"]
    return f"   margin {lo:+.3f}..{hi:+.3f} tok, {dlo:+.3f}..{dhi:+.3f} drafted ({iv['level']:.0%}, {iv['groups']} groups)"
