"""A roofline calibration fitted on a user's own measured steps, as a file: written by
`samspec-bench step-model --calibrate OUT.json` (roofline_calibration.calibrate_sets on their
{B, q, C, ms} points), read back by `--step-model roofline:...,calibration=OUT.json`, which then
prices every step of that hardware row with the file's per-operator-class parameters.

The file (JSON, format 1): kind, format, hardware (the row it was fitted on), measured_on (the
points files' device names), op_efficiency (every hardware.OP_KEYS key), fitted (the keys the
fit moved; the rest are the row's: tile heights, attention's kernel switch), fitted_on (per
points file: path, model, points, dtype), fit (the fitted points' |error| median and max, the
verify/decode ratio |error| max: fitted, not held out), made (UTC time), measured_range (the
step features the points span, {feature: [lo, hi]}: a roofline priced with the file flags steps
beyond it as a fitted profile's range does; files written before it have none: range unknown),
dtype (the dtype the fit priced) and dtype_mismatch (the points files measured in another), tp
(the tensor-parallel size the points ran at: 1 where every points file's meta states it, null
where one states none; files written before it have none: unknown) and tp_source. Priced at
another tp, or at tp > 1 with the points' tp unknown, the roofline says so (`tp_check`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from samspec_bench.bench.simulation.fitted_step_model import FEATURES, fit_problems
from samspec_bench.bench.simulation.hardware import OP_KEYS, Hardware, op_efficiencies
from samspec_bench.bench.simulation.measured_points import hardware_key
from samspec_bench.errors import UserError

KIND = "samspec-bench roofline calibration"
FORMAT = 1
MAKE = "make one with `samspec-bench step-model --step-model roofline:... --steps POINTS.jsonl --calibrate OUT.json`"
KERNEL_US_MAX = 100.0   # the fit's bound on the fixed time per weight-GEMM kernel (roofline_calibration.py)


def write_calibration(path: str | Path, hw: Hardware, fitted: Sequence[str], fitted_on: list[dict[str, Any]],
                      fit: dict[str, Any], measured_on: list[str], measured_range: dict[str, list[float]],
                      dtype: str, dtype_mismatch: list[dict[str, Any]], tp: int | None = None,
                      tp_source: str = "") -> dict[str, Any]:
    """Write the calibrated row `hw`'s parameters to `path` (folders made); returns what was written."""
    doc = {"kind": KIND, "format": FORMAT, "hardware": hw.name, "measured_on": measured_on,
           "op_efficiency": {k: float(v) for k, v in op_efficiencies(hw).items()}, "fitted": list(fitted),
           "fitted_on": fitted_on, "fit": fit, "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "measured_range": measured_range, "dtype": dtype, "dtype_mismatch": dtype_mismatch, "tp": tp,
           "tp_source": tp_source}
    p = Path(path).expanduser()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    except OSError as e:
        raise UserError(f"--calibrate {path}: cannot write it ({e}); give a writable path") from None
    return doc


def load_calibration(path: str | Path) -> dict[str, Any]:
    """The calibration file at `path`, checked: its kind and format, every op_efficiency value a
    finite number >= 0 under a known key. Anything else -> UserError naming the file and the fix."""
    where = f"calibration={path}"
    p = Path(path).expanduser()
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise UserError(f"{where}: cannot read it ({e.strerror or e}); {MAKE}") from None
    except ValueError:
        raise UserError(f"{where}: not JSON; {MAKE}") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise UserError(f"{where}: not a roofline calibration (its kind is not {KIND!r}); {MAKE}")
    if doc.get("format") != FORMAT:
        raise UserError(f"{where}: format {doc.get('format')!r}, this version reads format {FORMAT}; {MAKE}")
    eff = doc.get("op_efficiency")
    if not isinstance(eff, dict) or not eff:
        raise UserError(f"{where}: no op_efficiency object; {MAKE}")
    unknown = sorted(set(eff) - set(OP_KEYS))
    if unknown:
        raise UserError(f"{where}: unknown op_efficiency keys {', '.join(unknown)}; known: {', '.join(OP_KEYS)}")
    bad = [f"{k}={_shown(v)}" for k, v in eff.items() if not _finite_number(v) or v < 0]
    if bad:
        raise UserError(f"{where}: {', '.join(bad)}: every op_efficiency value is a finite number >= 0; {MAKE}")
    over = [f"{k}={eff[k]!r}" for k, hi in (("gemm_overlap_loss", 1.0), ("gemm_kernel_us", KERNEL_US_MAX))
            if k in eff and eff[k] > hi]
    if over:
        raise UserError(f"{where}: {', '.join(over)}: beyond what a fit writes (gemm_overlap_loss at most 1, "
                        f"gemm_kernel_us at most {KERNEL_US_MAX:g}); {MAKE}")
    if not isinstance(doc.get("hardware"), str) or hardware_key(doc["hardware"]) is None:
        raise UserError(f"{where}: hardware {doc.get('hardware')!r} names no hardware row the file was fitted on; {MAKE}")
    tp = doc.get("tp")   # absent or null: unknown
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or tp < 1):
        raise UserError(f"{where}: tp {_shown(tp)} is not a whole number >= 1 (the GPUs its points ran on) nor null "
                        f"(unknown); {MAKE}")
    vr = doc.get("measured_range")   # absent in older files: range unknown, not an error
    if vr is not None:   # read as a fitted profile's valid_range: checked by its check
        extra = sorted(set(vr) - set(FEATURES)) if isinstance(vr, dict) else []
        bad = ([f"measured_range keys {', '.join(extra)} are not step features ({', '.join(FEATURES)})"] if extra
               else [p.replace("valid_range", "measured_range", 1) for p in fit_problems({"valid_range": vr})])
        if bad:
            raise UserError(f"{where}: {bad[0]}; {MAKE}")
    return doc


