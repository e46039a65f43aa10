"""A stand-in CUDA for tests of the --device plumbing on a machine without one (and a hidden
one where a GPU is there): torch.cuda answers as on a machine with `count` GPUs. Nothing runs
on the stand-in; only a device's resolution and its record (devices.device_info) use it."""

from __future__ import annotations

import types

import pytest
import torch


def stand_in_cuda(monkeypatch, count: int = 1, name: str = "Stand-in GPU") -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: name)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i=0: types.SimpleNamespace(total_memory=80 * 2**30))


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch sees one CUDA device, 'Stand-in GPU' with 80 GiB."""
    stand_in_cuda(monkeypatch)


@pytest.fixture
def no_cuda(monkeypatch):
    """torch sees no CUDA device, whatever the machine has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


# A device clock for timing tests: events read it, the test moves it (no sleeps).
class FakeClock:
    def __init__(self):
        self.now = 0.0


class FakeEvent:
    """torch.cuda.Event's timing API on a fake device clock: elapsed_time is only defined after
    the end event was synchronised, as on the real device (else the event is still queued)."""

    def __init__(self, clock, enable_timing=False):
        assert enable_timing, "timing events must be created with enable_timing=True"
        self.clock, self.at, self.synced = clock, None, False

    def record(self):
        self.at = self.clock.now

    def synchronize(self):
        self.synced = True

    def elapsed_time(self, end):
        if not end.synced:
            raise RuntimeError("end event not completed: synchronise first")
        return (end.at - self.at) * 1e3
