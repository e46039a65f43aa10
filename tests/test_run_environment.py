"""What every result.json records of the environment that ran it."""

from __future__ import annotations

import sys
from importlib import metadata

from samspec_bench.run_environment import environment


def test_the_environment_names_the_interpreter_and_the_installed_packages_that_decide_figures():
    env = environment()
    assert env["python"] == sys.version.split()[0]
    assert env["packages"]["numpy"] == metadata.version("numpy")
    assert "vllm-ascend" not in env["packages"] or env["packages"]["vllm-ascend"] == metadata.version("vllm-ascend")
    assert env["argv"] is sys.argv and env["cpu_count"] >= 1
