"""Rejection sampler for speculative decoding: vectorised PyTorch, vLLM's tensor layout.

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

Randomness: each random request uses `num_draft_tokens[i]` uniforms for its accept tests and
one more ("final") uniform, which draws the recovered token on a rejection or the bonus
token (when sampled here) otherwise; only one of the two is ever needed. Uniforms are
float64 (53 random bits), so the accept test `u * q(x) < p(x)` is exact for float32
probabilities and categorical draws have no 2**-24 granularity. Requests listed in
`generators` draw from their own `torch.Generator` (reproducible whatever else is in the
batch); the others share one draw from the default generator. `draw_uniforms` is the single
source of these numbers, so the loop reference (`rejection_loop`) fed the same uniforms
returns the same tokens.

Categorical draws are inverse-CDF draws in token-index order (`inverse_cdf_sample`), in two
levels: float32 block sums (blocks of ~sqrt(V) tokens) accumulated in float64 pick the block,
then a float64 cumulative sum inside the chosen block, rescaled to the block's sum, picks the
token. Each token's probability is exact to float32 rounding (~1e-7 relative) and tokens of
probability 0 are never drawn. The vectorised path draws only for the one row per request
that needs it (the first rejected position, or the bonus row); the loop reference calls the
same primitive row by row, so both return identical tokens for the same uniforms.

The adapter contract for auditing any sampler (`samspec-bench sampler --audit mod:fn`) has two
shapes, both below: `RejectionInputs` / `SamplerFn` (target probabilities, after the caller
applied temperature, top-k and top-p; bonus tokens sampled by the caller) and `LogitsInputs` /
`LogitsSamplerFn` (raw target and bonus logits plus each request's temperature, top-k, top-p
and optional seeded generator, as vLLM's verify step receives them; the sampler does all of
it). Worked examples of both: `samspec_bench.suites.sampler.adapters`.

One module of about 800 lines on purpose: the semantics above, the uniforms and the categorical
draw that make them exact, and the adapter contract are one specification; the loop reference
(`rejection_loop`) and the audit import these same pieces.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Mapping, Optional, Sequence, Union

import torch

from samspec_bench.errors import UserError

PLACEHOLDER_TOKEN_ID = -1
# Temperatures at or below this are greedy (vLLM's _SAMPLING_EPS).
GREEDY_EPS = 1e-5

__all__ = [
    "PLACEHOLDER_TOKEN_ID", "GREEDY_EPS", "SamplerInputError", "SamplingBatch", "SpecSampleOutput",
    "RejectionInputs", "SamplerFn", "LogitsInputs", "LogitsSamplerFn", "make_generators", "block_layout",
    "cu_num_tokens", "expand_batch_to_tokens",
    "apply_top_k_top_p", "compute_probs", "draw_uniforms", "rejection_sample",
    "speculative_sample", "samspec_sampler", "samspec_logits_sampler", "parse_output", "count_accepted",
    "inverse_cdf_sample",
]


class SamplerInputError(UserError, ValueError):
    """Inputs that do not follow the layout (shapes, counts, token ids out of range)."""


# --------------------------------------------------------------------------------------
# Per-request sampling parameters


@dataclasses.dataclass
class SamplingBatch:
    """Per-request sampling parameters of one batch (B requests).

    temperature: [B]; <= GREEDY_EPS means greedy. top_k: [B]; <= 0 or >= V means off.
    top_p: [B]; >= 1 means off (at least one token is always kept). generators: request
    index -> torch.Generator for seeded requests (keep the generator across steps)."""

    temperature: Union[Sequence[float], torch.Tensor]
    top_k: Union[Sequence[int], torch.Tensor, None] = None
    top_p: Union[Sequence[float], torch.Tensor, None] = None
    generators: Optional[Mapping[int, torch.Generator]] = None

    @classmethod
    def uniform(cls, batch_size: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                seeds: Optional[Sequence[Optional[int]]] = None) -> "SamplingBatch":
        """The same parameters for every request; `seeds` gives seeded generators."""
        return cls(temperature=[float(temperature)] * batch_size,
                   top_k=None if not top_k else [int(top_k)] * batch_size,
                   top_p=None if top_p >= 1.0 else [float(top_p)] * batch_size,
                   generators=make_generators(seeds) if seeds is not None else None)

    @property
    def batch_size(self) -> int:
        return len(self.temperature)

    def temperature_tensor(self, device=None) -> torch.Tensor:
        return torch.as_tensor(self.temperature, dtype=torch.float32, device=device).reshape(-1)

    def is_greedy(self, device=None) -> torch.Tensor:
        return self.temperature_tensor(device) <= GREEDY_EPS

    def top_k_tensor(self, device=None) -> Optional[torch.Tensor]:
        if self.top_k is None:
            return None
        return torch.as_tensor(self.top_k, dtype=torch.long, device=device).reshape(-1)

    def top_p_tensor(self, device=None) -> Optional[torch.Tensor]:
        if self.top_p is None:
            return None
        return torch.as_tensor(self.top_p, dtype=torch.float32, device=device).reshape(-1)


def make_generators(seeds: Sequence[Optional[int]], device="cpu") -> dict[int, torch.Generator]:
    """{request index: torch.Generator seeded with seeds[i]} for the requests with a seed."""
    gens = {}
    for i, s in enumerate(seeds):
        if s is not None:
            g = torch.Generator(device=device)
            g.manual_seed(int(s))
            gens[i] = g
    return gens


# --------------------------------------------------------------------------------------
# Adapter contract


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
    sampling: "SamplingBatch"

    @property
    def vocab_size(self) -> int:
        return int(self.target_logits.shape[-1])


LogitsSamplerFn = Callable[[LogitsInputs], torch.Tensor]


def samspec_sampler(inputs: RejectionInputs) -> torch.Tensor:
    """This project's vectorised sampler under the adapter contract."""
    return rejection_sample(
        inputs.draft_token_ids, inputs.num_draft_tokens, inputs.target_probs,
        cu_num_draft_tokens=inputs.cu_num_draft_tokens, max_spec_len=inputs.max_spec_len,
        draft_probs=inputs.draft_probs, bonus_token_ids=inputs.bonus_token_ids,
        is_greedy=inputs.is_greedy, generators=inputs.generators)


