"""What a rollout's numbers are: seconds priced by a named step model (modelled), seconds
measured on an engine, or decode steps (no step model: counts, never sold as time).

`priced_by` describes the step model that priced a run (kind, source, profiled engine and date,
fit residuals, valid ranges, a roofline's assumptions); `time_basis` is the one line that says
what the numbers are; `to_step_units` renames a step-count run's metrics so that no key says
time (`total_s` -> `total_steps`, `tail_s_pooled` -> `tail_steps_pooled`, `speedup_*` ->
`step_ratio_*`); `t` / `ratio_name` read a metric in whichever units the run has."""

from __future__ import annotations

from typing import Any

STEP_RATIO = "step-count ratio, not time"
STEPS_LABEL = "decode steps (no step model: not time)"


# ---------- what priced a run ----------

def model_kind(model: Any) -> str:
    """A step model's kind ("fitted-profile", "roofline", "constant-steps"): its describe()'s
    when it names one, else read off the model (a constant step count, or a fit)."""
    d = model.describe() if hasattr(model, "describe") else {}
    if d.get("kind"):
        return str(d["kind"])
    fit = getattr(model, "fit", None) or {}
    return "constant-steps" if fit.get("source") == "constant" else "fitted-profile"


def priced_by(model: Any, source: str, profile: dict[str, Any] | None = None) -> dict[str, Any]:
    """What priced a rollout's steps: the step model's kind and source (a profile path, a
    roofline spec, 'measured in this run'), the profiled engine and date, the fit's residuals
    and the ranges the model holds over (a roofline: its hardware and assumptions, and its
    calibration's measured range where the file records one)."""
    fit = getattr(model, "fit", None) or {}
    d = model.describe() if hasattr(model, "describe") else {}
    out: dict[str, Any] = {"kind": model_kind(model), "source": source}
    if profile:
        out.update({k: profile.get(k) for k in ("engine", "date", "note") if profile.get(k) is not None})
    elif isinstance(fit.get("engine"), dict):   # an older profile read through StepTimeModel.load
        out["engine"] = fit["engine"]
    if fit:
        out["fit"] = {k: fit.get(k) for k in ("n_steps", "r2", "median_rel_error", "max_rel_error", "total_error")
                      if k in fit}
        vr = fit.get("valid_range") or fit.get("ranges")
        if vr:
            out["valid_range"] = vr
        if "verify_widths" in fit:
            out["verify_widths"] = fit["verify_widths"]
    for k in ("units", "assumptions", "hardware", "model", "tp", "dtype", "mode", "calibration", "calibration_tp",
              "range_note"):
        if k in d and (k == "units" or out["kind"] == "roofline"):   # a roofline's inputs
            out[k] = d[k]
    if out["kind"] == "roofline" and d.get("valid_range"):   # a calibration's measured range
        out["valid_range"] = d["valid_range"]
    return out


def roofline_tag(priced: dict[str, Any]) -> str:
    """'; the row's built-in parameters' / '; calibrated, range unknown' / '; calibrated on measured points' for a
    roofline (what its EXTRAPOLATED flag can say), '' for another model."""
    if priced.get("kind") != "roofline" or "range_note" not in priced:
        return ""
    if not priced.get("calibration"):
        return "; the hardware row's built-in parameters, no measured range claimed"
    return "; calibrated, range unknown" if not priced.get("valid_range") else "; calibrated on measured points"


def priced_label(priced: dict[str, Any] | None) -> str:
    """'modelled (priced by fitted-profile: step_profile.json)' or the steps' label."""
    if not priced:
        return STEPS_LABEL
    note = f"; {priced['note']}" if priced.get("note") else ""
    tp = (priced.get("calibration_tp") or {}).get("warning")   # parameters fitted at another tp than priced
    return (f"modelled (priced by {priced.get('kind')}: {priced.get('source')}{roofline_tag(priced)}{note})"
            + (f"; WARNING: {tp}" if tp else ""))


def time_basis(units: str, measured: bool, priced: dict[str, Any] | None, engine: str) -> str:
    """One line saying what the rollout's numbers are."""
    if units == "steps":
        return ("decode steps: no --step-model was given, so no time is reported; ratios of step counts "
                f"({STEP_RATIO}). Price them with `--step-model` (a `rollout profile` JSON, or roofline:...)")
    if measured:
        return (f"seconds measured on the {engine} engine (arms); the simulation's prediction beside them is "
                + priced_label(priced))
    return "seconds, " + priced_label(priced)


def unit_tag(units: str, measured: bool) -> str:
    """The word printed after a figure: 'measured', 'modelled', or 'steps, not time'."""
    return "decode steps, not time" if units == "steps" else "measured" if measured else "modelled"


# ---------- step units ----------

_RENAME = {"time_saved_fraction": "steps_saved_fraction"}


def step_key(k: str) -> str:
    """A metric's name in step units: `_s` parts become `_steps` (total_s, tail_s_pooled,
    instance_makespan_s), `speedup_*` `step_ratio_*`, time saved steps saved."""
    if k in _RENAME:
        return _RENAME[k]
    if k.startswith("speedup_"):
        return "step_ratio_" + k[len("speedup_"):]
    parts = k.split("_")
    return "_".join(p if (p != "s" or i == 0) else "steps" for i, p in enumerate(parts))


def to_step_units(obj: Any) -> Any:
    """A copy of rollout metrics in decode-step units (`step_key` names; where the step-unit
    name already exists, e.g. head_s beside head_steps, the existing key wins)."""
    if isinstance(obj, list):
        return [to_step_units(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    for k, v in obj.items():
        v = to_step_units(v)
        if not isinstance(k, str):
            out[k] = v
            continue
        new = step_key(k)
        if new == k:
            out[k] = v
        elif new not in obj:
            out[new] = int(v) if isinstance(v, float) and v.is_integer() else v
    return out


def t(m: dict[str, Any], key: str) -> Any:
    """Metric `key` (its seconds name, e.g. "total_s") in whichever units `m` holds it."""
    return m[key] if key in m else m.get(step_key(key))


def fmt_t(m: dict[str, Any], key: str, units: str, spec: str = ".3f") -> str:
    """Metric `key` with its unit: '12.345 s' or '1234 steps'."""
    v = t(m, key)
    if v is None:
        return "n/a"
    return f"{v:{spec}} s" if units == "s" else f"{v:g} steps"


def ratio_of(m: dict[str, Any], key: str) -> Any:
    """A speedup (`speedup_overall`) in whichever units `m` holds it (step_ratio_overall)."""
    return t(m, key)
