"""The same report as Markdown (for a pull request, a wiki page or a terminal): summary, steps,
per-suite gates, headline numbers and comparisons, tables, run metadata.

Figures are linked by their path relative to the Markdown file (so they show wherever the run
directories travel with it); `embed_figures=True` inlines them as data URIs instead (a larger
file that many viewers, though not GitHub, display). Deterministic, like the HTML report.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from samspec_bench.reports.answers import Answer, answer_sets
from samspec_bench.reports.fmt import fmt, fmt_headline, run_setting, threads_text
from samspec_bench.reports.metadata import data_files, metadata_rows
from samspec_bench.reports.model import SUMMARY_HEADLINES, Report, Run, SuiteGroup, gate_result
from samspec_bench.reports.pricing import figure_basis
from samspec_bench.reports.source_tables import SHOWN_KEYS, draft_source_tables
from samspec_bench.reports.tables import Table, shape_tables
from samspec_bench.output_paths import check_output_file
from samspec_bench.results import atomic_write_text

MAX_TABLE_ROWS = 40


def _c(x: Any) -> str:
    """A table cell: pipes and newlines escaped."""
    return str(x).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _table(columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    cols = list(columns)
    lines = ["| " + " | ".join(_c(c) for c in cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_c(x) for x in r) + " |")
    return "\n".join(lines) + "\n"


def _status(s: str) -> str:
    return {"pass": "**PASS**", "fail": "**FAIL**"}.get(s, s)


def _gate(p: Any) -> str:
    """A gate's result from its `passed` (True / False / None), or "unknown" (run_comparison)."""
    if p == "unknown":
        return "**unknown**"
    return "PASS" if p is True else "**FAIL**" if p is False else "n/a"


def _gate_result(g: dict) -> str:
    """A run's gate: PASS / FAIL / n/a, or its 'unknown (...)' reason (counted as failed)."""
    return f"**{gate_result(g)}**" if g.get("unknown") else _gate(g.get("passed"))


def _delta(d: Any, rel: Any) -> str:
    if d is None:
        return ""
    s = f"{'+' if d > 0 else ''}{fmt(d)}"
    if rel is not None:
        s += f" ({'+' if rel > 0 else ''}{rel * 100:.1f}%)"
    return s


def _comparison_rows(rows: list[dict], labels: list[str], with_ci: bool = False) -> str:
    out = []
    for r in rows:
        vals = []
        for i, v in enumerate(r["values"]):
            ci = (r.get("ci") or [None] * len(labels))[i] if with_ci else None
            vals.append(fmt(v) + (f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else ""))
        out.append([r["name"], *vals, *(_delta(d, rel) for d, rel in zip(r["diffs"][1:], r["rel"][1:]))])
    return _table(["name", *labels, *(f"Δ {lab}−{labels[0]}" for lab in labels[1:])], out)


def _render_table(t: Table) -> str:
    rows = t.rows[:MAX_TABLE_ROWS]
    more = f"\n_{len(t.rows) - len(rows)} more rows in the HTML report's embedded data._\n" if len(t.rows) > len(rows) else ""
    return f"**{t.title}**\n\n" + _table(t.columns, ([fmt(v) for v in r] for r in rows)) + more + "\n"


def _answer_md(a: Answer, level: str) -> str:
    """One answer: the question and its verdict, the sentence, a line per check, the source."""
    out = [f"{level} {a.question} — {a.badge}\n\n{a.text}\n\n"]
    for c in a.checks:
        out.append(f"- **{c.name}** — {c.badge}: {c.text}" + (f"  \n  _Source: {c.source}_" if c.source else "")
                   + "\n")
    if a.checks:
        out.append("\n")
    if a.source:
        out.append(f"_Source: {a.source}_\n\n")
    return "".join(out)


