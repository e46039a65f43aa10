"""Two sets of measured step points side by side: the {B, q, C, ms} rows of `rollout profile
--engine torch` (one or more JSONL files) against an independent measurement of the same device
and model shape (e.g. ../shared/data/hardware/h100_qwen3-8b_step_physics.jsonl), point by point.

    python tools/compare_step_points.py OURS.jsonl [OURS2.jsonl ...] --against THEIRS.jsonl [--json OUT]

Prints one line per shared (B, q, C) point (ours, theirs, ours / theirs) and the median and range
of the ratios; points only one side has are counted, not dropped silently. Exit 2 when no point is
shared or a file is unreadable. The devices named in the files' meta lines are compared, and a
pair measured on different devices is flagged. The two measure different programs (a transformers model with its
rotary embedding and KV writes against a hand-written layer stack), so the ratio is reported, not
bounded."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from samspec_bench.bench.simulation.measured_points import load_points
from samspec_bench.errors import UserError


def compare(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per shared point {B, q, C, ours_ms, theirs_ms, ratio}; the ratio's median, min, max; the
    points only one side has."""
    key = lambda r: (int(r["B"]), int(r["q"]), int(r["C"]))  # noqa: E731 - a point's identity
    mine, other = {key(r): r["ms"] for r in ours}, {key(r): r["ms"] for r in theirs}
    both = sorted(set(mine) & set(other))
    rows = [{"B": b, "q": q, "C": c, "ours_ms": mine[(b, q, c)], "theirs_ms": other[(b, q, c)],
             "ratio": round(mine[(b, q, c)] / other[(b, q, c)], 4)} for b, q, c in both]
    ratios = [r["ratio"] for r in rows]
    summary = ({"median": round(float(np.median(ratios)), 4), "min": min(ratios), "max": max(ratios)}
               if ratios else None)
    return {"points": rows, "ratio": summary, "only_ours": len(set(mine) - set(other)),
            "only_theirs": len(set(other) - set(mine))}


def device_name(meta: dict[str, Any]) -> str | None:
    """The device a points file says it was measured on: meta.device as text, or its "name"."""
    dev = meta.get("device")
    return (dev.get("name") or dev.get("device")) if isinstance(dev, dict) else dev


def main(argv: list[str]) -> int:
    if "--against" not in argv or argv.index("--against") in (0, len(argv) - 1):
        print("usage: compare_step_points.py OURS.jsonl [...] --against THEIRS.jsonl [--json OUT]", file=sys.stderr)
        return 2
    i = argv.index("--against")
    out = argv[argv.index("--json") + 1] if "--json" in argv[i:-1] else None
    try:
        loaded = [load_points(p) for p in argv[:i]]
        theirs, meta = load_points(argv[i + 1])
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ours = [r for rows, _ in loaded for r in rows]
    res = compare(ours, theirs)
    mine = sorted({str(device_name(m)) for _, m in loaded})
    other = str(device_name(meta))
    # a ratio across two kinds of device compares the machines, not the two programs: say so
    res["devices"] = {"ours": mine, "theirs": other, "same": mine == [other] and other != "None"}
    if not res["points"]:
        print(f"error: --against {argv[i + 1]}: no (B, q, C) point in common with {', '.join(argv[:i])}; measure "
              "the same grid", file=sys.stderr)
        return 2
    for r in res["points"]:
        print(f"B={r['B']:<4} q={r['q']:<3} C={r['C']:<6} ours {r['ours_ms']:9.3f} ms  theirs {r['theirs_ms']:9.3f} ms"
              f"  ratio {r['ratio']:.3f}")
    s = res["ratio"]
    print(f"ours / theirs over {len(res['points'])} shared points: median {s['median']:.3f} [{s['min']:.3f}, "
          f"{s['max']:.3f}]; only ours {res['only_ours']}, only theirs {res['only_theirs']}")
    same = "the same device" if res["devices"]["same"] else \
        "NOT the same device (or not stated): the ratio compares the machines as well as the programs"
    print(f"ours on {', '.join(mine)}; theirs on {other}: {same}")
    if out:
        Path(out).write_text(json.dumps({**res, "theirs_meta": meta}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
