"""Measured step points: JSONL rows {"B", "q", "C", "ms"} (B requests, q query tokens each, C
context tokens each, device milliseconds per step; a {"meta": ...} first line allowed), the
format of ../shared/data/hardware/*.jsonl and of the step profiler's output.

`point_report(model, rows)` prices every point with a step model and reports per point the
relative error of the step time (predicted / measured - 1) and, for every q > 1 point, the
error of its verify/decode ratio against the q = 1 point at the same (B, C): the ratio decides
whether speculation pays, so it is checked on its own. A model with `device_time` (the
roofline) is compared on device time, as the points hold device time only; a fitted profile
on its whole prediction.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from samspec_bench.bench.simulation.hardware import TABLE
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import CATALOGUE, SAME_SHAPE, ModelShape, load_shape, resolve_alias

POINT_KEYS = ("B", "q", "C", "ms")
MAX_COUNT = 2 ** 53   # the largest integer a float64 (the points are priced in float64) holds exactly


def is_point_file(path: str | Path) -> bool:
    return Path(path).suffix.lower() in (".jsonl", ".ndjson")


def load_points(path: str | Path, option: str = "--steps") -> tuple[list[dict[str, float]], dict[str, Any]]:
    """The point rows and the meta line ({} when absent) of a JSONL file. Skipped and counted
    in the meta: rows with an "error" key (e.g. out of memory when measured;
    `rows_skipped_error`), a point repeated with the same time (`rows_skipped_duplicate`);
    fields beside B, q, C and ms are counted by name (`fields_ignored`). Bad lines, a second
    meta line and a point measured twice with two times -> UserError naming them, as the
    command-line `option` that gave the file ("--steps", "--also MODEL=")."""
    p = Path(path).expanduser()
    where = f"{option}{'' if option.endswith('=') else ' '}{path}"
    try:
        lines = p.read_text(encoding="utf-8-sig").splitlines()   # -sig: a byte-order mark (Windows tools) is not data
    except OSError as e:
        raise UserError(f"{where}: cannot read it ({e}); pass a JSONL file of {{B, q, C, ms}} rows") from None
    rows, meta, meta_line, skipped, dupes = [], {}, 0, 0, 0
    seen: dict[tuple, tuple[int, float]] = {}
    ignored: dict[str, int] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError:
            cut = " (the last line, cut off: delete it or measure that point again)" if n == len(lines) else ""
            raise UserError(f"{where}: line {n} is not JSON{cut}; each line is {{\"B\", \"q\", \"C\", \"ms\"}}") from None
        if not isinstance(d, dict):
            raise UserError(f"{where}: line {n} is not a JSON object")
        if "meta" in d or "info" in d:
            if meta_line:   # two files joined: the points would be read as one device's
                raise UserError(f"{where}: line {n} is a second meta line (the first is line {meta_line}); "
                                "one file holds one measurement: split it and check each file on its own")
            if rows or skipped or dupes:   # points before it: two files joined, or a meta that does not lead them
                raise UserError(f"{where}: line {n} is a meta line after point rows; the meta line is the "
                                "first line of a file: move it there, or split the file where it joins two measurements")
            meta, meta_line = d.get("meta", d.get("info")) or {}, n
            if not isinstance(meta, dict):
                raise UserError(f"{where}: line {n}: the meta line holds {type(meta).__name__}; write "
                                "{\"meta\": {...}}, a JSON object")
            continue
        if "error" in d:
            skipped += 1
            continue
        missing = [k for k in POINT_KEYS if k not in d]
        if missing:
            raise UserError(f"{where}: line {n} has no {', '.join(missing)}; each line is "
                            "{\"B\", \"q\", \"C\", \"ms\"}")
        row = {k: _point_value(where, n, k, d[k]) for k in POINT_KEYS}
        for k in d.keys() - set(POINT_KEYS):
            ignored[k] = ignored.get(k, 0) + 1
        key = (row["B"], row["q"], row["C"])
        if key in seen:
            first, ms = seen[key]
            if ms != row["ms"]:
                raise UserError(f"{where}: line {n} measures B={key[0]:g} q={key[1]:g} C={key[2]:g} again "
                                f"({row['ms']:g} ms; line {first}: {ms:g} ms); keep one time per point")
            dupes += 1
            continue
        seen[key] = (n, row["ms"])
        rows.append(row)
    if not rows:
        raise UserError(f"{where}: no {{B, q, C, ms}} rows")
    counts = {"rows_skipped_error": skipped, "rows_skipped_duplicate": dupes, "fields_ignored": ignored}
    return rows, {**meta, **{k: v for k, v in counts.items() if v}}


def _point_value(where: str, n: int, key: str, v: Any) -> float:
    """One cell of a point line as a float: B, q (>= 1) and C (>= 0) whole numbers up to
    MAX_COUNT (8.0 passes, 8.5, "8", true, Infinity do not), ms a finite number > 0."""
    if key == "ms":
        try:
            ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0
        except OverflowError:   # an integer too large for a float
            ok = False
        if not ok:
            raise UserError(f"{where}: line {n}: ms={v!r}; give the measured milliseconds as a finite "
                            "number > 0")
        return float(v)
    lo = 0 if key == "C" else 1
    whole = not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))
    if not (whole and lo <= v <= MAX_COUNT):
        raise UserError(f"{where}: line {n}: {key}={v!r}; need an integer {key} >= {lo} (at most 2**53), "
                        "written as a JSON number")
    return float(v)


def _profiled_shape(meta: Mapping[str, Any]) -> tuple[ModelShape | None, int] | None:
    """The shape and layer count of a `rollout profile --engine torch` meta (its "model" the
    --model given: a catalogue name or a config.json path; "layers" the layers it built), else
    None. The shape is None where it is not known here: a builtin: or hub model is not built or
    fetched for a check, a config.json path may be another machine's."""
    m, layers = meta.get("model"), meta.get("layers")
    if not isinstance(m, str) or isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        return None
    known = resolve_alias(m) in CATALOGUE or resolve_alias(m) in SAME_SHAPE
    if not known and (m.startswith("builtin:") or not Path(m).expanduser().exists()):
        return None, layers
    try:
        return load_shape(m), layers
    except UserError:   # a config the roofline does not price (MLA, sliding window, ...): its layers only
        return None, layers


