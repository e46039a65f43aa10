"""`samspec-bench run` itself: settle the settings (options < config file; or the saved ones
with --resume), run the chosen steps in order, render report.html / report.md, print a summary
and exit 1 when a step or a gate failed."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from samspec_bench.bench.engines.engine_device import DEVICE_HELP, engine_device
from samspec_bench.bench.engines.factory import engine_names, require_engine
from samspec_bench.devices import resolve_device
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import BUILTIN_MODEL, check_model, model_id
from samspec_bench.reports.collect import collect
from samspec_bench.reports.html import write_html
from samspec_bench.reports.markdown import write_markdown
from samspec_bench.reports.model import status
from samspec_bench.results import emit_json
from samspec_bench.suites.run import plan
from samspec_bench.suites.run.config_file import check_sections, load_config, parse_steps
from samspec_bench.suites.run.config_options import check_engine
from samspec_bench.suites.run.config_values import check_values
from samspec_bench.suites.run.plan import Ctx
from samspec_bench.suites.run.state import (STATE_FILE, STATE_FORMAT, check_shape, new_run_dir, now, read_state,
                                            write_state)
from samspec_bench.suites.run.steps import globals_used, run_step

DEFAULT_MODEL = BUILTIN_MODEL


def render_reports(out: Path) -> tuple[Path, Path]:
    report = collect([out])
    report.title = f"samspec-bench report: {out.name}"
    return write_html(report, out / "report.html"), write_markdown(report, out / "report.md")


def run_device(device: str | None, engine: str | None, where: str = "--device") -> str:
    """The run's device (resolved: every step that takes --device gets it): a device that is not
    there, or one the run's engine cannot run on (vLLM places itself), is a UserError now. An engine
    that is not installed here is not asked: its steps are skipped with the reason (README)."""
    device = resolve_device(device, where)
    if engine in engine_names():
        try:
            require_engine(engine)
        except UserError:   # not installed here: the steps that would run it are skipped, saying why
            return device
        engine_device(engine, device, where)
    return device


GLOBALS = (("model", "--model"), ("engine", "--engine"), ("device", "--device"))


def _check_resume(s: dict, resume, model, engine, device, data_dir, config, steps) -> None:
    """A resumed run keeps its settings: another --model / --engine / --device / --data-dir,
    --config or --steps is a UserError. A setting no step of the run used is compared as given."""
    unused = s.get("not_used") or {}
    given = {"model": (model, lambda v: model_id(v)), "engine": (engine, lambda v: v),
             "device": (device, resolve_device),
             "data_dir": (data_dir, lambda v: str(Path(v).expanduser().resolve()))}
    for key, (value, norm) in given.items():
        if value is None:
            continue
        mine, saved = (value, unused[key]) if key in unused else (norm(value), s.get(key))
        if mine != saved:
            opt = "--" + key.replace("_", "-")
            raise UserError(f"--resume {resume}: the run used {opt} {saved!r}, this call {mine!r}; "
                            f"repeat the original options (or none) to continue it")
    if config is not None:
        raise UserError(f"--resume {resume}: the run's configuration is saved in its {STATE_FILE}; "
                        "drop --config to continue it (or start a new run)")
    saved = s.get("steps")   # as a run of an older version may have saved them: in any order, some twice
    if steps is not None and parse_steps(steps, "--steps") != (parse_steps(saved, "") if saved else None):
        raise UserError(f"--resume {resume}: the run used --steps {s.get('steps')}; drop --steps to continue it")


def _new_settings(sections: dict, model, engine, device, data_dir, config, steps,
                  output: str | Path = "results") -> tuple[dict, list[str]]:
    """A new run's settings (checked: a bad one is a UserError before the run folder exists) and
    its notes: a --model / --engine / --device (or the config file's) that no selected step uses
    is not checked, not recorded as the run's, and said in a note (refusing it would break
    scripts that always pass it)."""
    cf = f"--config {config}: " if config else ""   # a value from the config file names the file
    chosen = parse_steps(steps, "--steps") if steps is not None else parse_steps(sections.get("steps"), f"{cf}steps:")
    step_sections = {k: v for k, v in sections.items() if k in plan.STEP_NAMES}
    # fail fast on a bad config section (unknown option, a value of the wrong type) before
    # the run folder is made or anything runs
    check_sections(step_sections, config)
    engine_arg = engine
    engine = check_engine(engine, "--engine") if engine else check_engine(sections.get("engine"), f"{cf}engine:")
    used = globals_used(chosen or list(plan.STEP_NAMES), step_sections, engine)
    cli = {"model": model, "engine": engine_arg, "device": device}
    given = {k: cli[k] if cli[k] is not None else sections.get(k) for k, _ in GLOBALS}
    not_used = {k: (model_id(v) if k == "model" else v) for k, v in given.items() if v is not None and k not in used}
    notes = []
    if steps is not None and sections.get("steps") is not None:   # the file's list, checked, and said when overridden
        file_steps = parse_steps(sections["steps"], f"{cf}steps:")
        if file_steps != chosen:
            notes.append(f"--steps {','.join(chosen or [])} over the config file's steps: {','.join(file_steps or [])}")
    if not_used:
        shown = ", ".join(f"{opt} {given[k]}" if cli[k] is not None else f"{k}: {given[k]} (--config)"
                          for k, opt in GLOBALS if k in not_used)
        notes.append(f"{shown}: not used by the selected steps ({', '.join(chosen or plan.STEP_NAMES)}), which take "
                     f"no {'/'.join(k for k, _ in GLOBALS if k in not_used)}; the run records none")
    # a short name becomes its id; an uncached model offline stops here, before the run folder
    try:
        model = check_model(model or sections.get("model") or DEFAULT_MODEL) if "model" in used else None
    except UserError as e:
        raise (UserError(f"{cf}model: {e}") if not model and sections.get("model") else e) from None
    engine = engine if "engine" in used else None
    if "device" in used:
        device = run_device(device, engine) if device else run_device(sections.get("device"), engine, f"{cf}device:")
    else:
        device = None
    dd = data_dir or sections.get("data-dir") or os.environ.get("SAMSPEC_DATA_DIR") or None
    if dd is not None:
        p = Path(dd).expanduser()
        if not p.is_dir():
            opt = "--data-dir" if data_dir else f"{cf}data-dir:" if sections.get("data-dir") else "SAMSPEC_DATA_DIR"
            raise UserError(f"{opt} {dd}: no such directory; pass the shared data directory "
                            "(traces/, tokenizers/, benchmarks/), or leave it out for the built-in workload")
        dd = str(p.resolve())
    settings = {"model": model, "engine": engine, "device": device, "data_dir": dd,
                "config_file": str(config) if config else None, "sections": step_sections, "steps": chosen}
    if not_used:
        settings["not_used"] = not_used   # as given: a --resume compares them
    if config:   # values out of range, by the suites' own checks (build_config), before the run folder
        check_values(settings, chosen or list(plan.STEP_NAMES), config, output)
    return settings, notes


def run_all(output: str | Path = "results", model: str | None = None, engine: str | None = None,
            data_dir: str | Path | None = None, config: str | Path | None = None, steps: str | None = None,
            resume: str | Path | None = None, console=None, device: str | None = None) -> tuple[dict, Path]:
    """Run the steps and render the report; returns (the final state, the run directory)."""
    console = console or Console(stderr=False)
    if resume is not None:
        out = Path(resume)
        state = read_state(out)
        check_shape(state, resume, plan.STEP_NAMES)   # a hand-damaged state stops here, with what is wrong
        _check_resume(state["settings"], resume, model, engine, device, data_dir, config, steps)
        console.print(f"resuming {out}", highlight=False)
    else:
        sections = load_config(config) if config else {}
        settings, notes = _new_settings(sections, model, engine, device, data_dir, config, steps, output)
        out = new_run_dir(Path(output))
        state = {"format": STATE_FORMAT, "created": now(), "settings": settings, "steps": {}}
        if notes:
            state["notes"] = notes
        write_state(out, state)
        click.echo(f"run directory: {out}")
        for note in notes:
            click.echo(f"note: {note}")
    s = state["settings"]
    ctx = Ctx(out=out, model=s["model"], engine=s.get("engine"), data_dir=Path(s["data_dir"]) if s.get("data_dir") else None,
              sections=s.get("sections") or {}, state=state, device=s.get("device"))
    # torch threads: chosen now, from what is free before this run loads the machine (a resumed
    # run keeps its choice), and said before anything runs
    plan.threads_for(ctx)
    click.echo(plan.threads_note(ctx))
    chosen = s.get("steps") or list(plan.STEP_NAMES)
    todo = [st for st in plan.STEPS if st.name in chosen]
    try:
        for i, step in enumerate(todo, start=1):
            prev = state["steps"].get(step.name) or {}
            if prev.get("status") == "done":
                damage = ctx.done_problem(step.name)
                if damage is None:
                    console.print(f"[{i}/{len(todo)}] {step.name}: done in an earlier session ({prev['run_dir']})",
                                  highlight=False)
                    continue
                # never reported as done when its result cannot be read back: run it again
                click.echo(f"step {step.name}: {damage}: running it again")
            run_step(step, ctx, console, i, len(todo))
            _add_notes(state["steps"].get(step.name), state.get("notes") or [])
            write_state(out, state)
    except KeyboardInterrupt:
        write_state(out, state)
        click.echo(f"\ninterrupted: continue with  samspec-bench run --resume {out}", err=True)
        raise
    state["report"] = {"html": "report.html", "md": "report.md"}
    write_state(out, state)
    html, md = render_reports(out)
    _print_summary(state, console, html)
    return state, out


def _add_notes(st: dict | None, notes: list[str]) -> None:
    """The run's notes on a step's row too (the summary table and the report show a step's notes)."""
    if st is not None and notes:
        have = list(st.get("notes") or [])
        st["notes"] = have + [n for n in notes if n not in have]


def _print_summary(state: dict, console, html: Path) -> None:
    t = Table(title="samspec-bench run")
    for col in ("step", "status", "wall s", "CPU s", "gates", "reason / notes"):
        t.add_column(col)
    report = collect([html.parent])
    by_dir = {os.path.normpath(os.path.abspath(r.path)): r for r in report.runs}
    for name, st in state["steps"].items():
        run = by_dir.get(os.path.normpath(os.path.abspath(html.parent / st["run_dir"]))) if st.get("run_dir") else None
        gates = ""
        if run is not None and run.gates:
            npass = sum(1 for g in run.gates if g.get("passed") is True)
            gates = f"{npass}/{len(run.gates)} passed"
        secs, cpu = (f"{st[k]:.0f}" if isinstance(st.get(k), (int, float)) else "" for k in ("seconds", "cpu_seconds"))
        style = {"done": "green", "failed": "red"}.get(st.get("status"), "yellow")
        notes = "; ".join(x for x in [st.get("reason") or "", *(st.get("notes") or [])] if x)
        t.add_row(name, f"[{style}]{st.get('status')}[/]", secs, cpu, gates, escape(notes))   # text, not markup
    console.print(t)
    for u in report.unreadable:
        click.echo(f"report: left out {u['path']}: {u['reason']}", err=True)
    click.echo(f"report: {html}")
    click.echo(f"        {html.with_suffix('.md')}")


def outcome(state: dict, out: Path) -> int:
    """Exit status: 1 when a step failed, a suite exited non-zero (a failed check that need not be
    a gate: accuracy with every sample of an arm failed), a step recorded done has no result the
    report reads back, or a gate failed; else 0."""
    if any(st.get("status") == "failed" or st.get("exit_code") for st in state["steps"].values()):
        return 1
    report = collect([out])
    # a step recorded done whose result the report could not read back has no outcome to trust
    loaded = {os.path.normpath(os.path.abspath(r.path)) for r in report.runs}
    done = [out / (st.get("run_dir") or "") for st in state["steps"].values() if st.get("status") == "done"]
    if any(os.path.normpath(os.path.abspath(d)) not in loaded for d in done):
        return 1
    return 1 if any(status(r.gates) == "fail" for r in report.runs) else 0


@click.command("run")
@click.option("--model", default=None, help=f"Model for the suites that run one (default: {DEFAULT_MODEL}; "
              "a checkpoint directory for the real run).")
@click.option("--engine", default=None, help="Engine for the suites that take --engine (reference, vllm, replay). "
              "Suites that cannot use it run with their default; with vllm missing they are skipped.")
@click.option("--device", default=None, help="For the steps that take --device (default: auto). " + DEVICE_HELP)
@click.option("--data-dir", type=click.Path(), default=None,
              help="Shared data directory (traces/, tokenizers/, benchmarks/). Default: SAMSPEC_DATA_DIR; "
                   "without one, a built-in workload is generated with the model.")
@click.option("--config", "config", type=click.Path(), default=None,
              help="YAML: optional model/engine/device/data-dir/steps, then one section per suite with its CLI "
                   "options (e.g. accept: {num-spec-tokens: [3, 5]}); `suite: false` skips one.")
@click.option("--steps", default=None, help=f"Only these steps, comma list ({', '.join(plan.STEP_NAMES)}).")
@click.option("--output", default="results", show_default=True, type=click.Path(),
              help="Root directory: the run goes to <output>/run-<timestamp>/.")
@click.option("--resume", default=None, type=click.Path(), help="Continue an interrupted run in this directory.")
@click.option("--json", "json_out", default=None,
              help="Also write the run's summary (run folder, exit code, every step's status, command and result "
                   "folder, the reports) as JSON to this file ('-' for stdout: the run's own output then goes to stderr).")
def command(model, engine, device, data_dir, config, steps, output, resume, json_out):
    """Run every suite that can run here with small defaults and render one report.

    With no options: the built-in model and a built-in workload, about ten minutes on a
    laptop CPU. With --model, --engine and --data-dir: the real run."""
    to_stderr = json_out == "-"   # stdout then holds the JSON alone
    try:
        with contextlib.redirect_stdout(sys.stderr) if to_stderr else contextlib.nullcontext():
            state, out = run_all(output=output, model=model, engine=engine, data_dir=data_dir, config=config,
                                 steps=steps, resume=resume, device=device,
                                 console=Console(file=sys.stderr) if to_stderr else None)
    except KeyboardInterrupt:
        sys.exit(130)   # the resume hint is already printed; click would add "aborted"
    code = outcome(state, out)
    emit_json({"suite": "run", "run_dir": str(out), "exit_code": code, "settings": state["settings"],
               "steps": state["steps"], "notes": state.get("notes") or [],
               "report": {k: str(out / v) for k, v in (state.get("report") or {}).items()}}, json_out)
    if code:
        click.echo("run: a step or a gate failed (see the report)", err=True)
        sys.exit(code)
