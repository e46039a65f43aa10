"""`samspec-bench report html|md RESULTS... -o FILE`: one comparison report from result directories.

RESULTS are run directories (holding result.json) or folders that hold them (a `results/`
root, or the output of `samspec-bench run`); several runs of one suite are compared side by
side, the first one as the baseline.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from samspec_bench.reports.collect import collect
from samspec_bench.reports.html import write_html
from samspec_bench.reports.markdown import write_markdown
from samspec_bench.reports.model import status
from samspec_bench.results import emit_json


@click.group("report")
def command():
    """Render one self-contained comparison report from result directories of any suites.

    \b
    samspec-bench report html RESULTS... --output report.html
    samspec-bench report md   RESULTS... --output report.md
    Both take --json PATH (the report's data as JSON) and --fail-on-gate."""


def _non_finite_note(result: dict) -> str | None:
    """What the page says of the NaN / Infinity that load_result read as null (None: none)."""
    nf = result.get("non_finite_values")
    if not isinstance(nf, dict) or not nf.get("count"):
        return None
    return (f"{nf['count']} non-finite number(s) in result.json ({', '.join(map(str, nf.get('kinds') or []))}), "
            "shown as –")


def _finish(report, path: Path, json_path: str | None, fail_on_gate: bool) -> None:
    n_fail = sum(1 for r in report.runs if status(r.gates) == "fail")
    # with --json -, stdout holds the JSON alone
    click.echo(f"report: {path} ({len(report.runs)} runs of {len(report.groups)} suites"
               + (f"; {n_fail} with a failed gate" if n_fail else "") + ")", err=json_path == "-")
    for u in report.unreadable:
        click.echo(f"report: left out {u['path']}: {u['reason']}", err=True)
    for r in report.runs:   # what the page notes about a run it did report
        for note in [*r.notes, _non_finite_note(r.result), *(f.note for f in r.figures if f.data is None and f.note)]:
            if note:
                click.echo(f"report: note on {r.path}: {note}", err=True)
    emit_json(report.data(), json_path)
    if fail_on_gate and n_fail:
        click.echo(f"report: {n_fail} run(s) failed a gate (--fail-on-gate)", err=True)
        sys.exit(1)


@command.command("html")
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", default="report.html", show_default=True, type=click.Path(),
              help="The HTML file to write.")
@click.option("--title", default=None, help="Page title (default: 'samspec-bench report').")
@click.option("--json", "json_path", default=None, help="Also write the report's data as JSON here ('-' for stdout).")
@click.option("--fail-on-gate", is_flag=True, help="Exit with code 1 when a run failed one of its gates.")
def html_command(results, output, title, json_path, fail_on_gate):
    """One self-contained HTML file: inline figures and styles, the data embedded, no network.

    RESULTS: run directories, or folders holding them (several runs of one suite are compared
    side by side; the first is the baseline)."""
    report = collect(list(results))
    if title:
        report.title = title
    _finish(report, write_html(report, output), json_path, fail_on_gate)


@command.command("md")
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", default="report.md", show_default=True, type=click.Path(),
              help="The Markdown file to write.")
@click.option("--title", default=None, help="Title (default: 'samspec-bench report').")
@click.option("--embed-figures", is_flag=True,
              help="Inline figures as data URIs instead of linking them relative to the output file.")
@click.option("--json", "json_path", default=None, help="Also write the report's data as JSON here ('-' for stdout).")
@click.option("--fail-on-gate", is_flag=True, help="Exit with code 1 when a run failed one of its gates.")
def md_command(results, output, title, embed_figures, json_path, fail_on_gate):
    """The same report as Markdown (figures linked relative to the output file).

    RESULTS: run directories, or folders holding them (several runs of one suite are compared
    side by side; the first is the baseline)."""
    report = collect(list(results))
    if title:
        report.title = title
    _finish(report, write_markdown(report, output, embed_figures=embed_figures), json_path, fail_on_gate)
