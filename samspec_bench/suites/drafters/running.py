"""The drafter benchmark's run: load the tokens, time the replay and the sweep, write the run
folder (`run`), and the suite contract's `execute`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
from rich.progress import Progress

from samspec_bench.devices import _cpu_name, timer_label
from samspec_bench.errors import UserError
from samspec_bench.results import RunDir, emit_json, file_sha256
from samspec_bench.suites.drafters.config import SUITE, DraftersConfig, DraftersRun, available
from samspec_bench.suites.drafters.inputs import load_workload, token_stream, trace_groups
from samspec_bench.suites.drafters.output import plot, print_table, summarize
from samspec_bench.suites.drafters.timing import MODES, fastest_sweep, measure_replay


def run(cfg: DraftersConfig, out_root: str, progress: bool = True) -> tuple[dict, Path]:
    """Measure every drafter of `cfg` that can run here and write the run folder under
    `out_root`. Returns (result.json as written, the run folder)."""
    cfg.check()
    names, unavailable = available(cfg.drafters)
    if not names:
        name, why = next(iter(unavailable.items()))
        raise UserError(f"--drafters {','.join(cfg.drafters)}: none of them can run here ({name}: {why})")
    responses, skipped, formats, budget = load_workload(cfg)
    for s in skipped:   # as accept prints them: on stderr, each with its file, line and reason
        click.echo(f"skipped {s['file']}:{s['line']}: {s['reason']}", err=True)
    groups = trace_groups(responses)
    stream = token_stream(responses)
    need = max(cfg.sweep) + cfg.sweep_steps if cfg.sweep else 0
    if need > stream.size:  # the sweep needs a longer stream than the replay's share: load all of it
        stream = token_stream(load_workload(DraftersConfig(**{**cfg.__dict__, "max_tokens": need * 2}))[0])
    if need > stream.size:
        raise UserError(f"--sweep up to {max(cfg.sweep)} tokens needs {need} tokens of traces, "
                        f"found {stream.size}; pass more --traces or smaller --sweep values")

    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("replay", total=len(names) * len(groups) * (1 + cfg.repeats * len(MODES)))
        rows = measure_replay(names, groups, cfg, on_group=lambda: bar.advance(task))
        bar.remove_task(task)
        task = bar.add_task("context sweep", total=cfg.repeats * len(names) * len(cfg.sweep))
        sweep_rows = fastest_sweep(names, stream, cfg, on_point=lambda: bar.advance(task))
        bar.remove_task(task)

    run_dir = RunDir(out_root, SUITE)
    metrics = summarize(rows, sweep_rows, cfg)
    figure = plot(rows, sweep_rows, run_dir.file("drafters.png"))
    result = {
        "metrics": metrics,
        "tables": {"replay": rows, "context_sweep": sweep_rows},
        "extra": {"unavailable_drafters": unavailable, "skipped_trace_lines": len(skipped),
                  "skipped": skipped,
                  "prompt_formats": formats, "responses": len(responses), "groups": len(groups),
                  "token_budget": budget,
                  "data_files": {t: file_sha256(t) for t in cfg.traces}},
    }
    run_dir.write_result(cfg, metrics, result["tables"], [figure.name], result["extra"], device=cpu_record())
    return json.loads(run_dir.file("result.json").read_text()), run_dir.path


def cpu_record() -> dict:
    """environment.device: the drafters run on this CPU, timed by its wall clock on one thread."""
    return {"device": "cpu", "type": "cpu", "name": _cpu_name(), "cores": os.cpu_count(), "timer": timer_label("cpu"),
            "used": True}


def execute(job: DraftersRun, *, output, resume=None, json_path=None) -> int:
    """Run the benchmark, print the tables (not when the JSON goes to stdout), write the run
    directory and `json_path`. Returns the exit code (0: the benchmark has no gate)."""
    if resume is not None:
        raise UserError(f"--resume {resume}: `samspec-bench drafters` has no resume; start a new run")
    result, path = run(job.config, output, progress=job.progress)
    if json_path != "-":
        print_table(result)
        click.echo(f"result: {path / 'result.json'}")
    emit_json(result, json_path)
    return 0
