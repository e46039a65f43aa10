"""The adapter contract for auditing any sampler (`samspec-bench sampler --audit mod:fn`), in
two shapes: `RejectionInputs` / `SamplerFn` (target probabilities, after the caller applied
temperature, top-k and top-p; bonus tokens sampled by the caller) and `LogitsInputs` /
`LogitsSamplerFn` (raw target and bonus logits plus each request's temperature, top-k, top-p
and optional seeded generator, as vLLM's verify step receives them; the sampler does all of
it). This project's samplers under both shapes: `samspec_sampler`, `samspec_logits_sampler`
(vectorised) and `loop_sampler`, `loop_logits_sampler` (loop). Worked examples of adapting a
sampler: `samspec_bench.suites.sampler.adapters`."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch

from samspec_bench.bench.rejection.sampling import SamplingBatch


class _FlatDrafts:
    """What both adapter contracts derive from their flattened drafts."""

    num_draft_tokens: list
    draft_token_ids: torch.Tensor

    @property
    def batch_size(self) -> int:
        return len(self.num_draft_tokens)

    @property
    def num_tokens(self) -> int:
        return int(self.draft_token_ids.shape[0])


@dataclasses.dataclass
class RejectionInputs(_FlatDrafts):
    """The adapter contract: what an audited sampler receives (all tensors in vLLM's layout).

    draft_token_ids:     int64 [num_tokens], the drafts of all requests, flattened.
    num_draft_tokens:    list[int] [B]; 0 is allowed.
    cu_num_draft_tokens: int32 [B], inclusive cumulative sum of num_draft_tokens.
    max_spec_len:        int, >= max(num_draft_tokens); the output has max_spec_len + 1 columns.
    draft_probs:         float32 [num_tokens, V], or None for deterministic drafts (q one-hot).
    target_probs:        float32 [num_tokens, V], the target distribution at each draft
                         position after temperature/top-k/top-p; rows sum to 1.
    bonus_token_ids:     int64 [B, 1], sampled by the caller from the bonus distribution.
    is_greedy:           bool [B]; greedy requests are verified against argmax(target_probs).
    generators:          {request index: torch.Generator} for seeded requests (may be empty;
                         the others use the default generator, which the audit seeds).

    The sampler returns an integer tensor [B, max_spec_len + 1]: row i holds the accepted
    drafts, then one recovered or bonus token, then PLACEHOLDER_TOKEN_ID (-1). It must not
    modify its inputs. A function with vLLM's `rejection_sample` signature (draft_token_ids,
    num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_probs,
    bonus_token_ids, sampling_metadata) is adapted automatically by the audit."""

    draft_token_ids: torch.Tensor
    num_draft_tokens: list
    cu_num_draft_tokens: torch.Tensor
    max_spec_len: int
    draft_probs: Optional[torch.Tensor]
    target_probs: torch.Tensor
    bonus_token_ids: torch.Tensor
    is_greedy: torch.Tensor
    generators: dict = dataclasses.field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs.shape[-1])

    @property
    def all_greedy(self) -> bool:
        return bool(self.is_greedy.all()) if self.batch_size else True

    @property
    def all_random(self) -> bool:
        return not bool(self.is_greedy.any()) if self.batch_size else True


SamplerFn = Callable[[RejectionInputs], torch.Tensor]


@dataclasses.dataclass
class LogitsInputs(_FlatDrafts):
    """The logits-level adapter contract: what a sampler that does the whole verify step
    receives (vLLM's `RejectionSampler.forward` takes the same information).

    draft_token_ids:     int64 [num_tokens], the drafts of all requests, flattened.
    num_draft_tokens:    list[int] [B]; 0 is allowed.
    cu_num_draft_tokens: int32 [B], inclusive cumulative sum of num_draft_tokens.
    max_spec_len:        int, >= max(num_draft_tokens); the output has max_spec_len + 1 columns.
    draft_probs:         float32 [num_tokens, V], or None for deterministic drafts (q one-hot).
    target_logits:       float32 [num_tokens, V], the target's raw logits at each draft position
                         (no temperature, top-k or top-p applied; -inf marks excluded tokens).
    bonus_logits:        float32 [B, V], the raw logits at each request's bonus position.
    sampling:            SamplingBatch: per-request temperature [B] (<= GREEDY_EPS: greedy,
                         verified against argmax(target_logits)), top_k [B] or None (<= 0 or
                         >= V: off), top_p [B] or None (>= 1: off) and generators {request index:
                         torch.Generator} for seeded requests (the others use the default
                         generator, which the audit seeds).

    The sampler applies each request's temperature, then top-k, then top-p to its own rows
    (`compute_probs` is the reference), samples the bonus token itself from the processed
    bonus logits when every draft was accepted, and returns an integer tensor [B,
    max_spec_len + 1] laid out as in `RejectionInputs` (or any object with a `token_ids`
    attribute holding it, such as `SpecSampleOutput`). It must not modify its inputs."""

    draft_token_ids: torch.Tensor
    num_draft_tokens: list
    cu_num_draft_tokens: torch.Tensor
    max_spec_len: int
    draft_probs: Optional[torch.Tensor]
    target_logits: torch.Tensor
    bonus_logits: torch.Tensor
    sampling: SamplingBatch

    @property
    def vocab_size(self) -> int:
        return int(self.target_logits.shape[-1])


LogitsSamplerFn = Callable[[LogitsInputs], torch.Tensor]
