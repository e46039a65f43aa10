"""A modelled figure over several draws: its median and range, how it prints, and whether a
published figure is "matched" (inside the range) or how far it lies from the range's nearest end.

A spread is a plain dict, as result.json stores it:
    {"median": m, "min": lo, "max": hi, "n": draws with a value, "values": [one per draw, None kept]}
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np


def spread(values: Iterable[Any]) -> dict[str, Any]:
    """Median, min and max of the draws' values (None and NaN left out of the statistics, kept in
    `values`); median/min/max None when no draw has a value."""
    vals = [None if v is None or (isinstance(v, float) and np.isnan(v)) else float(v) for v in values]
    ok = [v for v in vals if v is not None]
    if not ok:
        return {"median": None, "min": None, "max": None, "n": 0, "values": vals}
    return {"median": float(np.median(ok)), "min": min(ok), "max": max(ok), "n": len(ok), "values": vals}


def mapped(sp: dict[str, Any] | None, f: Callable[[float], float]) -> dict[str, Any] | None:
    """The spread of f(value) per draw (f monotone or not: recomputed from the values)."""
    if sp is None:
        return None
    return spread(None if v is None else f(v) for v in sp["values"])


def single(value: Any) -> dict[str, Any]:
    """A one-draw spread (a figure that was not drawn several times)."""
    return spread([value])


def matched(published: float | None, sp: dict[str, Any] | None) -> tuple[bool | None, float | None]:
    """(matched, gap): matched when min <= published <= max (edges included), gap 0 then; else
    the gap from the published figure to the range's nearest end, in the modelled - published
    sense (negative: the whole range lies below the published figure). (None, None) when either
    side is missing."""
    if published is None or sp is None or sp.get("median") is None:
        return None, None
    lo, hi = sp["min"], sp["max"]
    if lo <= published <= hi:
        return True, 0.0
    return False, (lo - published) if published < lo else (hi - published)


def fmt(sp: dict[str, Any] | None, spec: str = ".3f", unit: str = "") -> str:
    """'3.99 [1.64, 4.83]' (median [min, max]), the unit after the median; a one-draw spread
    prints its value alone; 'n/a' without a value."""
    if sp is None or sp.get("median") is None:
        return "n/a"
    med = f"{sp['median']:{spec}}{unit}"
    if sp.get("n", 1) <= 1:
        return med
    return f"{med} [{sp['min']:{spec}}, {sp['max']:{spec}}]"


def of(m: dict[str, Any], key: str) -> dict[str, Any] | None:
    """An arm's figure `key` as a spread: its `spread` entry, else the arm's own value as one draw
    (results without draws, measured arms)."""
    sp = (m.get("spread") or {}).get(key)
    if sp is not None:
        return sp
    return single(m[key]) if m.get(key) is not None else None
