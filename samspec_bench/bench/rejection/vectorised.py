"""The vectorised rejection sampler: `rejection_sample` (drafts against target probabilities)
and `speculative_sample` (what an engine calls each verify step, from logits), with both under
the adapter contract (`samspec_sampler`, `samspec_logits_sampler`). The rule they follow is in
the package's docstring; the random numbers and the categorical draw in `draws`.

`rejection_sample` runs in named steps over one batch's flattened drafts (`_Flat`): accept
tests of greedy requests, then of random ones, the accepted prefix per request, then one final
token per request: recovered at the first rejection, or the bonus token."""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

import torch

from samspec_bench.bench.rejection.contract import LogitsInputs, RejectionInputs
from samspec_bench.bench.rejection.draws import draw_uniforms, inverse_cdf_sample
from samspec_bench.bench.rejection.layout import (PLACEHOLDER_TOKEN_ID, SamplerInputError, SpecSampleOutput,
                                                  count_accepted, cu_num_tokens, num_list, validate_inputs)
from samspec_bench.bench.rejection.sampling import SamplingBatch, compute_probs


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


@dataclasses.dataclass
class _Flat:
    """One batch's flattened drafts and the index tensors every step reads."""

    draft: torch.Tensor     # int64 [N]
    nums: list[int]         # drafts per request
    K: int                  # max_spec_len
    greedy: torch.Tensor    # bool [B]
    n_t: torch.Tensor       # int64 [B], drafts per request
    starts: torch.Tensor    # int64 [B], flat index of each request's first draft
    req: torch.Tensor       # int64 [N], request of each draft token
    pos: torch.Tensor       # int64 [N], position of each draft token in its request
    all_greedy: bool
    any_greedy: bool

    @classmethod
    def of(cls, draft: torch.Tensor, nums: list[int], K: int, is_greedy) -> "_Flat":
        device, B, N = draft.device, len(nums), sum(nums)
        greedy = (torch.zeros(B, dtype=torch.bool, device=device) if is_greedy is None
                  else torch.as_tensor(is_greedy, device=device).reshape(-1).to(torch.bool))
        n_t = torch.tensor(nums, dtype=torch.long, device=device)
        starts = torch.cumsum(n_t, 0) - n_t
        req = torch.repeat_interleave(torch.arange(B, device=device), n_t, output_size=N)
        pos = torch.arange(N, device=device) - starts.index_select(0, req)
        n_greedy = int(greedy.sum())
        return cls(draft, nums, K, greedy, n_t, starts, req, pos, n_greedy == B, n_greedy > 0)

    @property
    def B(self) -> int:
        return len(self.nums)

    @property
    def N(self) -> int:
        return int(self.draft.shape[0])

    def random_tokens(self) -> torch.Tensor:
        """Flat indices of the draft tokens of random (non-greedy) requests."""
        if not self.any_greedy:
            return torch.arange(self.N, device=self.draft.device)
        return torch.nonzero(~self.greedy.index_select(0, self.req)).reshape(-1)


