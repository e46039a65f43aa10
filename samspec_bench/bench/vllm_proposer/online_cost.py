"""A draft token's verify cost, fitted online from the engine's own step times.

The evidence draft-length policy proposes token i while P(tokens 1..i accepted) >= cost,
where cost is the marginal time of one more verified token relative to a decode step
(docs/drafting.md). The SAM proposer inside vLLM is called once per engine step, so it sees
every step's wall time (the interval between its calls) and what the step verified (the
batch's rows plus the draft tokens it proposed at the previous call). It fits

    step time = a + b * verified tokens

with exponentially decayed least squares (five running sums: bounded memory, recent steps
weigh more as the batch and the machine change) and turns the fit into the policy's cost
at the current batch of r rows. The engine emits E tokens per step S = a + b V (V verified);
one more draft token adds b to the step and, accepted with probability p, p tokens, so it
raises tokens per second when p >= b E / S: cost = b r t / (a + b r v), with t the tokens
each row emitted per step and v the tokens each row verified per step (decayed means of the
same steps; the step the policy drafts into is priced at its current drafting level). With
no drafting yet (t = v = 1) this is b r / (a + b r), as `proposer_timing.verify_cost` fits
offline. Guards:

- warm-up: the default cost until `warmup` steps are seen; those steps are fitted once,
  with residuals beyond 3 median absolute deviations dropped, to start the running sums;
- outliers (a pause, another process on the core): after warm-up a step time is clipped to
  the prediction +- `clip` running mean absolute residuals (at least a quarter of the
  predicted step, so that a lasting change of the machine still moves the fit) before it
  enters the sums;
- identifiability: the cost is updated only while the decayed variance of the verified
  tokens is at least `min_var` (a policy that stopped drafting gives no slope; the last
  fitted cost is kept);
- the cost is clipped to [0, max_cost] (max_cost < 1: at 1 no draft token pays).

Pure Python, no vLLM import: tested with synthetic step times.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from samspec_bench.sam.draft_length import DEFAULT_COST


class OnlineDraftCost:
    """See the module docstring. `observe(interval_s, rows, verified)` per engine step whose
    rows were all decoding and unchanged since the previous step; `cost` is the value the
    policy should use now."""

    def __init__(self, default: float = DEFAULT_COST, half_life: float = 128.0, warmup: int = 32,
                 min_var: float = 0.25, clip: float = 4.0, max_cost: float = 0.95):
        if not 0.0 <= default < 1.0 or not 0.0 < max_cost < 1.0:
            raise ValueError("default and max_cost must lie in [0, 1)")
        if half_life <= 0 or warmup < 3:
            raise ValueError("half_life must be > 0 and warmup >= 3")
        self.default = float(default)
        self.decay = 0.5 ** (1.0 / half_life)
        self.half_life = float(half_life)
        self.warmup = int(warmup)
        self.min_var = float(min_var)
        self.clip = float(clip)
        self.max_cost = float(max_cost)
        self.cost = self.default
        self.steps = 0                 # steps observed
        self.clipped = 0               # step times clipped as outliers
        self.updates = 0               # times the cost was re-fitted
        self.rows = 0                  # rows of the latest step (the batch the cost is for)
        self._buf: list[tuple[float, float]] | None = []   # warm-up steps; None once warm
        self._s = [0.0] * 5            # decayed sums: w, w x, w y, w x^2, w x y
        self._scale = 0.0              # decayed mean absolute residual (s)
        self._ab: tuple[float, float] | None = None
        self._per_row = [0.0, 0.0, 0.0]  # decayed sums: w, w emitted / rows, w verified / rows

    @property
    def warm(self) -> bool:
        return self._buf is None

    def fit(self) -> tuple[float, float] | None:
        """(a seconds, b seconds per verified token) of the decayed fit; None without spread."""
        w, sx, sy, sxx, sxy = self._s
        if w <= 0:
            return None
        mx, my = sx / w, sy / w
        var = sxx / w - mx * mx
        if var < self.min_var:
            return None
        b = (sxy / w - mx * my) / var
        return my - b * mx, b

    def observe(self, interval_s: float, rows: int, verified: int, emitted: int | None = None) -> float:
        """One engine step: its wall time (s), its decode rows, the tokens it verified (rows +
        draft tokens) and emitted (rows + accepted; None: not known, taken as rows). Returns
        the cost to use from now on."""
        emitted = rows if emitted is None else emitted
        if rows <= 0 or not math.isfinite(interval_s) or interval_s <= 0 or verified < rows \
                or not rows <= emitted <= verified:
            return self.cost
        self.steps += 1
        self.rows = int(rows)
        d = self.decay   # per-row means of the steps seen: what one row emits and verifies
        self._per_row = [d * self._per_row[0] + 1.0, d * self._per_row[1] + emitted / rows,
                         d * self._per_row[2] + verified / rows]
        x, y = float(verified), float(interval_s)
        if self._buf is not None:
            self._buf.append((x, y))
            if len(self._buf) >= self.warmup:
                self._start(self._buf)
                self._buf = None
                self._refit()
            return self.cost
        a, b = self._ab if self._ab is not None else (self._s[2] / self._s[0], 0.0)
        pred = a + b * x
        # the floor (a quarter of the predicted step) lets a real change of the machine through
        lim = max(self.clip * self._scale, 0.25 * abs(pred))
        if lim > 0:
            if abs(y - pred) > lim:
                y = pred + math.copysign(lim, y - pred)
                self.clipped += 1
        self._scale = self.decay * self._scale + (1 - self.decay) * abs(y - pred)
        self._add(x, y)
        self._refit()
        return self.cost

    def _add(self, x: float, y: float) -> None:
        d, s = self.decay, self._s
        s[0] = d * s[0] + 1.0
        s[1] = d * s[1] + x
        s[2] = d * s[2] + y
        s[3] = d * s[3] + x * x
        s[4] = d * s[4] + x * y

    def _start(self, pts: list[tuple[float, float]]) -> None:
        """Warm-up: one least-squares fit, drop residuals beyond 3 MADs, start the sums from
        the rest (in arrival order, so the decay weighs them as if seen one by one)."""
        xs, ys = [x for x, _ in pts], [y for _, y in pts]
        a, b = least_squares(xs, ys) or (statistics.fmean(ys), 0.0)   # no spread: a flat line
        res = [y - (a + b * x) for x, y in pts]
        mad = max(statistics.median([abs(r) for r in res]), 1e-9 * statistics.fmean(abs(y) for _, y in pts))
        kept = [p for p, r in zip(pts, res) if abs(r) <= 3 * 1.4826 * mad]
        self.clipped += len(pts) - len(kept)
        for x, y in kept:
            self._add(x, y)
        self._scale = statistics.median([abs(r) for r in res if abs(r) <= 3 * 1.4826 * mad] or [0.0])

    def _refit(self) -> None:
        ab = self.fit()
        if ab is None:
            return   # no spread in the verified tokens: keep the last cost
        self._ab = ab
        cost = draft_token_cost(*ab, self.rows, *self.per_row())
        if cost is None:
            return
        self.cost = min(max(cost, 0.0), self.max_cost)
        self.updates += 1

    def per_row(self) -> tuple[float, float]:
        """(tokens emitted, tokens verified) per row per step: decayed means; (1, 1) before any step."""
        w, e, v = self._per_row
        return (e / w, v / w) if w > 0 else (1.0, 1.0)

    def describe(self) -> dict[str, Any]:
        a, b = self._ab if self._ab is not None else (None, None)
        emitted, verified = self.per_row()
        return {"cost": self.cost, "unit": "decode steps per draft token",
                "source": "fitted online: step interval (measured) = a + b * verified tokens, decayed least squares",
                "warm": self.warm, "steps": self.steps, "updates": self.updates, "clipped_steps": self.clipped,
                "fixed_ms": None if a is None else 1e3 * a, "ms_per_verified_token": None if b is None else 1e3 * b,
                "rows": self.rows, "emitted_per_row_step": emitted, "verified_per_row_step": verified,
                "default": self.default, "half_life_steps": self.half_life,
                "warmup_steps": self.warmup, "max_cost": self.max_cost}


def least_squares(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """(intercept, slope) of the ordinary least-squares line; None when the x do not vary."""
    try:
        slope, intercept = statistics.linear_regression(xs, ys)
    except statistics.StatisticsError:
        return None
    return intercept, slope


def draft_token_cost(a: float, b: float, rows: int, emitted: float = 1.0, verified: float = 1.0) -> float | None:
    """A draft token's verify cost in decode steps (the acceptance probability at which it
    pays), from step time = a + b * verified tokens at `rows` decode rows, each row emitting
    `emitted` and verifying `verified` tokens per step: b * rows * emitted / (a + b * rows *
    verified); without drafting b * rows / (a + b * rows)."""
    step = a + b * rows * verified
    return b * rows * emitted / step if step > 0 else None
