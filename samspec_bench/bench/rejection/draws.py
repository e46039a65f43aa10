"""The random numbers of a verify step and the categorical draw that spends them.

Each random request uses `num_draft_tokens[i]` uniforms for its accept tests and one more
("final") uniform, which draws the recovered token on a rejection or the bonus token (when
sampled here) otherwise; only one of the two is ever needed. Uniforms are float64 (53 random
bits), so the accept test `u * q(x) < p(x)` is exact for float32 probabilities and categorical
draws have no 2**-24 granularity. Requests listed in `generators` draw from their own
`torch.Generator` (reproducible whatever else is in the batch); the others share one draw from
the default generator. `draw_uniforms` is the single source of these numbers, so the loop
reference fed the same uniforms returns the same tokens.

Categorical draws are inverse-CDF draws in token-index order (`inverse_cdf_sample`), in two
levels: float32 block sums (blocks of ~sqrt(V) tokens) accumulated in float64 pick the block,
then a float64 cumulative sum inside the chosen block, rescaled to the block's sum, picks the
token. Each token's probability is exact to float32 rounding (~1e-7 relative) and tokens of
probability 0 are never drawn. The vectorised sampler draws only for the one row per request
that needs it (the first rejected position, or the bonus row); the loop reference calls the
same primitive row by row, so both return identical tokens for the same uniforms."""

from __future__ import annotations

import functools
import math
from typing import Mapping, Optional

import torch

from samspec_bench.bench.rejection.layout import SamplerInputError, num_list


def draw_uniforms(num_draft_tokens, is_greedy=None, generators: Optional[Mapping[int, torch.Generator]] = None,
                  device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(accept_uniforms float64 [num_tokens], final_uniforms float64 [B]) in [0, 1).

    One draw of num_tokens + B from the default generator; each seeded, non-greedy request
    then overwrites its own n_i + 1 numbers from its generator (accepts, then final)."""
    nums = num_list(num_draft_tokens)
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
    probability 0 in exact arithmetic). Zero-weight tokens are never returned. A row whose
    weights sum to NaN or inf is a SamplerInputError.
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
    nonfinite = ~torch.isfinite(total)
    if bool((empty | nonfinite).any()):   # one device sync in the common case, as before
        if bool(nonfinite.any()):   # NaN / inf weights: a token drawn from them would be made up
            raise SamplerInputError("inverse_cdf_sample: a row's weights are not finite (NaN or inf in the "
                                    "probabilities); check the target / draft probabilities")
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
