"""Step-time model for rollout simulation: the wall time of one engine step as a linear
function of what the step computes, fitted by least squares on measured engine steps.

    t_step = c0 + c_decode * decode_tokens + c_prefill * prefill_tokens
             + c_draft * draft_tokens + c_context * context_tokens + c_running * running
             + c_spec_req * spec_requests + c_spec * speculative

`decode_tokens` = known tokens of requests that sample after a decode step (1 each),
`prefill_tokens` = prompt (and recomputed) tokens, `draft_tokens` = draft tokens verified
in the forward (priced separately: a verify token costs a query row and its logits, not a
new request), `context_tokens` = KV tokens the step attends over (before the step),
`running` = requests in the step's batch, `spec_requests` = decoding requests in a
speculative step (each goes through the verify path), `speculative` = 1 when the step
verifies at least one draft token. A step the policy let speculate whose drafts all came back
empty runs as a plain decode step (the reference engine's decode attention path, vLLM's
sampler without rejection), so it counts as one: speculation costs where drafts are verified.

Identifiability: a feature enters the fit only when its column adds rank to the design
(intercept + the features already in, in FEATURES order); otherwise it is left out with
coefficient 0 and its reason in `fit["dropped_reason"]` ("absent", "constant", "collinear
with ..."). A profile without speculation thus cannot invent a verify cost, and one where
every request decodes (running == decode_tokens) gets a decode-token cost but no separate
per-request cost. Negative coefficients are removed by refitting without them (times cannot
fall with more work).

The fit records what a user needs to judge it (`fit`): residuals (R², mean absolute error, the
median / 90th percentile / max relative error per step, the error of the summed time), the
range every measured feature covered (`valid_range`; `extrapolation` flags step tables beyond
it) and, for fits on step tables, the verify widths measured (`verify_widths`: speculative
steps by draft tokens per request; `uncovered_ks` names the k a profile never verified).
Saved as JSON (`save` / `load`; format 1 files, with one coefficient
for all scheduled tokens, load with it copied to the three token kinds; format 3 profile files
of `rollout profile` load the model they hold under "model"). A file is checked when it loads
(`from_document`): a coefficient name the format does not have, a value that is not a finite
number, a negative one or a model that prices the smallest step at 0 s is refused, naming it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from samspec_bench.errors import UserError

FEATURES = ("decode_tokens", "prefill_tokens", "draft_tokens", "context_tokens", "running", "spec_requests",
            "speculative")
FORMAT = 2
FORMAT1_COEFS = ("scheduled_tokens", "context_tokens", "running", "speculative")   # format 1's coef
PROFILE_FORMAT = 3   # `rollout profile` output: {"format": 3, "kind": "step-profile", "engine", "measured_steps", "model"}
_RANK_TOL = 1e-7   # relative singular value below which a column counts as dependent


@dataclass
class StepTimeModel:
    intercept: float
    coef: dict[str, float]
    dropped: list[str] = field(default_factory=list)
    fit: dict[str, Any] = field(default_factory=dict)   # n, r2, mean abs error, source, dropped_reason

    def predict(self, **features):
        """Step time(s) in seconds from FEATURES given as keywords (scalars or numpy arrays;
        a missing feature counts as 0)."""
        unknown = set(features) - set(FEATURES)
        if unknown:
            raise TypeError(f"unknown step features {sorted(unknown)}; known: {', '.join(FEATURES)}")
        shape = np.broadcast_shapes(*(np.shape(x) for x in features.values()))
        t = np.full(shape, float(self.intercept))
        for f, x in features.items():
            c = self.coef.get(f, 0.0)
            if c:
                t = t + c * np.asarray(x, dtype=float)
        if shape:
            return np.maximum(t, 0.0)
        return float(max(float(t), 0.0))

    def predict_steps(self, steps: Mapping[str, np.ndarray]) -> np.ndarray:
        """Predicted time of every step of a per-step table (`scheduler.STEP_COLUMNS` names)."""
        feats = step_features(steps)
        n = len(np.asarray(steps["num_running"]))
        return np.broadcast_to(self.predict(**feats), (n,)).astype(float)

    @classmethod
    def constant(cls, seconds: float = 1.0) -> "StepTimeModel":
        """Every step takes `seconds` (makes the simulated time a step count)."""
        return cls(float(seconds), {f: 0.0 for f in FEATURES}, fit={"source": "constant"})

    @property
    def is_constant(self) -> bool:
        return self.fit.get("source") == "constant"

    def describe(self) -> dict[str, Any]:
        kind = "constant-steps" if self.is_constant else "fitted-profile"
        units = (f"steps ({self.intercept:g} per step: a step count, not time)" if self.is_constant
                 else "seconds per engine step (fitted on measured steps)")
        return {"format": FORMAT, "kind": kind, "units": units, "intercept": self.intercept, "coef": dict(self.coef),
                "dropped": list(self.dropped), "fit": dict(self.fit), "features": list(FEATURES)}

    def valid_range(self) -> dict[str, list[float]]:
        """feature -> [lo, hi] the fit measured (every measured feature; fits saved before that
        was recorded: the identified ones; {} for a constant model)."""
        vr = self.fit.get("valid_range") or self.fit.get("ranges") or {}
        return {f: [float(lo), float(hi)] for f, (lo, hi) in vr.items()}

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.describe(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return p

    @classmethod
    def load(cls, path: str | Path) -> "StepTimeModel":
        """A model JSON (format 1 or 2) or a `rollout profile` file (format 3: its "model", the
        profile's engine copied into the fit), checked as `from_document` checks it."""
        p = Path(path)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"--step-model {p}: not a step-time model ({e}); write one with "
                            "`samspec-bench rollout profile`") from None
        engine = None
        if isinstance(d, dict) and d.get("format") == PROFILE_FORMAT:   # the fitted model is under "model"
            engine, d = d.get("engine"), d.get("model")
        model = cls.from_document(d, f"--step-model {p}")
        if engine is not None:
            model.fit = {**model.fit, "engine": engine}
        return model

    @classmethod
    def from_document(cls, d: Any, where: str) -> "StepTimeModel":
        """The model a JSON object holds (`describe()`, format 2; format 1: one coefficient for
        every scheduled token, copied to the three token kinds), refused (UserError starting with
        `where`) unless every coefficient is a name of its format and a finite number and no step
        can cost 0 s or less (`pricing_problem`). A missing coefficient is 0 (a fit leaves out
        what it cannot identify); the writer never writes the rest, so it is an edit or another
        version's file."""
        again = "measure it again with `samspec-bench rollout profile`"
        fmt = d.get("format") if isinstance(d, dict) else None
        if fmt not in (1, FORMAT):
            got = (f"format {fmt!r}" if isinstance(d, dict) else "no model" if d is None
                   else f"a JSON {type(d).__name__}, not an object")
            raise UserError(f"{where}: not a step-time model ({got}, expected {FORMAT}); write one with "
                            "`samspec-bench rollout profile`")
        raw = d.get("coef")
        if "intercept" not in d or not isinstance(raw, dict):
            what = "no intercept" if "intercept" not in d else "coef is not an object"
            raise UserError(f"{where}: not a step-time model ({what}); {again}")
        known = FORMAT1_COEFS if fmt == 1 else FEATURES
        unknown = [k for k in raw if k not in known]
        if unknown:
            raise UserError(f"{where}: unknown coefficient(s) {', '.join(map(repr, unknown))} (known: "
                            f"{', '.join(known)}): the file was edited or written by another version; {again}")
        vals = {"intercept": d["intercept"], **raw}
        bad = ([f"{k}={v!r} is not a number" for k, v in vals.items()
                if isinstance(v, bool) or not isinstance(v, (int, float))]
               or [f"{k}={v!r} is not a finite number" for k, v in vals.items() if not math.isfinite(v)])
        if bad:
            raise UserError(f"{where}: {', '.join(bad)}; {again}")
        c = {k: float(v) for k, v in raw.items()}
        if fmt == 1:
            tok = c.get("scheduled_tokens", 0.0)
            coef = {"decode_tokens": tok, "prefill_tokens": tok, "draft_tokens": tok,
                    "context_tokens": c.get("context_tokens", 0.0), "running": c.get("running", 0.0),
                    "spec_requests": 0.0, "speculative": c.get("speculative", 0.0)}
        else:
            coef = {f: c.get(f, 0.0) for f in FEATURES}
        dropped, fit = d.get("dropped", []), d.get("fit", {})
        if not isinstance(dropped, list) or not isinstance(fit, dict):
            raise UserError(f"{where}: not a step-time model (dropped is not a list or fit not an object); {again}")
        bad = fit_problems(fit)
        if bad:
            raise UserError(f"{where}: fit.{'; fit.'.join(bad)}; {again}")
        model = cls(float(d["intercept"]), coef, list(dropped), dict(fit))
        problem = model.pricing_problem()
        if problem:
            raise UserError(f"{where}: {problem}; {again}")
        return model

    def pricing_problem(self) -> str | None:
        """Why this model could price a step at zero, below zero or NaN, or None. Every step
        has a request and a token (decode or prefill), so with every coefficient finite and >= 0
        the smallest step costs intercept + running + the cheaper token kind; that must be > 0."""
        vals = {"intercept": self.intercept, **self.coef}
        bad = [f"{k}={v!r}" for k, v in vals.items() if not math.isfinite(v)]
        if bad:
            return "coefficient(s) " + ", ".join(bad) + " are not finite"
        neg = [f"{k}={v:g}" for k, v in vals.items() if v < 0]
        if neg:
            return "negative coefficient(s) " + ", ".join(neg) + " would price some steps below zero"
        smallest = self.intercept + self.coef.get("running", 0.0) + min(self.coef.get("decode_tokens", 0.0),
                                                                         self.coef.get("prefill_tokens", 0.0))
        if smallest <= 0:
            return ("a one-request one-token step would cost 0 s (intercept + running + the cheaper token "
                    "coefficient is 0)")
        return None


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _few(items: list[str], n: int = 3) -> str:
    return ", ".join(items[:n]) + (f" (and {len(items) - n} more)" if len(items) > n else "")


