"""Step switches: before each engine step, whether it speculates (any callable
(StepState) -> bool; the state's counts are read by name, so this module imports no engine),
and, for a per-step k policy, how many draft tokens a request may verify this step
(`step_k(state) -> int`, capped by the arm's k; bench/policies.py says how engines read it).

Specs (`parse_switch`): `always`; `threshold:T` (speculate while at most T requests run: the
seed's switch); `schedule:LO-HI=K;...` (vLLM's dynamic speculation `[[bs_lo, bs_hi, k], ...]`
and TensorRT-LLM's batch-size -> draft-length schedule: k per band of running requests, 0 or
no band: no speculation); `cost` (speculate at a running count only where the step model says
a draft pays: `CostSwitch`); `costk` (per-step k: at each running count the k whose step
emits the most tokens per second by the step model, Seer's and DAS's larger budgets when few
requests run, chosen by cost: `CostK`); `enginecutoff:W:T` (TensorRT-LLM's engine-wide
acceptance gate: `EngineCutoff`, fed each step's drafts through `observe_step`); `A+B`: two
or more of them together (`Both`: a step speculates when all agree, at the smallest k).
"""

from __future__ import annotations

from collections import deque
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
        ordered = sorted(self.bands)
        for (lo, hi, _), (lo2, hi2, _) in zip(ordered, ordered[1:]):
            if lo2 <= hi:   # a running count in two bands would take the first band's k silently
                raise ValueError(f"schedule bands {lo}-{hi} and {lo2}-{hi2} overlap; give each running count one band")

    def k_for(self, running: int) -> int:
        return next((k for lo, hi, k in self.bands if lo <= running <= hi), 0)

    def step_k(self, state) -> int:
        return self.k_for(state.num_running)

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


class CostK:
    """Per-step k from the running count, priced by the step model: at B running requests the k
    in 0..K whose step emits the most tokens per second, argmax_k (1 + a(k)) / t(B, B d(k))
    (a smaller k on a tie), with d(k), a(k) the arm's drafted and accepted tokens per decode
    step when its drafts are cut to k tokens (`drafted_by_k[k]`, `accepted_by_k[k]`, k = 0..K,
    from its acceptance profiles) and t(B, x) the step model's time of a decode step of B
    requests verifying x draft tokens. k = 0 at a count: no speculation there."""

    name = "costk"
    counts_only = True

    def __init__(self, step_time: Callable[[int, int], float], drafted_by_k, accepted_by_k, max_running: int):
        if len(drafted_by_k) != len(accepted_by_k) or len(drafted_by_k) < 1:
            raise ValueError("costk needs drafted and accepted tokens per step for k = 0..K")
        self.d, self.a = [float(x) for x in drafted_by_k], [float(x) for x in accepted_by_k]
        self.ks = [0]
        for b in range(1, max(int(max_running), 1) + 1):
            rate = [(1.0 + self.a[k]) / step_time(b, int(round(b * self.d[k]))) if k else 1.0 / step_time(b, 0)
                    for k in range(len(self.d))]
            self.ks.append(max(range(len(rate)), key=lambda k: (rate[k], -k)))

    def step_k(self, state) -> int:
        b = state.num_running
        return self.ks[b] if b < len(self.ks) else self.ks[-1]

    def __call__(self, state) -> bool:
        return self.step_k(state) > 0

    def bands(self) -> list[list[int]]:
        """[[lo, hi, k], ...]: the chosen k as runs of running counts (vLLM's schedule form)."""
        out: list[list[int]] = []
        for b, k in enumerate(self.ks[1:], start=1):
            if out and out[-1][2] == k:
                out[-1][1] = b
            else:
                out.append([b, b, k])
        return out

    def describe(self):
        return {"name": self.name, "bands": self.bands(), "drafted_by_k": self.d, "accepted_by_k": self.a,
                "rule": "at B running, argmax over k of (1 + accepted(k)) / t(B, B * drafted(k)), by the step model"}


class EngineCutoff:
    """TensorRT-LLM's acceptance gate (`acceptance_rate_window_size` / `_threshold`), engine-wide:
    the pooled acceptance rate of the last `window` steps that drafted (accepted draft tokens
    / drafted tokens, all requests together); once a full window's rate is below `threshold`,
    no step speculates again (permanently, as TensorRT-LLM's gate). Steps without drafts do not
    enter the window. Unlike the per-request `cutoff:W:T` (rules.RollingCutoff) one stubborn
    batch-wide slump stops every request, including ones whose own drafts were accepted.
    The engine reports each step's drafts through `observe_step` (bench/policies.py)."""

    name = "enginecutoff"
    gate = True   # it can turn speculation off for good: the run reports when (off_after_step)

    def __init__(self, window: int, threshold: float):
        if window < 1 or not 0.0 < threshold < 1.0:
            raise ValueError(f"window={window}, threshold={threshold}: need window >= 1 and 0 < threshold < 1")
        self.window, self.threshold = int(window), float(threshold)
        self.recent: deque = deque(maxlen=self.window)   # (drafted, accepted) of the last steps that drafted
        self.off_after_step: int | None = None

    @property
    def counts_only(self) -> bool:
        # once off the decision no longer depends on history, so the simulation's closed forms apply again
        return self.off_after_step is not None

    def __call__(self, state) -> bool:
        return self.off_after_step is None

    def observe_step(self, step: int, drafted: int, accepted: int) -> None:
        if self.off_after_step is not None or drafted <= 0:
            return
        self.recent.append((int(drafted), int(accepted)))
        if len(self.recent) == self.window:
            d, a = (sum(x) for x in zip(*self.recent))
            if a < self.threshold * d:
                self.off_after_step = int(step)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "window": self.window, "threshold": self.threshold,
                "off_after_step": self.off_after_step,
                "rule": "off for good once accepted / drafted over the last `window` drafting steps < threshold"}


