"""Running one step of `samspec-bench run`: its options (plan < the run's global settings <
the config file's section), then the suite through its contract in this process:
`module.execute(module.build_config(**params), output=..., resume=..., json_path=None)`.
A step that fails is recorded with its error; it does not stop the others."""

from __future__ import annotations

import inspect
import os
import resource
import shlex
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from samspec_bench.errors import UserError
from samspec_bench.results import created_mark, discard_unfinished
from samspec_bench.suites.run import state as run_state
from samspec_bench.suites.run.config_file import workload_config
from samspec_bench.suites.run.config_options import (build_args, engine_option, find_option, merge, suite_command,
                                              suite_module, suite_params)
from samspec_bench.suites.run import plan as plan_mod
from samspec_bench.suites.run.plan import Ctx, Plan, Step
from samspec_bench.workload import generate_trace


def contract_params(module: ModuleType, step: str, params: dict[str, Any], given: dict[str, Any],
                    cmd: click.Command) -> dict[str, Any]:
    """The parameters build_config takes: all of them, or (a suite that keeps output-only
    options such as a figure path out of its config) those its signature names. An option the
    plan or the config file gives that build_config does not take cannot reach the suite."""
    sig = inspect.signature(module.build_config)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return params
    for key in given:
        p = find_option(cmd, key)
        if p is not None and p.name not in sig.parameters:
            raise UserError(f"config section {step}: --{key} is an output option of `samspec-bench {cmd.name}`; "
                            "`samspec-bench run` cannot pass it, remove it")
    return {k: v for k, v in params.items() if k in sig.parameters}


def run_suite(module: ModuleType, cmd: click.Command, step: str, options: dict[str, Any], argv: list[str],
              output: Path, resume: Path | None) -> int:
    """The suite's build_config and execute with `options` converted by its click options;
    returns its exit code. sys.argv is set to the equivalent command line meanwhile, so the
    suite's result.json records how to reproduce the step."""
    if not (callable(getattr(module, "build_config", None)) and callable(getattr(module, "execute", None))):
        raise RuntimeError(f"{module.__name__} does not implement the suite contract (build_config, execute)")
    params = contract_params(module, step, suite_params(cmd, step, options), options, cmd)
    saved = sys.argv
    sys.argv = ["samspec-bench", step, *argv, "--output", str(output)] + (["--resume", str(resume)] if resume else [])
    try:
        code = module.execute(module.build_config(**params), output=str(output),
                              resume=str(resume) if resume else None, json_path=None)
    except SystemExit as e:   # a suite that exits instead of returning its code
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = saved
    return code if isinstance(code, int) else 0


def suite_options(cmd: click.Command, ctx: Ctx, plan: Plan, section: dict[str, Any]
                  ) -> tuple[dict[str, Any], list[str], str | None]:
    """(a suite step's options, its notes, why it is skipped or None): the plan's options, the
    run's global settings for the commands that take them (and whose plan uses them), then the
    config file's section."""
    notes = list(plan.notes)
    options = dict(plan.options)
    if find_option(cmd, "model") is not None and "model" not in plan.unused:
        options.setdefault("model", ctx.model)
    if ctx.data_dir is not None and find_option(cmd, "data-dir") is not None and "data-dir" not in plan.unused:
        options.setdefault("data-dir", str(ctx.data_dir))
    if ctx.device is not None and find_option(cmd, "device") is not None and "device" not in plan.unused:
        options.setdefault("device", ctx.device)
    if ctx.engine is not None and "engine" not in plan.unused:
        value, note = engine_option(cmd, ctx.engine)
        if note and note.startswith("skip:"):
            return options, notes, note[5:]
        if note:
            notes.append(note)
        if value is not None:
            options["engine"] = value
    return merge(cmd, options, section), notes, None


