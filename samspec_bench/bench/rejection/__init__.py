"""Rejection sampler for speculative decoding: vectorised PyTorch, vLLM's tensor layout. Kept
apart from the drafting library (`samspec_bench.sam`, torch-free), as vLLM keeps its rejection
sampler apart from `spec_decode/`.

Semantics (Leviathan et al. 2023; the rule every exact sampler must follow):

* Greedy requests: accept draft tokens while they equal the target argmax; at the first
  mismatch emit the target argmax; when every draft is accepted emit the bonus token.
* Random requests, deterministic drafts (n-gram / suffix / SAM: no draft probabilities,
  q is one-hot): accept draft x with probability p(x); on rejection emit a token drawn from
  p with x removed and renormalised. (If p(x) = 1 a rejection cannot happen.)
* Random requests, drafts with probabilities q: accept x with probability min(1, p(x)/q(x));
  on rejection draw from max(0, p - q) renormalised.
* Stop at the first rejection. Unused output slots hold PLACEHOLDER_TOKEN_ID (-1).

Layout (as vLLM lays it out): requests are flattened. `draft_token_ids` is int [num_tokens],
`num_draft_tokens` the per-request counts (list or tensor; requests may have 0 drafts),
`cu_num_draft_tokens` their inclusive cumulative sum [B], `target_probs` float
[num_tokens, V] (one row per draft position), `draft_probs` float [num_tokens, V] or None,
the bonus position as `bonus_token_ids` [B] / [B, 1] or `bonus_probs` [B, V]. The output is
int64 [B, max_spec_len + 1].

Modules: `layout` (the flattened layout, input checks, output rows), `sampling` (per-request
temperature / top-k / top-p), `draws` (the uniforms and the inverse-CDF draw), `contract`
(what an audited sampler receives), `vectorised` (the sampler), `loop` (the loop reference:
the same tokens for the same uniforms, one scalar at a time).
"""

from samspec_bench.bench.rejection.contract import LogitsInputs, LogitsSamplerFn, RejectionInputs, SamplerFn
from samspec_bench.bench.rejection.draws import block_layout, draw_uniforms, inverse_cdf_sample
from samspec_bench.bench.rejection.layout import (GREEDY_EPS, PLACEHOLDER_TOKEN_ID, SamplerInputError,
                                                  SpecSampleOutput, count_accepted, cu_num_tokens,
                                                  expand_batch_to_tokens, parse_output)
from samspec_bench.bench.rejection.sampling import SamplingBatch, apply_top_k_top_p, compute_probs, make_generators
from samspec_bench.bench.rejection.vectorised import (rejection_sample, samspec_logits_sampler, samspec_sampler,
                                                      speculative_sample)

__all__ = [
    "PLACEHOLDER_TOKEN_ID", "GREEDY_EPS", "SamplerInputError", "SamplingBatch", "SpecSampleOutput",
    "RejectionInputs", "SamplerFn", "LogitsInputs", "LogitsSamplerFn", "make_generators", "block_layout",
    "cu_num_tokens", "expand_batch_to_tokens",
    "apply_top_k_top_p", "compute_probs", "draw_uniforms", "rejection_sample",
    "speculative_sample", "samspec_sampler", "samspec_logits_sampler", "parse_output", "count_accepted",
    "inverse_cdf_sample",
]
