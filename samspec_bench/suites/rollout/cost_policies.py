"""The step policies a simulated arm prices with the run's step model: the cost switch (`cost`:
speculate at a running count only where a draft pays) and the per-step k (`costk`: at each
running count the k whose step emits the most tokens per second), both from the arm's own
acceptance profiles (sam/strategies/switches.py holds the rules; this module feeds them)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.sam.strategies.switches import CostK, CostSwitch


def acceptance_by_k(profiles: list, k_max: int) -> tuple[list[float], list[float]]:
    """Drafted and accepted tokens per decode position when every draft is cut to k tokens, for
    k = 0..k_max: sum over positions of min(drafted, k) and min(accepted, k), over the decode
    positions (a response's positions past its first token)."""
    pos = sum(max(len(d) - 1, 0) for d, _ in profiles) or 1
    d_all = np.concatenate([np.asarray(d, dtype=np.int64) for d, _ in profiles]) if profiles else np.zeros(0, int)
    a_all = np.concatenate([np.asarray(a, dtype=np.int64) for _, a in profiles]) if profiles else np.zeros(0, int)
    a_all = np.minimum(a_all, d_all)
    return ([float(np.minimum(d_all, k).sum()) / pos for k in range(k_max + 1)],
            [float(np.minimum(a_all, k).sum()) / pos for k in range(k_max + 1)])


def decode_step_time(step_model: StepTimeModel, context_per_request: float) -> Callable[[int, int], float]:
    """t(B, drafts): the step model's time of a decode step of B requests verifying `drafts`
    draft tokens, each request at `context_per_request` tokens of context."""
    def step_time(b: int, drafts: int) -> float:
        return float(step_model.predict(running=b, prefill_tokens=0, decode_tokens=b, draft_tokens=drafts,
                                        context_tokens=int(b * context_per_request), spec_requests=b if drafts else 0,
                                        speculative=int(drafts > 0)))
    return step_time


def cost_switch(rep: Any, key, lengths: np.ndarray, step_model: StepTimeModel, max_num_seqs: int,
                k_max: int | None = None) -> Callable[[str], Any]:
    """A factory of an arm's cost policies (`build(kind)`, kind 'cost' or 'costk'), the arm
    reading profiles `key` of `rep` (replay_arm.Replay) at most `k_max` tokens a step (default:
    the longest draft of its profiles); a decode step's context at the mean prompt plus half the
    mean response."""
    prof = rep.profiles[key]
    k_max = k_max if k_max is not None else max((int(np.max(d)) for d, _ in prof if len(d)), default=0)
    d_by_k, a_by_k = acceptance_by_k(prof, k_max)
    ctx = float(np.mean([len(p) for p, _ in rep.pairs])) + float(np.mean(lengths)) / 2
    step_time = decode_step_time(step_model, ctx)
    most = max(min(int(max_num_seqs), len(rep.idx)), 1)   # no instance runs more than the run's requests
    built: dict[str, Any] = {}

    def build(kind: str = "cost"):
        # the policies hold no per-run state: one per kind serves every instance
        if kind not in built:
            built[kind] = (CostK(step_time, d_by_k, a_by_k, most) if kind == "costk"
                           else CostSwitch(step_time, d_by_k[-1], a_by_k[-1], most))
        return built[kind]
    return build
