"""Per-row draft cost when the batch drains: only the request that finishes last sets the wall.

A batch that ends when its last request ends (an RL rollout step, a benchmark's generate
call) gains wall time from an accepted draft token only on the request that will finish
last (the critical one): each of its accepted tokens saves about one engine step at the end
of the batch (a + b v, a lone row verifying v tokens). An accepted token on any other row only
shortens that row's life, saving its own verify slots in later steps (b v per step it no
longer runs). With step time = a + b x verified tokens, a row emitting t tokens per step and
verifying v, critical with probability P, one more draft token (cost b) pays when its
acceptance probability p satisfies

    p >= t / (v + P a / b)

With P = 1 / rows (no row known to be critical) this is the batch throughput cost of
`online_cost.draft_token_cost`, b r t / (a + b r v): the two agree when nothing tells the rows
apart. Which row is critical: each row's remaining decode steps if it runs to its max_tokens,
R = (max_tokens - emitted) / t (an upper bound: a stop token may end it sooner), turned into
P by a softmax over the rows with temperature `TEMPERATURE` x the largest R plus
`MIN_TEMPERATURE` steps (early on the rows' R are alike and P stays near uniform).

Only for a draining batch: while requests wait for a slot, every row's tokens free a slot as
soon (throughput), so the engine uses the batch cost there. Pure Python, no vLLM import.
"""

from __future__ import annotations

import math
from typing import Sequence

TEMPERATURE = 0.1        # softmax temperature, as a fraction of the largest remaining steps
MIN_TEMPERATURE = 4.0    # ... plus this many steps


def critical_probabilities(remaining_steps: Sequence[float]) -> list[float]:
    """P(row finishes last) from each row's remaining decode steps (softmax, see the module)."""
    if not remaining_steps:
        return []
    top = max(remaining_steps)
    temp = TEMPERATURE * max(top, 0.0) + MIN_TEMPERATURE
    ws = [math.exp((r - top) / temp) for r in remaining_steps]
    total = sum(ws)
    return [w / total for w in ws]


def row_costs(a: float, b: float, rows: Sequence[tuple[float, float, float]],
              max_cost: float = 0.95) -> list[float] | None:
    """Each row's draft token cost (decode steps) from the step fit (a s, b s per verified
    token) and per row (remaining tokens to its max_tokens, tokens emitted per step, tokens
    verified per step). None when the fit cannot price a draft (b <= 0 or a < 0)."""
    if b <= 0 or a < 0 or not rows:
        return None
    remaining = [max(rem, 0.0) / max(t, 1e-9) for rem, t, _ in rows]
    probs = critical_probabilities(remaining)
    return [min(max(t / (v + p * a / b), 0.0), max_cost) for (_, t, v), p in zip(rows, probs)]