def measured_range(doc: dict[str, Any]) -> dict[str, list[float]] | None:
    """The step features a calibration's points span ({feature: [lo, hi]}), None where the file
    records none (written before ranges were)."""
    vr = doc.get("measured_range")
    return {k: [float(lo), float(hi)] for k, (lo, hi) in vr.items()} if isinstance(vr, dict) and vr else None


def points_tp(doc: dict[str, Any], path: str | Path) -> tuple[int | None, str]:
    """The tp the calibration's points ran at (None: unknown) and where that comes from."""
    if doc.get("tp") is not None:
        return int(doc["tp"]), f"calibration={path} ({doc.get('tp_source') or 'its tp'})"
    why = doc.get("tp_source") or "the file records none: written before calibrations recorded it"
    return None, f"calibration={path} ({why})"


def tp_check(points: int | None, source: str, priced: int) -> dict[str, Any]:
    """Whether parameters fitted on points measured at tp `points` (None: unknown) price the tp
    `priced` as measured: `same` False where the tps differ, or the points' is unknown and tp > 1;
    `warning` one line then (None otherwise)."""
    out = {"measured": points, "priced": int(priced), "source": source,
           "same": points == priced if points is not None else priced == 1}
    if out["same"]:
        return {**out, "warning": None}
    if points is None:
        got = (f"the tp of the points they were fitted on is unknown; priced at tp={priced}: if those points ran on "
               "one GPU the all-reduce is modelled, not measured; if on several, their all-reduce is inside the fitted "
               "parameters and priced again")
    else:
        got = (f"fitted on points measured at tp={points}, priced at tp={priced}: the per-GPU parameters are carried "
               f"to {priced} GPU(s) and the all-reduce is modelled, not measured")
    return {**out, "warning": f"{source}: {got}; check against steps measured at tp={priced} "
                              "(`samspec-bench step-model --steps`)"}


def _finite_number(v: Any) -> bool:
    """A JSON number that is finite as a float (an integer too large for one is not: 10**400 written out)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _shown(v: Any) -> str:
    """A bad value for a one-line message; a long one (hundreds of digits) cut."""
    text = repr(v)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def key_sources(doc: dict[str, Any], path: str | Path, row: str) -> dict[str, Any]:
    """Which op_efficiency keys (hardware.OP_KEYS) the calibration file `doc` gives and which the
    hardware row `row` keeps (a file written by hand, or cut down, may hold only some)."""
    eff = doc.get("op_efficiency") or {}
    return {"file": str(path), "row": row, "from_file": [k for k in OP_KEYS if k in eff],
            "from_row": [k for k in OP_KEYS if k not in eff]}


def calibration_record(doc: dict[str, Any], path: str | Path, row: str) -> dict[str, Any]:
    """What a roofline priced with the calibration file `doc` records of it: the file, the range
    its points span, the tp they ran at (points_tp) and which op_efficiency keys the row kept."""
    tp, source = points_tp(doc, path)
    keys = key_sources(doc, path, row)
    return {"file": str(path), "measured_range": measured_range(doc), "tp": tp, "tp_source": source,
            "from_file": keys["from_file"], "from_row": keys["from_row"]}


def key_sources_text(keys: dict[str, Any]) -> str:
    """One line: the keys the file gave and the ones the row kept."""
    n = len(keys["from_file"]) + len(keys["from_row"])
    if not keys["from_row"]:
        return f"calibration={keys['file']}: all {n} op_efficiency keys from the file"
    return (f"calibration={keys['file']} holds {len(keys['from_file'])} of the {n} op_efficiency keys: from the file "
            f"{', '.join(keys['from_file'])}; from the {keys['row']} row {', '.join(keys['from_row'])} (not fitted on "
            f"your points; {MAKE} to fit them)")


def with_calibration(hw: Hardware, path: str | Path, doc: dict[str, Any] | None = None) -> Hardware:
    """The row `hw` priced with the calibration file at `path` (its source names the file, the
    device its points were measured on and how many); `doc`: the file already read."""
    doc = load_calibration(path) if doc is None else doc
    fitted_row, row = hardware_key(doc["hardware"]), hardware_key(hw.name)
    if fitted_row != row:   # another GPU's efficiencies on this one's datasheet: neither device's times
        raise UserError(f"calibration={path}: fitted on the {doc['hardware']} row ({fitted_row}), priced here on "
                        f"{hw.name} ({row}); give hardware={fitted_row} with this file, or calibrate the {row} row on "
                        "points measured on it")
    fitted_on = doc.get("fitted_on") if isinstance(doc.get("fitted_on"), list) else []
    counts = [f.get("points") for f in fitted_on if isinstance(f, dict)]
    n = sum(c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c > 0)
    measured_on = doc.get("measured_on")
    devices = [measured_on] if isinstance(measured_on, str) else measured_on if isinstance(measured_on, list) else []
    on = ", ".join(str(d) for d in devices) or "a device not named in the points"
    keys = key_sources(doc, path, hw.name)
    rest = (f"; only {', '.join(keys['from_file'])} from the file, {', '.join(keys['from_row'])} the row's"
            if keys["from_row"] else "")
    source = (f"calibrated by `samspec-bench step-model --calibrate` on {n} measured points ({on}; fitted on "
              f"row {doc.get('hardware')!r}, {doc.get('made')}): {path}{rest}")
    return replace(hw, op_efficiency={**hw.op_efficiency, **{k: float(v) for k, v in doc["op_efficiency"].items()}},
                   sources={**hw.sources, "op_efficiency": source}, calibration_tp=points_tp(doc, path)[0])
