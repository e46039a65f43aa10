"""Loop reference for the rejection sampler: the same semantics as `vectorised`, one request,
one position and one scalar at a time. Kept for tests (it is the obviously-correct version)
and as the baseline of the speed comparison in `samspec-bench sampler`.

Its structure mirrors the PyTorch fallback of vllm-ascend's sampler
(`sample_recovered_tokens_pytorch` + `rejection_random_sample_pytorch`): a recovered token is
drawn at every draft position of every random request (a full-vocabulary pass per position),
then a scalar accept loop walks the drafts with `.item()` reads.

Categorical draws (recovered and bonus tokens) call the same primitive as the vectorised
sampler, `draws.inverse_cdf_sample`, one row at a time, so that given the same uniforms
(`draws.draw_uniforms`) the two return identical tokens: the comparison checks the
vectorised control flow (acceptance, first rejection, placeholders, bonus) element by element.
The primitive itself is checked against `inverse_cdf_row` below, a plain float64 cumulative
sum over the whole row (the two round differently, so on long-tailed 151k-token rows they can
pick neighbouring tokens for a small set of uniforms; both are inverse-CDF draws)."""

from __future__ import annotations

from typing import Mapping, Optional

import torch

from samspec_bench.bench.rejection.contract import LogitsInputs, RejectionInputs
from samspec_bench.bench.rejection.draws import draw_uniforms, inverse_cdf_sample
from samspec_bench.bench.rejection.layout import (GREEDY_EPS, PLACEHOLDER_TOKEN_ID, SamplerInputError,
                                                  SpecSampleOutput, count_accepted, num_list, validate_inputs)
from samspec_bench.bench.rejection.sampling import SamplingBatch

__all__ = ["expand_batch_to_tokens_loop", "apply_top_k_top_p_row", "compute_probs_loop", "inverse_cdf_row",
           "rejection_sample_loop", "speculative_sample_loop", "loop_sampler",
           "loop_logits_sampler"]


def expand_batch_to_tokens_loop(x: torch.Tensor, cu_num_tokens, num_tokens: int, replace_from=0,
                                replace_to=0) -> torch.Tensor:
    """[B] -> [num_tokens], one request at a time."""
    out = torch.empty(num_tokens, dtype=x.dtype, device=x.device)
    start = 0
    for i, end in enumerate(torch.as_tensor(cu_num_tokens).tolist()):
        v = x[i].item()
        out[start:end] = replace_to if v == replace_from else v
        start = end
    return out


def apply_top_k_top_p_row(row: torch.Tensor, k: int, p: float) -> torch.Tensor:
    """Top-k (keep logits >= the k-th largest) then top-p (keep tokens whose preceding mass in
    descending order is < p; the first is always kept) on one row of logits."""
    row = row.clone()
    V = row.shape[0]
    if 0 < k < V:
        kth = torch.topk(row, k).values[-1]
        row[row < kth] = float("-inf")
    if p < 1.0:
        sorted_logits, order = torch.sort(row, descending=True, stable=True)
        probs = torch.softmax(sorted_logits.float(), dim=-1)
        csum = torch.cumsum(probs, dim=-1)
        # mass before token i in descending order is csum[i - 1]: cut from the first i >= 1
        # with csum[i - 1] >= p (compared in float64, as Python floats would be)
        i = int(torch.searchsorted(csum.double(), torch.tensor([p], dtype=torch.float64)).item()) + 1
        if i < V:
            row[order[i:]] = float("-inf")
    return row


def compute_probs_loop(logits: torch.Tensor, num_draft_tokens, sampling: SamplingBatch) -> torch.Tensor:
    """Per-row version of `sampling.compute_probs` (greedy rows keep their logits)."""
    nums = num_list(num_draft_tokens)
    out = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    temps = sampling.temperature_tensor().tolist()
    top_k = sampling.top_k_tensor()
    top_p = sampling.top_p_tensor()
    t = 0
    for i, n in enumerate(nums):
        for _ in range(n):
            if temps[i] <= GREEDY_EPS:
                out[t] = logits[t].float()
            else:
                row = logits[t].float() / torch.tensor(temps[i], dtype=torch.float32)
                k = 0 if top_k is None else int(top_k[i])
                p = 1.0 if top_p is None else float(top_p[i])
                row = apply_top_k_top_p_row(row, k, p)
                out[t] = torch.softmax(row, dim=-1)
            t += 1
    return out


def inverse_cdf_row(weights: torch.Tensor, u: float) -> Optional[int]:
    """Inverse CDF (token-index order) of one row of non-negative weights at u in [0, 1);
    None when the weights sum to 0. Zero-weight tokens are never returned."""
    cdf = torch.cumsum(weights.to(torch.float64), dim=0)
    total = cdf[-1].item()
    if total <= 0:
        return None
    j = int(torch.searchsorted(cdf, torch.tensor([u * total], dtype=torch.float64), right=True).item())
    if j >= weights.shape[0]:  # u * total rounded up to the total: the last positive token
        j = int(torch.nonzero(weights > 0).max().item())
    return j


def _draw(src: torch.Tensor, row: int, u: float, exclude: Optional[int] = None,
          sub: Optional[torch.Tensor] = None) -> int:
    """One categorical draw from one row (the shared primitive; see the module doc)."""
    return int(inverse_cdf_sample(src, torch.tensor([row], device=src.device),
                                  torch.tensor([u], dtype=torch.float64, device=src.device),
                                  exclude=None if exclude is None else torch.tensor([exclude], device=src.device),
                                  sub=sub)[0])


def _recovered(target_probs, draft_probs, t: int, x: int, u: float) -> int:
    """Recovered token at flattened position t: p with x removed (deterministic draft) or
    max(0, p - q); falls back to p when that is empty (inside the primitive)."""
    if draft_probs is None:
        return _draw(target_probs, t, u, exclude=x)
    return _draw(target_probs, t, u, sub=draft_probs)


