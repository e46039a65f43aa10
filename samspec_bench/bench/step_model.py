"""Step-time model for rollout simulation: the wall time of one engine step as a linear
function of the batch, fitted by least squares on a measured engine profile.

    t_step = c0 + c_running * running + c_tokens * scheduled_tokens
             + c_context * context_tokens + c_spec * speculative

`running` = requests in the step's batch, `scheduled_tokens` = query tokens of the forward
(prefill + decode + draft tokens), `context_tokens` = KV tokens the step attends over
(before the step), `speculative` = 1 when the step verified drafts. Features whose column
is constant (or absent) in the profile are left out of the fit (coefficient 0) and listed in
`dropped`, so a profile without speculation cannot invent a speculation cost.
Negative coefficients are clipped to 0 by refitting without them (times cannot fall with
more work). Saved as JSON (`save` / `load`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

FEATURES = ("running", "scheduled_tokens", "context_tokens", "speculative")
FORMAT = 1


@dataclass
class StepTimeModel:
    intercept: float
    coef: dict[str, float]
    dropped: list[str] = field(default_factory=list)
    fit: dict[str, Any] = field(default_factory=dict)   # n, r2, mean abs error, source

    def predict(self, running, scheduled_tokens, context_tokens=0, speculative=0):
        """Step time(s) in seconds; arguments are scalars or numpy arrays."""
        c = self.coef
        t = (self.intercept + c.get("running", 0.0) * np.asarray(running, dtype=float)
             + c.get("scheduled_tokens", 0.0) * np.asarray(scheduled_tokens, dtype=float)
             + c.get("context_tokens", 0.0) * np.asarray(context_tokens, dtype=float)
             + c.get("speculative", 0.0) * np.asarray(speculative, dtype=float))
        return np.maximum(t, 0.0) if np.ndim(t) else float(max(t, 0.0))

    @classmethod
    def constant(cls, seconds: float = 1.0) -> "StepTimeModel":
        """Every step takes `seconds` (makes the simulated time a step count)."""
        return cls(float(seconds), {f: 0.0 for f in FEATURES}, fit={"source": "constant"})

    def describe(self) -> dict[str, Any]:
        return {"format": FORMAT, "intercept": self.intercept, "coef": dict(self.coef),
                "dropped": list(self.dropped), "fit": dict(self.fit), "features": list(FEATURES)}

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.describe(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return p

    @classmethod
    def load(cls, path: str | Path) -> "StepTimeModel":
        from samspec_bench.errors import UserError
        p = Path(path)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
            if d.get("format") != FORMAT:
                raise ValueError(f"format {d.get('format')!r}, expected {FORMAT}")
            coef = {f: float(d["coef"].get(f, 0.0)) for f in FEATURES}
            return cls(float(d["intercept"]), coef, list(d.get("dropped", [])), dict(d.get("fit", {})))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"--step-model {p}: not a step-time model ({e}); write one with "
                            "`samspec-bench rollout profile`") from None


def fit_step_model(times: Iterable[float], features: Mapping[str, Iterable[float]],
                   source: str = "") -> StepTimeModel:
    """Least-squares fit of step times on the FEATURES columns given in `features`."""
    y = np.asarray(list(times), dtype=float)
    if y.size < 2:
        raise ValueError(f"a step-time fit needs at least 2 steps, got {y.size}")
    cols: dict[str, np.ndarray] = {}
    dropped = []
    for f in FEATURES:
        if f not in features:
            dropped.append(f)
            continue
        x = np.asarray(list(features[f]), dtype=float)
        if x.shape != y.shape:
            raise ValueError(f"feature {f!r} has {x.size} values for {y.size} step times")
        if np.ptp(x) == 0:
            dropped.append(f)
            continue
        cols[f] = x
    names = list(cols)
    while True:
        A = np.column_stack([np.ones_like(y)] + [cols[n] for n in names])
        sol, *_ = np.linalg.lstsq(A, y, rcond=None)
        neg = [n for n, c in zip(names, sol[1:]) if c < 0]
        if not neg:
            break
        worst = min(neg, key=lambda n: sol[1 + names.index(n)])
        names.remove(worst)
        dropped.append(worst)
    pred = A @ sol
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    coef = {f: 0.0 for f in FEATURES}
    coef.update({n: float(c) for n, c in zip(names, sol[1:])})
    fit = {"n_steps": int(y.size), "r2": (1 - ss_res / ss_tot) if ss_tot > 0 else None,
           "mean_abs_error_s": float(np.mean(np.abs(y - pred))), "mean_step_s": float(y.mean()),
           "total_error": float(pred.sum() / y.sum() - 1) if y.sum() > 0 else None, "source": source}
    return StepTimeModel(float(sol[0]), coef, sorted(set(dropped), key=FEATURES.index), fit)


def fit_from_steps(step_tables: Iterable[Mapping[str, np.ndarray]], source: str = "") -> StepTimeModel:
    """Fit on one or more per-step tables (rollout_sim's column names: time_s, num_running,
    num_scheduled_tokens, context_tokens, speculative)."""
    tabs = list(step_tables)
    cat = lambda k: np.concatenate([np.asarray(t[k], dtype=float) for t in tabs])  # noqa: E731
    feats = {"running": cat("num_running"), "scheduled_tokens": cat("num_scheduled_tokens"),
             "speculative": cat("speculative")}
    if all("context_tokens" in t for t in tabs):
        feats["context_tokens"] = cat("context_tokens")
    return fit_step_model(cat("time_s"), feats, source=source)