def _contiguous(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return t if t is None or t.is_contiguous() else t.contiguous()


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
    nums = num_list(num_draft_tokens)
    device = target_probs.device
    K = max(nums, default=0) if max_spec_len is None else int(max_spec_len)
    draft = torch.as_tensor(draft_token_ids, device=device).reshape(-1) if draft_token_ids is not None \
        else torch.zeros(0, dtype=torch.long, device=device)
    if validate:
        validate_inputs(draft, nums, cu_num_draft_tokens, K, target_probs, draft_probs, bonus_token_ids,
                        bonus_probs, is_greedy)
        if recover not in ("lazy", "eager"):
            raise SamplerInputError(f"recover={recover!r}: use 'lazy' or 'eager'")
    # The categorical draws view rows as [blocks, block]: they need contiguous rows.
    target_probs, draft_probs, bonus_probs = (_contiguous(t) for t in (target_probs, draft_probs, bonus_probs))
    out = torch.full((len(nums), K + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=device)
    if not nums:
        return out
    flat = _Flat.of(draft.to(torch.long), nums, K, is_greedy)
    accepted, argmax_tok = _greedy_accepts(flat, target_probs)
    fin_u = None
    if not flat.all_greedy:
        acc_u, fin_u = _uniforms(flat, generators, uniforms)
        accepted = _random_accepts(flat, target_probs, draft_probs, acc_u, accepted)
    num_acc = _accepted_prefix(flat, accepted, out)
    final = torch.empty(flat.B, dtype=torch.long, device=device)
    rejected = num_acc < flat.n_t
    _recovered_tokens(flat, torch.nonzero(rejected).reshape(-1), num_acc, argmax_tok, target_probs, draft_probs,
                      fin_u, recover, final)
    _bonus_tokens(flat, torch.nonzero(~rejected).reshape(-1), bonus_token_ids, bonus_probs, fin_u, final)
    out[torch.arange(flat.B, device=device), num_acc] = final
    return out


def _greedy_accepts(flat: _Flat, target_probs: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(accepted bool [N], argmax token [N] or None): a greedy request's draft is accepted where
    it equals the target's argmax; random requests' entries stay False here."""
    accepted = torch.zeros(flat.N, dtype=torch.bool, device=flat.draft.device)
    if not flat.any_greedy or not flat.N:
        return accepted, None
    if flat.all_greedy:
        argmax_tok = target_probs.argmax(-1)
        return flat.draft == argmax_tok, argmax_tok
    g_tok_idx = torch.nonzero(flat.greedy.index_select(0, flat.req)).reshape(-1)
    argmax_tok = torch.full((flat.N,), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=flat.draft.device)
    if g_tok_idx.numel():
        am = target_probs.index_select(0, g_tok_idx).argmax(-1)
        argmax_tok.index_copy_(0, g_tok_idx, am)
        accepted.index_copy_(0, g_tok_idx, flat.draft.index_select(0, g_tok_idx) == am)
    return accepted, argmax_tok


def _uniforms(flat: _Flat, generators, uniforms) -> tuple[torch.Tensor, torch.Tensor]:
    """(accept [N], final [B]) float64: drawn here, or the caller's checked and converted."""
    device = flat.draft.device
    if uniforms is None:
        return draw_uniforms(flat.nums, flat.greedy, generators, device)
    acc_u, fin_u = (torch.as_tensor(t, device=device).to(torch.float64).reshape(-1) for t in uniforms)
    if acc_u.numel() != flat.N or fin_u.numel() != flat.B:
        raise SamplerInputError(f"uniforms: expected ([{flat.N}], [{flat.B}]) from draw_uniforms")
    return acc_u, fin_u


def _random_accepts(flat: _Flat, target_probs, draft_probs, acc_u, accepted) -> torch.Tensor:
    """Random requests' accept tests: u < p(x) for deterministic drafts, u q(x) < p(x) with
    draft probabilities (min(1, p/q) without a division)."""
    if not flat.N:
        return accepted
    r_tok_idx = flat.random_tokens()
    x = flat.draft.index_select(0, r_tok_idx)
    p_x = target_probs[r_tok_idx, x].to(torch.float64)
    u = acc_u.index_select(0, r_tok_idx)
    if draft_probs is None:
        ok = u < p_x
    else:
        ok = u * draft_probs[r_tok_idx, x].to(torch.float64) < p_x
    return accepted.index_copy_(0, r_tok_idx, ok) if flat.any_greedy else ok


def _accepted_prefix(flat: _Flat, accepted: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Accepted drafts per request (up to its first rejection), written into out[:, :K]."""
    B, K, device = flat.B, flat.K, flat.draft.device
    if K <= 0 or not flat.N:
        return torch.zeros(B, dtype=torch.long, device=device)
    mat = torch.ones((B, K), dtype=torch.bool, device=device)
    mat[flat.req, flat.pos] = accepted
    rej = ~mat
    num_acc = torch.where(rej.any(1), rej.to(torch.int8).argmax(1), torch.full_like(flat.n_t, K))
    num_acc = torch.minimum(num_acc, flat.n_t)
    dmat = torch.full((B, K), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=device)
    dmat[flat.req, flat.pos] = flat.draft
    cols = torch.arange(K, device=device).unsqueeze(0)
    out[:, :K] = torch.where(cols < num_acc.unsqueeze(1), dmat, dmat.new_full((), PLACEHOLDER_TOKEN_ID))
    return num_acc


def _recovered_tokens(flat: _Flat, rej_idx, num_acc, argmax_tok, target_probs, draft_probs, fin_u, recover,
                      final) -> None:
    """final[i] for the requests rej_idx that rejected a draft: the target's argmax (greedy), or
    a draw from the residual at the first rejected position with the request's final uniform."""
    if not rej_idx.numel():
        return
    tok = flat.starts.index_select(0, rej_idx) + num_acc.index_select(0, rej_idx)
    g_r = flat.greedy.index_select(0, rej_idx)
    gi = torch.nonzero(g_r).reshape(-1)
    if gi.numel():
        final.index_copy_(0, rej_idx.index_select(0, gi), argmax_tok.index_select(0, tok.index_select(0, gi)))
    ri = torch.nonzero(~g_r).reshape(-1)
    if not ri.numel():
        return
    reqs = rej_idx.index_select(0, ri)
    rows = tok.index_select(0, ri)
    if recover == "eager":
        rec = _recover_all(flat, target_probs, draft_probs, fin_u).index_select(0, rows)
    else:
        rec = inverse_cdf_sample(target_probs, rows, fin_u.index_select(0, reqs),
                                 exclude=flat.draft.index_select(0, rows) if draft_probs is None else None,
                                 sub=draft_probs)
    final.index_copy_(0, reqs, rec)


def _recover_all(flat: _Flat, target_probs, draft_probs, fin_u) -> torch.Tensor:
    """Recovered token at every random draft position (the eager layout)."""
    rec = torch.full((flat.N,), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=target_probs.device)
    r_idx = flat.random_tokens()
    if r_idx.numel():
        vals = inverse_cdf_sample(target_probs, r_idx, fin_u.index_select(0, flat.req.index_select(0, r_idx)),
                                  exclude=flat.draft.index_select(0, r_idx) if draft_probs is None else None,
                                  sub=draft_probs)
        rec.index_copy_(0, r_idx, vals)
    return rec


def _bonus_tokens(flat: _Flat, bon_idx, bonus_token_ids, bonus_probs, fin_u, final) -> None:
    """final[i] for the requests bon_idx that accepted every draft: the caller's bonus token, or
    one from bonus_probs (argmax for greedy requests, a draw with the final uniform otherwise)."""
    if not bon_idx.numel():
        return
    if bonus_token_ids is not None:
        final.index_copy_(0, bon_idx, torch.as_tensor(bonus_token_ids, device=final.device)
                          .reshape(-1).to(torch.long).index_select(0, bon_idx))
        return
    g_b = flat.greedy.index_select(0, bon_idx)
    gi = torch.nonzero(g_b).reshape(-1)
    if gi.numel():
        rows = bon_idx.index_select(0, gi)
        final.index_copy_(0, rows, bonus_probs.index_select(0, rows).argmax(-1))
    ri = torch.nonzero(~g_b).reshape(-1)
    if ri.numel():
        rows = bon_idx.index_select(0, ri)
        final.index_copy_(0, rows, inverse_cdf_sample(bonus_probs, rows, fin_u.index_select(0, rows)))


def speculative_sample(draft_token_ids: torch.Tensor, num_draft_tokens, target_logits: torch.Tensor,
                       bonus_logits: torch.Tensor, sampling: SamplingBatch, *,
                       draft_probs: Optional[torch.Tensor] = None,
                       cu_num_draft_tokens: Optional[torch.Tensor] = None,
                       max_spec_len: Optional[int] = None, uniforms=None) -> SpecSampleOutput:
    """What an engine calls each verify step: target logits at the draft positions
    [num_tokens, V] and at the bonus position [B, V], per-request sampling parameters; returns
    the emitted tokens. Greedy requests compare drafts with argmax(logits) (bit-exact with the
    non-speculative greedy path); the others follow the rejection rule."""
    nums = num_list(num_draft_tokens)
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
