"""The config file's option values checked by each suite's own build_config before a new run's
folder is made: a value out of its range (`drafters: {k: -5}`) is a UserError naming the config
file, the section and the option, not a failed step after the run started.

build_config validates without running (the suite contract), but it also looks for the inputs a
step gets (traces, a data directory, a model), some of which an earlier step makes (the built-in
workload's trace). So each section is checked with the options its step would get now (the
plan's, the run's global settings, the section), and an error counts as the section's only when
it names one of the section's options and the same options without the section do not give it:
an input that is not there yet is left to the step, which records it when it runs. The built-in
workload's trace is the input most steps wait for: when the run makes one (no data directory,
the workload step chosen), the steps are planned on a stand-in of it (STANDIN_TRACE), so that
their suites' checks reach the section's values instead of stopping at the missing trace.
That trace (and its tokenizer folder) is the only path one step hands another; a path a section
names itself (accept's --traces, curves' runs) no step writes, so one that is not there is the
section's error, refused here.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import click

from samspec_bench.errors import UserError, one_line
from samspec_bench.suites.run import plan as plan_mod
from samspec_bench.suites.run.config_options import find_option, suite_command, suite_module, suite_params
from samspec_bench.suites.run.plan import Ctx, Plan
from samspec_bench.suites.run.steps import contract_params, suite_options


def _refusal(module: ModuleType, cmd: click.Command, step: str, options: dict[str, Any]) -> str | None:
    """build_config's refusal of `options` (one line), or None when it takes them. Anything but a
    refusal (a suite's own bug) is left to the step, which records it with its traceback."""
    try:
        params = contract_params(module, step, suite_params(cmd, step, options), {}, cmd)
        module.build_config(**params)
    except UserError as e:
        return one_line(e)
    except click.ClickException as e:
        return one_line(e.format_message())
    except Exception:  # noqa: BLE001 - not a verdict on the config's values
        return None
    return None


def _names_option(message: str, cmd: click.Command, keys) -> bool:
    """Whether `message` names one of the options `keys` stand for (by any of its spellings)."""
    for key in keys:
        p = find_option(cmd, key)
        for spelling in (p.opts + p.secondary_opts) if p is not None else ():
            if re.search(rf"(?<![\w-]){re.escape(spelling)}(?![\w-])", message):
                return True
    return False


def _names_value(message: str, section: dict[str, Any]) -> bool:
    """Whether `message` names one of the section's text values (a path, a name: `runs:
    [/no/such/log]`), as a suite that refuses a value by naming it does."""
    for value in section.values():
        for v in value if isinstance(value, (list, tuple)) else [value]:
            text = v if isinstance(v, str) else None
            if text and len(text.strip()) > 1 and re.search(rf"(?<![\w./-]){re.escape(text.strip())}(?![\w/-])",
                                                            message):
                return True
    return False


def _probe_plan(step, ctx: Ctx) -> Plan:
    """The step's plan as it would be now; where it cannot run yet (no traces before the
    workload step), the run's global settings and the section alone."""
    try:
        p = step.plan(ctx)
    except Exception:  # noqa: BLE001 - a plan that needs an earlier step's output
        return Plan()
    return Plan(unused=p.unused) if p.skip else p


# one response of the built-in workload's trace (workload.py writes these fields) and the tokens
# its result.json counts: enough that no plan skips its step for too short a trace
STANDIN_TRACE = {"id": "p00-s00", "group": "p00", "dataset": "samspec-builtin-math", "model": "stand-in",
                 "system": None, "question": "1 + 1?", "prompt_ids": [1, 2, 3], "response_ids": [4, 5, 6],
                 "response_text": "2", "finish_reason": "stop", "logprobs": [0.0, 0.0, 0.0]}
STANDIN_TOTAL_TOKENS = 1 << 20


@contextlib.contextmanager
def probe_state(settings: dict, chosen: list[str]) -> Iterator[tuple[Path | None, dict]]:
    """(the probe's run directory, or None; its state): with a stand-in workload step recorded
    done there when this run's workload step makes the trace the others read; removed after."""
    own = (settings.get("sections") or {}).get("workload", {})
    if settings.get("data_dir") or "workload" not in chosen or own is False \
            or (isinstance(own, dict) and own.get("skip") is True):
        yield None, {"steps": {}}
        return
    with tempfile.TemporaryDirectory(prefix="samspec-run-probe-") as tmp:
        w = Path(tmp) / "runs" / "workload" / "stand-in"
        w.mkdir(parents=True)
        (w / "trace.jsonl").write_text(json.dumps(STANDIN_TRACE) + "\n", encoding="utf-8")
        (w / "result.json").write_text(json.dumps({"trace": "trace.jsonl", "tokenizer": str(w),
                                                   "metrics": {"total_tokens": STANDIN_TOTAL_TOKENS}}),
                                       encoding="utf-8")
        yield Path(tmp), {"steps": {"workload": {"status": "done", "run_dir": "runs/workload/stand-in"}}}


def check_values(settings: dict, chosen: list[str], config: str | Path, output: str | Path) -> None:
    """Each chosen suite step's config-file section through its suite's build_config (see the
    module doc), before the run folder under `output` is made; a UserError "--config FILE:
    config section STEP: <the suite's message>"."""
    with probe_state(settings, chosen) as (probe_dir, state):
        _check_values(settings, chosen, config, probe_dir or Path(output) / "run-(not made yet)", state)


def _check_values(settings: dict, chosen: list[str], config: str | Path, out: Path, state: dict) -> None:
    sections = settings.get("sections") or {}
    ctx = Ctx(out=out, model=settings["model"], engine=settings.get("engine"),
              data_dir=Path(settings["data_dir"]) if settings.get("data_dir") else None, sections=sections,
              state=state, device=settings.get("device"))
    for step in plan_mod.STEPS:
        section = sections.get(step.name)
        if step.name not in chosen or step.command is None or not isinstance(section, dict) \
                or section.get("skip") is True:
            continue
        section = {k: v for k, v in section.items() if k != "skip"}
        cmd, module = suite_command(step.command), suite_module(step.command)
        if not section or cmd is None or not callable(getattr(module, "build_config", None)):
            continue
        where = f"--config {config}: "
        try:   # an output option build_config does not take: refused by name, whatever its value
            contract_params(module, step.name, suite_params(cmd, step.name, section), section, cmd)
        except UserError as e:
            raise UserError(where + one_line(e)) from None
        p = _probe_plan(step, ctx)
        options, _, skip = suite_options(cmd, ctx, p, section)
        if skip:
            continue
        message = _refusal(module, cmd, step.name, options)
        if message is None or not (_names_option(message, cmd, section) or _names_value(message, section)):
            continue
        without, _, _ = suite_options(cmd, ctx, p, {})
        if _refusal(module, cmd, step.name, without) != message:
            raise UserError(f"{where}config section {step.name}: {message}")
