"""Several runs of one suite side by side: headlines, gates, every numeric metric, and what
differs in their configuration and environment. The first run (A) is the baseline; each other
run's difference is `value - baseline` and its relative difference `(value - baseline) / |baseline|`.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from samspec_bench.reports.values import flatten, is_number


def diff(base: Any, value: Any) -> tuple[float | None, float | None]:
    """(value - base, (value - base) / |base|); None where not both numbers (or base is 0)."""
    if not (is_number(base) and is_number(value)):
        return None, None
    d = value - base
    return d, (d / abs(base) if base != 0 else None)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def compare_rows(names: Sequence[str], values: Sequence[dict[str, Any]], only_changed: bool = False) -> list[dict]:
    """One row per name: the runs' values, differences against the first run, and whether any
    run differs from it. A name missing from a run has the value None there."""
    rows = []
    for name in names:
        vals = [v.get(name) for v in values]
        diffs, rels = [None], [None]
        for v in vals[1:]:
            d, r = diff(vals[0], v)
            diffs.append(d)
            rels.append(r)
        changed = any(not _same(vals[0], v) for v in vals[1:])
        if only_changed and not changed:
            continue
        rows.append({"name": name, "values": vals, "diffs": diffs, "rel": rels, "changed": changed})
    return rows


def _ordered_union(keys_lists: Sequence[Sequence[str]]) -> list[str]:
    seen: dict[str, None] = {}
    for keys in keys_lists:
        for k in keys:
            seen.setdefault(k, None)
    return list(seen)


def compare_runs(runs: Sequence[Any]) -> dict:
    """The comparison of runs (model.Run objects, or dicts with 'result', 'headlines',
    'gates', 'label') of one suite."""
    def get(r, key):
        return r[key] if isinstance(r, dict) else getattr(r, key)

    labels = [get(r, "label") for r in runs]
    results = [get(r, "result") for r in runs]

    heads = [{h["name"]: h.get("value") for h in get(r, "headlines")} for r in runs]
    cis = [{h["name"]: h.get("ci") for h in get(r, "headlines")} for r in runs]
    head_rows = compare_rows(_ordered_union([list(h) for h in heads]), heads)
    for row in head_rows:
        row["ci"] = [c.get(row["name"]) for c in cis]

    gates = [{g["name"]: "unknown" if g.get("unknown") else g.get("passed") for g in get(r, "gates")} for r in runs]
    gate_rows = compare_rows(_ordered_union([list(g) for g in gates]), gates)

    metrics = [flatten(res.get("metrics") or {}) for res in results]
    metric_rows = compare_rows(_ordered_union([list(m) for m in metrics]), metrics)
    numeric = [r for r in metric_rows if any(is_number(v) for v in r["values"])]

    configs = [flatten(res.get("config") or {}, max_list=64) for res in results]
    config_rows = compare_rows(sorted(_ordered_union([list(c) for c in configs])), configs, only_changed=True)
    # lists are flattened element-wise; show a changed list as one row as well
    for key in sorted({k for res in results for k, v in (res.get("config") or {}).items() if isinstance(v, list)}):
        vals = [(res.get("config") or {}).get(key) for res in results]
        if any(not _same(vals[0], v) for v in vals[1:]):
            config_rows = [r for r in config_rows if not r["name"].startswith(key + "[")]
            config_rows.append({"name": key, "values": vals, "diffs": [None] * len(vals),
                                "rel": [None] * len(vals), "changed": True})
    config_rows.sort(key=lambda r: r["name"])

    envs = []
    for res in results:
        env = res.get("environment") or {}
        e = {k: env.get(k) for k in ("git_revision", "python", "platform", "machine", "processor", "cpu_count")}
        for pkg, ver in sorted((env.get("packages") or {}).items()):
            e[f"packages.{pkg}"] = ver
        envs.append(e)
    env_rows = compare_rows(_ordered_union([list(e) for e in envs]), envs, only_changed=True)

    return {
        "labels": labels,
        "baseline": labels[0] if labels else None,
        "headlines": head_rows,
        "gates": gate_rows,
        "metrics": numeric,
        "config": config_rows,
        "environment": env_rows,
    }
