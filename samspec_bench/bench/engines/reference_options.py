"""The reference engine's construction options and what it can do, without torch: config
validation (and `factory.engine_capabilities`) ask here before the engine, and torch, load."""

from __future__ import annotations

from typing import Any

from samspec_bench.bench.draft_config import SOURCE_NAMES
from samspec_bench.bench.engines.base import EngineCapabilities
from samspec_bench.errors import UserError

ATTENTION_MODES = ("auto", "splitfuse")
LOGPROBS_MODES = ("raw", "processed")
DEFAULT_KV_CACHE_GB = 1.0

REFERENCE_CAPABILITIES = EngineCapabilities(
    generates=True, needs_model=True, needs_traces=False, exact_greedy_acceptance=False,
    draft_sources=tuple(s for s in SOURCE_NAMES if s in ("own", "group")),
    oracle_drafts=True, mixed_oracle_widths=True, teacher_forcing=True, attention_paths=ATTENTION_MODES,
    kv_blocks_settable=True, torch_in_process=True, draft_trees=True)


def check_options(max_num_seqs: int, max_num_batched_tokens: int, logprobs_mode: str, attention: Any) -> None:
    """The options that need no model, checked before it loads."""
    if max_num_seqs < 1 or max_num_batched_tokens < 1:
        raise UserError(f"max_num_seqs = {max_num_seqs}, max_num_batched_tokens = {max_num_batched_tokens}: "
                        "both must be >= 1")
    if logprobs_mode not in LOGPROBS_MODES:
        raise UserError(f"logprobs_mode {logprobs_mode!r}: use one of {', '.join(LOGPROBS_MODES)}")
    if isinstance(attention, str) and attention not in ATTENTION_MODES:
        raise UserError(f"attention {attention!r}: use one of {', '.join(ATTENTION_MODES)} (or a callable)")
