"""Per-operator-class parameters of the roofline fitted on measured step points, and how the
H100 row's were obtained (hardware.H100_CALIBRATED):

    calibrate_sets([(Qwen3-8B, its C=1024 and C=32768 rows), (Qwen3-32B, its C=1024 rows)], H100 row)
    point_report(model with them, the C=8192 rows of both shapes and the off-grid 8B rows) -> held-out errors

Fitted: the GEMMs' compute and memory efficiency, overlap loss and fixed time per kernel,
attention's compute and memory efficiency, the elementwise passes' memory efficiency (seven
numbers for a whole family of steps and model sizes, not one per point); the tile heights and
attention's kernel switch stay the row's (read off the kernels, not fitted). Two model sizes
are needed to tell the per-kernel time from the weight streaming's efficiency: one size alone
fits either. The loss is the squared relative error of
every point's device time plus 10 x the squared error of every verify/decode ratio (the ratio
is what the model is used for), plus 300 x the squared excess of a ratio error over 4 %.
Nelder-Mead, restarted from its own optimum until it stops improving, from the row's current
values; efficiencies kept in (0.05, 1], the overlap loss in [0, 1], the kernel time in
[0, 100] us.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from scipy.optimize import minimize

from samspec_bench.bench.simulation.calibration_file import KERNEL_US_MAX, write_calibration
from samspec_bench.bench.simulation.hardware import NOT_EFFICIENCIES, Hardware, op_efficiencies
from samspec_bench.bench.simulation.measured_points import (dtype_check, dtype_warning, hardware_key, is_point_file,
                                                             load_points, measured_device, measured_range, measured_tp,
                                                             point_report, shape_check, shape_warning)
from samspec_bench.bench.simulation.roofline import RooflineStepModel
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import ModelShape, load_shape

FITTED = ("gemm_compute", "gemm_memory", "gemm_overlap_loss", "gemm_kernel_us", "attention_compute",
          "attention_memory", "elementwise_memory")
# more starting points of the search (every FITTED key): mid-range efficiencies with a low and a
# high attention compute efficiency
STARTS = tuple({"gemm_compute": 0.8, "gemm_memory": 0.8, "gemm_overlap_loss": 0.3, "gemm_kernel_us": 5.0,
                "attention_compute": a, "attention_memory": 0.8, "elementwise_memory": 0.3} for a in (0.2, 0.8))
RATIO_WEIGHT = 10.0
HINGE, HINGE_WEIGHT = 0.04, 300.0   # ratio errors beyond 4 % cost much more (the check's bound is 5 %)


def with_efficiencies(hw: Hardware, eff: Mapping[str, float]) -> Hardware:
    return replace(hw, op_efficiency={**op_efficiencies(hw), **eff})


def _out_of_bounds(eff: Mapping[str, float]) -> bool:
    fractions = [v for k, v in eff.items() if k not in NOT_EFFICIENCIES]
    return any(not (0.05 < v <= 1.0) for v in fractions) or not (0.0 <= eff["gemm_overlap_loss"] <= 1.0) \
        or not (0.0 <= eff["gemm_kernel_us"] <= KERNEL_US_MAX)


def _loss(x, sets, hw, dtype) -> float:
    eff = dict(zip(FITTED, x))
    if _out_of_bounds(eff):
        return 1e9
    total = 0.0
    for shape, rows in sets:
        rep = point_report(RooflineStepModel(shape, with_efficiencies(hw, eff), dtype=dtype, mode="graph"), rows)
        e = np.array([p["error"] for p in rep["points"]])
        r = np.array([p["ratio_error"] for p in rep["points"] if p["ratio_error"] is not None])
        total += float(np.sum(e ** 2) + RATIO_WEIGHT * np.sum(r ** 2)
                       + HINGE_WEIGHT * np.sum(np.maximum(np.abs(r) - HINGE, 0.0) ** 2))
    return total


def calibrate(rows: list[Mapping[str, float]], shape: ModelShape, hw: Hardware,
              dtype: str = "bfloat16") -> dict[str, float]:
    """The FITTED parameters that best price `rows` (measured device times) for `shape` on `hw`."""
    return calibrate_sets([(shape, rows)], hw, dtype)


def calibrate_sets(sets: Sequence[tuple[ModelShape, list[Mapping[str, float]]]], hw: Hardware,
                   dtype: str = "bfloat16") -> dict[str, float]:
    """The FITTED parameters that best price every (shape, measured rows) set on `hw` together:
    the lowest loss of a local search from the row's current values and from each of STARTS
    (the loss is flat in some directions, e.g. attention's compute efficiency where attention is
    bound by its KV reads, so one start can stop on a shelf another passes)."""
    sets = list(sets)
    start = op_efficiencies(hw)
    first = [min(max(start[k], 0.06), 1.0) for k in FITTED]
    first[FITTED.index("gemm_overlap_loss")] = min(max(start["gemm_overlap_loss"], 0.1), 0.9)
    first[FITTED.index("gemm_kernel_us")] = min(max(start["gemm_kernel_us"], 1.0), KERNEL_US_MAX / 2)
    best = None
    for x0 in [first] + [[st[k] for k in FITTED] for st in STARTS]:
        res = _search(x0, sets, hw, dtype)
        if best is None or res.fun < best.fun:
            best = res
    return {k: float(v) for k, v in zip(FITTED, best.x)}


def _search(x0, sets, hw, dtype):
    best = None
    for _ in range(6):   # restarts: a simplex collapses early on this loss's kinks
        res = minimize(_loss, x0, args=(sets, hw, dtype), method="Nelder-Mead",
                       options={"maxiter": 4000, "maxfev": 4000, "xatol": 1e-5, "fatol": 1e-12, "adaptive": True})
        if best is not None and res.fun >= best.fun - 1e-12:
            break
        best, x0 = res, list(res.x)
    return best


def _out_path_problem(out: str, inputs: Sequence[str]) -> str | None:
    """Why `out` cannot take the calibration, checked before the fit: a comma would split the
    spec it is passed in (`calibration=OUT`), and an input's path would be overwritten."""
    if "," in str(out):
        return "a comma in the path would split the --step-model spec that reads it (calibration=PATH); choose a path without one"
    target = Path(out).expanduser().resolve()
    if any(Path(p).expanduser().resolve() == target for p in inputs):
        return "it is one of the points files the fit reads, which writing it would overwrite; choose another path"
    return None


