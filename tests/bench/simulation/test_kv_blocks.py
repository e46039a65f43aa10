"""The simulated KV cache refuses a request that could never fit, naming it and every fix."""

from __future__ import annotations

import numpy as np
import pytest

from samspec_bench.bench.simulation.kv_blocks import KvBlocks
from samspec_bench.errors import UserError


def test_a_request_larger_than_the_cache_is_refused_naming_its_prompt_and_the_fixes():
    # 5000 tokens of cache in blocks of 16 (312 blocks); request 1 needs 6100 tokens (382 blocks)
    with pytest.raises(UserError) as e:
        KvBlocks(5000, 16, np.array([900, 6100, 1200]))
    msg = str(e.value)
    assert "request 1 needs up to 6100 KV tokens (382 blocks of 16" in msg
    assert "prompt" in msg and "--max-response-len" in msg and "raise the capacity" in msg
    assert KvBlocks(5000, 16, np.array([900, 4992])).num_blocks == 312   # 312 blocks hold 4992 tokens
