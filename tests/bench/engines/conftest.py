"""Fixtures of the engine tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Multi-threaded small GEMMs stall on a busy shared machine (OpenMP spin-waits: a SmolLM2
    test took 8 minutes instead of 40 s); one thread keeps a module's timing predictable. A
    module opts in with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
