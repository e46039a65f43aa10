"""One self-contained HTML file from result directories.

Everything is inline: styles, figures (base64 `data:` images), and the machine-readable data
(a `<script type="application/json" id="samspec-data">` block: every result, headline, gate
and comparison). No script runs, nothing is fetched, there is no URL in the page. The output
depends only on the inputs (no time of rendering; stable ordering), so rendering twice gives
the same bytes.
"""

from __future__ import annotations

import html as _html
import json
import math
from pathlib import Path
from typing import Any, Iterable

from samspec_bench.reports.answers import Answer, AnswerSet, answer_sets
from samspec_bench.reports.fmt import fmt, fmt_headline, run_setting, threads_text
from samspec_bench.reports.metadata import data_files, metadata_rows
from samspec_bench.reports.model import SUMMARY_HEADLINES, Report, Run, SuiteGroup, gate_result
from samspec_bench.reports.pricing import figure_basis
from samspec_bench.reports.source_tables import SHOWN_KEYS, draft_source_tables
from samspec_bench.reports.tables import Table, shape_tables
from samspec_bench.reports.values import is_number
from samspec_bench.output_paths import check_output_file
from samspec_bench.results import atomic_write_text

MAX_TABLE_ROWS = 300    # longer tables are cut (every row is in the embedded data)
OPEN_TABLE_ROWS = 8     # tables up to this many rows are shown open, longer ones folded

CSS = """
:root { --fg:#1d2330; --muted:#5b6475; --line:#dde2ea; --bg:#ffffff; --panel:#f6f8fb;
        --pass:#16794a; --pass-bg:#e3f5ea; --fail:#b42318; --fail-bg:#fde8e6; --none:#5b6475; --none-bg:#eef1f5;
        --warn:#8a5300; --warn-bg:#fff1d1; --accent:#2952a3; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
       font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Liberation Sans", "DejaVu Sans", sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 64px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 36px 0 10px; padding-top: 12px; border-top: 2px solid var(--line); }
h3 { font-size: 15px; margin: 22px 0 8px; }
h4 { font-size: 13px; margin: 14px 0 6px; color: var(--muted); }
p.sub, .muted { color: var(--muted); }
code, .mono { font-family: "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace; font-size: 12px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 12.5px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px 4px 6px; text-align: left; vertical-align: top; }
th { background: var(--panel); font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.pos { color: var(--pass); } td.neg { color: var(--fail); }
tr.changed td:first-child { font-weight: 600; }
.wrap { overflow-x: auto; max-width: 100%; }
.badge { display:inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
         text-transform: uppercase; letter-spacing: .03em; white-space: nowrap; }
.badge.pass { color: var(--pass); background: var(--pass-bg); }
.badge.fail { color: var(--fail); background: var(--fail-bg); }
.badge.none { color: var(--none); background: var(--none-bg); }
table.summary td { padding: 7px 10px; }
table.summary td.heads { font-size: 12.5px; }
table.summary td.heads span { display: inline-block; margin: 0 14px 2px 0; white-space: nowrap; }
table.summary td.heads b { font-variant-numeric: tabular-nums; }
.figure { margin: 10px 0 18px; border: 1px solid var(--line); border-radius: 6px; padding: 8px; background: #fff; }
.figure img { max-width: 100%; height: auto; display: block; margin: 0 auto; }
.figure .cap { color: var(--muted); font-size: 12px; margin-top: 4px; text-align: center; }
details { margin: 6px 0 10px; }
summary { cursor: pointer; color: var(--accent); }
.kv th { width: 150px; }
.note { color: var(--muted); font-size: 12px; }
p.warn { color: var(--warn); background: var(--warn-bg); padding: 3px 8px; border-radius: 4px; font-size: 12.5px; }
nav.toc a { margin-right: 14px; color: var(--accent); text-decoration: none; }
.run { border-left: 3px solid var(--line); padding-left: 14px; margin-top: 16px; }
pre { background: var(--panel); padding: 10px; overflow-x: auto; font-size: 12px; border-radius: 4px; }
.badge.yes { color: var(--pass); background: var(--pass-bg); }
.badge.no { color: var(--fail); background: var(--fail-bg); }
.badge.partial { color: var(--warn); background: var(--warn-bg); }
.badge.unknown { color: var(--none); background: var(--none-bg); }
section.answers { margin: 14px 0 8px; }
.answer { border: 1px solid var(--line); border-left: 6px solid var(--none); border-radius: 6px;
          padding: 10px 14px 8px; margin: 0 0 10px; background: #fff; }
.answer.yes { border-left-color: var(--pass); } .answer.no { border-left-color: var(--fail); }
.answer.partial { border-left-color: var(--warn); }
.answer .q { font-size: 16px; font-weight: 650; margin: 0 0 3px; }
.answer .badge { text-transform: none; letter-spacing: 0; }
.answer .q .badge { font-size: 13px; margin-left: 8px; vertical-align: 2px; }
.answer p.a { font-size: 14.5px; margin: 2px 0 6px; }
.answer ul { list-style: none; margin: 0 0 4px; padding: 0; }
.answer li { margin: 3px 0; font-size: 13px; }
.answer li .badge { font-size: 11px; min-width: 112px; text-align: center; margin-right: 6px; }
.answer li b { margin-right: 4px; }
.prov { color: var(--muted); font-size: 11.5px; }
.prov::before { content: "source: "; font-weight: 600; }
table.answers-grid { width: 100%; table-layout: fixed; }
table.answers-grid td { vertical-align: top; padding: 6px; border: 0; }
table.answers-grid .answer { margin: 0; }
"""


