"""The drafter benchmark's run: load the tokens, time the replay and the sweep round by round
(each round recorded as it finishes: an interrupted run is continued by --resume), write the
run folder (`run`), and the suite contract's `execute`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
from rich.progress import Progress

from samspec_bench.devices import _cpu_name, timer_label
from samspec_bench.errors import UserError
from samspec_bench.results import CONFIG_FILE, INPUT_FILES, RunDir, emit_json, load_result
from samspec_bench.suites.drafters.config import SUITE, DraftersConfig, DraftersRun, available
from samspec_bench.suites.drafters.inputs import load_workload, sweep_stream, token_stream, trace_groups
from samspec_bench.suites.drafters.output import plot, print_table, summarize
from samspec_bench.suites.drafters.rounds import ROUNDS_FILE, Rounds, check_identity, new_session, run_identity
from samspec_bench.suites.drafters.timing import MODES, fastest_sweep, measure_replay


def run(cfg: DraftersConfig, out_root: str, progress: bool = True, resume: str | None = None) -> tuple[dict, Path]:
    """Measure every drafter of `cfg` that can run here and write the run folder under
    `out_root` (or continue the one `resume` names: its recorded rounds are kept, the missing
    ones run). Each round is recorded as it finishes, so an interrupted run keeps them. Returns
    (result.json as written, the run folder)."""
    cfg.check()
    session = new_session()
    names, unavailable = available(cfg.drafters)
    if not names:
        name, why = next(iter(unavailable.items()))
        raise UserError(f"--drafters {','.join(cfg.drafters)}: none of them can run here ({name}: {why})")
    identity = run_identity(cfg, names)
    if resume is not None:   # another suite's folder, or other settings: one line, exit 2, before any loading
        check_identity(resume, identity)
        done = _complete(resume)
        if done is not None:
            return done, Path(resume)
    # a resumed folder holds work already: named by an interrupt while the traces load, as later
    run_dir = RunDir(out_root, SUITE, resume) if resume is not None else None
    responses, skipped, formats, budget, streams = load_workload(cfg)
    for s in skipped:   # as accept prints them: on stderr, each with its file, line and reason
        click.echo(f"skipped {s['file']}:{s['line']}: {s['reason']}", err=True)
    groups = trace_groups(responses)
    stream = context_stream(cfg, token_stream(responses), streams, budget)

    # the inputs are good: from here on every finished round is kept (an interrupt leaves the folder)
    if run_dir is None:
        run_dir = RunDir(out_root, SUITE)
        run_dir.write_json(CONFIG_FILE, identity)
    rounds = Rounds(run_dir, cfg, names, session)
    if resume is not None:
        rounds.load()
        _say_resumed(run_dir.path, rounds, cfg)
    rows, sweep_rows = _measure(names, groups, stream, cfg, rounds, progress)

    metrics = summarize(rows, sweep_rows, cfg)
    figure = plot(rows, sweep_rows, run_dir.file("drafters.png"))
    result = {
        "metrics": metrics,
        "tables": {"replay": rows, "context_sweep": sweep_rows},
        "extra": {"unavailable_drafters": unavailable, "skipped_trace_lines": len(skipped),
                  "skipped": skipped,
                  "prompt_formats": formats, "responses": len(responses), "groups": len(groups),
                  "token_budget": budget,
                  "data_files": identity[INPUT_FILES], **rounds.extra()},
    }
    run_dir.write_result(cfg, metrics, result["tables"], [figure.name], result["extra"], device=cpu_record())
    return json.loads(run_dir.file("result.json").read_text()), run_dir.path


def context_stream(cfg: DraftersConfig, stream, streams: list, budget: dict):
    """The context sweep's tokens: the replay's stream where it holds what the longest --sweep
    context and --sweep-steps need, else its own of twice that (more build windows), each file's
    share as the files allow (a short file gives all it has, the others the rest); refused only
    where all the files together hold too few. budget["sweep"] says it (and each file's tokens)."""
    need = max(cfg.sweep) + cfg.sweep_steps if cfg.sweep else 0
    own = need > stream.size
    # --max-tokens caps the replay; a sweep reading past it is said, not hidden
    budget["sweep"] = {"tokens_needed": need, "stream_tokens": int(stream.size), "beyond_max_tokens": own}
    if not own:
        return stream
    stream, files = sweep_stream(streams, need * 2)
    budget["sweep"].update(stream_tokens=int(stream.size), files=files)
    if need > stream.size:
        given = ", ".join(f"{f['file']}: {f['tokens']}" for f in files)
        raise UserError(f"--sweep up to {max(cfg.sweep)} tokens needs {need} tokens of traces, found {stream.size} "
                        f"in all {len(files)} trace file(s) together ({given}); pass more --traces or smaller "
                        "--sweep values")
    return stream


def _complete(resume) -> dict | None:
    """The result of a --resume folder whose run finished (None: it did not)."""
    if not (Path(resume) / "result.json").is_file():
        return None
    result = load_result(resume)   # a damaged one is named, one line
    click.echo(f"--resume {resume}: the run is complete (result.json written {result.get('created', '?')}); "
               "nothing is measured, its result follows", err=True)
    return result


def _say_resumed(path: Path, rounds: Rounds, cfg: DraftersConfig) -> None:
    r = rounds.resumed
    click.echo(f"resuming {path}: {r['replay']} of {cfg.repeats} replay round(s) and {r['sweep']} of {cfg.repeats} "
               "sweep round(s) already recorded; the others run now", err=True)
    if rounds.ignored:
        click.echo(f"{rounds.ignored} record(s) of {ROUNDS_FILE} do not fit this run (damaged, or a round recorded "
                   "twice): their rounds are measured again", err=True)


def _measure(names, groups, stream, cfg: DraftersConfig, rounds: Rounds, progress: bool) -> tuple[list, list]:
    """The replay and the sweep, their missing rounds run and recorded; the bars start at what is done."""
    replay_done, sweep_done = rounds.recorded("replay"), rounds.recorded("sweep")
    left = cfg.repeats - len(replay_done)
    per_pass = len(names) * len(groups)
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("replay", total=per_pass * ((1 if left else 0) + cfg.repeats * len(MODES)),
                            completed=per_pass * len(replay_done) * len(MODES))
        rows = measure_replay(names, groups, cfg, on_group=lambda: bar.advance(task), done=replay_done,
                              on_round=lambda rep, data: rounds.record("replay", rep, data))
        bar.remove_task(task)
        per_round = len(names) * len(cfg.sweep)
        task = bar.add_task("context sweep", total=cfg.repeats * per_round, completed=len(sweep_done) * per_round)
        sweep_rows = fastest_sweep(names, stream, cfg, on_point=lambda: bar.advance(task), done=sweep_done,
                                   on_round=lambda rep, points: rounds.record("sweep", rep, points))
        bar.remove_task(task)
    return rows, sweep_rows


def cpu_record() -> dict:
    """environment.device: the drafters run on this CPU, timed by its wall clock on one thread."""
    return {"device": "cpu", "type": "cpu", "name": _cpu_name(), "cores": os.cpu_count(), "timer": timer_label("cpu"),
            "used": True}


def execute(job: DraftersRun, *, output, resume=None, json_path=None) -> int:
    """Run the benchmark (or continue the run `resume` names), print the tables (not when the
    JSON goes to stdout), write the run directory and `json_path`. Returns the exit code (0: the
    benchmark has no gate)."""
    result, path = run(job.config, output, progress=job.progress, resume=resume)
    if json_path != "-":
        print_table(result)
        click.echo(f"result: {path / 'result.json'}")
    emit_json(result, json_path)
    return 0
