"""Step switches: before each engine step, whether it speculates (any callable
(StepState) -> bool; the state's counts are read by name, so this module imports no engine).

Specs (`parse_switch`): `always`; `threshold:T` (speculate while at most T requests run: the
seed's switch); `schedule:LO-HI=K;...` (vLLM's dynamic speculation `[[bs_lo, bs_hi, k], ...]`
and TensorRT-LLM's batch-size -> draft-length schedule: speculate in a band whose k > 0);
`cost` (speculate at a running count only where the step model says a draft pays:
`CostSwitch`). A band's k caps the draft length only where the engine takes a per-step k; the
rollout simulation prices one k per arm (the strategy's), so there a schedule switches only.
"""

from __future__ import annotations

from typing import Any, Callable


class Threshold:
    name = "threshold"
    counts_only = True

    def __init__(self, threshold: int):
        if threshold < 0:
            raise ValueError(f"threshold {threshold}: must be >= 0")
        self.threshold = int(threshold)

    def __call__(self, state) -> bool:
        return state.num_running <= self.threshold

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "threshold": self.threshold}


class Always(Threshold):
    name = "always"

    def __init__(self):
        super().__init__(1 << 30)

    def describe(self):
        return {"name": self.name}


class BatchSchedule:
    """[(lo, hi, k), ...]: at lo <= running <= hi the draft length is k (0: no speculation);
    outside every band, no speculation."""

    name = "schedule"
    counts_only = True

    def __init__(self, bands):
        self.bands = [(int(lo), int(hi), int(k)) for lo, hi, k in bands]
        for lo, hi, k in self.bands:
            if not (1 <= lo <= hi) or k < 0:
                raise ValueError(f"schedule band {lo}-{hi}={k}: need 1 <= lo <= hi and k >= 0")

    def k_for(self, running: int) -> int:
        return next((k for lo, hi, k in self.bands if lo <= running <= hi), 0)

    def __call__(self, state) -> bool:
        return self.k_for(state.num_running) > 0

    def describe(self):
        return {"name": self.name, "bands": [list(b) for b in self.bands]}


class CostSwitch:
    """Speculate at B running requests where a step that verifies the drafts pays for itself:
    with d drafted and a accepted tokens per request and decode step (the arm's acceptance
    profiles), t(B, B d drafts) < (1 + a) t(B, 0), i.e. the step emits its extra tokens for
    less than they would cost as decode steps. `step_time(B, drafts)`: the step model's time
    of a decode step of B requests (context per request fixed by whoever builds it)."""

    name = "cost"
    counts_only = True

    def __init__(self, step_time: Callable[[int, int], float], drafted_per_step: float, accepted_per_step: float,
                 max_running: int):
        self.d, self.a = float(drafted_per_step), float(accepted_per_step)
        self.pays = [False] + [step_time(b, int(round(b * self.d))) < (1.0 + self.a) * step_time(b, 0)
                               for b in range(1, max(int(max_running), 1) + 1)]

    def __call__(self, state) -> bool:
        b = state.num_running
        return self.pays[b] if b < len(self.pays) else self.pays[-1]

    def describe(self):
        on = [b for b, p in enumerate(self.pays) if p]
        return {"name": self.name, "drafted_per_step": self.d, "accepted_per_step": self.a,
                "speculates_at_running": (f"{min(on)}..{max(on)}" + ("" if len(on) == max(on) else " (not all)"))
                if on else "never",
                "rule": "t(B, B * drafted per step) < (1 + accepted per step) * t(B, 0), by the step model"}


def parse_schedule(text: str) -> list[tuple[int, int, int]]:
    """'1-8=3;9-64=0' -> [(1, 8, 3), (9, 64, 0)]."""
    bands = []
    for part in text.split(";"):
        rng, k = part.split("=")
        lo, hi = rng.split("-")
        bands.append((int(lo), int(hi), int(k)))
    return bands


def parse_switch(spec: str, cost: Callable[[], CostSwitch] | None = None):
    """A fresh switch for a spec (see the module docstring); `cost` builds the cost switch
    (it needs the step model and the arm's acceptance)."""
    kind, _, arg = spec.partition(":")
    try:
        if kind == "always":
            return Always()
        if kind == "threshold":
            return Threshold(int(arg))
        if kind == "schedule":
            return BatchSchedule(parse_schedule(arg))
    except ValueError as e:
        raise ValueError(f"switch {spec!r}: {e}") from None
    if kind == "cost":
        if cost is None:
            raise ValueError("switch 'cost' needs a step model (give --step-model)")
        return cost()
    raise ValueError(f"switch {spec!r}: use always, threshold:T, schedule:LO-HI=K;... or cost")