def measured_shape(meta: Mapping[str, Any]) -> dict[str, int] | None:
    """The hidden size and layer count a points file says it measured, else None: its meta's
    model.hidden / layers or model.hidden_size / num_hidden_layers (tools/step_physics.py's
    info line), the torch profiler's model name and layers, or a "model_shape" text like
    "Qwen3-8B (hidden 4096, 36 layers, ...)"."""
    if not isinstance(meta, Mapping):
        return None
    profiled = _profiled_shape(meta)
    if profiled is not None:   # the layer count alone where the model's shape is not known here
        hidden = {} if profiled[0] is None else {"hidden_size": int(profiled[0].hidden_size)}
        return {**hidden, "num_hidden_layers": profiled[1]}
    m = meta.get("model")
    if isinstance(m, Mapping):
        hidden, layers = m.get("hidden", m.get("hidden_size")), m.get("layers", m.get("num_hidden_layers"))
        try:
            return {"hidden_size": int(hidden), "num_hidden_layers": int(layers)}
        except (TypeError, ValueError, OverflowError):
            pass
    text = meta.get("model_shape")
    if not isinstance(text, str):
        return None
    hidden = re.search(r"\bhidden(?:_size)?\s*[=:]?\s*(\d+)", text)
    layers = re.search(r"(\d+)\s*(?:hidden\s+)?layers\b", text) or re.search(r"\blayers\s*[=:]\s*(\d+)", text)
    if hidden is None or layers is None:
        return None
    return {"hidden_size": int(hidden.group(1)), "num_hidden_layers": int(layers.group(1))}


# dimensions beside hidden size and layers a points file may name: the shape's field -> the names
# meta.model uses for it (config.json's, tools/step_physics.py's) and the model_shape text's pattern
OTHER_DIMS = {"num_attention_heads": (("num_attention_heads", "q_heads"), r"(\d+)\s*q(?:uery)?\s+heads\b"),
              "num_key_value_heads": (("num_key_value_heads", "kv_heads"), r"(\d+)\s*kv\s+heads\b"),
              "head_dim": (("head_dim",), r"\bhead_dim\s*[=:]?\s*(\d+)"),
              "intermediate_size": (("intermediate_size", "inter"), r"\bintermediate(?:_size)?\s*[=:]?\s*(\d+)"),
              "vocab_size": (("vocab_size", "vocab"), r"\bvocab(?:_size)?\s*[=:]?\s*(\d+)")}


