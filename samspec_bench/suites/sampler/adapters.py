"""Loading the audited samplers: `--audit module:function` or a built-in name.

Adapter contract: either a function taking one `samspec_bench.sam.rejection.RejectionInputs`
and returning the [B, max_spec_len + 1] output (see that class for every tensor's shape and
dtype), or a function with vLLM's `rejection_sample(draft_token_ids, num_draft_tokens,
max_spec_len, cu_num_draft_tokens, draft_probs, target_probs | target_logits, bonus_token_ids,
sampling_metadata)` signature, which is adapted automatically: token ids are passed as int32,
`target_logits` (vLLM >= 0.1x, softmax applied inside) as log-probabilities, and
`sampling_metadata` as an object with all_greedy, all_random, temperature (the module's
GREEDY_TEMPERATURE for greedy rows, else 1), generators, top_k = top_p = None. For vLLM
modules on CPU the platform's kernel overrides are registered first, as the engine does at
start-up. The audit seeds the default generator before every call, so a verdict is
reproducible.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import types
from typing import Callable, Optional

from samspec_bench.errors import UserError
from samspec_bench.suites.sampler.config import BUILTIN_AUDITS, LOGITS_LEVEL
from samspec_bench.suites.sampler.vllm import register_cpu_kernels

def _resolve_target(spec: str):
    """'module:function' -> the function. UserError naming the input when that fails."""
    if ":" not in spec:
        raise UserError(f"--audit {spec}: expected module:function or one of the built-in names "
                        f"({', '.join(BUILTIN_AUDITS)})")
    mod_name, fn_name = spec.split(":", 1)
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's input problem
        raise UserError(f"--audit {spec}: cannot import {mod_name!r} ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}); install it or fix the module path") from None
    fn = mod
    for part in fn_name.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise UserError(f"--audit {spec}: {mod_name} has no attribute {fn_name!r}; "
                            "pass module:function of a rejection sampler")
    if not callable(fn):
        raise UserError(f"--audit {spec}: {fn_name} is not callable; pass a sampler function")
    return fn


VLLM_PARAMS = ("draft_token_ids", "num_draft_tokens", "max_spec_len", "cu_num_draft_tokens", "draft_probs",
               "target_probs", "target_logits", "bonus_token_ids", "sampling_metadata")


def adapt(fn: Callable, spec: str) -> tuple[Callable, str]:
    """A contract-style callable (RejectionInputs -> tensor) for fn, and the style detected."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn, "contract"
    names = list(params)
    if "sampling_metadata" in names or (("target_probs" in names or any(n.startswith("target_logits") for n in names))
                                        and "cu_num_draft_tokens" in names):
        required = [n for n, p in params.items() if p.default is inspect.Parameter.empty
                    and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = [n for n in required if n not in VLLM_PARAMS and not n.startswith("target_logits")]
        if unknown:
            raise UserError(f"--audit {spec}: vLLM-style signature with unknown required parameters "
                            f"{unknown}; wrap it in a function taking RejectionInputs "
                            "(see samspec_bench.sam.rejection.RejectionInputs)")
        return _vllm_adapter(fn, names), "vllm"
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is inspect.Parameter.empty]
    if len(positional) > 1:
        raise UserError(f"--audit {spec}: takes {len(positional)} required arguments; a sampler must take one "
                        "RejectionInputs (or have vLLM's rejection_sample signature)")
    return fn, "contract"


def _vllm_adapter(fn: Callable, names: list[str]) -> Callable:
    import torch  # imports torch

    mod = inspect.getmodule(fn)
    if getattr(mod, "__name__", "").startswith("vllm."):
        register_cpu_kernels()
    greedy_temp = getattr(mod, "GREEDY_TEMPERATURE", 0)
    greedy_temp = float(getattr(greedy_temp, "value", greedy_temp))

    def call(inp):
        temp = torch.where(inp.is_greedy, torch.tensor(greedy_temp), torch.tensor(1.0)).to(
            device=inp.target_probs.device, dtype=torch.float32)
        md = types.SimpleNamespace(
            all_greedy=inp.all_greedy, all_random=inp.all_random, temperature=temp,
            top_k=None, top_p=None, min_p=None, generators=inp.generators, max_num_logprobs=None,
            no_penalties=True, prompt_token_ids=None, frequency_penalties=None, presence_penalties=None,
            repetition_penalties=None, output_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={},
            logitsprocs=None)
        # Token ids as vLLM's engine passes them (int32, like SamplerOutput.sampled_token_ids).
        values = {"draft_token_ids": inp.draft_token_ids.to(torch.int32), "num_draft_tokens": list(inp.num_draft_tokens),
                  "max_spec_len": inp.max_spec_len, "cu_num_draft_tokens": inp.cu_num_draft_tokens,
                  "draft_probs": inp.draft_probs, "target_probs": inp.target_probs,
                  "bonus_token_ids": inp.bonus_token_ids.to(torch.int32), "sampling_metadata": md}
        for n in names:
            if n.startswith("target_logits"):  # target_logits (vLLM >= 0.1x), target_logits_or_tuple (vllm-ascend)
                # Processed logits, softmax applied inside: softmax(log p) = p, argmax(log p) = argmax(p).
                values[n] = torch.log(inp.target_probs)
        return fn(**{n: values[n] for n in names if n in values})

    return call


@dataclasses.dataclass
class Audited:
    """One sampler to audit: fn in the contract style, logits_fn for the logits battery."""
    name: str
    target: str
    description: str
    fn: Optional[Callable] = None
    style: str = "contract"
    logits_fn: Optional[Callable] = None
    skipped: Optional[str] = None
    explicit: bool = False


def resolve_audit(spec: str, explicit: bool) -> Audited:
    """A built-in name or module:function -> the sampler to audit. What does not load is
    skipped, except an explicit --audit (other than vllm / vllm-ascend): a UserError."""
    if spec in BUILTIN_AUDITS:
        target, desc = BUILTIN_AUDITS[spec]
        name = spec
    else:
        target, desc, name = spec, "user-supplied sampler", spec
    try:
        fn = _resolve_target(target)
    except UserError as e:
        if explicit and spec not in ("vllm", "vllm-ascend"):
            raise
        msg = str(e).split(": ", 1)[-1]
        return Audited(name, target, desc, skipped=msg.split("; install")[0].replace("cannot import", "not importable:"))
    wrapped, style = adapt(fn, spec)
    logits_fn = _resolve_target(LOGITS_LEVEL[name]) if name in LOGITS_LEVEL else None
    return Audited(name, target, desc, wrapped, style, logits_fn, explicit=explicit)

