"""vLLM's flattened layout of a verify step: per-request draft counts, their cumulative sums,
per-request values expanded to per-token ones, the checks every sampler entry point runs on
its inputs, and the output rows ([B, max_spec_len + 1], -1 in unused slots) read back."""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from samspec_bench.errors import UserError

PLACEHOLDER_TOKEN_ID = -1
# Temperatures at or below this are greedy (vLLM's _SAMPLING_EPS).
GREEDY_EPS = 1e-5


class SamplerInputError(UserError, ValueError):
    """Inputs that do not follow the layout (shapes, counts, token ids out of range)."""


def num_list(num_draft_tokens) -> list[int]:
    """Per-request draft counts (a list or a 1-D tensor) as a list of ints."""
    if isinstance(num_draft_tokens, torch.Tensor):
        return [int(v) for v in num_draft_tokens.reshape(-1).tolist()]
    try:
        return [int(v) for v in num_draft_tokens]
    except TypeError:
        raise SamplerInputError("num_draft_tokens: expected a list or 1-D tensor of per-request "
                                "draft counts") from None


def cu_num_tokens(num_draft_tokens, device=None, dtype=torch.int32) -> torch.Tensor:
    """Inclusive cumulative sum of per-request counts ([2, 3, 1] -> [2, 5, 6])."""
    nums = torch.as_tensor(num_list(num_draft_tokens), dtype=torch.long, device=device)
    return torch.cumsum(nums, 0).to(dtype)


def expand_batch_to_tokens(x: torch.Tensor, cu_num_tokens: torch.Tensor, num_tokens: int,
                           replace_from=0, replace_to=0) -> torch.Tensor:
    """Expand a per-request [B] tensor to per-token [num_tokens] using the inclusive cumulative
    counts: x = [a, b, c], cu = [2, 5, 6] -> [a, a, b, b, b, c]. Values equal to
    `replace_from` become `replace_to` (vLLM uses this to turn the greedy temperature into 1)."""
    x = torch.as_tensor(x)
    cu = torch.as_tensor(cu_num_tokens, device=x.device).to(torch.long).reshape(-1)
    if x.shape[0] != cu.shape[0]:
        raise SamplerInputError(f"expand_batch_to_tokens: x has {x.shape[0]} entries but "
                                f"cu_num_tokens has {cu.shape[0]}; pass one value per request")
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    if x.shape[0] and (int(cu[-1]) != num_tokens or bool((counts < 0).any())):
        raise SamplerInputError(f"expand_batch_to_tokens: cu_num_tokens ends at {int(cu[-1])}, "
                                f"expected num_tokens={num_tokens} and non-decreasing counts")
    if replace_from != replace_to:
        x = torch.where(x == replace_from, torch.as_tensor(replace_to, dtype=x.dtype, device=x.device), x)
    return torch.repeat_interleave(x, counts, output_size=num_tokens)


def validate_inputs(draft, nums, cu, K, target_probs, draft_probs, bonus_token_ids, bonus_probs, is_greedy):
    """SamplerInputError naming the first argument that breaks the layout."""
    B, N = len(nums), sum(nums)
    if draft.dim() != 1:
        raise SamplerInputError(f"draft_token_ids: expected a flat [num_tokens] tensor, got shape "
                                f"{tuple(draft.shape)}")
    if any(v < 0 for v in nums):
        raise SamplerInputError("num_draft_tokens: counts must be >= 0")
    if draft.shape[0] != N:
        raise SamplerInputError(f"draft_token_ids has {draft.shape[0]} tokens but num_draft_tokens "
                                f"sums to {N}; they must describe the same flattened drafts")
    if target_probs.dim() != 2 or target_probs.shape[0] != N:
        raise SamplerInputError(f"target_probs: expected [num_tokens={N}, V], got shape "
                                f"{tuple(target_probs.shape)}")
    V = target_probs.shape[1]
    if V < 1:
        raise SamplerInputError("target_probs: vocabulary size must be >= 1")
    if cu is not None:
        cu_l = torch.as_tensor(cu).reshape(-1).tolist()
        exp = []
        acc = 0
        for v in nums:
            acc += v
            exp.append(acc)
        if [int(c) for c in cu_l] != exp:
            raise SamplerInputError("cu_num_draft_tokens does not equal the inclusive cumulative sum "
                                    "of num_draft_tokens; pass matching counts (or omit it)")
    if K < max(nums, default=0):
        raise SamplerInputError(f"max_spec_len={K} is smaller than the largest draft count "
                                f"{max(nums, default=0)}")
    if N and (int(draft.min()) < 0 or int(draft.max()) >= V):
        raise SamplerInputError(f"draft_token_ids: ids must be in [0, {V}) (the vocabulary of "
                                f"target_probs); got range [{int(draft.min())}, {int(draft.max())}]")
    if draft_probs is not None and tuple(draft_probs.shape) != tuple(target_probs.shape):
        raise SamplerInputError(f"draft_probs: expected shape {tuple(target_probs.shape)} like "
                                f"target_probs, got {tuple(draft_probs.shape)}")
    if bonus_token_ids is None and bonus_probs is None:
        raise SamplerInputError("pass bonus_token_ids [B] or bonus_probs [B, V] for the bonus position")
    if bonus_token_ids is not None and bonus_token_ids.numel() != B:
        raise SamplerInputError(f"bonus_token_ids: expected {B} ids (one per request), got "
                                f"{bonus_token_ids.numel()}")
    if bonus_probs is not None and tuple(bonus_probs.shape) != (B, V):
        raise SamplerInputError(f"bonus_probs: expected shape ({B}, {V}), got {tuple(bonus_probs.shape)}")
    if is_greedy is not None and torch.as_tensor(is_greedy).numel() != B:
        raise SamplerInputError(f"is_greedy: expected {B} flags (one per request)")


@dataclasses.dataclass
class SpecSampleOutput:
    token_ids: torch.Tensor       # int64 [B, max_spec_len + 1], -1 for unused slots
    num_accepted: torch.Tensor    # int64 [B], accepted draft tokens per request

    def to_lists(self) -> list[list[int]]:
        return parse_output(self.token_ids)


def parse_output(output_token_ids: torch.Tensor, vocab_size: Optional[int] = None) -> list[list[int]]:
    """Rows of the output without placeholders (and without ids >= vocab_size if given)."""
    res = []
    for row in output_token_ids.tolist():
        res.append([t for t in row if t != PLACEHOLDER_TOKEN_ID and (vocab_size is None or t < vocab_size)])
    return res


def count_accepted(output_token_ids: torch.Tensor) -> torch.Tensor:
    """Accepted draft tokens per request: emitted tokens minus the one recovered/bonus token."""
    return ((output_token_ids != PLACEHOLDER_TOKEN_ID).sum(1) - 1).clamp_min(0).to(torch.long)