def fit_problems(fit: Mapping[str, Any]) -> list[str]:
    """What in a loaded fit the range and coverage checks could not read: feature ranges
    (`valid_range`, `ranges`: {feature: [lo, hi]}, finite, lo <= hi) and verify widths
    (`verify_widths`: {"k": steps}, integers >= 0)."""
    out = []
    for key in ("valid_range", "ranges"):
        vr = fit.get(key)
        if vr is None:
            continue
        bad = ([f"{f}={r!r}" for f, r in vr.items() if not isinstance(r, list) or len(r) != 2
                or not all(map(_is_num, r)) or r[0] > r[1]] if isinstance(vr, dict) else ["is not an object"])
        if bad:
            out.append(f"{key} {_few(bad)}: a feature's range is [lo, hi], finite numbers, lo <= hi")
    vw = fit.get("verify_widths")
    if vw is not None:
        bad = ([f"{k!r}: {n!r}" for k, n in vw.items() if not str(k).isdigit() or isinstance(n, bool)
                or not isinstance(n, int) or n < 0] if isinstance(vw, dict) else ["is not an object"])
        if bad:
            out.append(f"verify_widths {_few(bad)}: each is \"k\": verify steps, an integer >= 0")
    return out


def _adds_rank(base: np.ndarray, col: np.ndarray) -> bool:
    """Whether `col` is linearly independent of the columns of `base` (columns scaled to unit norm)."""
    m = np.column_stack([base, col])
    norms = np.linalg.norm(m, axis=0)
    m = m / np.where(norms > 0, norms, 1.0)
    s = np.linalg.svd(m, compute_uv=False)
    return bool(s[-1] > _RANK_TOL * s[0])