def samspec_logits_sampler(inputs: LogitsInputs) -> torch.Tensor:
    """This project's verify step (`speculative_sample`) under the logits-level contract."""
    return speculative_sample(
        inputs.draft_token_ids, inputs.num_draft_tokens, inputs.target_logits, inputs.bonus_logits,
        inputs.sampling, draft_probs=inputs.draft_probs, cu_num_draft_tokens=inputs.cu_num_draft_tokens,
        max_spec_len=inputs.max_spec_len).token_ids


# --------------------------------------------------------------------------------------
# Layout helpers


def _num_list(num_draft_tokens) -> list[int]:
    if isinstance(num_draft_tokens, torch.Tensor):
        return [int(v) for v in num_draft_tokens.reshape(-1).tolist()]
    try:
        return [int(v) for v in num_draft_tokens]
    except TypeError:
        raise SamplerInputError("num_draft_tokens: expected a list or 1-D tensor of per-request "
                                "draft counts") from None


def cu_num_tokens(num_draft_tokens, device=None, dtype=torch.int32) -> torch.Tensor:
    """Inclusive cumulative sum of per-request counts ([2, 3, 1] -> [2, 5, 6])."""
    nums = torch.as_tensor(_num_list(num_draft_tokens), dtype=torch.long, device=device)
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


def apply_top_k_top_p(logits: torch.Tensor, top_k: Optional[torch.Tensor],
                      top_p: Optional[torch.Tensor]) -> torch.Tensor:
    """Per-row top-k then top-p masking (masked logits become -inf); returns a new tensor.

    top_k[r] in (0, V) keeps the tokens whose logit is >= the k-th largest (ties kept).
    top_p[r] < 1 then keeps, in descending order of the (top-k renormalised) probability,
    each token whose preceding mass is < top_p; the most likely token is always kept."""
    out = logits.clone()
    V = logits.shape[-1]
    if top_k is not None:
        k = top_k.to(device=logits.device, dtype=torch.long).reshape(-1)
        rows = torch.nonzero((k > 0) & (k < V)).reshape(-1)
        if rows.numel():
            kr = k.index_select(0, rows)
            sub = out.index_select(0, rows)
            top_vals = torch.topk(sub, int(kr.max()), dim=-1).values
            thresh = top_vals.gather(1, (kr - 1).unsqueeze(1))
            sub.masked_fill_(sub < thresh, float("-inf"))
            out.index_copy_(0, rows, sub)
    if top_p is not None:
        p = top_p.to(device=logits.device, dtype=torch.float32).reshape(-1)
        rows = torch.nonzero(p < 1.0).reshape(-1)
        if rows.numel():
            sub = out.index_select(0, rows)
            sorted_logits, order = torch.sort(sub, dim=-1, descending=True, stable=True)
            probs = torch.softmax(sorted_logits.float(), dim=-1)
            csum = torch.cumsum(probs, dim=-1)
            before = torch.cat([torch.zeros_like(csum[:, :1]), csum[:, :-1]], dim=1)  # monotone
            drop = before >= p.index_select(0, rows).unsqueeze(1)
            drop[:, 0] = False
            mask = torch.zeros_like(drop).scatter_(1, order, drop)
            sub.masked_fill_(mask, float("-inf"))
            out.index_copy_(0, rows, sub)
    return out