def esc(x: Any) -> str:
    return _html.escape(str(x), quote=True)


def _badge(status: str) -> str:
    cls = {"pass": "pass", "fail": "fail"}.get(status, "none")
    return f'<span class="badge {cls}">{esc(status)}</span>'


def _gate_badge(passed: Any) -> str:
    """A gate's badge from its `passed` (True / False / None), or "unknown" (run_comparison)."""
    if passed == "unknown":
        return '<span class="badge fail">unknown</span>'
    return _badge("pass" if passed is True else "fail" if passed is False else "n/a")


def _gate_result(g: dict) -> str:
    """A run's gate: pass / fail / n/a, or its 'unknown (...)' reason (counted as failed)."""
    if g.get("unknown"):
        return f'<span class="badge fail">{esc(gate_result(g))}</span>'
    return _gate_badge(g.get("passed"))


def _anchor(suite: str) -> str:
    return "suite-" + "".join(c if c.isalnum() else "-" for c in suite)


def _cell(v: Any) -> str:
    cls = ' class="num"' if is_number(v) else ""
    return f"<td{cls}>{esc(fmt(v))}</td>"


def _table(columns: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """rows: already-rendered <td> strings."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join(f"<tr>{''.join(r)}</tr>" for r in rows)
    c = f' class="{cls}"' if cls else ""
    return f'<div class="wrap"><table{c}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def render_table(t: Table) -> str:
    rows = t.rows[:MAX_TABLE_ROWS]
    body = _table(t.columns, ([_cell(v) for v in r] for r in rows))
    more = (f'<p class="note">{len(t.rows) - len(rows)} more rows in the embedded data '
            f'(script#samspec-data)</p>' if len(t.rows) > len(rows) else "")
    n = len(t.rows)
    label = f"{esc(t.title)} <span class=\"note\">({n} row{'s' if n != 1 else ''})</span>"
    if n <= OPEN_TABLE_ROWS:
        return f"<h4>{label}</h4>{body}{more}"
    return f"<details><summary>{label}</summary>{body}{more}</details>"


def _delta(d: Any, rel: Any) -> str:
    if d is None:
        return "<td></td>"
    sign = "+" if d > 0 else ""
    text = f"{sign}{fmt(d)}"
    if rel is not None:
        text += f" ({'+' if rel > 0 else ''}{rel * 100:.1f}%)"
    return f'<td class="num">{esc(text)}</td>'


def render_comparison_rows(rows: list[dict], labels: list[str], with_ci: bool = False) -> str:
    cols = ["name"] + labels + [f"Δ {lab}−{labels[0]}" for lab in labels[1:]]
    out = []
    for r in rows:
        cells = [f"<td>{esc(r['name'])}</td>"]
        for i, v in enumerate(r["values"]):
            ci = (r.get("ci") or [None] * len(labels))[i] if with_ci else None
            text = fmt(v) + (f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "")
            cls = ' class="num"' if is_number(v) else ""
            cells.append(f"<td{cls}>{esc(text)}</td>")
        for d, rel in zip(r["diffs"][1:], r["rel"][1:]):
            cells.append(_delta(d, rel))
        out.append(cells)
    return _table(cols, out)


# --- sections ----------------------------------------------------------------------------------------------

def _answer_card(a: Answer) -> str:
    checks = "".join(f'<li data-check="{esc(c.name)}"><span class="badge {esc(c.status)}">{esc(c.badge)}</span>'
                     f"<b>{esc(c.name)}</b> {esc(c.text)}"
                     + (f'<br><span class="prov">{esc(c.source)}</span>' if c.source else "") + "</li>"
                     for c in a.checks)
    return (f'<div class="answer {esc(a.status)}" data-answer="{esc(a.key)}">'
            f'<div class="q">{esc(a.question)} <span class="badge {esc(a.status)}">{esc(a.badge)}</span></div>'
            f'<p class="a">{esc(a.text)}</p>' + (f"<ul>{checks}</ul>" if checks else "")
            + (f'<div class="prov">{esc(a.source)}</div>' if a.source else "") + "</div>")


def _answers(sets: list[AnswerSet]) -> str:
    """The first screen: the three answers with their provenance (one column per compared
    `run` folder; see answers.answer_sets for the choice)."""
    out = ['<section class="answers" id="answers">']
    if len(sets) == 1:
        s = sets[0]
        out.append(f'<p class="note">Answers from {esc(s.title)}. {esc(s.note)} The evidence (every table and figure) '
                   "follows below.</p>")
        out.extend(_answer_card(a) for a in s.answers)
    else:
        out.append(f'<p class="note">Answers of {len(sets)} <code>samspec-bench run</code> folders side by side '
                   "(each from its newest run of each suite); the evidence follows below.</p>")
        head = "".join(f'<th>{esc(s.title)}</th>' for s in sets)
        rows = "".join("<tr>" + "".join(f"<td>{_answer_card(s.answers[i])}</td>" for s in sets) + "</tr>"
                       for i in range(len(sets[0].answers)))
        out.append(f'<table class="answers-grid"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>')
    out.append("</section>")
    return "".join(out)


def _summary(report: Report) -> str:
    rows = []
    for g in report.groups:
        heads = []
        last = g.runs[-1]
        comp = {r["name"]: r for r in (g.comparison or {}).get("headlines", [])}
        for h in [h for h in last.headlines if h.get("value") is not None][:SUMMARY_HEADLINES]:
            text = fmt_headline(h)
            c = comp.get(h["name"])
            if c is not None and c["diffs"][-1] is not None:
                d, rel = c["diffs"][-1], c["rel"][-1]
                text += f" (Δ {'+' if d > 0 else ''}{fmt(d)}" + (f", {'+' if rel > 0 else ''}{rel * 100:.1f}%" if rel is not None else "") + ")"
            heads.append(f"<span>{esc(h['name'])}: <b>{esc(text)}</b></span>")
        runs = ", ".join(f"{r.label} {_badge(r.status)}" for r in g.runs) if len(g.runs) > 1 else ""
        ngates = sum(len(r.gates) for r in g.runs)
        npass = sum(1 for r in g.runs for x in r.gates if x.get("passed") is True)
        rows.append([f'<td><a href="#{_anchor(g.suite)}">{esc(g.suite)}</a></td>',
                     f"<td>{_badge(g.status)}</td>",
                     f"<td>{len(g.runs)}{(' (' + runs + ')') if runs else ''}</td>",
                     f'<td class="num">{npass}/{ngates}</td>',
                     f'<td class="heads">{"".join(heads) or "<span class=note>no headline numbers</span>"}</td>'])
    return ("<h2 id=\"summary\">Summary</h2>"
            "<p class=\"note\">Metric names follow samspec-bench's definitions (tokens_per_step: tokens per target "
            "forward over all decode steps; acceptance_length: vLLM's, over steps that had a draft).</p>"
            + _table(["suite", "status", "runs", "gates passed", "headline numbers"
                      + (" (last run; Δ against the first)" if any(len(g.runs) > 1 for g in report.groups) else "")],
                     rows, "summary"))


def _steps(report: Report) -> str:
    if not report.run_states:
        return ""
    out = ["<h2 id=\"steps\">Steps of samspec-bench run</h2>"]
    for rs in report.run_states:
        state = rs["state"]
        settings = state.get("settings") or {}
        out.append(f"<p class=\"sub\">{esc(rs['path'])}: model <code>{esc(run_setting(settings, 'model', 'default'))}"
                   f"</code>, engine <code>{esc(run_setting(settings, 'engine', 'default'))}</code>, data "
                   f"<code>{esc(settings.get('data_dir') or 'built-in workload')}</code>"
                   f"{esc(threads_text(state.get('threads')))}</p>")
        rows = []
        for name, st in (state.get("steps") or {}).items():
            status = st.get("status", "")
            cls = {"done": "pass", "failed": "fail"}.get(status, "none")
            badge = f'<span class="badge {cls}">{esc(status)}</span>'
            cmd = st.get("command") or ""
            rows.append([f"<td>{esc(name)}</td>", f"<td>{badge}</td>", _cell(st.get("seconds")), _cell(st.get("cpu_seconds")),
                         f"<td>{esc(st.get('reason') or '')}{'<br>' if st.get('reason') and st.get('notes') else ''}"
                         f"{esc('; '.join(st.get('notes') or []))}</td>",
                         f'<td class="mono">{esc(cmd)}</td>'])
        out.append(_table(["step", "status", "wall s", "CPU s", "reason / notes", "command"], rows))
    return "".join(out)


def _unreadable(report: Report) -> str:
    if not report.unreadable:
        return ""
    rows = [[f"<td class=\"mono\">{esc(u['path'])}</td>", f"<td>{esc(u['reason'])}</td>"] for u in report.unreadable]
    return ("<h2 id=\"unreadable\">Runs that could not be read</h2>"
            f'<p class="note">Left out of this report ({len(rows)}):</p>' + _table(["path", "reason"], rows))


def _gates_table(run: Run) -> str:
    if not run.gates:
        return '<p class="note">This suite defines no pass/fail gate for this run.</p>'
    rows = [[f"<td>{esc(g['name'])}</td>", f"<td>{_gate_result(g)}</td>", _cell(g.get("value")),
             _cell(g.get("threshold")), f"<td>{esc(g.get('note') or '')}</td>"] for g in run.gates]
    return _table(["gate", "result", "value", "threshold", "note"], rows)


def _headlines_table(run: Run) -> str:
    if not run.headlines:
        return '<p class="note">No headline numbers.</p>'
    rows = [[f"<td>{esc(h['name'])}</td>", f'<td class="num">{esc(fmt_headline(h))}</td>',
             f"<td>{esc(h.get('note') or '')}</td>"] for h in run.headlines]
    return _table(["headline", "value", "note"], rows)


def _figures(run: Run) -> str:
    out = []
    for f in run.figures:
        uri = f.data_uri()
        if uri is None:
            out.append(f'<p class="note">figure {esc(f.name)}: {esc(f.note or "not available")}</p>')
            continue
        out.append(f'<figure class="figure"><img src="{uri}" alt="{esc(f.name)}" data-figure="{esc(f.name)}">'
                   f'<figcaption class="cap">{esc(run.suite)} {esc(run.label)}: {esc(f.name)} ({esc(figure_basis(run))})'
                   '</figcaption></figure>')
    return "".join(out)


def _metadata(run: Run) -> str:
    rows = [[f"<th>{esc(k)}</th>", f"<td>{esc(v)}</td>"] for k, v in metadata_rows(run)]
    files = data_files(run.result)
    if files:
        rows.append(["<th>data files</th>",
                     "<td>" + "<br>".join(f"{esc(f)} <span class=\"mono\">sha256 {esc(h)}</span>" for f, h in files)
                     + "</td>"])
    else:
        rows.append(["<th>data files</th>", "<td class=\"note\">none recorded</td>"])
    table = ('<div class="wrap"><table class="kv"><tbody>' + "".join(f"<tr>{''.join(r)}</tr>" for r in rows)
             + "</tbody></table></div>")
    cfg = json.dumps(run.result.get("config"), indent=2, sort_keys=True)
    return table + f"<details><summary>config</summary><pre>{esc(cfg)}</pre></details>"


def _comparison(g: SuiteGroup) -> str:
    c = g.comparison
    if not c:
        return ""
    labels = c["labels"]
    legend = _table(["run", "directory", "created", "git revision", "status"],
                    [[f"<td>{esc(r.label)}</td>", f"<td>{esc(r.path)}</td>", f"<td>{esc(r.result.get('created'))}</td>",
                      f"<td class=\"mono\">{esc(str((r.result.get('environment') or {}).get('git_revision'))[:12])}</td>",
                      f"<td>{_badge(r.status)}</td>"] for r in g.runs])
    out = [f"<h3>Comparison of {len(g.runs)} runs (baseline {esc(labels[0])})</h3>", legend]
    if c["config"]:
        out.append("<h4>What differs: configuration</h4>" + render_comparison_rows(c["config"], labels))
    if c["environment"]:
        out.append("<h4>What differs: environment</h4>" + render_comparison_rows(c["environment"], labels))
    if not c["config"] and not c["environment"]:
        out.append('<p class="note">Same configuration and environment in every run.</p>')
    if c["gates"]:
        out.append("<h4>Gates</h4>" + _table(
            ["gate"] + labels,
            [[f"<td>{esc(r['name'])}</td>"] + [f"<td>{_gate_badge(v)}</td>" for v in r["values"]] for r in c["gates"]]))
    if c["headlines"]:
        out.append("<h4>Headline numbers</h4>" + render_comparison_rows(c["headlines"], labels, with_ci=True))
    if c["metrics"]:
        n = len(c["metrics"])
        out.append(f"<details><summary>All numeric metrics side by side ({n} rows)</summary>"
                   + render_comparison_rows(c["metrics"][:MAX_TABLE_ROWS * 3], labels) + "</details>")
    return "".join(out)


def _suite_section(g: SuiteGroup) -> str:
    out = [f'<h2 id="{_anchor(g.suite)}">{esc(g.suite)} {_badge(g.status)}</h2>']
    out.append(_comparison(g))
    for run in g.runs:
        title = f"Run {run.label}: {run.name}" if len(g.runs) > 1 else f"Run: {run.name}"
        out.append(f'<div class="run"><h3>{esc(title)} {_badge(run.status)}</h3>')
        out.extend(f'<p class="warn" data-note>{esc(n)}</p>' for n in run.notes)
        out.append("<h4>Gates</h4>" + _gates_table(run))
        out.append("<h4>Headline numbers</h4>" + _headlines_table(run))
        out.append(_figures(run))
        sources = draft_source_tables(run.result)
        if sources:
            out.append("<h4>Draft sources</h4>" + "".join(render_table(t) for t in sources))
        metrics = run.result.get("metrics") or {}
        if metrics:
            out.append("<h4>Metrics</h4>" + "".join(render_table(t) for t in shape_tables("metrics", metrics)))
        tables = {k: v for k, v in (run.result.get("tables") or {}).items() if not (sources and k in SHOWN_KEYS)}
        if tables:
            out.append("<h4>Tables</h4>")
            for name in tables:
                out.extend(render_table(t) for t in shape_tables(name, tables[name]))
        out.append("</div>")
    return "".join(out)


def _metadata_section(report: Report) -> str:
    out = ['<h2 id="metadata">Run metadata</h2>']
    for g in report.groups:
        for run in g.runs:
            out.append(f"<h3>{esc(g.suite)} {esc(run.label)}: {esc(run.name)}</h3>" + _metadata(run))
    return "".join(out)


def _finite(obj: Any) -> Any:
    """Infinity and NaN (which JSON lacks) as strings, so the embedded data parses anywhere."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def json_for_script(data: Any) -> str:
    """JSON that is safe inside a <script> element (no '</' or '<!--' sequences)."""
    text = json.dumps(_finite(data), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False,
                      default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(report: Report) -> str:
    n_runs = len(report.runs)
    sets = answer_sets(report)
    data = report.data()
    data["answers"] = [s.data() for s in sets]
    toc = " ".join(["<a href=\"#answers\">answers</a>", "<a href=\"#summary\">summary</a>"] + (["<a href=\"#steps\">steps</a>"] if report.run_states else [])
                   + [f'<a href="#{_anchor(g.suite)}">{esc(g.suite)}</a>' for g in report.groups]
                   + ['<a href="#metadata">metadata</a>'])
    overall = "fail" if any(g.status == "fail" for g in report.groups) else \
        "pass" if any(g.status == "pass" for g in report.groups) else "no gates"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(report.title)}</title>",
        f"<style>{CSS}</style></head><body><main>",
        f"<h1>{esc(report.title)} {_badge(overall)}</h1>",
        f'<p class="sub">{n_runs} run{"s" if n_runs != 1 else ""} of {len(report.groups)} '
        f'suite{"s" if len(report.groups) != 1 else ""} from {esc(", ".join(report.inputs))}.</p>',
        f'<nav class="toc">{toc}</nav>',
        _answers(sets),
        _summary(report),
        _unreadable(report),
        _steps(report),
        *(_suite_section(g) for g in report.groups),
        _metadata_section(report),
        '<p class="note">Machine-readable data: the JSON in <code>script#samspec-data</code> of this file '
        "(every result.json, headline, gate and comparison).</p>",
        f'<script type="application/json" id="samspec-data">{json_for_script(data)}</script>',
        "</main></body></html>",
        "",
    ]
    return "\n".join(p for p in parts if p)


def write_html(report: Report, out: str | Path) -> Path:
    out = check_output_file(out, "--output", "report.html")   # before rendering: a directory, or a file in the way
    return atomic_write_text(out, render_html(report), option="--output")
