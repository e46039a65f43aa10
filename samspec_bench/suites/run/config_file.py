"""The YAML file of `samspec-bench run --config`: optional top-level model, engine, device, data-dir,
steps; then one section per step with the suite's CLI options, e.g.
`accept: {drafter: "sam,ngram", num-spec-tokens: [3, 5]}`; `op-equivalence: false` skips a step.
Every section's option names are checked before anything runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click
import yaml

from samspec_bench.devices import resolve_device
from samspec_bench.errors import UserError, nearest, one_line
from samspec_bench.models.checkpoints import AUTO_DTYPE, DTYPES, check_model
from samspec_bench.sam.drafters import DRAFTERS
from samspec_bench.suites.run import plan
from samspec_bench.suites.run.config_options import build_args, find_option, suite_command, suite_params
from samspec_bench.workload import WorkloadConfig

GLOBAL_KEYS = ("model", "engine", "device", "data-dir", "steps")
MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKey(yaml.YAMLError):
    """A key given twice in one mapping of the config file (PyYAML would keep the last one silently)."""

    def __init__(self, key: Any, line: int):
        super().__init__(f"key {key!r} given twice")
        self.key, self.line = key, line


class _Loader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (`<<` merges may be overridden)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else ():
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    raise DuplicateKey(key, key_node.start_mark.line + 1)
                seen.add(key)
            except TypeError:   # an unhashable key: the constructor names it
                pass
        return super().construct_mapping(node, deep=deep)


def load_config(path: str | Path) -> dict:
    """A YAML file: optional top-level model, engine, device, data-dir, steps; then one section per step."""
    p = Path(path)
    if not p.exists() or p.is_dir():   # a pipe (`--config <(...)`) is read as a file
        what = "a directory" if p.is_dir() else "no such file"
        raise UserError(f"--config {path}: {what}; pass a YAML file with one section per suite")
    try:
        data = yaml.load(p.read_bytes().decode("utf-8"), Loader=_Loader)   # a SafeLoader
    except DuplicateKey as e:
        raise UserError(f"--config {path}: {e.key!r} is given twice (line {e.line}); keep one") from None
    except UnicodeDecodeError as e:
        raise UserError(f"--config {path}: not UTF-8 text (byte {e.start}); pass a YAML text file") from None
    except OSError as e:
        raise UserError(f"--config {path}: cannot be read ({e.strerror or type(e).__name__})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise UserError(f"--config {path}: not valid YAML{where}; fix the file") from None
    data = {} if data is None else data   # an empty file (or comments only): no settings
    if not isinstance(data, dict):
        raise UserError(f"--config {path}: the top level must be a mapping (model:, accept:, sampler: ...)")
    out: dict[str, Any] = {}
    for key, value in data.items():
        k = str(key).replace("_", "-")
        if k in GLOBAL_KEYS:
            if k in ("model", "engine", "device", "data-dir") and value is not None and not isinstance(value, str):
                raise UserError(f"--config {path}: {key} must be a string (got {type(value).__name__} {value!r})")
            if k == "steps" and value is not None and not isinstance(value, (str, list)):
                raise UserError(f"--config {path}: steps must be a comma list or a YAML list of step names "
                                f"(got {value!r})")
            out[k] = value
        elif k in plan.STEP_NAMES:
            if value is None:
                value = {}
            if not isinstance(value, (dict, bool)):
                raise UserError(f"--config {path}: section {key} must be a mapping of options (or false to skip it)")
            out[k] = value
        else:
            raise UserError(f"--config {path}: unknown key {key!r}{nearest(k, (*GLOBAL_KEYS, *plan.STEP_NAMES))}; "
                            f"use {', '.join(GLOBAL_KEYS)} or a step name "
                            f"({', '.join(plan.STEP_NAMES)})")
    return out


def parse_steps(value: Any, where: str) -> list[str] | None:
    """The chosen step names (a comma list or a list), each once and in the order they run
    (plan.STEPS): `accept,workload` and `workload,accept,accept` choose the same run."""
    if value is None:
        return None
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    names = [str(x).strip() for x in items if str(x).strip()]
    bad = [n for n in names if n not in plan.STEP_NAMES]
    if bad or not names:
        what = f"{bad[0]!r} is not a step{nearest(bad[0], plan.STEP_NAMES)}; " if bad else ""
        raise UserError(f"{where} {value!r}: {what}use step names from {', '.join(plan.STEP_NAMES)}")
    return [n for n in plan.STEP_NAMES if n in names]


def _workload_value(key: Any, value: Any) -> None:
    """One workload option's value: of its field's type (an integer for a count, a number for
    temperature and top-p, text for model, dtype, device and drafter; null only for drafter, plain
    decoding), a dtype and drafter that exist and a model that can be found. A UserError naming it."""
    name = str(key).replace("-", "_")
    field = next((f for f in dataclasses.fields(WorkloadConfig) if f.name == name), None)
    if field is None or (name == "drafter" and value is None):
        return   # an unknown key: WorkloadConfig names it
    want = type(field.default)
    ok = isinstance(value, (int, float) if want is float else want) and not isinstance(value, bool)
    if not ok:
        kind = {int: "an integer", float: "a number", str: "text"}[want]
        raise UserError(f"config section workload: {key} must be {kind} (got {value!r})")
    if name == "dtype" and value != AUTO_DTYPE and value not in DTYPES:
        raise UserError(f"config section workload: dtype {value!r}: use {AUTO_DTYPE} or one of {', '.join(DTYPES)}")
    if name == "drafter" and value and value not in DRAFTERS:
        raise UserError(f"config section workload: drafter {value!r}{nearest(value, DRAFTERS)}: use one of "
                        f"{', '.join(DRAFTERS)}, or null for plain decoding")
    if name == "model":
        try:
            check_model(value)
        except UserError as e:
            raise UserError(f"config section workload: model: {one_line(e)}") from None


def workload_config(options: dict) -> WorkloadConfig:
    """The built-in workload step's settings; a value of the wrong type is a UserError."""
    for key, value in options.items():
        _workload_value(key, value)
    try:
        return WorkloadConfig.from_options(options)
    except (TypeError, ValueError, OverflowError) as e:
        raise UserError(f"config section workload: {one_line(e)}; give numbers for the numeric settings") from None