def compute_probs(logits: torch.Tensor, cu_num_draft_tokens: torch.Tensor, sampling: SamplingBatch,
                  greedy_rows: str = "logits") -> torch.Tensor:
    """Target probabilities [num_tokens, V] (float32) from logits, applying each request's
    temperature, top-k and top-p to its own rows via `expand_batch_to_tokens`.

    Rows of greedy requests are only ever arg-maxed: with greedy_rows="logits" they hold the
    raw logits (so argmax equals the plain argmax path bit for bit), with "probs" the
    temperature-1 softmax."""
    if logits.dim() != 2:
        raise SamplerInputError(f"logits: expected [num_tokens, V], got shape {tuple(logits.shape)}")
    n = logits.shape[0]
    device = logits.device
    temp = sampling.temperature_tensor(device)
    greedy = temp <= GREEDY_EPS
    cu = torch.as_tensor(cu_num_draft_tokens, device=device)
    t_tok = expand_batch_to_tokens(torch.where(greedy, torch.ones_like(temp), temp), cu, n)
    x = logits.float() / t_tok.unsqueeze(1)
    top_k = sampling.top_k_tensor(device)
    top_p = sampling.top_p_tensor(device)
    if top_k is not None:
        top_k = expand_batch_to_tokens(torch.where(greedy, torch.zeros_like(top_k), top_k), cu, n)
    if top_p is not None:
        top_p = expand_batch_to_tokens(torch.where(greedy, torch.ones_like(top_p), top_p), cu, n)
    if top_k is not None or top_p is not None:
        x = apply_top_k_top_p(x, top_k, top_p)
    probs = torch.softmax(x, dim=-1)
    if greedy_rows == "logits" and bool(greedy.any()):
        g_tok = torch.nonzero(expand_batch_to_tokens(greedy, cu, n)).reshape(-1)
        probs.index_copy_(0, g_tok, logits.index_select(0, g_tok).float())
    return probs


# --------------------------------------------------------------------------------------
# Random numbers


