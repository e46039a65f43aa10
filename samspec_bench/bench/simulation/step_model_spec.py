"""`--step-model` values -> step-time models, and the check of a step model against measured steps.

A step model is anything with `predict(**FEATURES) -> seconds`, `predict_steps(table)`,
`describe()` (with "kind" and "units") and `valid_range()`:

- a profile JSON path (`rollout profile` output, formats 1-3) -> StepTimeModel (fitted-profile);
- `roofline:hardware=H100,model=Qwen/Qwen3-32B,tp=8[,dtype=bfloat16][,mode=eager|graph][,threads=N][,attention_tile=R][,calibration=F]`
  -> RooflineStepModel (model: a catalogue id or short name, builtin:<name>, or a config.json
  path; hardware: bench/simulation/hardware.py's names, `cpu` measured here; threads: cpu only,
  default 1, the thread count the measured engine runs with; attention_tile: the query rows of
  the engine's attention tile for every step, replacing the hardware row's tiles and its
  switch between two kernels, e.g. 128 for a kernel with 128-row tiles, 1 for none;
  calibration: a file `samspec-bench step-model --calibrate` wrote from your measured points,
  whose per-operator-class parameters replace the row's; calibration_file.py);
- None or "" -> None (the caller reports step counts, not time).

`compare(model, steps)` prices measured steps with a model and reports its errors;
`check_step_model(spec, path)` runs it on a `rollout profile` JSON (format 3, "measured_steps"),
a rollout run folder or its steps.csv / steps.parquet (the rows with source == "measured"), or
a JSONL file of measured points {"B", "q", "C", "ms"} (measured_points.py: per-point errors and
verify/decode ratio errors, on device time). The
command is `samspec-bench step-model` (suites/step_model: run folder, --json);
`python -m samspec_bench.bench.simulation.step_model_spec` runs it with the same flags:

    samspec-bench step-model --step-model SPEC --steps PATH [--json OUT]
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from samspec_bench.bench.simulation.calibration_file import (calibration_record, key_sources, key_sources_text,
                                                              load_calibration, with_calibration)
from samspec_bench.bench.simulation.hardware import hardware, one_attention_kernel
from samspec_bench.bench.simulation.measured_points import (device_check, device_warning, dtype_check, dtype_warning,
                                                             format_points, is_point_file, load_points, point_features,
                                                             point_report, shape_check, shape_warning, tp_check,
                                                             tp_warning)
from samspec_bench.bench.simulation.roofline import MODES, RooflineStepModel
from samspec_bench.bench.simulation.fitted_step_model import (FEATURES, PROFILE_FORMAT, StepTimeModel, extrapolation,
                                                               step_features)
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import DTYPE_BYTES, load_shape

ROOFLINE_KEYS = ("hardware", "model", "tp", "dtype", "mode", "threads", "attention_tile", "calibration")
ROOFLINE_HELP = ("roofline:hardware=NAME,model=ID|config.json,tp=N[,dtype=bfloat16][,mode=eager|graph][,attention_tile=ROWS]"
                 "[,calibration=FILE.json]")
STEP_COLUMNS_NEEDED = ("time_s", "num_running", "num_scheduled_tokens", "num_prefill_tokens", "num_drafted",
                       "num_decode_reqs", "speculative")
PROFILE_STEP_NAMES = ("time_s", "running", "decode_tokens", "prefill_tokens", "draft_tokens", "spec_requests")


def parse_roofline(spec: str) -> dict[str, str]:
    """The key=value pairs of a `roofline:` spec (unknown or repeated keys, missing hardware/model -> UserError)."""
    body = spec.split(":", 1)[1] if ":" in spec else ""
    out: dict[str, str] = {}
    for part in (p.strip() for p in body.split(",")):
        if not part:
            continue
        key, eq, val = part.partition("=")
        key, val = key.strip().lower(), val.strip()
        if not eq or not val:
            raise UserError(f"--step-model {spec!r}: {part!r} is not key=value; use {ROOFLINE_HELP}")
        if key not in ROOFLINE_KEYS:
            raise UserError(f"--step-model {spec!r}: unknown key {key!r}; keys: {', '.join(ROOFLINE_KEYS)}")
        if key in out:
            raise UserError(f"--step-model {spec!r}: {key} given twice")
        out[key] = val
    missing = [k for k in ("hardware", "model") if k not in out]
    if missing:
        raise UserError(f"--step-model {spec!r}: missing {', '.join(missing)}; use {ROOFLINE_HELP}")
    return out


def spec_with(spec: str, key: str, value: str) -> str:
    """The roofline spec with `key` set to `value` (replacing it where given)."""
    kept = [p for p in spec.split(":", 1)[1].split(",") if p.strip() and p.partition("=")[0].strip().lower() != key]
    return "roofline:" + ",".join(kept + [f"{key}={value}"])


def _int(spec: str, key: str, val: str) -> int:
    try:
        n = int(val)
    except ValueError:
        n = 0
    if n < 1:
        raise UserError(f"--step-model {spec!r}: {key}={val!r}; give an integer >= 1")
    return n


def roofline_from_spec(spec: str) -> RooflineStepModel:
    kv = parse_roofline(spec)
    tp = _int(spec, "tp", kv.get("tp", "1"))
    threads = _int(spec, "threads", kv.get("threads", "1"))
    is_cpu = kv["hardware"].strip().lower() == "cpu"
    if "threads" in kv and not is_cpu:
        raise UserError(f"--step-model {spec!r}: threads applies to hardware=cpu only")
    dtype = kv.get("dtype", "float32" if is_cpu else "bfloat16")
    if dtype not in DTYPE_BYTES:
        raise UserError(f"--step-model {spec!r}: dtype={dtype!r}; use one of {', '.join(DTYPE_BYTES)}")
    mode = kv.get("mode")
    if mode is not None and mode not in MODES:
        raise UserError(f"--step-model {spec!r}: mode={mode!r}; use eager or graph")
    try:   # the model's, the hardware's and the roofline's own checks, named as --step-model's
        shape = load_shape(kv["model"])
        hw, calibration = hardware(kv["hardware"], dtype=dtype, threads=threads), None
        if "calibration" in kv:   # its parameters, the range and tp of its points, the keys the row kept
            doc = load_calibration(kv["calibration"])
            calibration = calibration_record(doc, kv["calibration"], hw.name)
            hw = with_calibration(hw, kv["calibration"], doc)
        if "attention_tile" in kv:
            rows = _int(spec, "attention_tile", kv["attention_tile"])
            hw = one_attention_kernel(hw, rows, f"attention tile {rows} query rows for every step (one kernel): "
                                                "given in --step-model")
        return RooflineStepModel(shape, hw, tp=tp, dtype=dtype, mode=mode, spec=spec, calibration=calibration)
    except UserError as e:
        if str(e).startswith("--step-model "):
            raise
        err = UserError(f"--step-model {spec!r}: {e}")
        err.exit_code = e.exit_code
        raise err from None


def is_roofline_spec(spec: str | None) -> bool:
    """Whether a `--step-model` value names the roofline ('roofline' or 'roofline:...')."""
    s = str(spec or "").strip().lower()
    return s == "roofline" or s.startswith("roofline:")


def load_step_model(spec: str | None):
    """The step model a `--step-model` value names (see the module docstring); None for none."""
    if spec is None or not str(spec).strip():
        return None
    spec = str(spec).strip()
    if is_roofline_spec(spec):
        return roofline_from_spec(spec)
    if not Path(spec).expanduser().is_file():
        raise UserError(f"--step-model {spec!r}: no such file; pass a profile JSON from `samspec-bench rollout profile` "
                        f"or {ROOFLINE_HELP}")
    return StepTimeModel.load(Path(spec).expanduser())


# ---------------- measured steps ----------------

def _columns_from_rows(rows: list[dict[str, Any]], where: str, labels: list[str],
                       needed: tuple[str, ...] = STEP_COLUMNS_NEEDED) -> dict[str, np.ndarray]:
    """Columns of measured step rows (`labels[i]` names row i in messages: "line 7"). Every
    needed column must hold finite numbers >= 0 (context_tokens may be empty / NaN: unknown);
    anything else -> UserError naming the row and column. A zero time passes (a step below the
    timer's resolution): compare() counts it and leaves it out of the per-step errors."""
    if not rows:
        raise UserError(f"{where}: no measured steps (rows with source == 'measured'); pass a rollout run of a "
                        "measured engine (--engine reference|vllm) or a `rollout profile` JSON (format 3)")
    missing = [c for c in needed if c not in rows[0]]
    if missing:
        raise UserError(f"{where}: the step table has no column(s) {', '.join(missing)}; pass a rollout run folder "
                        "or its steps.csv, a `rollout profile` JSON, or a JSONL file of {B, q, C, ms} points")
    out: dict[str, np.ndarray] = {}
    for c in rows[0]:
        vals = [r[c] for r in rows]
        if c in ("arm", "source"):
            out[c] = np.asarray(vals, dtype=object)
        elif c in needed or c in ("context_tokens", "speculative"):
            out[c] = _checked_column(vals, c, where, labels)
        else:
            try:
                out[c] = np.asarray([_num(v) for v in vals], dtype=float)
            except (TypeError, ValueError, OverflowError):
                out[c] = np.asarray(vals, dtype=object)
    short = (out["num_scheduled_tokens"] < out["num_prefill_tokens"] + out["num_drafted"]
             if "num_scheduled_tokens" in needed else np.zeros(len(rows), dtype=bool))
    if short.any():   # the decode tokens would come out negative
        i = int(np.argmax(short))
        raise UserError(f"{where}: {labels[i]}: num_scheduled_tokens {out['num_scheduled_tokens'][i]:g} is fewer than "
                        f"num_prefill_tokens {out['num_prefill_tokens'][i]:g} + num_drafted {out['num_drafted'][i]:g} "
                        "(the scheduled tokens include both); correct or delete that step's row")
    if not (out["time_s"] > 0).any():
        raise UserError(f"{where}: every measured step time is 0; pass steps timed by a finer clock")
    return out


def _checked_column(vals: list[Any], c: str, where: str, labels: list[str]) -> np.ndarray:
    out = np.empty(len(vals))
    for i, v in enumerate(vals):
        try:
            x = _num(v)
        except (TypeError, ValueError, OverflowError):
            x = None
        if x is not None and (math.isnan(x) and c == "context_tokens" or math.isfinite(x) and x >= 0):
            out[i] = x
            continue
        raise UserError(f"{where}: {labels[i]}, column {c}: {v!r} is not a finite number >= 0"
                        f"{' (empty context_tokens means unknown)' if c == 'context_tokens' else ''}; "
                        "correct or delete that step's row")
    return out


def _num(v) -> float:
    """A CSV / JSON cell as a number (booleans as 0/1, empty as NaN)."""
    if v is None or (isinstance(v, str) and not v.strip()):
        return float("nan")
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return float(v.strip().lower() == "true")
    return float(v)


def _profile_steps(path: str | Path, ms: dict[str, Any]) -> dict[str, np.ndarray]:
    """A `rollout profile` JSON's measured_steps: step-table columns (STEP_COLUMNS_NEEDED), or
    what rollout/profile.py writes, time_s and the step features (PROFILE_STEP_NAMES), mapped
    to step-table columns so that step_features() gives the features back."""
    where = str(path)
    if not isinstance(ms.get("time_s"), list):
        raise UserError(f"{where}: measured_steps has no time_s list; write the profile again with "
                        "`samspec-bench rollout profile`")
    n = len(ms["time_s"])
    for k, v in ms.items():
        if not isinstance(v, list) or len(v) != n:
            got = f"{len(v)} values" if isinstance(v, list) else type(v).__name__
            raise UserError(f"{where}: measured_steps.{k} has {got}, time_s {n}; every column of measured_steps "
                            "is a list with one value per step: write the profile again with `samspec-bench rollout profile`")
    rows = [{k: v[i] for k, v in ms.items()} for i in range(n)]
    labels = [f"measured step {i + 1}" for i in range(n)]
    if all(c in ms for c in STEP_COLUMNS_NEEDED) or not any(c in ms for c in PROFILE_STEP_NAMES):
        return _columns_from_rows(rows, where, labels)
    f = _columns_from_rows(rows, where + " (measured_steps, step-feature names)", labels, PROFILE_STEP_NAMES)
    verifies = f["draft_tokens"] > 0
    out = {"time_s": f["time_s"], "num_running": f["running"], "num_prefill_tokens": f["prefill_tokens"],
           "num_drafted": f["draft_tokens"],
           "num_scheduled_tokens": f["decode_tokens"] + f["prefill_tokens"] + f["draft_tokens"],
           "num_decode_reqs": np.where(verifies, f["spec_requests"], f["decode_tokens"]),
           "speculative": f["speculative"] if "speculative" in f else verifies.astype(float)}
    if "context_tokens" in f:
        out["context_tokens"] = f["context_tokens"]
    return out


def load_measured_steps(path: str | Path) -> dict[str, np.ndarray]:
    """Measured per-step rows (time_s and the step columns) from a `rollout profile` JSON
    (format 3, "measured_steps", in step-feature or step-table names), a rollout run folder,
    or its steps.csv / steps.parquet (its rows with source == "measured")."""
    p = Path(path).expanduser()
    if p.is_dir():
        cand = [p / "steps.csv", p / "steps.parquet"]
        p = next((c for c in cand if c.is_file()), None)
        if p is None:
            raise UserError(f"{path}: no steps.csv or steps.parquet in this folder; pass a rollout run folder")
    if not p.is_file():
        raise UserError(f"{path}: no such file; pass a profile JSON, a rollout run folder or its steps.csv")
    if p.suffix == ".json":
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"{path}: not JSON ({e})") from None
        ms = d.get("measured_steps") if isinstance(d, dict) else None
        if not isinstance(ms, dict):
            fmt = d.get("format") if isinstance(d, dict) else None
            raise UserError(f"{path}: format {fmt!r} holds no measured_steps; write a format-{PROFILE_FORMAT} profile "
                            "with `samspec-bench rollout profile`, or pass a rollout run folder")
        return _profile_steps(path, ms)
    if p.suffix == ".parquet":
        import pandas as pd  # imported here: only parquet tables need it
        rows = pd.read_parquet(p).to_dict("records")
        labels = [f"row {i + 1}" for i in range(len(rows))]
    else:
        rows, labels = _csv_rows(p, str(path))
    if rows and "source" in rows[0]:
        keep = [i for i, r in enumerate(rows) if r["source"] == "measured"]
        rows, labels = [rows[i] for i in keep], [labels[i] for i in keep]
    return _columns_from_rows(rows, str(path), labels)


