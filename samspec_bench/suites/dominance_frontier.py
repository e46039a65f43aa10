"""The default policy at one fixed cost matched to an anchor's spending (`dominance --anchors
--frontier`): the question the budgeted default cannot answer on its own, whether the policy
drafts better tokens at the anchor's spending or only its online budget paces worse.

The evidence policy drafts a token while the estimated chance that it and the tokens before it
are accepted is at least `cost`; one cost for the whole run is a point on the policy's curve of
tokens per step against drafted tokens per step. The search finds the lowest cost whose pooled
drafted tokens per step are at most the anchor's: bisection over [0, MAX_COST], every point a
full replay, reading only the drafted tokens of each (never the tokens per step it compares), and
it keeps only a point that met the spending, so the bound holds by construction even where the
drafted tokens are not monotone in the cost. This is an offline calibration of one number, as a
user sets `evidence:cost=C` for a verify budget (or as the last RL step's responses could be
replayed between steps); the budgeted default is the online form.
"""

from __future__ import annotations

from typing import Callable

from samspec_bench.bench.draft_config import DraftConfig, strategy_config
from samspec_bench.sam.draft_budget import MAX_COST

HALVINGS = 8   # the cost to within 0.99 / 2^8 = 0.004 (about 2 % of the default cost 0.215)


def fixed_cost_config(k: int, sources: str, cost: float, policy: str = "evidence") -> DraftConfig:
    """The default policy at k on `sources` with its cost fixed at `cost` (the strategy spec's
    `:cost=C`, exact: repr of the float)."""
    return strategy_config(f"{policy}:k={k}:cost={cost!r}@{sources}")


def cost_at_spend(replay_at: Callable[[float], dict], spend: float, halvings: int = HALVINGS) -> dict:
    """The lowest cost (within the bisection's step) whose replay drafts at most `spend` tokens per
    step: {"cost", "metrics" (that replay's; None when even MAX_COST drafts more), "tried":
    [[cost, drafted per step], ...]}. Cost 0 (the most drafting) is tried first and kept when it
    is within the spending."""
    tried: list[list[float]] = []

    def drafted(cost: float) -> tuple[float, dict]:
        m = replay_at(cost)
        tried.append([cost, m["drafted_per_step"]])
        return m["drafted_per_step"], m

    d0, m0 = drafted(0.0)
    if d0 <= spend:
        return {"cost": 0.0, "metrics": m0, "tried": tried}
    lo, hi, best = 0.0, MAX_COST, None
    for _ in range(halvings):
        mid = (lo + hi) / 2
        d, m = drafted(mid)
        if d <= spend:
            hi, best = mid, m
        else:
            lo = mid
    if best is None:   # every midpoint overspent: the top of the range, or nothing
        d, m = drafted(MAX_COST)
        best = m if d <= spend else None
    return {"cost": hi if best is not None else None, "metrics": best, "tried": tried}


def frontier_point(k: int, sources: str, spend: float, replay: Callable[[list, int], dict], window: int) -> dict:
    """The default at k on `sources` at the fixed cost that spends at most `spend` (one replay
    of every RL step per point tried)."""
    return cost_at_spend(lambda cost: replay([(fixed_cost_config(k, sources, cost), None)], window), spend)
