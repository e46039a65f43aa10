"""The suite contract (SUITE, command, build_config, execute) for the suites whose click
commands call it: build_config takes every parameter of the command but where results go, with
no defaults of its own (the click options are the one source of defaults)."""

from __future__ import annotations

import importlib
import inspect

import click
import pytest

from samspec_bench.commands import COMMANDS

# the suites of this branch that implement the contract; the others join this list as they do
CONTRACT_SUITES = ("accept", "accuracy", "compare", "curves", "dominance", "drafters", "op-equivalence", "rollout",
                   "sampler", "spec-metrics", "step-model")
OUTPUT_OPTIONS = ("--output", "--resume", "--json")


@pytest.mark.parametrize("name", CONTRACT_SUITES)
def test_suite_exposes_the_contract(name):
    module = importlib.import_module(COMMANDS[name][0].split(":")[0])
    assert module.SUITE == name and isinstance(module.command, click.Command)
    settings = {p.name for p in module.command.params
                if not (isinstance(p, click.Option) and set(p.opts) & set(OUTPUT_OPTIONS))}
    sig = inspect.signature(module.build_config)
    assert set(sig.parameters) == settings
    assert all(p.default is inspect.Parameter.empty for p in sig.parameters.values())
    ex = inspect.signature(module.execute).parameters
    assert {"output", "resume", "json_path"} <= set(ex)
    assert ex["resume"].default is None and ex["json_path"].default is None