def run_step(step: Step, ctx: Ctx, console, index: int, total: int) -> None:
    st = ctx.state["steps"].setdefault(step.name, {})
    section = ctx.sections.get(step.name, {})
    if section is False or (isinstance(section, dict) and section.get("skip") is True):
        st.update({"status": "skipped", "reason": "turned off in the config file", "args": None})
        return
    section = dict(section) if isinstance(section, dict) else {}
    section.pop("skip", None)
    cmd = module = None
    if step.command is not None:
        cmd = suite_command(step.command)
        if cmd is None:
            st.update({"status": "skipped", "reason": f"this build has no `{step.command}` command yet", "args": None})
            return
        module = suite_module(step.command)
    plan = step.plan(ctx)
    if plan.skip:
        st.update({"status": "skipped", "reason": plan.skip, "args": None, "notes": plan.notes})
        return
    if cmd is not None:
        options, notes, skip = suite_options(cmd, ctx, plan, section)
        if skip:
            st.update({"status": "skipped", "reason": skip, "args": None})
            return
        args = build_args(cmd, step.name, options)
    else:
        notes, options = list(plan.notes), dict(plan.options)
        if ctx.device is not None:
            options.setdefault("device", ctx.device)
        options.update(section)
        args = []
    step_dir = ctx.step_dir(step.name)
    step_dir.mkdir(parents=True, exist_ok=True)
    resume_dir = None
    if st.get("status") == "running":
        partial = run_state.partial(step_dir)
        if partial is not None and (cmd is None or find_option(cmd, "resume") is not None):
            resume_dir = partial
    before = [p.name for p in run_state.run_dirs(step_dir)]
    st.clear()
    if cmd is not None:
        shown = " ".join(["samspec-bench", step.name, *(shlex.quote(str(a)) for a in args)])
    else:
        shown = f"(built-in step) {step.name}: " + ", ".join(f"{k}={v}" for k, v in options.items())
    st.update({"status": "running", "args": args, "command": shown, "notes": notes, "started": run_state.now()})
    run_state.write_state(ctx.out, ctx.state)
    console.rule(f"[bold][{index}/{total}] {step.name}[/]: {step.what}")
    console.print(shown + (f" --resume {resume_dir}" if resume_dir else ""), highlight=False, soft_wrap=True)
    t0, cpu0 = time.perf_counter(), cpu_seconds()
    code = 0
    error = None
    mark = created_mark()
    try:
        if cmd is None:
            run_workload(step_dir, options, resume_dir)
        else:
            if plan.prepare is not None:
                plan.prepare(suite_params(cmd, step.name, options))
            code = run_suite(module, cmd, step.name, options, args, step_dir, resume_dir)
    except KeyboardInterrupt:
        st["seconds"], st["cpu_seconds"] = time.perf_counter() - t0, cpu_seconds() - cpu0
        run_state.write_state(ctx.out, ctx.state)   # stays "running": --resume re-runs (or resumes) it
        raise
    except UserError as e:
        error = str(e)
    except click.ClickException as e:
        error = e.format_message()
    except Exception as e:  # noqa: BLE001 - one broken suite must not stop the others
        error = f"{type(e).__name__}: {e}"
        st["traceback"] = traceback.format_exc(limit=8)
    st["seconds"], st["cpu_seconds"] = time.perf_counter() - t0, cpu_seconds() - cpu0
    found = resume_dir if resume_dir is not None and (resume_dir / "result.json").is_file() else \
        run_state.finished_new(step_dir, before)
    if found is not None:
        st["run_dir"] = os.path.relpath(found, ctx.out)
    if error is None and found is not None:
        st["status"] = "done"
        if code:
            st["exit_code"] = code
            notes.append(f"the suite exited with code {code} (a failed check; see its gates and output)")
    else:
        st["status"] = "failed"
        st["reason"] = error or (f"exit code {code}, no result.json written" if code else "no result.json written")
        console.print(f"[red]step {step.name} failed[/]: {st['reason']}", highlight=False)
        # a run folder the step made but put no work in is not kept (one with samples stays: --resume)
        discard_unfinished(mark)
        for d in (step_dir, step_dir.parent):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()


def globals_used(steps: list[str], sections: dict[str, Any], engine: str | None) -> set[str]:
    """Which of the run's --model, --engine and --device some of `steps` uses: a suite whose
    command takes the option (--engine: one of its engines; the built-in workload step: model and
    device), less what its plan leaves out under this config (plan.unused_globals)."""
    used: set[str] = set()
    for step in plan_mod.STEPS:
        if step.name not in steps:
            continue
        if step.command is None:
            used |= {"model", "device"}
            continue
        cmd = suite_command(step.command)
        if cmd is None:
            continue
        takes = {k for k in ("model", "device") if find_option(cmd, k) is not None}
        p = find_option(cmd, "engine")
        if p is not None and (engine is None or engine in (getattr(p.type, "choices", None) or [engine])):
            takes.add("engine")
        used |= takes - set(plan_mod.unused_globals(step.name, sections))
    return used


def cpu_seconds() -> float:
    """CPU seconds this process and its finished children used (user + system, all threads):
    what a step costs, apart from what other processes on a loaded machine take."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_workload(step_dir: Path, options: dict, resume_dir: Path | None) -> None:
    cfg = workload_config(options)
    result, path = generate_trace(cfg, step_dir, resume=resume_dir)
    m = result["metrics"]
    click.echo(f"workload: {m['responses']} responses, {m['output_tokens']} tokens"
               + (f", tokens_per_step with SAM {m['tokens_per_step']:.2f}" if m.get("tokens_per_step") else "")
               + f"; trace {path / result['trace']}")
