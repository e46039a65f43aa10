"""`samspec-bench spec-metrics FILE...`: the run folder (result.json), the printed lines and the
JSON. A reading takes a moment: no --resume."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

import click

from samspec_bench.bench.engines.vllm.spec_metrics import Interval, Reading, read_files
from samspec_bench.errors import UserError
from samspec_bench.metrics import VLLM_NAMES
from samspec_bench.results import RunDir
from samspec_bench.suites.run_output import print_and_emit

SUITE = "spec-metrics"
ROW_KEYS = ("source", "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "spec_decode_num_drafts",
            "spec_decode_draft_tokens", "spec_decode_accepted_tokens", "spec_decode_per_position_acceptance_rates",
            "drafts_exact")


@dataclass(frozen=True)
class SpecMetricsConfig:
    files: tuple[str, ...]


def build_config(*, files: tuple[str, ...]) -> SpecMetricsConfig:
    if not files:
        raise UserError("spec-metrics: give one or more files: Prometheus scrapes of a vLLM server's /metrics, "
                        "or vLLM logs with 'SpecDecoding metrics:' lines")
    seen: dict[str, str] = {}
    for f in map(str, files):   # a log read twice counts its lines twice; a scrape twice makes an empty interval
        first = seen.get(real := os.path.realpath(f))
        if first is not None:
            same = f"{f!r}" if first == f else f"{first!r} and {f!r} (the same file)"
            raise UserError(f"spec-metrics: {same} given twice: its readings would count twice (a log) or make an "
                            "empty interval (a scrape); give each file once")
        seen[real] = f
    return SpecMetricsConfig(files=tuple(str(f) for f in files))


def metrics_of(reading: Reading) -> dict[str, Any]:
    """result.json's metrics: the pooled figures, how the lines were read, the definitions."""
    return {"format": reading.format, "total": reading.total().figures(), "intervals": len(reading.intervals),
            "lines": dict(reading.lines), "lines_not_understood_examples": list(reading.not_understood),
            "lines_not_understood_why": list(reading.why_not_understood),
            "log_fields_not_read": fields_not_read(reading),
            "counter_resets": reading.resets, "log_lines_inconsistent": list(reading.inconsistent),
            "log_lines_non_finite_not_used": list(reading.non_finite), "series_not_used": dict(reading.not_used),
            "notes": list(reading.notes), "vllm_names": VLLM_NAMES}


def fields_not_read(reading: Reading) -> dict[str, int]:
    """Fields of the log lines the reader does not know (a newer vLLM's or a fork's), each with the
    number of lines that print it: ignored, so said."""
    out: dict[str, int] = {}
    for iv in reading.intervals:
        for name in iv.printed.get("fields_not_read", ()):
            out[name] = out.get(name, 0) + 1
    return out


def lines(reading: Reading) -> list[str]:
    """The reading as terminal lines: the pooled figures, each interval, and the tally."""
    out = [f"format: {reading.format}, {len(reading.intervals)} interval(s)"]
    for label, iv in [("total", reading.total()), *((f"  {i.source}", i) for i in reading.intervals)]:
        out.append(_line(label, iv))
    tally = ", ".join(f"{k} {v}" for k, v in reading.lines.items())
    out.append(f"lines: {tally}")
    if reading.lines.get("not_understood"):
        why = f" ({reading.why_not_understood[0]})" if reading.why_not_understood else ""
        out.append(f"NOT UNDERSTOOD: {reading.lines['not_understood']} line(s), e.g. {reading.not_understood[0]!r}{why}")
    if reading.non_finite:
        out.append(f"NOT FINITE, not used: {len(reading.non_finite)} log line(s) print a figure that is not a number: "
                   f"{', '.join(reading.non_finite[:5])}")
    if unread := fields_not_read(reading):
        out.append("log fields not read (not used in any figure): "
                   + ", ".join(f"{k!r} ({v} line(s))" for k, v in unread.items()))
    if reading.not_used:
        out.append("spec-decode series not used: " + ", ".join(f"{k} ({v})" for k, v in reading.not_used.items()))
    out.extend(f"note: {n}" for n in reading.notes)
    if reading.resets:
        out.append(f"counter resets: {reading.resets} (an engine's counters went down between readings: it "
                   "restarted; its new values are counted as the increase)")
    if reading.inconsistent:
        out.append(f"log lines whose printed acceptance rate disagrees with Accepted / Drafted: "
                   f"{', '.join(reading.inconsistent[:5])}")
    return out


def _line(label: str, iv: Interval) -> str:
    f = iv.figures()
    rate, length = f["spec_decode_acceptance_rate"], f["spec_decode_acceptance_length"]
    rates = f["spec_decode_per_position_acceptance_rates"]
    pos = "unknown" if rates is None else ", ".join(f"{p:.3f}" for p in rates) or "-"
    est = "" if iv.drafts_exact or iv.drafts is None else " (drafts estimated)"
    drafts, drafted, accepted = ("unknown" if f[k] is None else f[k] for k in
                                 ("spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens"))
    return (f"{label}: acceptance rate {'-' if rate is None else f'{rate:.1f} %'}  mean acceptance length "
            f"{'-' if length is None else f'{length:.2f}'}{est}  per-position acceptance rate {pos}  "
            f"drafts {drafts}  drafted {drafted}  accepted {accepted}")


def execute(config: SpecMetricsConfig, *, output: str, resume: str | None = None, json_path: str | None = None) -> int:
    """Read the files, print, write result.json (bad input fails before a folder is made)."""
    if resume is not None:
        raise UserError(f"--resume {resume}: `samspec-bench spec-metrics` has no resume (a reading takes a moment); "
                        "run it again")
    reading = read_files(config.files)
    run_dir = RunDir(output, SUITE)
    rows = [{k: iv.figures()[k] for k in ROW_KEYS} for iv in reading.intervals]
    path = run_dir.write_result(asdict(config), metrics_of(reading), {"intervals": rows})
    print_and_emit(lines(reading), path, json_path)
    return 0


@click.command(SUITE)
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
def command(output, json_path, **params):
    """A vLLM run's own spec-decode metrics (Prometheus scrapes of /metrics, or its 'SpecDecoding
    metrics:' log lines) as acceptance: per-position acceptance, acceptance in %, mean acceptance
    length, per interval and pooled."""
    code = execute(build_config(**params), output=output, json_path=json_path)
    if code:
        sys.exit(code)
