"""Public paths users already type keep working after the engines moved to
`samspec_bench.bench.engines.vllm`: the drafter's old class path, the old plugin module, the
`vllm.general_plugins` entry point, and `python -m samspec_bench.bench.vllm_engine`. None of
them needs vLLM to import (vLLM loads the plugin in every process it starts), and the vLLM
engine core imports no suite. No vLLM needed: these run in every venv."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# vLLM (and torch) made unimportable: `import vllm` raises ImportError in the child
_BLOCK = "import sys; sys.modules['vllm'] = None; sys.modules['torch'] = None\n"


def _python(code: str = "", *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-c", code] if code else [sys.executable, *args]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_old_drafter_path_is_the_same_object():
    from samspec_bench.bench import vllm_drafter
    from samspec_bench.bench.engines.vllm import drafter

    assert vllm_drafter.SamProposer is drafter.SamProposer
    assert vllm_drafter.SamWorkerExtension is drafter.SamWorkerExtension
    assert drafter.LEGACY_CLASS_PATH == "samspec_bench.bench.vllm_drafter.SamProposer"


def test_old_plugin_path_registers():
    from samspec_bench.bench import ascend_plugin
    from samspec_bench.bench.engines.vllm import ascend

    assert callable(ascend_plugin.register) and ascend_plugin.register is ascend.register


def test_old_engine_path_is_the_same_object():
    from samspec_bench.bench import vllm_engine
    from samspec_bench.bench.engines.vllm import adapter, compare

    assert vllm_engine.VllmEngine is adapter.VllmEngine
    assert vllm_engine.compare_methods is compare.compare_methods


def test_plugin_entry_point_resolves_without_vllm():
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    target = data["project"]["entry-points"]["vllm.general_plugins"]["samspec_sam"]
    mod, _, attr = target.partition(":")
    got = _python(_BLOCK + f"import importlib\nf = getattr(importlib.import_module({mod!r}), {attr!r})\n"
                  "assert callable(f), f\nprint(f())\n")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "False"   # no vllm-ascend: the plugin does nothing, never raises


def test_old_paths_and_engine_core_import_without_vllm_and_no_suite():
    modules = ["samspec_bench.bench.vllm_drafter", "samspec_bench.bench.ascend_plugin",
               "samspec_bench.bench.vllm_engine", "samspec_bench.bench.engines.vllm.adapter",
               "samspec_bench.bench.engines.vllm.step_records", "samspec_bench.bench.engines.vllm.guard_rails",
               "samspec_bench.bench.engines.vllm.compare", "samspec_bench.bench.engines.acceptance"]
    got = _python(_BLOCK + "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules) +
                  "print(sorted(m for m in sys.modules if m.startswith('samspec_bench.suites')))\n")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "[]"


def test_module_commands_of_the_method_comparison():
    for module in ("samspec_bench.bench.vllm_engine", "samspec_bench.bench.engines.vllm.compare"):
        got = _python("", "-m", module, "--help")
        assert got.returncode == 0, got.stderr
        assert f"python -m {module}" in got.stdout and "--methods" in got.stdout
