"""Per-request draft-length rules (`base.LengthRule`) of the named strategies.

- `AimdLength`: HistoSpec's additive-increase / multiplicative-decrease, here x2 / /2: start
  at `start`, double after a draft accepted whole, halve after any other, within [lo, hi].
- `BudgetByLength`: DAS's length-aware budget: a request predicted to run long (its prompt's
  earlier responses averaged at least `long_len` tokens) may draft `long_k`, others `short_k`.
- `RollingCutoff`: TensorRT-LLM's acceptance cut-off, per request: once the mean accepted
  fraction of its last `window` drafts falls below `threshold`, it drafts no more.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from samspec_bench.sam.strategies.base import LengthRule


class AimdLength(LengthRule):
    name = "aimd"

    def __init__(self, start: int = 2, lo: int = 2, hi: int = 16):
        if not 1 <= lo <= start <= hi:
            raise ValueError(f"aimd start={start}, lo={lo}, hi={hi}: need 1 <= lo <= start <= hi")
        self.start_n, self.lo, self.hi = int(start), int(lo), int(hi)

    def start(self, context=None):
        return [self.start_n]

    def length(self, state, k):
        return min(state[0], k)

    def update(self, state, drafted, accepted):
        state[0] = min(self.hi, state[0] * 2) if accepted >= drafted else max(self.lo, state[0] // 2)

    def describe(self):
        return {"name": self.name, "start": self.start_n, "lo": self.lo, "hi": self.hi}


class BudgetByLength(LengthRule):
    name = "length-budget"

    def __init__(self, short_k: int = 4, long_k: int = 16):
        if not 1 <= short_k <= long_k:
            raise ValueError(f"length budget short_k={short_k}, long_k={long_k}: need 1 <= short_k <= long_k")
        self.short_k, self.long_k = int(short_k), int(long_k)

    def start(self, context=None):
        ctx = context or {}
        pred, long_len = ctx.get("predicted_len"), ctx.get("long_len")
        return self.long_k if pred is not None and long_len is not None and pred >= long_len else self.short_k

    def length(self, state, k):
        return min(state, k)

    def describe(self):
        return {"name": self.name, "short_k": self.short_k, "long_k": self.long_k,
                "long": "the prompt's earlier responses average at least the median of that average over the step"}


class RollingCutoff(LengthRule):
    name = "rolling-cutoff"

    def __init__(self, inner: LengthRule | None = None, window: int = 8, threshold: float = 0.3):
        if window < 1 or not 0.0 <= threshold <= 1.0:
            raise ValueError(f"rolling cut-off window={window}, threshold={threshold}: window >= 1, threshold in [0, 1]")
        self.inner, self.window, self.threshold = inner, int(window), float(threshold)

    def start(self, context=None):
        return {"inner": self.inner.start(context) if self.inner else None, "recent": deque(maxlen=self.window),
                "off": False}

    def length(self, state, k):
        if state["off"]:
            return 0
        return self.inner.length(state["inner"], k) if self.inner else k

    def update(self, state, drafted, accepted):
        if self.inner:
            self.inner.update(state["inner"], drafted, accepted)
        rec = state["recent"]
        rec.append(accepted / drafted)
        if len(rec) == self.window and sum(rec) / self.window < self.threshold:
            state["off"] = True

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "window": self.window, "threshold": self.threshold,
                "inner": self.inner.describe() if self.inner else None}