def measured_dims(meta: Mapping[str, Any]) -> dict[str, int]:
    """The OTHER_DIMS a points file's meta names (meta.model's keys, else its model_shape text)."""
    if not isinstance(meta, Mapping):
        return {}
    profiled = _profiled_shape(meta)
    if profiled is not None:
        return {} if profiled[0] is None else {dim: int(getattr(profiled[0], dim)) for dim in OTHER_DIMS}
    m, text = meta.get("model"), meta.get("model_shape")
    out: dict[str, int] = {}
    for dim, (keys, pattern) in OTHER_DIMS.items():
        v = next((m[k] for k in keys if k in m), None) if isinstance(m, Mapping) else None
        if v is None and isinstance(text, str):
            hit = re.search(pattern, text)
            v = hit.group(1) if hit else None
        try:
            if v is not None and not isinstance(v, bool):
                out[dim] = int(v)
        except (TypeError, ValueError, OverflowError):
            pass
    return out


def shape_check(meta: Mapping[str, Any], shape: Any) -> dict[str, Any] | None:
    """Whether the points were measured on the shape the model prices (None where either is
    unknown): a roofline of another model size compared with them says nothing about either.
    Beside hidden size and layers, every OTHER_DIMS the meta names is compared (`differs`: the
    ones that do not match): Qwen2.5-32B and Qwen3-32B share hidden size and layers, not heads."""
    got = measured_shape(meta)
    if got is None or shape is None:
        return None
    priced = {k: int(getattr(shape, k)) for k in got}   # a torch profile of a model unknown here: layers only
    differs = {k: {"measured": v, "priced": int(getattr(shape, k))} for k, v in measured_dims(meta).items()
               if hasattr(shape, k) and v != int(getattr(shape, k))}
    return {"measured": got, "priced": priced, "priced_model": getattr(shape, "name", ""),
            "same": got == priced and not differs, "differs": differs}


def _shape_text(d: Mapping[str, int]) -> str:
    if "hidden_size" not in d:
        return f"{d['num_hidden_layers']} layers (hidden size not known here)"
    return f"hidden {d['hidden_size']}, {d['num_hidden_layers']} layers"


def shape_warning(sc: Mapping[str, Any] | None) -> str | None:
    """One line saying the points were measured on another shape than the priced one, or None."""
    if not sc or sc["same"]:
        return None
    m, p, name = sc["measured"], sc["priced"], sc["priced_model"] or "another shape"
    if m != p:
        return f"the points were measured on {_shape_text(m)}; the step model prices {name} ({_shape_text(p)})"
    dims = ", ".join(f"{k} {d['measured']} (priced {d['priced']})" for k, d in sc.get("differs", {}).items())
    return f"the points were measured on a shape with {dims}; the step model prices {name}"


def hardware_key(text: Any) -> str | None:
    """The hardware table row (bench/simulation/hardware.py) a device name names ("NVIDIA H100
    80GB HBM3" -> "H100", "H100 SXM 80GB" -> "H100"; "cpu" for a CPU), else None."""
    up = str(text).upper()
    for key in TABLE:
        if re.search(rf"(?<![0-9]){re.escape(key.upper())}(?![0-9A-Z])", up):
            return key
    return "cpu" if re.search(r"\bCPU\b", up) else None


def _variant(text: str) -> dict[str, str]:
    """The form factor (PCIe, NVL, SXM) and memory size ("80GB") a device name states."""
    up, out = text.upper(), {}
    form = re.search(r"\b(PCIE|NVL|SXM)", up)
    if form:
        out["form factor"] = form.group(1).replace("PCIE", "PCIe")
    mem = re.search(r"(?<![0-9.])(\d+)\s*GB\b", up)
    if mem:
        out["memory"] = f"{mem.group(1)} GB"
    return out


def measured_device(meta: Mapping[str, Any]) -> str | None:
    """The device a points file says it was measured on: its meta's "device" text, or the name
    in the torch profiler's device dict (devices.device_info; "(CPU)" added for a CPU's model name)."""
    dev = meta.get("device") if isinstance(meta, Mapping) else None
    if isinstance(dev, Mapping):
        name = dev.get("name")
        if not isinstance(name, str) or not name.strip():
            return None
        cpu = dev.get("type") == "cpu" and hardware_key(name) != "cpu"
        return f"{name} (CPU)" if cpu else name
    return dev if isinstance(dev, str) else None


def device_check(meta: Mapping[str, Any], priced: str | None) -> dict[str, Any] | None:
    """Whether the points were measured on the hardware the model prices (`priced`: its
    hardware's name); None where either is unknown (no meta "device", or a name no table row
    matches). A variant of the row's GPU (H100 PCIe or NVL against the SXM row, an A100 40GB
    against the 80GB one: other bandwidth and clocks) is not the same (`variant`)."""
    dev = measured_device(meta)
    if dev is None or priced is None:
        return None
    got, want = hardware_key(dev), hardware_key(priced)
    if got is None or want is None:
        return None
    a, b = _variant(dev), _variant(priced)
    variant = "; ".join(f"{k} {a[k]} (priced {b[k]})" for k in a if k in b and a[k] != b[k]) or None
    return {"measured": dev, "priced": priced, "measured_hardware": got, "priced_hardware": want,
            "same": got == want and variant is None, "variant": variant}