def fit_step_model(times: Iterable[float], features: Mapping[str, Iterable[float]],
                   source: str = "") -> StepTimeModel:
    """Least-squares fit of step times on the FEATURES columns given in `features`."""
    y = np.asarray(list(times), dtype=float)
    if y.size < 2:
        raise ValueError(f"a step-time fit needs at least 2 steps, got {y.size}")
    unknown = set(features) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown step features {sorted(unknown)}; known: {', '.join(FEATURES)}")
    names: list[str] = []
    cols: dict[str, np.ndarray] = {}
    given: dict[str, np.ndarray] = {}   # every feature measured, identified or not: its valid range
    reason: dict[str, str] = {}
    design = np.ones((y.size, 1))
    for f in FEATURES:
        if f not in features:
            reason[f] = "absent"
            continue
        x = np.asarray(list(features[f]), dtype=float)
        if x.shape != y.shape:
            raise ValueError(f"feature {f!r} has {x.size} values for {y.size} step times")
        given[f] = x
        if np.ptp(x) == 0:
            reason[f] = "constant"
            continue
        if not _adds_rank(design, x):
            reason[f] = "collinear with " + " + ".join(["intercept"] + names)
            continue
        names.append(f)
        cols[f] = x
        design = np.column_stack([design, x])
    ones = np.ones_like(y)   # the intercept's column; zeros once a fit put it below 0
    while True:
        A = np.column_stack([ones] + [cols[n] for n in names])
        sol, *_ = np.linalg.lstsq(A, y, rcond=None)
        neg = [n for n, c in zip(names, sol[1:]) if c < 0]
        if not neg and sol[0] < 0 and ones.any():
            # a negative fixed cost prices small (tail) steps at nothing: refit through the origin
            ones, reason["intercept"] = np.zeros_like(y), "negative: fitted through 0"
            continue
        if not neg:
            break
        worst = min(neg, key=lambda n: sol[1 + names.index(n)])
        names.remove(worst)
        reason[worst] = "negative coefficient"
    sol[0] = sol[0] if ones.any() else 0.0
    pred = A @ sol
    coef = {f: 0.0 for f in FEATURES}
    coef.update({n: float(c) for n, c in zip(names, sol[1:])})
    fit = {"n_steps": int(y.size), **residual_stats(y, pred), "source": source,
           "identified": list(names), "dropped_reason": reason,
           "ranges": {f: [float(np.min(cols[f])), float(np.max(cols[f]))] for f in names},
           "valid_range": {f: [float(np.min(v)), float(np.max(v))] for f, v in given.items()}}
    return StepTimeModel(float(sol[0]), coef, [f for f in FEATURES if f in reason], fit)