def rejection_sample_loop(draft_token_ids: torch.Tensor, num_draft_tokens, target_probs: torch.Tensor, *,
                          cu_num_draft_tokens=None, max_spec_len: Optional[int] = None,
                          draft_probs: Optional[torch.Tensor] = None, bonus_token_ids=None, bonus_probs=None,
                          is_greedy=None, generators: Optional[Mapping[int, torch.Generator]] = None,
                          uniforms=None, eager_recovered: bool = True, validate: bool = True) -> torch.Tensor:
    """Same arguments and output as `vectorised.rejection_sample`, computed element by element.
    eager_recovered=True draws a recovered token at every draft position first (the layout of
    vllm-ascend's fallback); False only at the first rejection. The output is the same."""
    nums = num_list(num_draft_tokens)
    B, N = len(nums), sum(nums)
    device = target_probs.device
    K = max(nums, default=0) if max_spec_len is None else int(max_spec_len)
    draft = torch.as_tensor(draft_token_ids).reshape(-1)
    if validate:
        validate_inputs(draft, nums, cu_num_draft_tokens, K, target_probs, draft_probs, bonus_token_ids,
                        bonus_probs, is_greedy)
    out = torch.full((B, K + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=device)
    greedy = [False] * B if is_greedy is None else [bool(v) for v in torch.as_tensor(is_greedy).reshape(-1).tolist()]
    if all(greedy):
        acc_u = fin_u = None
    elif uniforms is None:
        acc_u, fin_u = draw_uniforms(nums, torch.tensor(greedy), generators, device)
    else:
        acc_u, fin_u = (torch.as_tensor(t).to(torch.float64).reshape(-1) for t in uniforms)
        if acc_u.numel() != N or fin_u.numel() != B:
            raise SamplerInputError(f"uniforms: expected ([{N}], [{B}]) from draw_uniforms")
    bonus_ids = None if bonus_token_ids is None else torch.as_tensor(bonus_token_ids).reshape(-1)

    start = 0
    for i in range(B):
        n = nums[i]
        rejected = False
        if greedy[i]:
            for pos in range(n):
                t = start + pos
                am = int(target_probs[t].argmax().item())
                out[i, pos] = am
                if int(draft[t].item()) != am:
                    rejected = True
                    break
            if not rejected:
                out[i, n] = (int(bonus_ids[i].item()) if bonus_ids is not None
                             else int(bonus_probs[i].argmax().item()))
        else:
            u_fin = fin_u[i].item()
            recovered = None
            if eager_recovered:
                recovered = [_recovered(target_probs, draft_probs, start + pos, int(draft[start + pos].item()), u_fin)
                             for pos in range(n)]
            for pos in range(n):
                t = start + pos
                x = int(draft[t].item())
                p = target_probs[t, x].item()
                q = 1.0 if draft_probs is None else draft_probs[t, x].item()
                u = acc_u[t].item()
                if u * q < p:
                    out[i, pos] = x
                else:
                    rejected = True
                    out[i, pos] = recovered[pos] if recovered is not None else \
                        _recovered(target_probs, draft_probs, t, x, u_fin)
                    break
            if not rejected:
                if bonus_ids is not None:
                    out[i, n] = int(bonus_ids[i].item())
                else:
                    out[i, n] = _draw(bonus_probs, i, u_fin)
        start += n
    return out


def speculative_sample_loop(draft_token_ids, num_draft_tokens, target_logits, bonus_logits,
                            sampling: SamplingBatch, *, draft_probs=None, max_spec_len=None,
                            uniforms=None, eager_recovered: bool = True) -> SpecSampleOutput:
    """Loop version of `vectorised.speculative_sample`."""
    nums = num_list(num_draft_tokens)
    B = len(nums)
    greedy = sampling.is_greedy()
    if bool(greedy.all()):
        target, bonus_ids, bonus_probs = target_logits, bonus_logits.argmax(-1), None
    else:
        target = compute_probs_loop(target_logits, nums, sampling)
        bonus_probs = compute_probs_loop(bonus_logits, [1] * B, sampling)
        bonus_ids = None
    out = rejection_sample_loop(draft_token_ids, nums, target, max_spec_len=max_spec_len, draft_probs=draft_probs,
                                bonus_token_ids=bonus_ids, bonus_probs=bonus_probs, is_greedy=greedy,
                                generators=sampling.generators, uniforms=uniforms, eager_recovered=eager_recovered)
    return SpecSampleOutput(out, count_accepted(out))


def loop_sampler(inputs: RejectionInputs) -> torch.Tensor:
    """The loop reference under the adapter contract (recovered tokens drawn only at the first
    rejection: the same output as the eager layout, with a fraction of the draws, which keeps
    the audit's large sample counts affordable)."""
    return rejection_sample_loop(
        inputs.draft_token_ids, inputs.num_draft_tokens, inputs.target_probs,
        cu_num_draft_tokens=inputs.cu_num_draft_tokens, max_spec_len=inputs.max_spec_len,
        draft_probs=inputs.draft_probs, bonus_token_ids=inputs.bonus_token_ids,
        is_greedy=inputs.is_greedy, generators=inputs.generators, eager_recovered=False)


def loop_logits_sampler(inputs: LogitsInputs) -> torch.Tensor:
    """The loop reference under the logits-level contract."""
    return speculative_sample_loop(
        inputs.draft_token_ids, inputs.num_draft_tokens, inputs.target_logits, inputs.bonus_logits,
        inputs.sampling, draft_probs=inputs.draft_probs, max_spec_len=inputs.max_spec_len,
        eager_recovered=False).token_ids