def device_warning(dc: Mapping[str, Any] | None) -> str | None:
    """One line saying the points were measured on another device than the priced one, or None."""
    if not dc or dc["same"]:
        return None
    what = f" ({dc['variant']})" if dc.get("variant") else ""
    return (f"the points were measured on {dc['measured']!r} ({dc['measured_hardware']}); the step model prices "
            f"{dc['priced']} ({dc['priced_hardware']}){what}")


# the meta keys a points file may state its tensor-parallel size under (vLLM's and torch's names)
TP_KEYS = ("tp", "tp_size", "tensor_parallel_size", "world_size")
ONE_DEVICE = "their meta records no tp; tools/step_physics.py and `rollout profile --engine torch` time one device"


def measured_tp(meta: Mapping[str, Any]) -> tuple[int | None, str]:
    """The GPUs one measured step ran on, as a points file's meta states it (a TP_KEYS key, at
    the top or under meta.model), and where that came from; (None, why) where it states none."""
    for where in (meta, meta.get("model") if isinstance(meta, Mapping) else None):
        if not isinstance(where, Mapping):
            continue
        for k in TP_KEYS:
            v = where.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 1 and v == int(v):
                return int(v), f"meta {'model.' if where is not meta else ''}{k}"
    return None, ONE_DEVICE


def tp_check(meta: Mapping[str, Any], priced_tp: Any) -> dict[str, Any] | None:
    """Whether the points were measured at the tp the model prices (None for a model without
    one): `measured` is the meta's tp, else None (unknown, taken as one GPU: what the writers
    measure); `same` False where a tp > 1 model meets one-GPU or unknown points, or the tps differ."""
    if not isinstance(priced_tp, (int, np.integer)):
        return None
    got, source = measured_tp(meta if isinstance(meta, Mapping) else {})
    out = {"measured": got, "priced": int(priced_tp), "source": source,
           "same": (got if got is not None else 1) == int(priced_tp)}
    return {**out, "warning": tp_warning(out)}


def tp_warning(tc: Mapping[str, Any] | None) -> str | None:
    """One line saying the points and the model are two tp configurations, or None."""
    if not tc or tc["same"]:
        return None
    got = (f"tp={tc['measured']} ({tc['source']})" if tc["measured"] is not None
           else f"single-GPU measurements, tp unknown ({tc['source']})")
    return (f"the points are {got}; the step model prices tp={tc['priced']} ({tc['priced']} GPUs, with their "
            "all-reduce), a different configuration")


# dtype names as points files write them (tools/step_physics.py: "torch.bfloat16") -> torch's names
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


def measured_dtype(meta: Mapping[str, Any]) -> str | None:
    """The dtype a points file says its steps ran in (its meta's "dtype": the torch profiler's,
    tools/step_physics.py's), in torch's names; None where it says none."""
    d = meta.get("dtype") if isinstance(meta, Mapping) else None
    if not isinstance(d, str) or not d.strip():
        return None
    name = d.strip().lower().removeprefix("torch.")
    return DTYPE_ALIASES.get(name, name)


def dtype_check(meta: Mapping[str, Any], priced: Any) -> dict[str, Any] | None:
    """Whether the points were measured in the dtype the model prices (`priced`: its dtype);
    None where either is unknown. Another dtype is warned, not refused: its bytes per weight and
    KV element and its peak FLOP/s differ, so the errors compare two configurations."""
    got = measured_dtype(meta)
    want = measured_dtype({"dtype": priced}) if isinstance(priced, str) else None
    if got is None or want is None:
        return None
    return {"measured": got, "priced": want, "same": got == want}


def dtype_warning(dc: Mapping[str, Any] | None) -> str | None:
    """One line saying the points were measured in another dtype than the priced one, or None."""
    if not dc or dc["same"]:
        return None
    return (f"the points were measured in {dc['measured']}; the step model prices {dc['priced']} (other bytes per "
            f"weight and KV element, other peak FLOP/s); measure in {dc['priced']} (`rollout profile --dtype "
            f"{dc['priced']}`) or give dtype={dc['measured']} in --step-model")


# the step features a calibration's points span (its measured range): requests, their query and
# draft tokens, the KV tokens a step attends over
RANGE_FEATURES = ("running", "decode_tokens", "draft_tokens", "context_tokens")


