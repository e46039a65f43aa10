"""Per-operator-class efficiencies of the roofline fitted on measured step points, and how the
H100 row's were obtained (hardware.H100_CALIBRATED):

    calibrate(rows of C=1024 only, Qwen3-8B shape, H100 row) -> efficiencies
    point_report(model with them, rows of C=32768) -> the held-out errors

Fitted: the GEMMs' compute and memory efficiency and overlap loss, attention's compute and
memory efficiency, the elementwise passes' memory efficiency (six numbers for a whole family of
steps, not one per point); the tile height stays the row's (not fitted). The loss is the
squared relative error of every point's device time plus 10 x the squared error of every
verify/decode ratio (the ratio is what the model is used for), plus 300 x the squared excess
of a ratio error over 4 %. Nelder-Mead, restarted from its own optimum until it stops improving, from the row's
current values; efficiencies kept in (0.05, 1], the overlap loss in [0, 1].
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np
from scipy.optimize import minimize

from samspec_bench.bench.simulation.hardware import Hardware, op_efficiencies
from samspec_bench.bench.simulation.measured_points import point_report
from samspec_bench.bench.simulation.roofline import RooflineStepModel
from samspec_bench.models.shapes import ModelShape

FITTED = ("gemm_compute", "gemm_memory", "gemm_overlap_loss", "attention_compute", "attention_memory",
          "elementwise_memory")
RATIO_WEIGHT = 10.0
HINGE, HINGE_WEIGHT = 0.04, 300.0   # ratio errors beyond 4 % cost much more (the check's bound is 5 %)


def with_efficiencies(hw: Hardware, eff: Mapping[str, float]) -> Hardware:
    return replace(hw, op_efficiency={**op_efficiencies(hw), **eff})


def _loss(x, shape, hw, rows, dtype) -> float:
    eff = dict(zip(FITTED, x))
    if any(not (0.05 < v <= 1.0) for k, v in eff.items() if k != "gemm_overlap_loss") or not (
            0.0 <= eff["gemm_overlap_loss"] <= 1.0):
        return 1e9
    rep = point_report(RooflineStepModel(shape, with_efficiencies(hw, eff), dtype=dtype, mode="graph"), rows)
    e = np.array([p["error"] for p in rep["points"]])
    r = np.array([p["ratio_error"] for p in rep["points"] if p["ratio_error"] is not None])
    return float(np.sum(e ** 2) + RATIO_WEIGHT * np.sum(r ** 2)
                 + HINGE_WEIGHT * np.sum(np.maximum(np.abs(r) - HINGE, 0.0) ** 2))


def calibrate(rows: list[Mapping[str, float]], shape: ModelShape, hw: Hardware,
              dtype: str = "bfloat16") -> dict[str, float]:
    """The FITTED efficiencies that best price `rows` (measured device times) for `shape` on `hw`."""
    start = op_efficiencies(hw)
    x0 = [min(max(start[k], 0.06), 1.0) for k in FITTED]
    x0[FITTED.index("gemm_overlap_loss")] = min(max(start["gemm_overlap_loss"], 0.1), 0.9)
    best = None
    for _ in range(6):   # restarts: a simplex collapses early on this loss's kinks
        res = minimize(_loss, x0, args=(shape, hw, rows, dtype), method="Nelder-Mead",
                       options={"maxiter": 3000, "maxfev": 3000, "xatol": 1e-5, "fatol": 1e-12, "adaptive": True})
        if best is not None and res.fun >= best.fun - 1e-12:
            break
        best, x0 = res, list(res.x)
    return {k: float(v) for k, v in zip(FITTED, best.x)}
