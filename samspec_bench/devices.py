"""Which accelerator a suite runs on, what it is, and how its work is timed.

One device option for every suite: `auto | cpu | cuda[:N] | npu[:N]`. `auto` picks CUDA, then an
Ascend NPU (torch_npu registers `torch.npu` when imported), then the CPU. A device that is not
there is a one-line UserError (exit 2), raised before any model loads.

Time on an accelerator is device time: events recorded on the device's stream and read after
synchronising (`torch.cuda.Event` / `torch.npu.Event`, the same API in torch_npu). On the CPU the
work runs on the calling thread, so the wall clock around it is the measure. Every timing says
which timer produced it (`timer_label`).

torch is imported inside the functions: `samspec-bench --help` and the replay paths stay light.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import time
from contextlib import contextmanager
from typing import Any, Iterator

from samspec_bench.errors import UserError

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N, npu, npu:N"
_SPEC = re.compile(r"^(auto|cpu|cuda|npu)(?::(\d+))?$")


def parse_device(spec: str, option: str = "--device") -> tuple[str, int | None]:
    """Syntax only (no torch): ('cuda', 1) for 'cuda:1', ('auto', None) for 'auto'."""
    m = _SPEC.match(str(spec).strip().lower())
    if not m or (m.group(1) in ("auto", "cpu") and m.group(2) is not None):
        raise UserError(f"{option} {spec!r}: not a device; use one of {DEVICE_CHOICES}")
    return m.group(1), (int(m.group(2)) if m.group(2) is not None else None)


def _npu_module():
    """torch.npu after importing torch_npu (which registers it), or None where it is absent."""
    if importlib.util.find_spec("torch_npu") is None:
        return None
    import torch
    import torch_npu  # noqa: F401  (registers torch.npu)
    return getattr(torch, "npu", None)


def accelerator(kind: str):
    """The torch module of an accelerator kind ('cuda' -> torch.cuda, 'npu' -> torch.npu)."""
    import torch
    if kind == "cuda":
        return torch.cuda
    if kind == "npu":
        return _npu_module()
    raise ValueError(f"not an accelerator kind: {kind}")


def resolve_device(spec: str | None, option: str = "--device") -> str:
    """A device string torch accepts ('cpu', 'cuda:0', 'npu:1'), checked to be present."""
    kind, index = parse_device(spec or "auto", option)
    if kind == "cpu":
        return "cpu"
    if kind == "auto":
        import torch
        if torch.cuda.is_available():
            return "cuda:0"
        npu = _npu_module()
        return "npu:0" if npu is not None and npu.is_available() else "cpu"
    mod = accelerator(kind)
    if mod is None or not mod.is_available():
        why = "torch_npu is not installed" if mod is None else f"torch sees no {kind.upper()} device"
        raise UserError(f"{option} {spec}: {why} on this machine; pass --device cpu or auto")
    count = int(mod.device_count())
    index = 0 if index is None else index
    if index >= count:
        raise UserError(f"{option} {spec}: this machine has {count} {kind} device(s) (0..{count - 1}); "
                        f"pass one of them, or auto")
    return f"{kind}:{index}"


def device_kind(device: str) -> str:
    return str(device).split(":")[0]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nvrm_driver(text: str) -> str | None:
    """The driver version in /proc/driver/nvidia/version's NVRM line: the first dotted number after
    "Kernel Module" (proprietary: "x86_64 Kernel Module  580.95.05"; open: "Open Kernel Module
    for x86_64  580.159.04", where the word after it is "for")."""
    m = re.search(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)*)\b", text)
    return m.group(1) if m else None


def _nvidia_driver() -> str | None:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            return nvrm_driver(f.read())
    except OSError:
        return None


def device_info(device: str) -> dict[str, Any]:
    """What a result records about the device: its name and the software that drives it."""
    import torch
    kind = device_kind(device)
    info: dict[str, Any] = {"device": str(device), "type": kind, "torch": torch.__version__,
                            "timer": timer_label(device)}
    if kind == "cpu":
        info.update(name=_cpu_name(), cores=os.cpu_count(), torch_threads=torch.get_num_threads())
        return info
    mod = accelerator(kind)
    index = int(str(device).split(":")[1]) if ":" in str(device) else 0
    info["name"] = mod.get_device_name(index)
    if kind == "cuda":
        info.update(cuda=torch.version.cuda, hip=getattr(torch.version, "hip", None), driver=_nvidia_driver())
        props = torch.cuda.get_device_properties(index)
        info["memory_gib"] = round(props.total_memory / 2**30, 2)
    else:
        import torch_npu
        info["torch_npu"] = getattr(torch_npu, "__version__", None)
        cann = getattr(getattr(torch_npu, "version", None), "cann", None)
        info["cann"] = cann if isinstance(cann, str) else None
    return info


def timer_label(device: str) -> str:
    kind = device_kind(device)
    if kind == "cpu":
        return "CPU wall clock (perf_counter, work on the calling thread)"
    return f"{kind} device time ({kind} events, synchronised)"


def synchronize(device: str) -> None:
    """Wait for the device's queued work (no-op on the CPU)."""
    kind = device_kind(device)
    if kind != "cpu":
        accelerator(kind).synchronize()


class DeviceTimer:
    """Times device work: `with timer.span(): work()` appends milliseconds to `timer.ms`.

    On an accelerator the span is measured by two events on the current stream and read after
    a synchronisation, so host-side launch time does not count and queued kernels do."""

    def __init__(self, device: str):
        self.device = str(device)
        self.kind = device_kind(device)
        self.label = timer_label(device)
        self.ms: list[float] = []

    @contextmanager
    def span(self) -> Iterator[None]:
        if self.kind == "cpu":
            t0 = time.perf_counter()
            yield
            self.ms.append((time.perf_counter() - t0) * 1e3)
            return
        mod = accelerator(self.kind)
        start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        end.synchronize()
        self.ms.append(float(start.elapsed_time(end)))


def time_ms(fn, device: str, *, repeats: int, warmup: int = 1) -> tuple[list[float], str]:
    """Run fn warmup + repeats times; the repeats' times in ms and the timer's label."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    timer = DeviceTimer(device)
    for _ in range(repeats):
        with timer.span():
            fn()
    return timer.ms, timer.label


def step_timers(device) -> tuple[DeviceTimer, DeviceTimer]:
    """The timers of a step and of its forward pass. On CUDA / NPU: events on the device's stream,
    read after synchronising (the step's pair spans its host work too, so time_s is the step as
    the device saw it: queued kernels count, launch time alone does not end it); on the CPU the
    wall clock. A kind devices.py cannot time (mps, xpu): the host's wall clock, labelled so."""
    kind = device_kind(str(device))
    if kind in ("cpu", "cuda", "npu"):
        return DeviceTimer(str(device)), DeviceTimer(str(device))
    timers = DeviceTimer("cpu"), DeviceTimer("cpu")
    for t in timers:
        t.label = f"host wall clock ({kind} work not synchronised)"
    return timers


def out_of_memory(e: BaseException) -> bool:
    """Whether an exception is an allocation that failed, in host or device memory (torch's
    OutOfMemoryError, CUDA's and the CPU allocator's messages): where the size came from the
    user's options, a caller turns it into a UserError naming them."""
    text = str(e).lower()
    return (isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError"
            or "can't allocate memory" in text or "out of memory" in text)

