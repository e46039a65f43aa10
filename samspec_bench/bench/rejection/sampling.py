"""Per-request sampling parameters (`SamplingBatch`) and what they do to the target's logits:
temperature, then top-k, then top-p, each request on its own rows (`compute_probs`, the
reference every logits-level sampler is audited against)."""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence, Union

import torch

from samspec_bench.bench.rejection.layout import GREEDY_EPS, SamplerInputError, expand_batch_to_tokens


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

