"""--dtype auto as vLLM's users mean it, resolved where the model is loaded."""

from __future__ import annotations

import pytest

from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import resolve_dtype


def test_auto_dtype_is_full_precision_on_the_cpu_and_bfloat16_on_an_accelerator():
    assert [resolve_dtype("auto", d) for d in ("cpu", "cuda:1", "npu", "cuda")] == \
        ["float32", "bfloat16", "bfloat16", "bfloat16"]
    assert resolve_dtype("float16", "cpu") == "float16"
    with pytest.raises(UserError, match="--dtype 'fp8'.*use auto or one of float32"):
        resolve_dtype("fp8", "cuda:0")