def draw_uniforms(num_draft_tokens, is_greedy=None, generators: Optional[Mapping[int, torch.Generator]] = None,
                  device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(accept_uniforms float64 [num_tokens], final_uniforms float64 [B]) in [0, 1).

    One draw of num_tokens + B from the default generator; each seeded, non-greedy request
    then overwrites its own n_i + 1 numbers from its generator (accepts, then final)."""
    nums = _num_list(num_draft_tokens)
    n_tok = sum(nums)
    u = torch.rand(n_tok + len(nums), dtype=torch.float64, device=device)
    acc, fin = u[:n_tok], u[n_tok:]
    if generators:
        greedy = None if is_greedy is None else torch.as_tensor(is_greedy).reshape(-1).tolist()
        starts = [0]
        for v in nums[:-1]:
            starts.append(starts[-1] + v)
        for i, g in generators.items():
            i = int(i)
            if i < 0 or i >= len(nums):
                raise SamplerInputError(f"generators: request index {i} outside the batch of "
                                        f"{len(nums)}; key generators by batch position")
            if greedy is not None and greedy[i]:
                continue
            r = torch.rand(nums[i] + 1, dtype=torch.float64, generator=g, device=g.device)
            r = r.to(device)
            acc[starts[i]:starts[i] + nums[i]] = r[:nums[i]]
            fin[i] = r[nums[i]]
    return acc, fin


# --------------------------------------------------------------------------------------
# Categorical draws by inverse CDF


@functools.lru_cache(maxsize=64)
def _block_layout(vocab_size: int) -> tuple[int, int]:
    """(num_blocks, block_size) with block_size a divisor of V near sqrt(V); a single block
    when V has no divisor in [32, 8192] (still correct, only slower)."""
    target = math.sqrt(vocab_size)
    best = None
    for d in range(32, min(8192, vocab_size) + 1):
        if vocab_size % d == 0:
            score = abs(math.log(d / target))
            if best is None or score < best[0]:
                best = (score, d)
    if best is None or vocab_size < 1024:
        return 1, vocab_size
    return vocab_size // best[1], best[1]


def block_layout(vocab_size: int) -> tuple[int, int]:
    """(num_blocks, block_size) of the two-level categorical draw for a vocabulary: one block
    below 1,024 tokens (a plain cumulative sum), about sqrt(V) tokens per block above."""
    return _block_layout(int(vocab_size))


def _last_positive(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last True along the last dim (0 when none)."""
    n = mask.shape[-1]
    return (n - 1) - torch.flip(mask, dims=[-1]).to(torch.int8).argmax(-1)


def _row_block_sums(src3: torch.Tensor, rows: torch.Tensor, sub3: Optional[torch.Tensor]) -> torch.Tensor:
    """float32 [R, nb] block sums of src rows (or of max(0, src - sub) rows)."""
    if rows.numel() == 0:
        return src3.new_zeros((0, src3.shape[1]))
    if sub3 is None:
        if src3.device.type == "cpu":
            # Per-row views: no [R, V] copy (copying rows costs more than summing them on CPU).
            return torch.stack([src3[i].sum(-1) for i in rows.tolist()])
        return src3.index_select(0, rows).sum(-1)
    if src3.device.type == "cpu":
        return torch.stack([(src3[i] - sub3[i]).clamp_min_(0).sum(-1) for i in rows.tolist()])
    return (src3.index_select(0, rows) - sub3.index_select(0, rows)).clamp_min_(0).sum(-1)


def inverse_cdf_sample(src: torch.Tensor, rows: torch.Tensor, u: torch.Tensor,
                       exclude: Optional[torch.Tensor] = None, sub: Optional[torch.Tensor] = None,
                       fallback_plain: bool = True) -> torch.Tensor:
    """One token per selected row r = rows[j]: the inverse CDF (token-index order) at u[j] of
    the weights w = src[r] with token exclude[j] set to 0 (deterministic-draft residual), or
    w = max(0, src[r] - sub[r]) (residual with draft probabilities), or w = src[r].
    Rows whose weights sum to 0 fall back to w = src[r] (the rejection that led here has
    probability 0 in exact arithmetic). Zero-weight tokens are never returned.
    Returns int64 [R]."""
    R = rows.numel()
    device = src.device
    if R == 0:
        return torch.zeros(0, dtype=torch.long, device=device)
    V = src.shape[1]
    nb, bs = _block_layout(V)
    src = src if src.is_contiguous() else src.contiguous()
    sub = sub if sub is None or sub.is_contiguous() else sub.contiguous()
    src3 = src.view(src.shape[0], nb, bs)
    sub3 = None if sub is None else sub.view(sub.shape[0], nb, bs)
    S = _row_block_sums(src3, rows, sub3)
    ar = torch.arange(R, device=device)
    if exclude is not None and sub3 is None:
        exclude = exclude.to(torch.long)
        xb, xo = exclude // bs, exclude % bs
        blk = src3[rows, xb].clone()
        blk[ar, xo] = 0
        S = S.clone()
        S[ar, xb] = blk.sum(-1)
    S64 = S.double()
    C = torch.cumsum(S64, dim=-1)
    total = C[:, -1]
    empty = total <= 0
    if bool(empty.any()):
        if not fallback_plain:
            raise SamplerInputError("inverse_cdf_sample: a row has zero total weight")
        e_idx = torch.nonzero(empty).reshape(-1)
        plain = inverse_cdf_sample(src, rows.index_select(0, e_idx), u.index_select(0, e_idx),
                                   fallback_plain=False)
        keep = torch.nonzero(~empty).reshape(-1)
        out = torch.empty(R, dtype=torch.long, device=device)
        out.index_copy_(0, e_idx, plain)
        if keep.numel():
            out.index_copy_(0, keep, inverse_cdf_sample(
                src, rows.index_select(0, keep), u.index_select(0, keep),
                None if exclude is None else exclude.index_select(0, keep), sub, fallback_plain=False))
        return out
    target = u.to(torch.float64) * total
    b = torch.searchsorted(C, target.unsqueeze(1), right=True).squeeze(1)
    b = torch.minimum(b, _last_positive(S > 0))
    prev = torch.where(b > 0, C.gather(1, (b - 1).clamp_min(0).unsqueeze(1)).squeeze(1),
                       torch.zeros_like(total))
    t_in = (target - prev).clamp_min(0)
    if sub3 is None:
        blk = src3[rows, b]
        if exclude is not None:
            hit = torch.nonzero(xb == b).reshape(-1)
            if hit.numel():
                blk = blk.clone()
                blk[hit, xo.index_select(0, hit)] = 0
    else:
        blk = (src3[rows, b] - sub3[rows, b]).clamp_min_(0)
    cb = torch.cumsum(blk.double(), dim=-1)
    sb = S64.gather(1, b.unsqueeze(1)).squeeze(1)
    t_in = t_in * (cb[:, -1] / sb)
    j = torch.searchsorted(cb, t_in.unsqueeze(1), right=True).squeeze(1)
    j = torch.minimum(j, _last_positive(blk > 0))
    return b * bs + j


# --------------------------------------------------------------------------------------
# The sampler


def _validate(draft, nums, cu, K, target_probs, draft_probs, bonus_token_ids, bonus_probs, is_greedy):
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


def rejection_sample(draft_token_ids: torch.Tensor, num_draft_tokens, target_probs: torch.Tensor, *,
                     cu_num_draft_tokens: Optional[torch.Tensor] = None, max_spec_len: Optional[int] = None,
                     draft_probs: Optional[torch.Tensor] = None, bonus_token_ids: Optional[torch.Tensor] = None,
                     bonus_probs: Optional[torch.Tensor] = None, is_greedy=None,
                     generators: Optional[Mapping[int, torch.Generator]] = None,
                     uniforms: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
                     recover: str = "lazy", validate: bool = True) -> torch.Tensor:
    """Verify the drafts of a batch; returns int64 [B, max_spec_len + 1] (-1 = unused slot).

    target_probs rows of greedy requests are only arg-maxed (they may hold logits).
    bonus_token_ids [B] or [B, 1] gives the bonus tokens; otherwise bonus_probs [B, V] is
    sampled here (argmax for greedy requests), only for requests that accepted every draft.
    is_greedy: bool [B] (None: all random). uniforms: (accept [num_tokens], final [B]) as from
    `draw_uniforms`, to replay exact random numbers; otherwise they are drawn here.
    recover="lazy" draws a recovered token only at each request's first rejection;
    "eager" draws one at every draft position first (as vLLM's kernels do; same output)."""
    nums = _num_list(num_draft_tokens)
    B, N = len(nums), sum(nums)
    device = target_probs.device
    K = max(nums, default=0) if max_spec_len is None else int(max_spec_len)
    draft = torch.as_tensor(draft_token_ids, device=device).reshape(-1) if draft_token_ids is not None \
        else torch.zeros(0, dtype=torch.long, device=device)
    if validate:
        _validate(draft, nums, cu_num_draft_tokens, K, target_probs, draft_probs, bonus_token_ids,
                  bonus_probs, is_greedy)
        if recover not in ("lazy", "eager"):
            raise SamplerInputError(f"recover={recover!r}: use 'lazy' or 'eager'")
    draft = draft.to(torch.long)
    # The categorical draws view rows as [blocks, block]: they need contiguous rows.
    target_probs = target_probs if target_probs.is_contiguous() else target_probs.contiguous()
    if draft_probs is not None and not draft_probs.is_contiguous():
        draft_probs = draft_probs.contiguous()
    if bonus_probs is not None and not bonus_probs.is_contiguous():
        bonus_probs = bonus_probs.contiguous()
    out = torch.full((B, K + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=device)
    if B == 0:
        return out
    greedy = (torch.zeros(B, dtype=torch.bool, device=device) if is_greedy is None
              else torch.as_tensor(is_greedy, device=device).reshape(-1).to(torch.bool))
    n_t = torch.tensor(nums, dtype=torch.long, device=device)
    starts = torch.cumsum(n_t, 0) - n_t
    req = torch.repeat_interleave(torch.arange(B, device=device), n_t, output_size=N)
    pos = torch.arange(N, device=device) - starts.index_select(0, req)
    n_greedy = int(greedy.sum())
    all_greedy, any_greedy = n_greedy == B, n_greedy > 0

    accepted = torch.zeros(N, dtype=torch.bool, device=device)
    argmax_tok = None
    g_tok_idx = None
    if any_greedy and N:
        if all_greedy:
            argmax_tok = target_probs.argmax(-1)
            accepted = draft == argmax_tok
        else:
            g_tok_idx = torch.nonzero(greedy.index_select(0, req)).reshape(-1)
            argmax_tok = torch.full((N,), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=device)
            if g_tok_idx.numel():
                am = target_probs.index_select(0, g_tok_idx).argmax(-1)
                argmax_tok.index_copy_(0, g_tok_idx, am)
                accepted.index_copy_(0, g_tok_idx, draft.index_select(0, g_tok_idx) == am)

    if not all_greedy:
        if uniforms is None:
            acc_u, fin_u = draw_uniforms(nums, greedy, generators, device)
        else:
            acc_u, fin_u = (torch.as_tensor(t, device=device).to(torch.float64).reshape(-1) for t in uniforms)
            if acc_u.numel() != N or fin_u.numel() != B:
                raise SamplerInputError(f"uniforms: expected ([{N}], [{B}]) from draw_uniforms")
        if N:
            r_tok_idx = (torch.arange(N, device=device) if not any_greedy
                         else torch.nonzero(~greedy.index_select(0, req)).reshape(-1))
            x = draft.index_select(0, r_tok_idx)
            p_x = target_probs[r_tok_idx, x].to(torch.float64)
            u = acc_u.index_select(0, r_tok_idx)
            if draft_probs is None:
                ok = u < p_x
            else:
                q_x = draft_probs[r_tok_idx, x].to(torch.float64)
                ok = u * q_x < p_x
            if any_greedy:
                accepted.index_copy_(0, r_tok_idx, ok)
            else:
                accepted = ok

    # Accepted prefix length per request.
    if K > 0 and N:
        mat = torch.ones((B, K), dtype=torch.bool, device=device)
        mat[req, pos] = accepted
        rej = ~mat
        num_acc = torch.where(rej.any(1), rej.to(torch.int8).argmax(1), torch.full_like(n_t, K))
        num_acc = torch.minimum(num_acc, n_t)
        dmat = torch.full((B, K), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=device)
        dmat[req, pos] = draft
        cols = torch.arange(K, device=device).unsqueeze(0)
        out[:, :K] = torch.where(cols < num_acc.unsqueeze(1), dmat, dmat.new_full((), PLACEHOLDER_TOKEN_ID))
    else:
        num_acc = torch.zeros(B, dtype=torch.long, device=device)

    final = torch.empty(B, dtype=torch.long, device=device)
    rejected = num_acc < n_t
    rej_idx = torch.nonzero(rejected).reshape(-1)
    if rej_idx.numel():
        tok = starts.index_select(0, rej_idx) + num_acc.index_select(0, rej_idx)
        g_r = greedy.index_select(0, rej_idx)
        gi = torch.nonzero(g_r).reshape(-1)
        if gi.numel():
            final.index_copy_(0, rej_idx.index_select(0, gi), argmax_tok.index_select(0, tok.index_select(0, gi)))
        ri = torch.nonzero(~g_r).reshape(-1)
        if ri.numel():
            reqs = rej_idx.index_select(0, ri)
            rows = tok.index_select(0, ri)
            if recover == "eager":
                rec_all = _recover_all(target_probs, draft_probs, draft, req, greedy, fin_u, g_tok_idx, N)
                rec = rec_all.index_select(0, rows)
            else:
                rec = inverse_cdf_sample(target_probs, rows, fin_u.index_select(0, reqs),
                                         exclude=draft.index_select(0, rows) if draft_probs is None else None,
                                         sub=draft_probs)
            final.index_copy_(0, reqs, rec)
    bon_idx = torch.nonzero(~rejected).reshape(-1)
    if bon_idx.numel():
        if bonus_token_ids is not None:
            final.index_copy_(0, bon_idx, torch.as_tensor(bonus_token_ids, device=device)
                              .reshape(-1).to(torch.long).index_select(0, bon_idx))
        else:
            g_b = greedy.index_select(0, bon_idx)
            gi = torch.nonzero(g_b).reshape(-1)
            if gi.numel():
                rows = bon_idx.index_select(0, gi)
                final.index_copy_(0, rows, bonus_probs.index_select(0, rows).argmax(-1))
            ri = torch.nonzero(~g_b).reshape(-1)
            if ri.numel():
                rows = bon_idx.index_select(0, ri)
                final.index_copy_(0, rows, inverse_cdf_sample(bonus_probs, rows, fin_u.index_select(0, rows)))
    out[torch.arange(B, device=device), num_acc] = final
    return out


def _recover_all(target_probs, draft_probs, draft, req, greedy, fin_u, g_tok_idx, N):
    """Recovered token at every random draft position (the eager layout)."""
    rec = torch.full((N,), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=target_probs.device)
    r_idx = (torch.arange(N, device=target_probs.device) if g_tok_idx is None
             else torch.nonzero(~greedy.index_select(0, req)).reshape(-1))
    if r_idx.numel():
        vals = inverse_cdf_sample(target_probs, r_idx, fin_u.index_select(0, req.index_select(0, r_idx)),
                                  exclude=draft.index_select(0, r_idx) if draft_probs is None else None,
                                  sub=draft_probs)
        rec.index_copy_(0, r_idx, vals)
    return rec


# --------------------------------------------------------------------------------------
# Engine-level entry point


@dataclasses.dataclass
class SpecSampleOutput:
    token_ids: torch.Tensor       # int64 [B, max_spec_len + 1], -1 for unused slots
    num_accepted: torch.Tensor    # int64 [B], accepted draft tokens per request

    def to_lists(self) -> list[list[int]]:
        return parse_output(self.token_ids)


def speculative_sample(draft_token_ids: torch.Tensor, num_draft_tokens, target_logits: torch.Tensor,
                       bonus_logits: torch.Tensor, sampling: SamplingBatch, *,
                       draft_probs: Optional[torch.Tensor] = None,
                       cu_num_draft_tokens: Optional[torch.Tensor] = None,
                       max_spec_len: Optional[int] = None, uniforms=None) -> SpecSampleOutput:
    """What an engine calls each verify step: target logits at the draft positions
    [num_tokens, V] and at the bonus position [B, V], per-request sampling parameters; returns
    the emitted tokens. Greedy requests compare drafts with argmax(logits) (bit-exact with the
    non-speculative greedy path); the others follow the rejection rule above."""
    nums = _num_list(num_draft_tokens)
    B = len(nums)
    if sampling.batch_size != B:
        raise SamplerInputError(f"sampling: {sampling.batch_size} requests, num_draft_tokens: {B}; "
                                "pass one set of parameters per request")
    if bonus_logits.dim() != 2 or bonus_logits.shape[0] != B:
        raise SamplerInputError(f"bonus_logits: expected [B={B}, V], got {tuple(bonus_logits.shape)}")
    cu = cu_num_tokens(nums, device=target_logits.device) if cu_num_draft_tokens is None else cu_num_draft_tokens
    greedy = sampling.is_greedy(target_logits.device)
    if bool(greedy.all()):
        target = target_logits
        bonus_ids = bonus_logits.argmax(-1)
        bonus_probs = None
    else:
        target = compute_probs(target_logits, cu, sampling)
        bonus_probs = compute_probs(bonus_logits, cu_num_tokens([1] * B, device=bonus_logits.device), sampling)
        bonus_ids = None
    out = rejection_sample(draft_token_ids, nums, target, cu_num_draft_tokens=cu, max_spec_len=max_spec_len,
                           draft_probs=draft_probs, bonus_token_ids=bonus_ids, bonus_probs=bonus_probs,
                           is_greedy=greedy, generators=sampling.generators, uniforms=uniforms)
    return SpecSampleOutput(out, count_accepted(out))


def parse_output(output_token_ids: torch.Tensor, vocab_size: Optional[int] = None) -> list[list[int]]:
    """Rows of the output without placeholders (and without ids >= vocab_size if given)."""
    res = []
    for row in output_token_ids.tolist():
        res.append([t for t in row if t != PLACEHOLDER_TOKEN_ID and (vocab_size is None or t < vocab_size)])
    return res


def count_accepted(output_token_ids: torch.Tensor) -> torch.Tensor:
    """Accepted draft tokens per request: emitted tokens minus the one recovered/bonus token."""
    return ((output_token_ids != PLACEHOLDER_TOKEN_ID).sum(1) - 1).clamp_min(0).to(torch.long)