def _checked_set(shape: ModelShape, path: str, row: str | None, option: str = "--steps") -> tuple[list, dict]:
    """The points of one file (read as the command-line `option` that gave it), refused where its
    meta says they were measured on another model shape than `shape` or on another GPU than the
    row `row` (hardware_key) the fit calibrates, whatever the meta's form (measured_device: a
    name, or the torch profiler's device dict)."""
    if not is_point_file(path):
        raise UserError(f"--calibrate fits measured points: {path} is not a .jsonl file of {{B, q, C, ms}} rows")
    rows, meta = load_points(path, option)
    warn = shape_warning(shape_check(meta, shape))
    if warn:
        raise UserError(f"--calibrate: {path}: {warn}; fit each file as the model it measured (--step-model "
                        "model=... for --steps, MODEL=POINTS.jsonl for --also)")
    tp, source = measured_tp(meta)
    if tp is not None and tp > 1:
        raise UserError(f"--calibrate: {path} was measured at tp={tp} ({source}); the fit prices one GPU: give "
                        "points measured at tp=1 (tools/step_physics.py), then price any tp with the file")
    dev = measured_device(meta)
    if dev is not None and hardware_key(dev) not in (None, row):
        raise UserError(f"--calibrate: {path} was measured on {dev!r} ({hardware_key(dev)}), the spec fits the {row} "
                        f"row; give hardware={hardware_key(dev)} in --step-model")
    return rows, meta