def check_sections(sections: dict, config: str | Path | None = None) -> None:
    """Every section names options its suite has, with values its click types take (fail
    fast, before the run folder is made or any step runs). An error names the config file
    first ("--config FILE: config section STEP: ...") when the sections come from one."""
    for step in plan.STEPS:
        sec = sections.get(step.name)
        if not isinstance(sec, dict):
            continue
        try:
            _check_section(step, sec)
        except UserError as e:
            if config is None:
                raise
            raise UserError(f"--config {config}: {one_line(e)}") from None


def _check_section(step: plan.Step, sec: dict) -> None:
    """One step's config section (see check_sections); a UserError naming the section."""
    if "skip" in sec and not isinstance(sec["skip"], bool):
        raise UserError(f"config section {step.name}: skip must be true or false (got {sec['skip']!r})")
    options = {k: v for k, v in sec.items() if k != "skip"}
    for key, value in options.items():
        if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value)):
            raise UserError(f"config section {step.name}: {key} must be a value or a list of values "
                            f"(got {value!r})")
    if step.command is None:
        workload_config(options)
        device_keys = [k for k in options if str(k).replace("-", "_") == "device"]
    elif (cmd := suite_command(step.command)) is not None:   # None: not in this build
        build_args(cmd, step.name, options)
        try:
            suite_params(cmd, step.name, options)   # each value through its option's click type
        except click.ClickException as e:
            raise UserError(f"config section {step.name}: {one_line(e.format_message())}") from None
        device_keys = [k for k in options if getattr(find_option(cmd, k), "name", None) == "device"]
    else:
        device_keys = []
    for key in device_keys:   # a device that is not there: now, not when its step runs
        if options[key] is not None:
            resolve_device(str(options[key]), f"config section {step.name}: {key}")