def _csv_rows(p: Path, where: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of a steps CSV and their line labels ("line 7"). A byte-order mark (Excel) is not
    data; a header naming a column twice, or a row with more cells than the header, would lose a
    value unseen (csv.DictReader keeps the last of two columns, files extra cells under None) ->
    UserError naming the column or line."""
    with p.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        names = reader.fieldnames or []
        twice = sorted({c for c in names if names.count(c) > 1})
        if twice:
            raise UserError(f"{where}: the header names column(s) {', '.join(twice)} twice; keep one column of each "
                            "name (which one holds the step's value is not known)")
        rows, labels = [], []
        for r in reader:
            if None in r:
                raise UserError(f"{where}: line {reader.line_num} has {len(names) + len(r[None])} cells, the header "
                                f"{len(names)}; correct or delete that row")
            rows.append(r)
            labels.append(f"line {reader.line_num}")
    return rows, labels


# ---------------- the check ----------------

def _err_stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, Any]:
    ok = meas > 0
    rel = pred[ok] / meas[ok] - 1.0
    return {"steps": int(ok.sum()), "zero_time_steps": int((meas == 0).sum()), "measured_total_s": float(meas.sum()), "predicted_total_s": float(pred.sum()),
            "total_error": float(pred.sum() / meas.sum() - 1.0) if meas.sum() > 0 else None,
            "median_abs_rel_error": float(np.median(np.abs(rel))) if rel.size else None,
            "max_abs_rel_error": float(np.max(np.abs(rel))) if rel.size else None,
            "median_rel_error": float(np.median(rel)) if rel.size else None}


def compare(model, steps: Mapping[str, np.ndarray], group_by: tuple[str, ...] = ("num_running", "speculative")
            ) -> dict[str, Any]:
    """A step model's predictions against measured steps: per-step relative errors (predicted
    / measured - 1: median and max of their absolute values), the total-time error, the same
    per group of steps (batch size, speculative or not), and for an analytic model which term
    bounds the steps (compute, memory) and the host / communication shares."""
    meas = np.asarray(steps["time_s"], dtype=float)
    pred = np.asarray(model.predict_steps(steps), dtype=float)
    out: dict[str, Any] = {"step_model": model.describe().get("kind"), "units": "seconds (measured vs modelled)",
                           "overall": _err_stats(pred, meas)}
    feats = step_features(steps)
    out["context_known"] = "context_tokens" in feats
    beyond = extrapolation(model, steps)   # past what the fit or a roofline's calibration measured
    if beyond:
        out["extrapolation"] = beyond
    if "context_tokens" in steps:   # NaN: a step whose context was not recorded (all then price it as 0)
        out["context_unknown_steps"] = int(np.isnan(np.asarray(steps["context_tokens"], dtype=float)).sum())
    keys = [g for g in group_by if g in steps]
    if keys:
        combos: dict[tuple, np.ndarray] = {}
        cols = [np.asarray(steps[g]) for g in keys]
        for i in range(len(meas)):
            combos.setdefault(tuple(c[i] for c in cols), []).append(i)
        out["groups"] = [{**{g: (v.item() if hasattr(v, "item") else v) for g, v in zip(keys, combo)},
                          "median_measured_s": float(np.median(meas[idx])), "median_predicted_s": float(np.median(pred[idx])),
                          **_err_stats(pred[idx], meas[idx]),
                          **({} if "modelled_host_s" not in steps else   # points: their "measured" adds modelled host
                             {"modelled_host_in_measured_s": float(np.sum(np.asarray(steps["modelled_host_s"])[idx]))})}
                         for combo, idx in sorted(((c, np.asarray(ix)) for c, ix in combos.items()), key=lambda t: t[0])]
    if hasattr(model, "components"):
        comp = model.components(**{k: v for k, v in feats.items() if k in FEATURES})
        n = len(meas)
        bound = np.broadcast_to(comp["bound"], (n,))
        tot = np.broadcast_to(comp["total_s"], (n,)).sum()
        out["terms"] = {"steps_compute_bound": int((bound == "compute").sum()), "steps_memory_bound": int((bound == "memory").sum()),
                        "share_device": float(np.broadcast_to(comp["t_device_s"] - comp["t_comm_s"], (n,)).sum() / tot),
                        "share_host": float(np.broadcast_to(comp["t_host_s"], (n,)).sum() / tot),
                        "share_comm": float(np.broadcast_to(comp["t_comm_s"], (n,)).sum() / tot)}
    return out


def _pct(x: float | None, spec: str = "+.1%") -> str:
    return "n/a" if x is None else format(x, spec)


def format_report(rep: Mapping[str, Any]) -> str:
    o = rep["overall"]
    unknown, n = rep.get("context_unknown_steps"), o["steps"] + o.get("zero_time_steps", 0)
    ctx = ("known" if rep["context_known"] else
           f"UNKNOWN ({unknown} of {n} steps without): priced as 0" if unknown else "UNKNOWN: priced as 0")
    host = o.get("modelled_host_in_measured_s")   # points (device time) with the model's host time added
    measured = (f"measured {o['measured_total_s'] - host:.3f} s device + {host:.3f} s modelled host = "
                f"{o['measured_total_s']:.3f} s" if host is not None else f"measured {o['measured_total_s']:.3f} s")
    lines = [f"step model: {rep['step_model']}  ({rep['units']}; context tokens {ctx})",
             f"steps {o['steps']}: {measured}, predicted {o['predicted_total_s']:.3f} s, "
             f"total error {_pct(o['total_error'])}, per-step |error| median {_pct(o['median_abs_rel_error'], '.1%')} "
             f"max {_pct(o['max_abs_rel_error'], '.1%')}"]
    if o.get("zero_time_steps"):
        lines.append(f"{o['zero_time_steps']} steps measured 0 s (below the timer's resolution): in the totals, "
                     "left out of the step count and the per-step errors")
    d = rep.get("describe") or {}   # a roofline: calibrated on which range, calibrated with it unknown, or not
    if d.get("range_note"):
        lines.append(("WARNING: " if d.get("calibration") and d.get("valid_range") is None else "") + d["range_note"])
    if rep.get("extrapolation"):
        lines.append("WARNING: the step model extrapolates (EXTRAPOLATED predictions): " + ", ".join(
            f"{f} up to {v['max']:,.0f} (measured up to {v['valid_max']:,.0f}; {100 * v['steps_beyond']:.0f} % of steps)"
            for f, v in rep["extrapolation"].items()))
    if rep.get("terms"):
        t = rep["terms"]
        lines.append(f"modelled terms: {t['steps_memory_bound']} steps memory-bound, {t['steps_compute_bound']} "
                     f"compute-bound; time shares device {t['share_device']:.0%} host {t['share_host']:.0%} "
                     f"comm {t['share_comm']:.0%}")
    for g in rep.get("groups", []):
        key = " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in g.items()
                       if k in ("num_running", "speculative"))
        lines.append(f"  {key:32s} n={g['steps']:4d} {'measured + host' if host is not None else 'measured'} median "
                     f"{g['median_measured_s'] * 1e3:8.2f} ms  "
                     f"predicted {g['median_predicted_s'] * 1e3:8.2f} ms  total error {_pct(g['total_error'])}")
    if rep.get("calibration_keys"):
        keys = rep["calibration_keys"]
        lines.append(("WARNING: " if keys["from_row"] else "") + key_sources_text(keys))
    if (rep.get("calibration_tp") or {}).get("warning"):   # the parameters' points ran at another tp
        lines.append(f"WARNING: {rep['calibration_tp']['warning']}")
    if rep.get("points"):
        lines.append(format_points(rep["points"]))
    pm = rep.get("points_meta") or {}
    if pm.get("rows_skipped_error"):
        lines.append(f"{pm['rows_skipped_error']} rows of the points file were measurement errors (e.g. out of memory) "
                     "and are not compared")
    if pm.get("rows_skipped_duplicate"):
        lines.append(f"{pm['rows_skipped_duplicate']} rows of the points file repeat a point with the same time and "
                     "are compared once")
    if pm.get("fields_ignored"):
        lines.append("fields of the point rows not read: " + ", ".join(f"{k} ({v} rows)" for k, v in
                                                                      sorted(pm["fields_ignored"].items())))
    for warn, what in ((shape_warning(rep.get("points_shape")), "two model shapes"),
                       (device_warning(rep.get("points_device")), "two devices"),
                       (tp_warning(rep.get("points_tp")), "two tensor-parallel sizes"),
                       (dtype_warning(rep.get("points_dtype")), "two dtypes")):
        if warn:
            lines.append(f"WARNING: {warn}: the errors above compare {what}")
    return "\n".join(lines)


def check_step_model(spec: str, steps: str | Path) -> dict[str, Any]:
    """The check of the step model `spec` names against the measured steps at `steps`:
    compare()'s report plus what was checked (a UserError for a bad spec or steps file). A
    JSONL file of {B, q, C, ms} points adds `points` (measured_points.point_report: per-point
    and verify/decode ratio errors) and compares on device time where the model has it."""
    model = load_step_model(spec)
    if model is None:
        raise UserError("--step-model: give a profile JSON or a roofline: spec")
    extra: dict[str, Any] = {}
    cal = parse_roofline(spec).get("calibration") if is_roofline_spec(spec) else None
    if cal is not None:   # which keys the file gave, which the hardware row kept
        extra["calibration_keys"] = key_sources(load_calibration(cal), cal, model.hw.name)
    table = None if is_point_file(steps) else load_measured_steps(steps)
    torch_points = None if table is None else _torch_profile_points(steps, table)
    if table is None or torch_points is not None:
        rows, meta = load_points(steps) if torch_points is None else torch_points
        extra |= {"points": point_report(model, rows), "points_meta": meta,
                  "points_shape": shape_check(meta, getattr(model, "shape", None)),
                  "points_device": device_check(meta, getattr(getattr(model, "hw", None), "name", None)),
                  "points_tp": tp_check(meta, getattr(model, "tp", None)),
                  "points_dtype": dtype_check(meta, getattr(model, "dtype", None))}
        rep = compare(model, points_as_steps(rows, model))
        if hasattr(model, "device_time"):   # the points' device time plus the model's host time: say which is which
            device_s = float(sum(r["ms"] for r in rows)) / 1e3
            rep["overall"]["modelled_host_in_measured_s"] = rep["overall"]["measured_total_s"] - device_s
            rep["units"] = "seconds (measured device time plus the model's host time, vs modelled)"
    else:
        rep = compare(model, table)
    if hasattr(model, "calibration_tp"):   # the tp its parameters' points ran at, against the priced tp
        extra["calibration_tp"] = model.calibration_tp()
    return {**rep, **extra, "step_model_spec": spec, "steps_from": str(steps), "describe": model.describe()}


def _torch_profile_points(path: str | Path, table: Mapping[str, np.ndarray]
                          ) -> tuple[list[dict[str, float]], dict[str, Any]] | None:
    """A `rollout profile --engine torch` JSON's measured steps as the {B, q, C, ms} points of its
    --out-jsonl (device time of one forward step, no host time: checked as those points are), with
    a meta of its engine's device and tp; None for any other steps file."""
    if Path(path).suffix != ".json":
        return None
    try:
        doc = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    engine = doc.get("engine") if isinstance(doc, dict) else None
    if not isinstance(engine, dict) or engine.get("name") != "torch" or "context_tokens" not in table:
        return None
    B = np.asarray(table["num_running"], dtype=float)
    if not (B >= 1).all():
        return None
    q, C = np.asarray(table["num_scheduled_tokens"]) / B, np.asarray(table["context_tokens"]) / B
    whole = np.isfinite(C).all() and (q == np.round(q)).all() and (C == np.round(C)).all()
    if not whole or (table["time_s"] <= 0).any():   # not one grid point a step: checked as engine steps
        return None
    rows = [{"B": float(b), "q": float(x), "C": float(c), "ms": float(t) * 1e3}
            for b, x, c, t in zip(B, q, C, table["time_s"])]
    meta = {k: v for k, v in (("device", engine.get("device")), ("tp", engine.get("tp")), ("dtype", engine.get("dtype")),
                              ("from", "measured_steps of a `rollout profile --engine torch` JSON: device time"))
            if v is not None}
    return rows, meta


def points_as_steps(rows, model) -> dict[str, np.ndarray]:
    """{B, q, C, ms} points as a step table (decode steps of B requests verifying q - 1 drafts each).
    The points hold device time only: a model with host time gets it added to the measured time,
    so compare() weighs like with like."""
    f = point_features(rows)
    meas = np.array([r["ms"] for r in rows], dtype=float) / 1e3
    out = {"num_running": f["running"], "num_scheduled_tokens": f["decode_tokens"] + f["draft_tokens"],
           "num_prefill_tokens": np.zeros(len(rows)), "num_drafted": f["draft_tokens"],
           "num_decode_reqs": f["running"], "speculative": f["speculative"] > 0, "context_tokens": f["context_tokens"]}
    if hasattr(model, "components"):   # the model's host term itself (predict - device_time loses it past ~1e13 s)
        out["modelled_host_s"] = np.broadcast_to(np.asarray(model.components(**f)["t_host_s"], dtype=float), meas.shape)
    elif hasattr(model, "device_time"):
        out["modelled_host_s"] = np.asarray(model.predict(**f)) - np.asarray(model.device_time(**f))
    return {"time_s": meas + out.get("modelled_host_s", 0.0), **out}