def residual_stats(y: np.ndarray, pred: np.ndarray) -> dict[str, Any]:
    """How well predicted step times `pred` fit measured ones `y` (seconds): R², mean absolute
    error, the per-step relative error |pred - y| / y (median, 90th percentile, max; over steps
    with y > 0) and the error of the summed time (pred total / measured total - 1)."""
    y, pred = np.asarray(y, dtype=float), np.asarray(pred, dtype=float)
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    pos = y > 0
    rel = np.abs(pred[pos] - y[pos]) / y[pos]
    q = (lambda p: float(np.percentile(rel, p))) if rel.size else (lambda p: None)  # noqa: E731
    return {"r2": (1 - ss_res / ss_tot) if ss_tot > 0 else None,
            "mean_abs_error_s": float(np.mean(np.abs(y - pred))), "mean_step_s": float(y.mean()),
            "median_rel_error": q(50), "p90_rel_error": q(90), "max_rel_error": q(100),
            "total_error": float(pred.sum() / y.sum() - 1) if y.sum() > 0 else None}


def valid_ranges(model: Any) -> dict[str, list[float]] | None:
    """The feature ranges a step model is trusted over ({feature: [lo, hi]}), or None when it
    claims none (an analytic model, a constant): its `valid_range()` when it has one, else the
    ranges its fit measured (every measured feature; older fits: the identified ones)."""
    vr = getattr(model, "valid_range", None)
    if callable(vr):
        return vr()
    fit = getattr(model, "fit", None) or {}
    return fit.get("valid_range") or fit.get("ranges") or None


