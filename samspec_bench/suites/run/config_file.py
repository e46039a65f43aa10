"""The YAML file of `samspec-bench run --config`: optional top-level model, engine, data-dir,
steps; then one section per step with the suite's CLI options, e.g.
`accept: {drafter: "sam,ngram", num-spec-tokens: [3, 5]}`; `op-equivalence: false` skips a step.
Every section's option names are checked before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from samspec_bench.errors import UserError
from samspec_bench.suites.run import plan
from samspec_bench.suites.run.options import build_args, suite_command
from samspec_bench.workload import WorkloadConfig

GLOBAL_KEYS = ("model", "engine", "data-dir", "steps")


def load_config(path: str | Path) -> dict:
    """A YAML file: optional top-level model, engine, data-dir, steps; then one section per step."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--config {path}: no such file; pass a YAML file with one section per suite")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise UserError(f"--config {path}: not valid YAML{where}; fix the file") from None
    if not isinstance(data, dict):
        raise UserError(f"--config {path}: the top level must be a mapping (model:, accept:, sampler: ...)")
    out: dict[str, Any] = {}
    for key, value in data.items():
        k = str(key).replace("_", "-")
        if k in GLOBAL_KEYS:
            out[k] = value
        elif k in plan.STEP_NAMES:
            if value is None:
                value = {}
            if not isinstance(value, (dict, bool)):
                raise UserError(f"--config {path}: section {key} must be a mapping of options (or false to skip it)")
            out[k] = value
        else:
            raise UserError(f"--config {path}: unknown key {key!r}; use {', '.join(GLOBAL_KEYS)} or a step name "
                            f"({', '.join(plan.STEP_NAMES)})")
    return out


def parse_steps(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    names = [str(x).strip() for x in items if str(x).strip()]
    bad = [n for n in names if n not in plan.STEP_NAMES]
    if bad or not names:
        raise UserError(f"{where} {value!r}: use step names from {', '.join(plan.STEP_NAMES)}")
    return names


def check_sections(sections: dict) -> None:
    """Every section names options its suite has (fail fast, before any step runs)."""
    for step in plan.STEPS:
        sec = sections.get(step.name)
        if not isinstance(sec, dict):
            continue
        options = {k: v for k, v in sec.items() if k != "skip"}
        if step.command is None:
            WorkloadConfig.from_options(options)
        elif (cmd := suite_command(step.command)) is not None:   # None: not in this build
            build_args(cmd, step.name, options)
