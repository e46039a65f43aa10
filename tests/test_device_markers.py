"""The `cuda` / `npu` markers (tests/conftest.py): a marked test runs only where its device is and
skips with the reason elsewhere; SAMSPEC_CUDA_TESTS_ON=cpu runs the cuda tests on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")
MARKED = """
import pytest

@pytest.mark.cuda
def test_on_cuda(accel_device):
    print("RAN-ON", accel_device)

@pytest.mark.npu
def test_on_npu():
    pass
"""


@pytest.fixture
def inner(pytester, monkeypatch):
    """An inner pytest session with our conftest and a cuda- and an npu-marked test."""
    monkeypatch.delenv("SAMSPEC_CUDA_TESTS_ON", raising=False)
    pytester.makeconftest(CONFTEST.read_text())
    pytester.syspathinsert(CONFTEST.parent)      # conftest imports small_qwen3 from tests/
    pytester.makeini("[pytest]\nmarkers =\n    cuda: x\n    npu: x\n")
    pytester.makepyfile(test_marked=MARKED)
    return pytester


def test_without_the_device_the_marked_tests_skip_with_the_reason(inner, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = inner.runpytest_inprocess("-rs")
    res.assert_outcomes(skipped=2)
    res.stdout.fnmatch_lines(["*marked cuda: torch sees no CUDA device*", "*marked npu: *"])


def test_with_a_cuda_device_the_cuda_test_runs(inner, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    res = inner.runpytest_inprocess("-rs", "-s")
    res.assert_outcomes(passed=1, skipped=1)
    res.stdout.fnmatch_lines(["*RAN-ON cuda*"])


def test_the_cpu_dry_run_runs_the_cuda_tests_on_the_cpu(inner, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("SAMSPEC_CUDA_TESTS_ON", "cpu")
    res = inner.runpytest_inprocess("-rs", "-s")
    res.assert_outcomes(passed=1, skipped=1)
    res.stdout.fnmatch_lines(["*RAN-ON cpu*"])