def measured_range(rows: Iterable[Mapping[str, float]]) -> dict[str, list[float]]:
    """{feature: [lo, hi]} the points span (RANGE_FEATURES): read as a fitted profile's
    valid_range is (fitted_step_model.extrapolation flags steps beyond it)."""
    f = point_features(rows)
    return {k: [float(np.min(f[k])), float(np.max(f[k]))] for k in RANGE_FEATURES}


def point_features(rows: Iterable[Mapping[str, float]]) -> dict[str, np.ndarray]:
    """Step FEATURES of the points: B decoding requests verifying q - 1 drafts each over C context tokens."""
    B = np.array([r["B"] for r in rows], dtype=float)
    q = np.array([r["q"] for r in rows], dtype=float)
    C = np.array([r["C"] for r in rows], dtype=float)
    spec = (q > 1).astype(float)
    return {"decode_tokens": B, "draft_tokens": B * (q - 1), "context_tokens": B * C, "running": B,
            "spec_requests": B * spec, "speculative": spec}


def predicted_seconds(model, rows) -> tuple[np.ndarray, str]:
    """The model's time of each point and what it is ("device" or "step")."""
    feats = point_features(rows)
    if hasattr(model, "device_time"):
        return np.atleast_1d(np.asarray(model.device_time(**feats), dtype=float)), "device"
    return np.atleast_1d(np.asarray(model.predict(**feats), dtype=float)), "step"


def point_report(model, rows: list[Mapping[str, float]]) -> dict[str, Any]:
    """Per point: measured / predicted ms, error, and for q > 1 the verify/decode ratios and
    their error; summary: median and max |error|, median and max |ratio error|."""
    meas = np.array([r["ms"] for r in rows], dtype=float) / 1e3
    pred, basis = predicted_seconds(model, rows)
    pred = np.broadcast_to(pred, meas.shape)
    base = {(r["B"], r["C"]): i for i, r in enumerate(rows) if r["q"] == 1}
    table = []
    for i, r in enumerate(rows):
        row = {"B": int(r["B"]), "q": int(r["q"]), "C": int(r["C"]), "measured_ms": float(meas[i] * 1e3),
               "predicted_ms": float(pred[i] * 1e3), "error": float(pred[i] / meas[i] - 1.0),
               "measured_ratio": None, "predicted_ratio": None, "ratio_error": None}
        j = base.get((r["B"], r["C"]))
        if r["q"] > 1 and j is not None:
            mr, pr = meas[i] / meas[j], pred[i] / pred[j]
            row.update(measured_ratio=float(mr), predicted_ratio=float(pr), ratio_error=float(pr / mr - 1.0))
        table.append(row)
    err = np.abs([t["error"] for t in table])
    rerr = np.abs([t["ratio_error"] for t in table if t["ratio_error"] is not None])
    return {"basis": basis, "points": table,
            "summary": {"points": len(table), "ratios": int(rerr.size),
                        "median_abs_error": float(np.median(err)), "max_abs_error": float(np.max(err)),
                        "median_error": float(np.median([t["error"] for t in table])),
                        "median_abs_ratio_error": float(np.median(rerr)) if rerr.size else None,
                        "max_abs_ratio_error": float(np.max(rerr)) if rerr.size else None}}


def format_points(rep: Mapping[str, Any]) -> str:
    s = rep["summary"]
    lines = [f"{s['points']} measured points, compared on {rep['basis']} time: |error| median {s['median_abs_error']:.1%} "
             f"max {s['max_abs_error']:.1%}" + (f"; verify/decode ratio |error| median {s['median_abs_ratio_error']:.1%} "
                                                f"max {s['max_abs_ratio_error']:.1%} ({s['ratios']} ratios)"
                                                if s["ratios"] else ""),
             f"  {'B':>5} {'q':>3} {'C':>7} {'measured ms':>12} {'model ms':>10} {'error':>7}  "
             f"{'ratio meas':>10} {'ratio model':>11} {'ratio err':>9}"]
    for t in rep["points"]:
        rat = (f"{t['measured_ratio']:10.3f} {t['predicted_ratio']:11.3f} {t['ratio_error']:+9.1%}"
               if t["ratio_error"] is not None else f"{'':10} {'':11} {'':9}")
        lines.append(f"  {t['B']:5d} {t['q']:3d} {t['C']:7d} {t['measured_ms']:12.3f} {t['predicted_ms']:10.3f} "
                     f"{t['error']:+7.1%}  {rat}")
    return "\n".join(lines)