def extrapolation(model: Any, steps: Mapping[str, np.ndarray], factor: float = 1.0) -> dict[str, Any]:
    """Features of a step table that reach beyond `factor` x the largest value the model was
    measured on (its prediction there is an extrapolation): {feature: {"max": table max,
    "valid_max": measured max, "steps_beyond": share of the table's steps beyond it}}; {} when
    every step is inside or the model claims no range."""
    ranges = valid_ranges(model) or {}
    feats = step_features(steps)
    out = {}
    for f, (_, hi) in ranges.items():
        if f in feats and len(feats[f]):
            x = np.asarray(feats[f], dtype=float)
            beyond = x > factor * hi + 1e-12
            if beyond.any():
                out[f] = {"max": float(np.max(x)), "valid_max": float(hi), "steps_beyond": float(beyond.mean())}
    return out


MIN_VERIFY_STEPS = 3   # verify steps of a width a profile needs before it counts as covering that k


def verify_widths(steps: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Speculative steps by draft tokens per speculating request ({"k": steps}), over the steps
    where every speculating request verified the same number of draft tokens."""
    f = step_features(steps)
    sr, dr = f["spec_requests"], f["draft_tokens"]
    ok = (sr > 0) & (dr > 0) & (np.mod(dr, np.maximum(sr, 1)) == 0)
    w, n = np.unique((dr[ok] / sr[ok]).astype(np.int64), return_counts=True)
    return {str(int(a)): int(b) for a, b in zip(w, n)}


def uncovered_ks(model: Any, ks: Iterable[int]) -> list[int]:
    """The k (draft tokens per request) whose verify steps the model's profile never measured
    (fewer than MIN_VERIFY_STEPS steps of k + 1 tokens per request). [] for a model that
    records no widths (analytic, constant, older profiles): it makes no claim either way."""
    widths = (getattr(model, "fit", None) or {}).get("verify_widths")
    if widths is None:
        return []
    return [int(k) for k in ks if int(k) > 0 and int(widths.get(str(int(k)), 0)) < MIN_VERIFY_STEPS]


def step_features(steps: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """FEATURES from a per-step table (`scheduler.STEP_COLUMNS` names, simulated or an engine's
    step records: num_running, num_scheduled_tokens, num_prefill_tokens, num_drafted,
    num_decode_reqs, speculative, optional context_tokens)."""
    g = lambda k: np.asarray(steps[k], dtype=float)  # noqa: E731
    prefill, drafted = g("num_prefill_tokens"), g("num_drafted")
    verifies = (drafted > 0).astype(float)   # a speculative step whose drafts were all empty ran as a decode step
    out = {"running": g("num_running"), "prefill_tokens": prefill, "draft_tokens": drafted,
           "decode_tokens": g("num_scheduled_tokens") - prefill - drafted,
           "spec_requests": g("num_decode_reqs") * verifies,
           "speculative": verifies}
    if "context_tokens" in steps and np.isfinite(g("context_tokens")).all():
        out["context_tokens"] = g("context_tokens")
    return out


def fit_from_steps(step_tables: Iterable[Mapping[str, np.ndarray]], source: str = "") -> StepTimeModel:
    """Fit on one or more per-step tables (context_tokens is used only when every table has it)."""
    tabs = list(step_tables)
    feats = [step_features(t) for t in tabs]
    times = np.concatenate([np.asarray(t["time_s"], dtype=float) for t in tabs]) if tabs else np.zeros(0)
    keys = [f for f in FEATURES if feats and all(f in x for x in feats)]
    model = fit_step_model(times, {f: np.concatenate([x[f] for x in feats]) for f in keys}, source=source)
    widths: dict[str, int] = {}
    for t in tabs:
        for w, n in verify_widths(t).items():
            widths[w] = widths.get(w, 0) + n
    model.fit["verify_widths"] = dict(sorted(widths.items(), key=lambda kv: int(kv[0])))
    return model
