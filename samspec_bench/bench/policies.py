"""Speculation policies: before each engine step, decide whether the step speculates.

One home for the rule every engine and the rollout simulation apply: the reference and vLLM
engines take a policy in `generate(spec_policy=...)`, the simulation in `simulate(policy=...)`.
Any callable `(StepState) -> bool` works; these classes add a `describe()` for results and
`counts_only` (the decision depends on the counts alone, not the step index), which lets
the simulation fast-forward long stretches in closed form.

A policy may also choose the step's draft length: `step_k(StepState) -> int`, the most draft
tokens a request verifies this step (the simulation caps it by the arm's k; 0 = no
speculation). The batch schedule and the cost rule's per-step k (sam/strategies/switches.py)
have one; the reference and vLLM engines read only the on / off decision.

A policy may learn from the steps it let through: `observe_step(step, drafted, accepted)`,
called by the reference engine and the simulation after every step with the step's drafted
and accepted draft tokens (the engine-wide cut-off, switches.EngineCutoff). Such a policy
depends on history, so it reports `counts_only` False until its decision is fixed (the
simulation reads it before every step and steps one by one meanwhile).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from samspec_bench.sam.strategies.switches import Threshold


@dataclass(frozen=True)
class StepState:
    """What a policy sees before a step is scheduled."""

    step: int
    num_running: int     # requests admitted and not finished
    num_waiting: int     # requests not admitted yet
    num_decoding: int    # running requests past their prefill (the ones that would draft)


class SpecPolicy:
    """Decides, step by step, whether the step speculates. Any callable
    `(StepState) -> bool` works too. This default always speculates."""

    name = "always"

    def __call__(self, state: StepState) -> bool:
        return True

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class NeverSpeculate(SpecPolicy):
    name = "never"
    counts_only = True

    def __call__(self, state: StepState) -> bool:
        return False


def describe_policy(policy: Callable[[StepState], bool] | None) -> dict[str, Any] | None:
    if policy is None:
        return None
    if hasattr(policy, "describe"):
        return policy.describe()
    return {"name": getattr(policy, "__name__", type(policy).__name__)}


class ThresholdPolicy(Threshold, SpecPolicy):
    """Speculate when the number of running requests is at most `threshold` (the seed's
    adaptive switch). Decided on the state before the step (running = admitted, unfinished).
    The rule is the drafting library's `Threshold` switch: one definition for engines,
    simulation and strategies."""


class AlwaysPolicy(SpecPolicy):
    name = "always"
    counts_only = True


OffPolicy = NeverSpeculate  # the rollout arm's name for it


def make_policy(arm: str, threshold: int | None = None) -> SpecPolicy:
    if arm == "off":
        return OffPolicy()
    if arm == "always":
        return AlwaysPolicy()
    if arm == "threshold":
        if threshold is None:
            raise ValueError("the threshold arm needs a threshold")
        return ThresholdPolicy(threshold)
    raise ValueError(f"arm {arm!r}: use off, always or threshold")
