"""The device option's resolution, what a result records about a device, and device timing.

CUDA and NPU paths run here against a stand-in of the accelerator module (torch.cuda's API,
which torch_npu copies as torch.npu): the stand-in keeps a clock of its own, so the timer's
arithmetic and its synchronisation order are checked exactly."""

from __future__ import annotations

import importlib.machinery
import sys
import types

import pytest
import torch

from samspec_bench import devices
from samspec_bench.errors import UserError

from device_fixtures import FakeClock, FakeEvent


def fake_accelerator(count=2, name="Ascend910B3"):
    clock = FakeClock()
    mod = types.SimpleNamespace(
        is_available=lambda: count > 0, device_count=lambda: count,
        get_device_name=lambda i=0: f"{name}#{i}", synchronize=lambda: None,
        Event=lambda enable_timing=False: FakeEvent(clock, enable_timing), clock=clock)
    return mod


@pytest.fixture
def fake_npu(monkeypatch):
    """torch_npu as installed on an Ascend machine: importing it registers torch.npu."""
    mod = fake_accelerator()
    pkg = types.ModuleType("torch_npu")
    pkg.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)
    pkg.__version__ = "2.10.0.post4"
    pkg.version = types.SimpleNamespace(cann="8.3.RC1")
    monkeypatch.setitem(sys.modules, "torch_npu", pkg)
    monkeypatch.setattr(torch, "npu", mod, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return mod


@pytest.mark.parametrize("spec,want", [("auto", ("auto", None)), ("cpu", ("cpu", None)), ("CUDA", ("cuda", None)),
                                       ("cuda:3", ("cuda", 3)), (" npu:0 ", ("npu", 0))])
def test_parse_device_accepts_the_documented_forms(spec, want):
    assert devices.parse_device(spec) == want


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:-1", "cpu:0", "auto:1", "mps", ""])
def test_parse_device_rejects_other_forms_naming_the_option(spec):
    with pytest.raises(UserError, match=r"^--device .*use one of auto, cpu, cuda"):
        devices.parse_device(spec)


def test_cuda_on_a_machine_without_it_is_a_user_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError) as e:
        devices.resolve_device("cuda", option="--device")
    msg = str(e.value)
    assert msg.startswith("--device cuda: torch sees no CUDA device") and "\n" not in msg
    assert "--device cpu" in msg


def test_auto_without_accelerators_is_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(devices, "_npu_module", lambda: None)
    assert devices.resolve_device("auto") == "cpu"
    assert devices.resolve_device(None) == "cpu"


def test_auto_prefers_cuda_then_npu(monkeypatch, fake_npu):
    assert devices.resolve_device("auto") == "npu:0"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.resolve_device("auto") == "cuda:0"


def test_npu_index_beyond_the_count_names_the_valid_range(fake_npu):
    assert devices.resolve_device("npu:1") == "npu:1"
    with pytest.raises(UserError, match=r"--device npu:2: this machine has 2 npu device\(s\) \(0\.\.1\)"):
        devices.resolve_device("npu:2")


def test_npu_without_torch_npu_says_so(monkeypatch):
    monkeypatch.setattr(devices, "_npu_module", lambda: None)
    with pytest.raises(UserError, match="torch_npu is not installed"):
        devices.resolve_device("npu")


def test_device_info_names_the_npu_and_its_software(fake_npu):
    info = devices.device_info("npu:1")
    assert info["name"] == "Ascend910B3#1"
    assert (info["torch_npu"], info["cann"]) == ("2.10.0.post4", "8.3.RC1")
    assert info["timer"].startswith("npu device time")


def test_device_info_on_the_cpu_records_threads():
    info = devices.device_info("cpu")
    assert info["type"] == "cpu" and info["torch_threads"] == torch.get_num_threads()
    assert info["torch"] == torch.__version__ and "wall clock" in info["timer"]


def test_device_timer_reads_events_after_synchronising(fake_npu):
    clock = fake_npu.clock
    durations = [0.004, 0.0015, 0.010]
    it = iter(durations)

    def work():
        clock.now += next(it)

    timer = devices.DeviceTimer("npu:0")
    for _ in durations:
        with timer.span():
            work()
    assert timer.ms == pytest.approx([4.0, 1.5, 10.0])


def test_time_ms_warms_up_then_times_each_repeat_on_the_cpu(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(devices.time, "perf_counter", lambda: clock.now)
    calls = []

    def work():
        calls.append(1)
        clock.now += 0.002 * len(calls)   # the n-th call takes 2n ms

    ms, label = devices.time_ms(work, "cpu", repeats=3, warmup=2)
    assert len(calls) == 5
    assert ms == pytest.approx([6.0, 8.0, 10.0])   # calls 3..5: the warm-up ones are not timed
    assert label.startswith("CPU wall clock")


@pytest.mark.parametrize("text, want", [
    # the open kernel module's line: on the H100 machines of 2026-11-27 the driver was recorded as "for"
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
     "(dvs-builder@U22-I3-AF03-09-1)  Thu Oct  2 19:21:20 UTC 2025\nGCC version:  gcc version 12.3.0", "580.159.04"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n", "535.104.05"),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.54  Tue Feb 20 2024\n", "550.54"),
    ("no version here\n", None)])
def test_the_driver_version_is_read_from_either_kernel_module_line(text, want):
    assert devices.nvrm_driver(text) == want


def test_out_of_memory_tells_allocation_failures_from_other_errors():
    import torch
    from samspec_bench.devices import out_of_memory
    assert out_of_memory(MemoryError()) and out_of_memory(torch.OutOfMemoryError("CUDA out of memory."))
    assert out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: can't "
                                      "allocate memory: you tried to allocate 4000000000000 bytes."))
    assert not out_of_memory(RuntimeError("shape '[2, 3]' is invalid for input of size 5"))