def calibrate_to_file(model: RooflineStepModel, steps: str, also: Sequence[str], out: str, say=None) -> dict:
    """Fit `model`'s hardware row on measured points (`steps` priced with its shape; each of
    `also`, MODEL=POINTS.jsonl, with that model's) and write the calibration file `out`
    (calibration_file.py) with the range the points span (measured_range: a roofline priced with
    the file flags steps beyond it). Points of one GPU: a tp > 1 spec is refused, and so are points
    whose meta names another shape or another GPU than the row, fewer points than parameters
    fitted and an `out` the spec cannot name or that is an input; points of another dtype than
    the model's are recorded (dtype_mismatch) and warned. `say(text)`: told once the inputs are
    read, before the fit (tens of seconds), each dtype warning first."""
    if not isinstance(model, RooflineStepModel):
        raise UserError("--calibrate fits a roofline: give --step-model roofline:hardware=...,model=...")
    if model.tp != 1:
        raise UserError(f"--calibrate: tp={model.tp}; fit on one GPU's points with tp=1, then price any tp with the file")
    files = [(model.shape, steps, "--steps")]
    for item in also:
        name, eq, path = str(item).partition("=")
        if not eq or not name.strip() or not path.strip():
            raise UserError(f"--also {item!r}: give MODEL=POINTS.jsonl (a model id or config.json, then its points)")
        files.append((load_shape(name.strip()), path.strip(), f"--also {name.strip()}="))
    problem = _out_path_problem(out, [p for _, p, _ in files])
    if problem:
        raise UserError(f"--calibrate {out}: {problem}")
    sets, fitted_on, devices, mismatch, row = [], [], [], [], hardware_key(model.hw.name)
    for shape, path, option in files:
        rows, meta = _checked_set(shape, path, row, option)
        sets.append((shape, rows))
        dc = dtype_check(meta, model.dtype)   # another dtype: warned and recorded, not refused
        fitted_on.append({"file": str(path), "model": shape.name, "points": len(rows),
                          "dtype": dc["measured"] if dc else None, "tp": measured_tp(meta)[0]})
        if dc and not dc["same"]:
            mismatch.append({"file": str(path), "measured": dc["measured"], "priced": dc["priced"],
                             "warning": f"{path}: {dtype_warning(dc)}"})
        dev = measured_device(meta)
        if dev is not None and dev not in devices:
            devices.append(dev)
    n = sum(f["points"] for f in fitted_on)
    if n <= len(FITTED):
        raise UserError(f"--calibrate: {n} point(s) for {len(FITTED)} fitted parameters ({', '.join(FITTED)}); a fit "
                        "needs more points than parameters: measure a grid (e.g. B 1, 8, 32, 128 x q 1, 4, 9 x C 1024, "
                        "32768 with tools/step_physics.py)")
    if say is not None:
        for m in mismatch:
            say(f"WARNING: --calibrate: {m['warning']}")
        say(f"fitting {model.hw.name} on {n} points of {len(sets)} file(s): a local search from 3 starts, tens of seconds")
    hw = with_efficiencies(model.hw, calibrate_sets(sets, model.hw, model.dtype))
    reps = [point_report(RooflineStepModel(shape, hw, dtype=model.dtype, mode="graph"), rows) for shape, rows in sets]
    err = np.abs([p["error"] for r in reps for p in r["points"]])
    rerr = np.abs([p["ratio_error"] for r in reps for p in r["points"] if p["ratio_error"] is not None])
    fit = {"points": int(err.size), "median_abs_error": float(np.median(err)), "max_abs_error": float(err.max()),
           "max_abs_ratio_error": float(rerr.max()) if rerr.size else None, "held_out": False}
    span = measured_range([r for _, rows in sets for r in rows])   # a roofline priced with the file flags steps beyond
    tp, tp_source = _points_tp(fitted_on)
    return write_calibration(out, hw, FITTED, fitted_on, fit, devices, span, model.dtype, mismatch, tp, tp_source)


def _points_tp(fitted_on: list[dict]) -> tuple[int | None, str]:
    """The calibration's tp: 1 where every points file's meta states it (a tp > 1 is refused), else
    unknown (None), naming the files whose meta states none."""
    silent = [f["file"] for f in fitted_on if f["tp"] is None]
    if not silent:
        return 1, "every points file's meta states tp=1"
    return None, (f"the meta of {', '.join(silent)} records no tp (tools/step_physics.py and `rollout profile "
                  "--engine torch` time one GPU; state \"tp\" in the meta line where known)")
