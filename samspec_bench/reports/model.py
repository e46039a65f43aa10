"""What a report is made of: headlines and gates (plain dicts, as they are embedded in the report's
JSON), figures, runs, the runs of one suite, and the report itself. `collect` fills these in;
the HTML and Markdown renderers only read them.

    headline = {"name": str, "value": number | str | bool | None, "ci": [lo, hi] | None, "note": str | None}
    gate     = {"name": str, "passed": bool | None, "value": ..., "threshold": ..., "note": str | None}
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

Headline = dict
Gate = dict
Summarizer = Callable[[dict], "tuple[list[Headline], list[Gate]]"]
SUMMARY_HEADLINES = 6   # headlines shown per suite in the summary table at the top


def headline(name: str, value: Any, ci: Any = None, note: str | None = None) -> Headline:
    return {"name": name, "value": value, "ci": list(ci) if ci is not None else None, "note": note}


def gate(name: str, passed: bool | None, value: Any = None, threshold: Any = None, note: str | None = None) -> Gate:
    return {"name": name, "passed": passed, "value": value, "threshold": threshold, "note": note}


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
    data: bytes | None       # None when the file is missing
    note: str | None = None

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
                          "gates": r.gates, "figures": [f.name for f in r.figures], "result": r.result}
                         for r in g.runs],
                "comparison": g.comparison,
            } for g in self.groups],
        }
