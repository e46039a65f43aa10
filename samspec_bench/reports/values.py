"""JSON values as the report reads them: what counts as a number, and nested dicts flattened to
dotted names. The lowest module of the reports package: summaries, comparisons, tables and
renderers all use it, and it uses none of them."""

from __future__ import annotations

import math
from typing import Any


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def number(v: Any) -> float | None:
    """v as a float when it is a finite number, else None."""
    return float(v) if is_number(v) else None


def flatten(obj: Any, prefix: str = "", max_list: int = 16) -> dict[str, Any]:
    """Nested dicts to {"a.b.c": scalar}; short lists of scalars to "a[0]"...; long lists and
    lists of dicts are left out (they are tables, not metrics)."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k in obj:
            key = f"{prefix}.{k}" if prefix else str(k)
            out.update(flatten(obj[k], key, max_list))
    elif isinstance(obj, (list, tuple)):
        if len(obj) <= max_list and all(not isinstance(v, (dict, list, tuple)) for v in obj):
            for i, v in enumerate(obj):
                out[f"{prefix}[{i}]"] = v
    else:
        out[prefix] = obj
    return out