class _Renderer:
    def __init__(self, report: Report, out_dir: Path | None, embed_figures: bool, tables: bool):
        self.report = report
        self.out_dir = out_dir
        self.embed = embed_figures
        self.tables = tables

    def figure_ref(self, run: Run, name: str) -> str:
        path = Path(run.path) / name
        if self.out_dir is None:
            return path.as_posix()
        base = self.out_dir if self.out_dir.is_absolute() else Path(os.path.abspath(self.out_dir))
        target = path if path.is_absolute() else Path(os.path.abspath(path))
        return Path(os.path.relpath(target, base)).as_posix()

    def answers(self) -> str:
        """The three answers first, in plain text: one block per answer set (a single one, or one
        per compared `run` folder: see answers.answer_sets)."""
        sets = answer_sets(self.report)
        out = ["## Answers\n\n"]
        if len(sets) == 1:
            out.append(f"_Answers from {sets[0].title}. {sets[0].note + ' ' if sets[0].note else ''}"
                       "The evidence follows below._\n\n")
            out.extend(_answer_md(a, "###") for a in sets[0].answers)
            return "".join(out)
        out.append(f"_Answers of {len(sets)} `samspec-bench run` folders (each from its newest run of each suite); "
                   "the evidence follows below._\n\n")
        out.append(_table(["question", *(s.title for s in sets)],
                          [[a.question, *(s.answers[i].badge for s in sets)]
                           for i, a in enumerate(sets[0].answers)]) + "\n")
        for s in sets:
            out.append(f"### {s.title}\n\n" + "".join(_answer_md(a, "####") for a in s.answers))
        return "".join(out)

    def summary(self) -> str:
        rows = []
        for g in self.report.groups:
            last = g.runs[-1]
            heads = "; ".join([f"{h['name']}: {fmt_headline(h)}" for h in last.headlines if h.get("value") is not None][:SUMMARY_HEADLINES])
            ngates = sum(len(r.gates) for r in g.runs)
            npass = sum(1 for r in g.runs for x in r.gates if x.get("passed") is True)
            rows.append([g.suite, _status(g.status), len(g.runs), f"{npass}/{ngates}", heads or "–"])
        return "## Summary\n\n" + _table(["suite", "status", "runs", "gates passed", "headline numbers"], rows) + "\n"

    def unreadable(self) -> str:
        if not self.report.unreadable:
            return ""
        return ("## Runs that could not be read\n\n"
                + _table(["path", "reason"], [[f"`{u['path']}`", u["reason"]] for u in self.report.unreadable]) + "\n")

    def steps(self) -> str:
        out = []
        for rs in self.report.run_states:
            state = rs["state"]
            st = state.get("settings") or {}
            out.append(f"## Steps of samspec-bench run\n\n`{rs['path']}`: model `{run_setting(st, 'model', 'default')}`, "
                       f"engine `{run_setting(st, 'engine', 'default')}`, data `{st.get('data_dir') or 'built-in workload'}`"
                       f"{threads_text(state.get('threads'))}\n\n")
            rows = []
            for name, s in (state.get("steps") or {}).items():
                cmd = s.get("command") or ""
                notes = "; ".join(x for x in [s.get("reason") or "", *(s.get("notes") or [])] if x)
                rows.append([name, s.get("status", ""), fmt(s.get("seconds")), fmt(s.get("cpu_seconds")), notes,
                             f"`{cmd}`" if cmd else ""])
            out.append(_table(["step", "status", "wall s", "CPU s", "reason / notes", "command"], rows) + "\n")
        return "".join(out)

    def run_section(self, g: SuiteGroup, run: Run) -> str:
        title = f"Run {run.label}: {run.name}" if len(g.runs) > 1 else f"Run: {run.name}"
        out = [f"### {title} ({_status(run.status)})\n\n"]
        out.extend(f"> **Note:** {n}\n\n" for n in run.notes)
        if run.gates:
            out.append(_table(["gate", "result", "value", "threshold", "note"],
                              [[x["name"], _gate_result(x), fmt(x.get("value")), fmt(x.get("threshold")),
                                x.get("note") or ""] for x in run.gates]) + "\n")
        else:
            out.append("_No pass/fail gate for this run._\n\n")
        if run.headlines:
            out.append(_table(["headline", "value", "note"],
                              [[h["name"], fmt_headline(h), h.get("note") or ""] for h in run.headlines]) + "\n")
        for f in run.figures:
            if f.data is None:
                out.append(f"_figure {f.name}: {f.note}_\n\n")
            elif self.embed:
                out.append(f"![{run.suite} {run.label}: {f.name}]({f.data_uri()})\n\n")
            else:
                out.append(f"![{run.suite} {run.label}: {f.name}]({self.figure_ref(run, f.name)})\n\n")
            if f.data is not None:
                out.append(f"_{run.suite} {run.label}: {f.name} ({figure_basis(run)})_\n\n")
        sources = draft_source_tables(run.result)
        out.extend(_render_table(t) for t in sources)
        if self.tables:
            metrics = run.result.get("metrics") or {}
            tables = {k: v for k, v in (run.result.get("tables") or {}).items() if not (sources and k in SHOWN_KEYS)}
            if metrics or tables:
                out.append("<details><summary>Metrics and tables</summary>\n\n")
                if metrics:
                    out.extend(_render_table(t) for t in shape_tables("metrics", metrics))
                for name in tables:
                    out.extend(_render_table(t) for t in shape_tables(name, tables[name]))
                out.append("</details>\n\n")
        return "".join(out)

    def comparison(self, g: SuiteGroup) -> str:
        c = g.comparison
        if not c:
            return ""
        labels = c["labels"]
        out = [f"### Comparison of {len(g.runs)} runs (baseline {labels[0]})\n\n",
               _table(["run", "directory", "created", "git revision", "status"],
                      [[r.label, str(r.path), r.result.get("created"),
                        str((r.result.get("environment") or {}).get("git_revision"))[:12], _status(r.status)]
                       for r in g.runs]) + "\n"]
        if c["config"]:
            out.append("**What differs: configuration**\n\n" + _comparison_rows(c["config"], labels) + "\n")
        if c["environment"]:
            out.append("**What differs: environment**\n\n" + _comparison_rows(c["environment"], labels) + "\n")
        if c["gates"]:
            out.append("**Gates**\n\n" + _table(["gate", *labels], [[r["name"], *(_gate(v) for v in r["values"])]
                                                                    for r in c["gates"]]) + "\n")
        if c["headlines"]:
            out.append("**Headline numbers**\n\n" + _comparison_rows(c["headlines"], labels, with_ci=True) + "\n")
        return "".join(out)

    def metadata(self) -> str:
        out = ["## Run metadata\n\n"]
        for g in self.report.groups:
            for run in g.runs:
                rows = [[k, v] for k, v in metadata_rows(run)]
                files = data_files(run.result)
                rows.append(["data files", "; ".join(f"{f} (sha256 {h})" for f, h in files) if files else "none recorded"])
                out.append(f"### {g.suite} {run.label}: {run.name}\n\n" + _table(["field", "value"], rows) + "\n")
                cfg = json.dumps(run.result.get("config"), indent=2, sort_keys=True)
                out.append(f"<details><summary>config</summary>\n\n```json\n{cfg}\n```\n\n</details>\n\n")
        return "".join(out)

    def render(self) -> str:
        r = self.report
        overall = "fail" if any(g.status == "fail" for g in r.groups) else \
            "pass" if any(g.status == "pass" for g in r.groups) else "no gates"
        out = [f"# {r.title} ({_status(overall)})\n\n",
               f"{len(r.runs)} runs of {len(r.groups)} suites from {', '.join(r.inputs)}.\n\n",
               self.answers(), self.summary(), self.unreadable(), self.steps()]
        for g in r.groups:
            out.append(f"## {g.suite} ({_status(g.status)})\n\n")
            out.append(self.comparison(g))
            out.extend(self.run_section(g, run) for run in g.runs)
        out.append(self.metadata())
        return "".join(out).rstrip("\n") + "\n"


def render_markdown(report: Report, out_dir: str | Path | None = None, embed_figures: bool = False,
                    tables: bool = True) -> str:
    return _Renderer(report, Path(out_dir) if out_dir is not None else None, embed_figures, tables).render()


def write_markdown(report: Report, out: str | Path, embed_figures: bool = False) -> Path:
    out = check_output_file(out, "--output", "report.md")
    return atomic_write_text(out, render_markdown(report, out.parent, embed_figures), option="--output")
