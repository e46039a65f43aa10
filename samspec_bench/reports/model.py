"""What a report is made of: headlines and gates (plain dicts, as they are embedded in the report's
JSON), figures, runs, the runs of one suite, and the report itself. `collect` fills these in;
the HTML and Markdown renderers only read them.

    headline = {"name": str, "value": number | str | bool | None, "ci": [lo, hi] | None, "note": str | None}
    gate     = {"name": str, "passed": bool | None, "value": ..., "threshold": ..., "note": str | None}
               (+ "unknown": True, "result": why, when its value could not be judged: `unknown_gate`)
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from samspec_bench.reports.values import is_number

Headline = dict
Gate = dict
Summarizer = Callable[[dict], "tuple[list[Headline], list[Gate]]"]
SUMMARY_HEADLINES = 6   # headlines shown per suite in the summary table at the top


def headline(name: str, value: Any, ci: Any = None, note: str | None = None) -> Headline:
    return {"name": name, "value": value, "ci": list(ci) if ci is not None else None, "note": note}


def gate(name: str, passed: bool | None, value: Any = None, threshold: Any = None, note: str | None = None) -> Gate:
    return {"name": name, "passed": passed, "value": value, "threshold": threshold, "note": note}


NOT_FINITE = "unknown (value not a finite number)"
NOT_BOOLEAN = "unknown (value not true or false)"


def unknown_gate(name: str, value: Any, threshold: Any = None, note: str | None = None, why: str = NOT_FINITE) -> Gate:
    """A gate whose value cannot be judged (NaN / Infinity, read as null; text such as "50%"):
    shown as `why` and counted as failed, so that a damaged value never passes --fail-on-gate."""
    seen = "null in result.json (NaN / Infinity are read as null)" if value is None else f"value {value!r}"
    g = gate(name, False, value, threshold, seen + (f"; {note}" if note else ""))
    g.update(unknown=True, result=why)
    return g


def number_gate(name: str, obj: Any, key: str, passes: Callable[[float], bool], threshold: Any,
                note: str | None = None) -> list[Gate]:
    """The gate on obj[key] as a list: [] when the key is absent (the bar does not apply), the
    verdict of `passes` on a finite number, else an unknown gate (failed)."""
    if not isinstance(obj, dict) or key not in obj:
        return []
    v = obj[key]
    if not is_number(v):
        return [unknown_gate(name, v, threshold, note)]
    return [gate(name, bool(passes(v)), v, threshold, note)]


def flag_gate(name: str, obj: Any, key: str, note: str | None = None) -> list[Gate]:
    """The gate on a true/false obj[key]: [] when absent, passed = the value, else unknown (failed)."""
    if not isinstance(obj, dict) or key not in obj:
        return []
    v = obj[key]
    if not isinstance(v, bool):
        return [unknown_gate(name, v, True, note, why=NOT_BOOLEAN)]
    return [gate(name, v, v, True, note)]


def gate_result(g: Gate) -> str:
    """A gate's result as a renderer names it: pass, fail, n/a, or its 'unknown (...)' reason."""
    if g.get("unknown"):
        return str(g.get("result") or NOT_FINITE)
    return "pass" if g.get("passed") is True else "fail" if g.get("passed") is False else "n/a"


def status(gates: list[Gate]) -> str:
    """'fail' if a gate failed, 'pass' if all passed, 'no gates' when there are none."""
    if any(g.get("passed") is False for g in gates):
        return "fail"
    if any(g.get("passed") is True for g in gates):
        return "pass"
    return "no gates"


@dataclass
class Figure:
    name: str
    mime: str | None
    data: bytes | None       # None when not embedded (missing, not an image)
    note: str | None = None
    why: str | None = None   # why not embedded: "missing", "not an image", "not an image type", "unreadable"

    def data_uri(self) -> str | None:
        if self.data is None or self.mime is None:
            return None
        return f"data:{self.mime};base64," + base64.b64encode(self.data).decode("ascii")


@dataclass
class Run:
    path: Path               # as given (relative paths stay relative: deterministic output)
    result: dict
    label: str = ""          # A, B, ... within its suite
    name: str = ""           # directory name (parent/name when two runs share a name)
    headlines: list = field(default_factory=list)
    gates: list = field(default_factory=list)
    figures: list = field(default_factory=list)
    notes: list = field(default_factory=list)   # what in its result.json the report could not use as it is

    @property
    def suite(self) -> str:
        return str(self.result.get("suite") or "unknown")

    @property
    def status(self) -> str:
        return status(self.gates)


@dataclass
class SuiteGroup:
    suite: str
    runs: list[Run]
    comparison: dict | None = None

    @property
    def status(self) -> str:
        sts = [r.status for r in self.runs]
        if "fail" in sts:
            return "fail"
        if "pass" in sts:
            return "pass"
        return "no gates"


@dataclass
class Report:
    inputs: list[str]
    groups: list[SuiteGroup]
    run_states: list[dict]   # {"path", "state"} of `samspec-bench run` outputs among the inputs
    title: str = "samspec-bench report"
    unreadable: list[dict] = field(default_factory=list)   # {"path", "reason"}: runs / states left out

    @property
    def runs(self) -> list[Run]:
        return [r for g in self.groups for r in g.runs]

    def data(self) -> dict:
        """The machine-readable content embedded in the report."""
        return {
            "format": "samspec-bench-report/1",
            "inputs": self.inputs,
            "run_states": self.run_states,
            "unreadable": self.unreadable,
            "suites": [{
                "suite": g.suite, "status": g.status,
                "runs": [{"label": r.label, "path": str(r.path), "status": r.status, "headlines": r.headlines,
                          "gates": r.gates, "figures": [f.name for f in r.figures], "notes": r.notes,
                          "result": r.result}
                         for r in g.runs],
                "comparison": g.comparison,
            } for g in self.groups],
        }
