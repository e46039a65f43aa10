"""`make_engine`: an engine by its `--engine` name. Apart from the interface (`base`) so
that the interface imports no back end; each back end is imported only when asked for
(torch for `reference`; the vLLM adapter imports vLLM itself when an engine starts)."""

from __future__ import annotations

from typing import Any

from samspec_bench.bench.engines.base import Engine
from samspec_bench.bench.engines.vllm.adapter import VllmEngine  # imports vLLM only when an engine starts
from samspec_bench.errors import UserError
from samspec_bench.models import BUILTIN_MODEL

ENGINE_NAMES = ("reference", "vllm")


def make_engine(name: str, model: str = BUILTIN_MODEL, **options: Any) -> Engine:
    """An engine by its `--engine` name. `reference`: `ReferenceEngine(model, **options)`
    (dtype, device, max_num_seqs, max_num_batched_tokens, max_model_len, block_size,
    num_blocks, kv_cache_gb, attention, batch_invariant, logprobs_mode)."""
    if name == "reference":
        from samspec_bench.bench.engines.reference import ReferenceEngine  # imports torch
        return ReferenceEngine(model, **options)
    if name == "vllm":  # needs the vLLM install (README, "vLLM back end")
        return VllmEngine(model, **options)
    raise UserError(f"--engine {name!r}: the engines are reference and vllm")
