"""tools/sampler_host_bound.py: refuses a machine without CUDA in one line (exit 2); on a GPU, the
span of a call holds its kernels and the call launches kernels (the figures README quotes)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "sampler_host_bound.py"
REPO = TOOL.parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("sampler_host_bound", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_it_refuses_a_device_it_cannot_measure_in_one_line():
    res = subprocess.run([sys.executable, str(TOOL), "--device", "cpu"], capture_output=True, text=True,
                         cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "needs a CUDA device" in res.stderr


@pytest.mark.cuda
def test_on_a_gpu_the_span_holds_the_kernels(on_accelerator):
    if not on_accelerator:
        pytest.skip("kernel times need CUDA; this is the dry run on the CPU")
    out = _tool().measure("cuda", calls=5, profiled=2)
    assert out["kernels_per_call"] > 10 and out["host_syncs_per_call"] >= 0
    assert 0 < out["kernel_ms_per_call"] <= out["span_ms_median"] * 1.5
