"""Public paths users already type keep working after the engines moved to
`samspec_bench.bench.engines.vllm` and the in-worker proposer to `samspec_bench.bench.vllm_proposer`:
the drafter's class paths (the README's and the older one), the old plugin modules, the
`vllm.general_plugins` entry point, and the old `python -m` scripts (now CLI commands). None of
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


# what users wrote into vLLM configurations (README, earlier releases) and what it must build
CONFIG_PATHS = {"samspec_bench.bench.engines.vllm.drafter.SamProposer": "SamProposer",
                "samspec_bench.bench.engines.vllm.drafter.SamWorkerExtension": "SamWorkerExtension",
                "samspec_bench.bench.vllm_drafter.SamProposer": "SamProposer",
                "samspec_bench.bench.vllm_drafter.SamWorkerExtension": "SamWorkerExtension"}


def test_config_paths_resolve_to_the_proposer_classes():
    """Each dotted path resolves as vLLM resolves custom_class (import the module, take the
    attribute) to the one class in vllm_proposer, and the path the engine passes vLLM is that
    class's own (the start-up guard rail compares it with what vLLM built)."""
    import importlib

    from samspec_bench.bench import vllm_proposer

    for path, cls in CONFIG_PATHS.items():
        mod, _, attr = path.rpartition(".")
        assert getattr(importlib.import_module(mod), attr) is getattr(vllm_proposer, cls), path
    p = vllm_proposer.SamProposer
    assert vllm_proposer.CLASS_PATH == f"{p.__module__}.{p.__qualname__}"
    e = vllm_proposer.SamWorkerExtension
    assert vllm_proposer.EXTENSION_PATH == f"{e.__module__}.{e.__qualname__}"
    assert set(vllm_proposer.CLASS_PATHS) == {vllm_proposer.CLASS_PATH} | {k for k, v in CONFIG_PATHS.items()
                                                                           if v == "SamProposer"}


def test_old_plugin_paths_register():
    from samspec_bench.bench import ascend_plugin
    from samspec_bench.bench.engines.vllm import ascend as old_ascend
    from samspec_bench.bench.vllm_proposer import ascend

    assert ascend_plugin.register is ascend.register and old_ascend.register is ascend.register


def test_old_engine_path_is_the_same_object():
    from samspec_bench.bench import vllm_engine
    from samspec_bench.bench.engines.vllm import adapter, method_comparison as compare

    assert vllm_engine.VllmEngine is adapter.VllmEngine
    assert vllm_engine.compare_methods is compare.compare_methods


def test_plugin_entry_points_resolve_without_vllm():
    """The entry point declared now and the one earlier installs recorded both load without
    vLLM and do nothing where vllm-ascend is absent (never raise)."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    target = data["project"]["entry-points"]["vllm.general_plugins"]["samspec_sam"]
    assert target == "samspec_bench.bench.vllm_proposer.ascend:register"
    for t in (target, "samspec_bench.bench.engines.vllm.ascend:register"):
        mod, _, attr = t.partition(":")
        got = _python(_BLOCK + f"import importlib\nf = getattr(importlib.import_module({mod!r}), {attr!r})\n"
                      "assert callable(f), f\nprint(f())\n")
        assert got.returncode == 0, got.stderr
        assert got.stdout.strip() == "False"   # no vllm-ascend: the plugin does nothing, never raises


def test_old_paths_and_engine_core_import_without_vllm_and_no_suite():
    modules = ["samspec_bench.bench.vllm_drafter", "samspec_bench.bench.ascend_plugin",
               "samspec_bench.bench.engines.vllm.drafter", "samspec_bench.bench.engines.vllm.ascend",
               "samspec_bench.bench.vllm_proposer", "samspec_bench.bench.draft_dominance",
               "samspec_bench.bench.simulation.step_model_spec", "samspec_bench.bench.simulation.step_models",
               "samspec_bench.bench.vllm_engine", "samspec_bench.bench.engines.vllm.adapter",
               "samspec_bench.bench.engines.vllm.step_records", "samspec_bench.bench.engines.vllm.guard_rails",
               "samspec_bench.bench.engines.vllm.method_comparison", "samspec_bench.bench.engines.vllm.compare", "samspec_bench.bench.engines.acceptance"]
    got = _python(_BLOCK + "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules) +
                  "print(sorted(m for m in sys.modules if m.startswith('samspec_bench.suites')))\n")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "[]"


# old `python -m` scripts -> the command they now run, and a flag of the old command line
OLD_SCRIPTS = {"samspec_bench.bench.vllm_engine": ("compare", "--methods"),
               "samspec_bench.bench.engines.vllm.compare": ("compare", "--methods"),
               "samspec_bench.bench.draft_dominance": ("dominance", "--sam-length"),
               "samspec_bench.bench.simulation.step_models": ("step-model", "--step-model")}


def test_old_scripts_run_their_command():
    for module, (command, flag) in OLD_SCRIPTS.items():
        got = _python("", "-m", module, "--help")
        assert got.returncode == 0, got.stderr
        assert got.stdout.startswith(f"Usage: samspec-bench {command} [OPTIONS]") and flag in got.stdout, module


def test_old_script_flags_reach_the_command(tmp_path):
    """A bad value through the old path is the CLI's one-line error naming it (exit 2), and the
    old `--traces A B` (several files after one flag) still parses."""
    got = _python("", "-m", "samspec_bench.bench.simulation.step_models", "--step-model",
                  "roofline:hardware=XPU,model=Qwen3-8B", "--steps", str(tmp_path / "none.json"),
                  "--output", str(tmp_path / "out"))
    assert got.returncode == 2 and got.stderr.startswith("error: ") and got.stderr.count("\n") == 1, got.stderr
    assert "XPU" in got.stderr and not (tmp_path / "out").exists()
    from samspec_bench.bench.draft_dominance import legacy_argv

    assert legacy_argv(["--traces", "a.jsonl", "b.jsonl", "-k", "3", "--traces", "c.jsonl"]) == [
        "--traces", "a.jsonl", "--traces", "b.jsonl", "-k", "3", "--traces", "c.jsonl"]
    assert legacy_argv(["-k", "2", "--no-share-stats"]) == ["-k", "2", "--no-share-stats"]
