"""How alike the response lengths of one prompt are: --length-group-share.

In a GRPO rollout the n responses of one prompt have similar lengths (a hard prompt's responses
are all long; Seer, arXiv 2511.14617, schedules on exactly this). `group_share` measures it on
trace groups: the one-way ANOVA intraclass correlation of log(length), the share of the
log-length variance the responses of one prompt have in common. On the shared
qwen25math_math_100x8 trace it is about 0.79 in tokens (0.76 in characters).

Drawn lengths (config.draw_lengths) take a share R through a Gaussian copula
(`copula_normals`): response i of group g gets z = sqrt(R) g + sqrt(1 - R) e_i (standard
normals), and its length is the named distribution's quantile at Phi(z), so every response
keeps the named distribution and the log-length ICC of a lognormal is R. R = 0 draws as before
(independent lengths, the same random numbers); R = 1 gives every response of a group the
same length.

A leaf module: a replay is read by its fields (replay_arm.Replay: pairs, idx, group_size)."""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np

from samspec_bench.errors import UserError

TRACES = "traces"   # --length-group-share traces: the share measured on the replay's traces
UNIT = "tokens"     # what a replay's lengths (and so the measured share) count


def group_share(groups: Iterable[Sequence[float]]) -> dict[str, Any] | None:
    """The one-way ANOVA intraclass correlation of log(length) over the groups with >= 2
    (positive) lengths, clipped to [0, 1]: (MSB - MSW) / (MSB + (n0 - 1) MSW), n0 the
    ANOVA's mean group size for unequal groups. {"share", "groups", "responses"}; None with
    fewer than 2 such groups. Lengths with no spread at all share nothing: 0."""
    logs = [np.log(x[x > 0]) for x in (np.asarray(g, dtype=float) for g in groups)]
    logs = [x for x in logs if len(x) >= 2]
    if len(logs) < 2:
        return None
    sizes = np.array([len(x) for x in logs], dtype=float)
    k, n = len(logs), float(sizes.sum())
    grand = float(np.concatenate(logs).mean())
    msb = float(sum(len(x) * (x.mean() - grand) ** 2 for x in logs)) / (k - 1)
    msw = float(sum(((x - x.mean()) ** 2).sum() for x in logs)) / (n - k)
    n0 = (n - float((sizes ** 2).sum()) / n) / (k - 1)
    denom = msb + (n0 - 1) * msw
    share = (msb - msw) / denom if denom > 0 else 0.0
    return {"share": float(min(max(share, 0.0), 1.0)), "groups": k, "responses": int(n)}


def replay_groups(rep: Any) -> list[list[int]]:
    """The lengths (tokens as replayed: cut at --max-response-len) of the distinct trace
    responses of each prompt a replay runs (requests prompt-major, `rep.group_size` each); a
    trace group replayed by several prompts (--prompts beyond the traces' groups) counts once."""
    g, seen, out = rep.group_size, set(), []
    for p in range(len(rep.idx) // g):
        members = tuple(sorted(set(rep.idx[p * g:(p + 1) * g])))
        if members not in seen:
            seen.add(members)
            out.append([len(rep.pairs[j][1]) for j in members])
    return out


def traces_share(rep: Any) -> dict[str, Any] | None:
    """`group_share` of a replay's trace groups, with its unit; None without 2 groups of >= 2."""
    got = group_share(replay_groups(rep))
    return {**got, "unit": UNIT} if got else None


def share_used(cfg: Any, rep: Any) -> float:
    """The share a replay draws with: --length-group-share, or with `traces` the replay's own."""
    if cfg.length_group_share != TRACES:
        return float(cfg.length_group_share)
    got = traces_share(rep)
    if got is None:
        raise UserError(f"--length-group-share traces: the traces {cfg.traces} hold fewer than 2 prompts with 2 or "
                        "more responses, so no share can be measured; give a number in [0, 1]")
    return got["share"]


def copula_normals(rng: np.random.Generator, n: int, group_size: int, share: float) -> np.ndarray:
    """n standard normals, request q in group q // group_size: sqrt(share) of each one's
    variance from its group's normal (drawn first, one per group), the rest its own."""
    groups = rng.standard_normal(-(-n // max(group_size, 1)))
    own = rng.standard_normal(n)
    return math.sqrt(share) * np.repeat(groups, max(group_size, 1))[:n] + math.sqrt(1.0 - share) * own


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """Phi(z), elementwise (math.erfc: no scipy)."""
    return 0.5 * np.vectorize(math.erfc, otypes=[float])(-np.asarray(z, dtype=float) / math.sqrt(2.0))


def unread_text(share: Any, lengths: str, option: str = "--length-group-share") -> str:
    """The refusal of a --length-group-share (or --length-rank-share) where no lengths are drawn
    (config, unread_options)."""
    what = ("a prompt's responses" if option == "--length-group-share"
            else "the requests with their recorded responses' lengths")
    return (f"{option} {share}: it correlates the drawn lengths of {what}, and this run "
            f"draws none (lengths: {lengths}), so there is nothing to correlate; give a drawn --length-dist "
            "(lognormal:MEDIAN:SIGMA, pareto:MIN:ALPHA or trace), or drop it")
