"""The engines by their `--engine` names: what each can do (`engine_capabilities`, asked before
one is built), building one (`make_engine`, `shared_engine`) and the install it needs
(`require_engine`). Apart from the interface (`base`) so that the interface imports no back
end; each back end is imported only when asked for (torch for `reference`; the vLLM adapter
imports vLLM itself when an engine starts)."""

from __future__ import annotations

from typing import Any

from samspec_bench.bench.engines.base import Engine, EngineCapabilities
from samspec_bench.bench.engines.reference_options import REFERENCE_CAPABILITIES
from samspec_bench.bench.engines.replay import REPLAY_CAPABILITIES
from samspec_bench.bench.engines.vllm.adapter import VllmEngine, get_engine  # imports vLLM only when an engine starts
from samspec_bench.bench.engines.vllm.platform import require_vllm
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import BUILTIN_MODEL

# every engine, in the order the commands list them
CAPABILITIES: dict[str, EngineCapabilities] = {"replay": REPLAY_CAPABILITIES, "reference": REFERENCE_CAPABILITIES,
                                               "vllm": VllmEngine.capabilities}
_REQUIRES = {"vllm": require_vllm}   # an optional install -> the check that explains its absence


def engine_names(**wanted: bool) -> tuple[str, ...]:
    """The engines whose capabilities have the given values, e.g. engine_names(generates=True)."""
    return tuple(n for n, c in CAPABILITIES.items() if all(getattr(c, k) == v for k, v in wanted.items()))


ENGINE_NAMES = engine_names(generates=True)   # the model engines make_engine builds: reference, vllm


def engine_capabilities(name: str, option: str = "--engine") -> EngineCapabilities:
    """What the engine `name` can do, without importing it (no torch, no vLLM)."""
    try:
        return CAPABILITIES[name]
    except KeyError:
        raise UserError(f"{option} {name!r}: use one of {', '.join(CAPABILITIES)}") from None


def require_engine(name: str) -> None:
    """A one-line UserError now when the install the engine needs is missing (before a suite
    writes anything)."""
    need = engine_capabilities(name).requires
    if need is not None:
        _REQUIRES[need]()


def make_engine(name: str, model: Any = BUILTIN_MODEL, **options: Any) -> Engine:
    """A model engine by its `--engine` name. `reference`: `ReferenceEngine(model, **options)`
    (dtype, device, max_num_seqs, max_num_batched_tokens, max_model_len, block_size,
    num_blocks, kv_cache_gb, attention, batch_invariant, logprobs_mode, tokenizer with a loaded
    model). `vllm`: `VllmEngine(model, **options)` (speculative, num_spec_tokens, dtype,
    max_model_len, seed, engine_args, ...)."""
    if name == "reference":
        from samspec_bench.bench.engines.reference_engine import ReferenceEngine  # imports torch
        return ReferenceEngine(model, **options)
    if name == "vllm":  # needs the vLLM install (README, "vLLM back end")
        return VllmEngine(model, **options)
    raise UserError(f"--engine {name!r}: the engines that generate are {' and '.join(ENGINE_NAMES)}")


def shared_engine(name: str, model: str = BUILTIN_MODEL, **options: Any) -> Engine:
    """The process's shared engine of `name` for capabilities.shared_per_process (start-up takes
    tens of seconds: it stays open for the next user), else a new one (close it yourself)."""
    if engine_capabilities(name).shared_per_process:
        return get_engine(model, **options)
    return make_engine(name, model, **options)