class Both:
    """Switches combined (`A+B`, e.g. TensorRT-LLM's batch-size schedule with its acceptance gate,
    `schedule:1-8=4+enginecutoff:64:0.3`): a step speculates only when every part says so, at
    the smallest k any part with a per-step k allows; each part sees every step's drafts."""

    name = "both"

    def __init__(self, parts):
        self.parts = list(parts)
        if len(self.parts) < 2:
            raise ValueError("a combined switch needs two or more parts")
        if any(isinstance(p, Both) for p in self.parts):
            raise ValueError("combined switches do not nest")
        if any(hasattr(p, "step_k") for p in self.parts):
            self.step_k = self._step_k   # only where a part has one: no step_k means the arm's k
        self.gate = any(getattr(p, "gate", False) for p in self.parts)

    @property
    def counts_only(self) -> bool:
        return all(getattr(p, "counts_only", False) for p in self.parts)

    def __call__(self, state) -> bool:
        return all(p(state) for p in self.parts)

    def _step_k(self, state) -> int:
        return min(p.step_k(state) for p in self.parts if hasattr(p, "step_k"))

    def observe_step(self, step: int, drafted: int, accepted: int) -> None:
        for p in self.parts:
            if hasattr(p, "observe_step"):
                p.observe_step(step, drafted, accepted)

    @property
    def off_after_step(self):
        return next((p.off_after_step for p in self.parts if getattr(p, "off_after_step", None) is not None), None)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "parts": [p.describe() for p in self.parts],
                "rule": "speculates only when every part does, at the smallest per-step k of the parts"}


def parse_schedule(text: str) -> list[tuple[int, int, int]]:
    """'1-8=3;9-64=0' -> [(1, 8, 3), (9, 64, 0)]; anything else names the form."""
    bands = []
    for part in text.split(";"):
        try:
            rng, k = part.split("=")
            lo, hi = rng.split("-")
            bands.append((int(lo), int(hi), int(k)))
        except ValueError:
            raise _FormError(f"switch 'schedule:{text}': band {part!r}: use schedule:LO-HI=K;..., whole numbers, "
                             "e.g. schedule:1-8=3;9-64=0") from None
    return bands


def switch_parts(spec: str) -> list[str]:
    """The parts of a (possibly combined, `A+B`) switch spec."""
    return [part.strip() for part in spec.split("+")]


def switch_threshold(spec: str) -> int | None:
    """The running count at or below which a switch spec may speculate by its `threshold:T`
    parts (the smallest where several are combined, as all must agree); None without one."""
    ts = [int(p.partition(":")[2]) for p in switch_parts(spec) if p.partition(":")[0] == "threshold"]
    return min(ts) if ts else None


def needs_cost(spec: str) -> bool:
    """Whether a switch spec prices its steps (`cost`, `costk`): it needs a step model."""
    return any(p in ("cost", "costk") for p in switch_parts(spec))


def _threshold(spec: str, arg: str) -> int:
    try:
        return int(arg)
    except ValueError:
        raise _FormError(f"switch {spec!r}: use threshold:T, T a whole number of running requests, e.g. "
                         "threshold:8") from None


def _window_threshold(spec: str, arg: str) -> tuple[int, float]:
    """'8:0.3' -> (8, 0.3); anything else names the form (raised past parse_switch's wrapper)."""
    w, _, t = arg.partition(":")
    try:
        return int(w), float(t)
    except ValueError:
        raise _FormError(f"switch {spec!r}: use enginecutoff:WINDOW:THRESHOLD, e.g. enginecutoff:8:0.3") from None


class _FormError(ValueError):
    pass


def parse_switch(spec: str, cost: Callable[[str], Any] | None = None):
    """A fresh switch for a spec (see the module docstring); `cost(kind)` builds the cost
    switches, kind 'cost' or 'costk' (they need the step model and the arm's acceptance)."""
    if "+" in spec:
        parts = [parse_switch(part, cost) for part in switch_parts(spec)]
        try:
            return Both(parts)
        except ValueError as e:
            raise ValueError(f"switch {spec!r}: {e}") from None
    kind, _, arg = spec.partition(":")
    try:
        if kind == "always":
            return Always()
        if kind == "threshold":
            return Threshold(_threshold(spec, arg))
        if kind == "schedule":
            return BatchSchedule(parse_schedule(arg))
        if kind == "enginecutoff":
            return EngineCutoff(*_window_threshold(spec, arg))
    except _FormError:
        raise
    except ValueError as e:
        raise ValueError(f"switch {spec!r}: {e}") from None
    if kind in ("cost", "costk") and not arg:
        if cost is None:
            raise ValueError(f"switch {kind!r} needs a step model (give --step-model)")
        return cost(kind)
    raise ValueError(f"switch {spec!r}: use always, threshold:T, schedule:LO-HI=K;..., cost, costk or "
                     "enginecutoff:WINDOW:THRESHOLD, or two of them joined by + (both must agree)")
