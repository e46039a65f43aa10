"""Number formatting shared by the renderers (and the summaries' notes): short and stable, so
the same result always reads the same."""

from __future__ import annotations

import json
import math
from typing import Any


def fmt(value: Any) -> str:
    """A short, stable text for a value: floats to 4 significant digits, tiny ones in e-notation."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == 0:
            return "0"
        a = abs(value)
        if a < 1e-3 or a >= 1e7:
            return f"{value:.3g}"
        if a >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        if len(value) <= 8 and all(not isinstance(v, (dict, list)) for v in value):
            return "[" + ", ".join(str(v) if isinstance(v, int) and not isinstance(v, bool) else fmt(v)
                                   for v in value) + "]"
        return json.dumps(value, sort_keys=True)[:200]
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)[:200]
    return str(value)


def fmt_headline(h: dict) -> str:
    """A headline's value, with its interval when it has one: "0.1 [0.05, 0.2]"."""
    s = fmt(h.get("value"))
    ci = h.get("ci")
    if ci and len(ci) == 2:
        s += f" [{fmt(ci[0])}, {fmt(ci[1])}]"
    return s


def pct(x: float) -> str:
    """A fraction as a percentage: 0.1234 -> "12.3 %"."""
    return f"{100 * x:.1f} %"


def pts(x: float | None, sign: str = "") -> str:
    """A fraction as percentage points: 0.123 -> "12.3" ("+12.3" with sign="+"); "–" when missing."""
    return "–" if x is None or not math.isfinite(x) else f"{100 * x:{sign}.1f}"


def x2(v: Any) -> str:
    """A ratio with two decimals (speedups, tokens per step); "–" when missing."""
    return f"{v:.2f}" if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else "–"


def run_setting(settings: dict, key: str, default: str) -> str:
    """A `samspec-bench run` setting as the report shows it: its value; 'none' where no
    selected step used it (run_state's `not_used`); else `default`."""
    value = settings.get(key)
    if value is None and key in (settings.get("not_used") or {}):
        return "none (no selected step uses it)"
    return str(value) if value is not None else default


def threads_text(chosen: Any) -> str:
    """`samspec-bench run`'s torch-thread choice (run_state.json "threads") as a clause:
    ", torch threads 1 (2 cores available, load average 7.4 when the run started)"; "" without one."""
    if not isinstance(chosen, dict) or not chosen.get("threads"):
        return ""
    if "cores" not in chosen:
        return f", torch threads {chosen['threads']}"
    return (f", torch threads {chosen['threads']} ({chosen['cores']} cores available, load average "
            f"{fmt(chosen.get('load_avg_1m'))} when the run started)")


def accept_setting(m: dict) -> str:
    """An accept configuration in words: "sam k=3, own context"."""
    src = str(m.get("sources") or "own")
    src = {"own": "own context", "own+group": "own context + GRPO siblings"}.get(src.split("(")[0], src)
    return f"{m.get('drafter')} k={m.get('k')}, {src}"
