"""The `--device` of a suite, resolved for the engine it runs, and what its result records.

- An engine that runs torch in this process (reference) is put on the device: `resolve_device`
  (auto: CUDA, then NPU, then the CPU; a device that is not there is a one-line UserError).
- An engine that places itself (vLLM: its CUDA, Ascend or CPU build chooses the platform) runs
  where its platform is: `auto` or that kind is accepted, another kind is refused in one line.
- An engine without a model (trace replay) computes nothing on a device: the device still
  resolves (a missing one is the same error) and is recorded as unused.

Every check here runs before a suite writes anything. torch and vLLM are imported inside the
functions (devices.py's rule): `--help` stays light.
"""

from __future__ import annotations

from typing import Any, Callable

from samspec_bench.bench.engines.factory import engine_capabilities, require_engine
from samspec_bench.devices import device_info, device_kind, parse_device, resolve_device
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import AUTO_DTYPE, resolve_dtype

RECORDED_KINDS = ("cpu", "cuda", "npu")   # the kinds device_info describes
# the --device option's help, the same in every suite
DEVICE_HELP = ("Where the model and its tensors run: auto (CUDA, then an Ascend NPU, then the CPU), cpu, cuda[:N] "
               "or npu[:N]. --engine vllm runs where its build puts it (auto or that kind); trace replay runs no model "
               "(the device is recorded as unused).")


def vllm_device_kind() -> str | None:
    """The device kind of vLLM's current platform (cuda, npu, cpu, ...), None where vLLM does not say."""
    try:
        from vllm.platforms import current_platform  # imports vLLM
    except Exception:  # noqa: BLE001 - vLLM missing or broken: require_engine explains it
        return None
    kind = getattr(current_platform, "device_type", None)
    return str(kind) if kind else None


# an optional install -> how to ask it where it runs (an engine that places itself)
_PLATFORM: dict[str, Callable[[], str | None]] = {"vllm": vllm_device_kind}


def placed_device(engine: str) -> str | None:
    """Where an engine that places itself runs (its platform's device kind); None for an engine
    put on a device by us, or one that does not say. Raises nothing: for the record."""
    caps = engine_capabilities(engine)
    if caps.torch_in_process or not caps.needs_model or caps.requires not in _PLATFORM:
        return None
    return _PLATFORM[caps.requires]()


def engine_device(engine: str, spec: str | None, option: str = "--device") -> str:
    """The device `engine` runs on for `--device spec`: a torch device string ('cpu', 'cuda:0');
    for an engine that places itself, its platform's kind ('cuda'). Raises UserError naming
    `option` when the device is not there or not the engine's."""
    spec = spec or "auto"
    kind, index = parse_device(spec, option)
    caps = engine_capabilities(engine)
    if caps.torch_in_process or not caps.needs_model or caps.requires not in _PLATFORM:
        return resolve_device(spec, option)
    require_engine(engine)
    have = placed_device(engine)
    if have is None:
        if kind == "auto":
            return "auto"
        raise UserError(f"{option} {spec}: {engine} does not say which device it runs on; pass {option} auto")
    if kind not in ("auto", have):
        raise UserError(f"{option} {spec}: {engine} here runs on its {have} platform (it chooses the device "
                        f"itself); pass {option} {have} or auto")
    if index not in (None, 0):
        raise UserError(f"{option} {spec}: {engine} places itself on the visible devices; choose the device with "
                        f"CUDA_VISIBLE_DEVICES (ASCEND_RT_VISIBLE_DEVICES on an NPU) and pass {option} {have}")
    return have


def engine_dtype(engine: str, dtype: str, device: str) -> str:
    """The --dtype a run records: resolved for an engine that runs torch here (`auto`: float32
    on the CPU, bfloat16 on a GPU / NPU), so that a resumed run on another device keeps it; an
    engine that places itself keeps `auto` (vLLM chooses from the checkpoint). An unknown name
    is a one-line UserError either way."""
    resolved = resolve_dtype(dtype, device if device != "auto" else "cuda")
    return resolved if engine_capabilities(engine).torch_in_process or dtype != AUTO_DTYPE else dtype


def engine_options(engine: str, device: str) -> dict[str, Any]:
    """The construction option that puts `engine` on `device`: {'device': ...} for an engine that
    runs torch in this process, {} for one that places itself."""
    return {"device": device} if engine_capabilities(engine).torch_in_process else {}


def device_record(engine: str, device: str) -> dict[str, Any]:
    """What a result records about the device (results.py: environment.device): the device, its
    name and the torch / driver versions (`devices.device_info`), whether the engine used it
    and who chose it."""
    caps = engine_capabilities(engine)
    kind = device_kind(device)
    if not caps.needs_model:
        return {"device": str(device), "type": kind, "used": False,
                "why": f"the {engine} engine runs no model: nothing is computed on a device"}
    info = device_info(device) if kind in RECORDED_KINDS else {"device": str(device), "type": kind}
    info["used"] = True
    if not caps.torch_in_process:
        info["chosen_by"] = f"{engine}'s platform ({kind})"
    return info
