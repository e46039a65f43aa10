"""Where a speculative arm's wall time goes, modelled from measured step costs.

A vLLM engine step costs about a + b x (tokens it verifies): a fixed part (weights read,
scheduling, sampling) and b per verified position (a request's row plus its draft tokens).
`verify_cost` (proposer_timing.py) fits a and b over an arm's measured steps (the comparison
uses the medians of its drafting arms' fits). With the step
counts of a generate call (engine steps S, verified positions V = request decode steps +
drafted tokens, of them `rejected` drafted tokens the target refused), the call's wall time
is modelled as S a + V b, and the arm's speed-up over a baseline without drafts (S0 engine
steps, V0 = its decode steps) as

    as counted:        (S0 a + V0 b) / (S a + V b)
    exact drafts:      (S0 a + V0 b) / (S a + (V - rejected) b)   every drafted token accepted
    free verification: S0 / S                                     b = 0 (a verifier whose extra
                                                                  positions cost nothing)

The three tell a user what limits the arm on their hardware: the gap between the measured
ratio and "as counted" is what the linear step model misses (noise, overheads), the gap to
"exact drafts" is the price of rejected draft tokens (draft precision), and "free
verification" is the ceiling of the engine-step count alone (a memory-bound GPU step comes
close to it). Modelled figures, never measured ones. Pure Python, no vLLM import.
"""

from __future__ import annotations

from typing import Any

SOURCE = ("modelled: step time = a + b x verified tokens (a, b fitted from measured step intervals), "
          "step counts of the last repeat")


def modelled_ratios(a_ms: float, b_ms: float, base_steps: int, base_verified: int, steps: int,
                    verified: int, rejected: int) -> dict[str, Any] | None:
    """The three modelled speed-ups of the module docstring; None when the fit or the counts
    cannot give them (a < 0, b < 0, no steps)."""
    if a_ms is None or b_ms is None or a_ms < 0 or b_ms < 0 or steps <= 0 or base_steps <= 0:
        return None
    base = base_steps * a_ms + base_verified * b_ms
    counted = steps * a_ms + verified * b_ms
    exact = steps * a_ms + (verified - rejected) * b_ms
    if counted <= 0 or exact <= 0:
        return None
    return {"as_counted": base / counted, "exact_drafts": base / exact, "free_verification": base_steps / steps,
            "fixed_ms": a_ms, "ms_per_verified_token": b_ms, "unit": "x", "source": SOURCE}
