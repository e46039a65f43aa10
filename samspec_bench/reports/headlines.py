"""Headline numbers and pass/fail gates of one result: `summarize(result)`.

A small registry maps a suite name to `fn(result) -> (headlines, gates)` (the suites' own in
suite_headlines.py); suites without an entry get a generic summary (their scalar metrics). A
suite that writes its own `gates` list (or `headlines` list) into result.json is trusted first:
the registry only fills in what the suite did not say.
"""

from __future__ import annotations

from typing import Any, Callable

from samspec_bench.reports.model import NOT_BOOLEAN, Gate, Headline, Summarizer, gate, headline, unknown_gate
from samspec_bench.reports.suite_headlines import SUITE_SUMMARIZERS
from samspec_bench.reports.tool_headlines import TOOL_SUMMARIZERS
from samspec_bench.reports.values import is_number

REGISTRY: dict[str, Summarizer] = {**SUITE_SUMMARIZERS, **TOOL_SUMMARIZERS}
# suites whose summary sets pass/fail gates (a summary that cannot read their result leaves an unknown gate)
GATED_SUITES = frozenset({"accept", "drafters", "sampler", "op-equivalence", "accuracy", "dominance", "compare",
                          "curves"})
CHECK_SUFFIXES = ("_pass", "_passed", "_ok", "passed")   # a generic metric named like a check is a gate


def register(suite: str) -> Callable[[Summarizer], Summarizer]:
    def deco(fn: Summarizer) -> Summarizer:
        REGISTRY[suite] = fn
        return fn
    return deco


def summarize(result: dict) -> tuple[list[Headline], list[Gate]]:
    """Headlines and gates of one result; the suite's own lists (in result.json) come first."""
    suite = result.get("suite", "")
    fn = REGISTRY.get(suite, generic)
    try:
        heads, gates = fn(result)
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as e:
        # A result in an older or newer shape: fall back, and say so, rather than fail the report.
        heads, gates = generic(result)
        heads.insert(0, headline("summary", None, note=f"the {suite} summary could not read this result "
                                                       f"({type(e).__name__}: {e}); generic summary shown"))
        if suite in GATED_SUITES:   # its gates could not be judged: unknown, so the run does not pass
            gates.append(unknown_gate(f"the {suite} gates", None,
                                      why=f"unknown (the {suite} summary could not read this result)"))
    own_gates = result.get("gates")
    if isinstance(own_gates, list) and own_gates:
        gates = [_norm_gate(g) for g in own_gates if isinstance(g, dict)]
    own_heads = result.get("headlines")
    if isinstance(own_heads, list) and own_heads:
        heads = [headline(str(h.get("name")), h.get("value"), h.get("ci"), h.get("note"))
                 for h in own_heads if isinstance(h, dict)]
    return heads, gates


def _norm_gate(g: dict) -> Gate:
    passed = g.get("passed")
    return gate(str(g.get("name", "gate")), passed if isinstance(passed, bool) else None,
                g.get("value"), g.get("threshold"), g.get("note"))


def _ci_of(d: dict) -> list | None:
    for key in ("ci", "ci95", "interval", "ci_95"):
        v = d.get(key)
        if isinstance(v, (list, tuple)) and len(v) == 2 and all(is_number(x) for x in v):
            return list(v)
    for lo, hi in (("ci_low", "ci_high"), ("ci_lo", "ci_hi"), ("lo", "hi"), ("lower", "upper")):
        if is_number(d.get(lo)) and is_number(d.get(hi)):
            return [d[lo], d[hi]]
    return None


def generic(result: dict) -> tuple[list[Headline], list[Gate]]:
    """Any suite: its scalar metrics as headlines (values with an interval stay one headline),
    booleans named like a check (…_pass, …_passed, …_ok) as gates."""
    heads: list[Headline] = []
    gates: list[Gate] = []

    def walk(obj: Any, prefix: str) -> None:
        if isinstance(obj, dict):
            ci = _ci_of(obj)
            val = next((obj[k] for k in ("value", "mean", "diff", "estimate") if is_number(obj.get(k))), None)
            if ci is not None and val is not None:
                heads.append(headline(prefix, val, ci))
                return
            for k in obj:
                walk(obj[k], f"{prefix}.{k}" if prefix else str(k))
        elif prefix.rsplit(".", 1)[-1].endswith(CHECK_SUFFIXES) and not isinstance(obj, (dict, list)):
            gates.append(gate(prefix, obj, obj, True) if isinstance(obj, bool)
                         else unknown_gate(prefix, obj, True, why=NOT_BOOLEAN))
        elif isinstance(obj, bool):
            heads.append(headline(prefix, obj))
        elif is_number(obj) or isinstance(obj, str) or obj is None:
            heads.append(headline(prefix, obj))
        elif isinstance(obj, list) and len(obj) <= 8 and all(is_number(v) for v in obj):
            heads.append(headline(prefix, obj))

    walk(result.get("metrics") or {}, "")
    return heads, gates

