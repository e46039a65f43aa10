"""--dtype auto as vLLM's users mean it, resolved where the model is loaded."""

from __future__ import annotations

import pytest

from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import load_model, progress_bars, resolve_dtype


def test_auto_dtype_is_full_precision_on_the_cpu_and_bfloat16_on_an_accelerator():
    assert [resolve_dtype("auto", d) for d in ("cpu", "cuda:1", "npu", "cuda")] == \
        ["float32", "bfloat16", "bfloat16", "bfloat16"]
    assert resolve_dtype("float16", "cpu") == "float16"
    with pytest.raises(UserError, match="--dtype 'fp8'.*use auto or one of float32"):
        resolve_dtype("fp8", "cuda:0")


def test_a_load_with_progress_off_prints_no_bar_and_leaves_the_bars_as_they_were(capfd):
    """--no-progress: transformers' "Loading weights" bar is not printed while the model loads,
    and transformers' bars are as they were afterwards (on stays on, off stays off)."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.is_progress_bar_enabled()
    try:
        hf_logging.enable_progress_bar()
        load_model("builtin:tiny-qwen3")            # built on first use, then loaded with its bar
        assert "Loading weights" in capfd.readouterr().err
        load_model("builtin:tiny-qwen3", progress=False)
        assert capfd.readouterr().err == ""
        assert hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        with progress_bars(False):
            pass
        assert not hf_logging.is_progress_bar_enabled()   # off before: not turned on by the restore
    finally:
        (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()
