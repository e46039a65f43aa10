"""The two attention paths of the reference engine, in plain PyTorch, over one paged KV cache.

- `paged_attention_decode`: one query token per request (normal token-by-token decoding;
  the role of `torch_npu._npu_paged_attention` / vLLM's paged decode kernels).
- `paged_attention_splitfuse`: several query tokens per request, each attending to the cached
  context plus the query tokens before it (the causal mask inside the chunk). This is the path
  that verifies k draft tokens in one forward pass of k+1 query tokens, and the one chunked
  prefill uses (the role of `torch_npu._npu_paged_attention_splitfuse` / flash-attention varlen).
  With `metadata.tree_visible` a request's chunk is a draft tree instead: each token sees the
  cached context and its ancestors in the tree (tree attention, as Medusa / SpecInfer verify).

Both read keys/values through block tables, both accumulate in float32 (scores, softmax and
the probability-weighted sum of values, as attention kernels do) and cast the output to the
query's dtype. They differ where real kernels differ: the shape of the matrix products. Decode
multiplies each request's `G` query rows (G = query heads per KV head) with its keys; splitfuse
multiplies `G * q_len` rows at once, under a causal mask. Whether that changes any bit of the
result is what `samspec-bench op-equivalence` measures. `impl="fixed-order"` replaces the BLAS
products by reductions whose order does not depend on shapes (see `_attend`): the control that
shows where differences come from.

Inputs (vLLM's varlen conventions):
    query            [num_tokens, num_heads, head_dim], tokens of request b contiguous
    key/value_cache  [num_blocks, block_size, num_kv_heads, head_dim]
    metadata         block tables [B, max_blocks], seq_lens [B] (context length INCLUDING this
                     step's query tokens), query_start_loc [B+1]
Query heads map to KV heads as in Hugging Face's `repeat_kv`: head h uses KV head h // G.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import torch

# Bound on the float32 elements of one group's gathered keys (requests are processed in groups
# so that hundreds of long sequences never materialise one huge padded tensor).
DEFAULT_GROUP_ELEMENTS = 1 << 25


@dataclass
class PagedAttentionMetadata:
    """Per-step attention inputs shared by every layer (index tensors are built once)."""

    block_tables: torch.Tensor          # [B, max_blocks] int64
    seq_lens: list[int]                 # context length per request, including its query tokens
    query_lens: list[int]               # query tokens per request
    block_size: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    # request b -> [q, q] bool, True where query token i of its chunk sees chunk token j: a
    # draft tree's ancestors (and itself) in place of the causal mask inside the chunk
    tree_visible: dict[int, torch.Tensor] = field(default_factory=dict)
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, block_tables: torch.Tensor | Sequence[Sequence[int]], seq_lens: Sequence[int],
              query_lens: Sequence[int], block_size: int, device: str | torch.device = "cpu"):
        device = torch.device(device)
        if not isinstance(block_tables, torch.Tensor):
            width = max((len(t) for t in block_tables), default=1) or 1
            bt = torch.zeros((len(block_tables), width), dtype=torch.long)
            for i, t in enumerate(block_tables):
                if len(t):
                    bt[i, : len(t)] = torch.as_tensor(list(t), dtype=torch.long)
            block_tables = bt
        seq_lens, query_lens = [int(x) for x in seq_lens], [int(x) for x in query_lens]
        if not (len(seq_lens) == len(query_lens) == block_tables.shape[0]):
            raise ValueError("block_tables, seq_lens and query_lens must have one entry per request")
        for s, q in zip(seq_lens, query_lens):
            if q < 1 or s < q:
                raise ValueError(f"query_len {q} / seq_len {s}: need 1 <= query_len <= seq_len")
            if s > block_tables.shape[1] * block_size:
                raise ValueError(f"seq_len {s} exceeds the block table ({block_tables.shape[1]} blocks)")
        return cls(block_tables.to(device=device, dtype=torch.long), seq_lens, query_lens, int(block_size), device)

    @property
    def num_reqs(self) -> int:
        return len(self.seq_lens)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def query_start_loc(self) -> list[int]:
        out = [0]
        for q in self.query_lens:
            out.append(out[-1] + q)
        return out

    @property
    def is_decode_only(self) -> bool:
        return all(q == 1 for q in self.query_lens)

    def query_positions(self) -> torch.Tensor:
        """Absolute position of every query token, `[num_tokens]`."""
        key = "qpos"
        if key not in self._cache:
            pos = [s - q + i for s, q in zip(self.seq_lens, self.query_lens) for i in range(q)]
            self._cache[key] = torch.tensor(pos, dtype=torch.long, device=self.device)
        return self._cache[key]

    def kv_slots(self, reqs: Sequence[int], length: int) -> torch.Tensor:
        """Flat cache slots of positions 0..length-1 of the given requests, `[len(reqs), length]`
        (positions past a request's table read its last block: masked, never used)."""
        key = ("slots", tuple(reqs), length)
        if key not in self._cache:
            bs = self.block_size
            pos = torch.arange(length, device=self.device)
            idx = torch.as_tensor(list(reqs), dtype=torch.long, device=self.device)
            col = torch.clamp(pos // bs, max=self.block_tables.shape[1] - 1)
            blocks = self.block_tables[idx][:, col]                       # [b, L]
            self._cache[key] = blocks * bs + (pos % bs)[None, :]
        return self._cache[key]

    def groups(self, kind: str, num_kv_heads: int, group_size: int, head_dim: int,
               max_elements: int) -> list[list[int]]:
        """Requests split into groups whose padded keys and scores stay under `max_elements`.
        Requests are grouped in order of (query length, context length) so that padding is
        small; the grouping depends only on the batch, so a step is deterministic."""
        key = ("groups", kind, num_kv_heads, group_size, head_dim, max_elements)
        if key in self._cache:
            return self._cache[key]
        order = sorted(range(self.num_reqs), key=lambda b: (self.query_lens[b] if kind == "splitfuse" else 1,
                                                            self.seq_lens[b], b))
        groups: list[list[int]] = []
        cur: list[int] = []
        cur_len = cur_q = 0
        for b in order:
            L, Q = self.seq_lens[b], (self.query_lens[b] if kind == "splitfuse" else 1)
            new_len, new_q = max(cur_len, L), max(cur_q, Q)
            size = (len(cur) + 1) * new_len * num_kv_heads * max(head_dim, new_q * group_size)
            if cur and (size > max_elements or (kind == "splitfuse" and new_q != cur_q)):
                groups.append(cur)
                cur, new_len, new_q = [], L, Q
            cur.append(b)
            cur_len, cur_q = new_len, new_q
        if cur:
            groups.append(cur)
        self._cache[key] = groups
        return groups


def _gather_kv(key_cache, value_cache, slots):
    """Keys and values at `slots` `[b, L]` -> `[b, num_kv_heads, L, head_dim]` float32."""
    _, _, hkv, d = key_cache.shape
    k = key_cache.view(-1, hkv, d)[slots]          # [b, L, Hkv, D]
    v = value_cache.view(-1, hkv, d)[slots]
    return (k.permute(0, 2, 1, 3).to(torch.float32), v.permute(0, 2, 1, 3).to(torch.float32))


IMPLS = ("gemm", "fixed-order")


def tree_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum along `dim` by a fixed pairwise tree: zero-pad to the next power of two, then
    repeatedly add the second half onto the first. Every output is accumulated in an order fixed
    by its own data: padding (adding exact zeros) and the sizes of the other dimensions change
    nothing, unlike `torch.sum`, whose blocking depends on the reduced length."""
    dim = dim % x.dim()
    n = x.shape[dim]
    p = 1
    while p < n:
        p *= 2
    if p != n:
        shape = list(x.shape)
        shape[dim] = p - n
        x = torch.cat([x, x.new_zeros(shape)], dim)
    while x.shape[dim] > 1:
        h = x.shape[dim] // 2
        x = x.narrow(dim, 0, h) + x.narrow(dim, h, h)
    return x.squeeze(dim)


def _attend(q, k, v, masked, scale, impl="gemm"):
    """q [b, Hkv, M, D], k/v [b, Hkv, L, D] float32, masked [b, 1, M, L] bool -> [b, Hkv, M, D].

    impl="gemm": two batched matrix products (BLAS) and torch.softmax. Fast; the kernel BLAS
    picks, and so the order in which each dot product is accumulated, depends on the matrix
    shapes (M rows, L keys), so one query row's result can change in its last bits with the
    number of rows beside it and with the padding of the batch.
    impl="fixed-order": elementwise products reduced by `tree_sum`; the softmax denominator is
    accumulated with the values (a column of ones appended to V) and divided at the end. Every
    output element's arithmetic is then fixed by its own row and keys: batch-invariant (the
    same bits whatever the batch, the number of query rows or the padding), at several times
    the cost and memory."""
    if impl == "gemm":
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
        scores = scores.masked_fill(masked, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)
    if impl != "fixed-order":
        raise ValueError(f"attention impl {impl!r}: use one of {', '.join(IMPLS)}")
    scores = tree_sum(q.unsqueeze(-2) * k.unsqueeze(-3), -1) * scale
    scores = scores.masked_fill(masked, float("-inf"))
    e = torch.exp(scores - scores.amax(-1, keepdim=True))                  # max is exact: order-free
    v1 = torch.cat([v, v.new_ones(v.shape[:-1] + (1,))], -1)
    o = tree_sum(e.unsqueeze(-1) * v1.unsqueeze(-3), -2)                   # [b, Hkv, M, D+1]
    return o[..., :-1] / o[..., -1:]


def _check(query, key_cache, value_cache):
    if key_cache.shape != value_cache.shape or key_cache.dim() != 4:
        raise ValueError(f"key/value caches must both be [num_blocks, block_size, num_kv_heads, head_dim]; "
                         f"got {tuple(key_cache.shape)} and {tuple(value_cache.shape)}")
    hq, d = query.shape[-2:]
    hkv = key_cache.shape[2]
    if d != key_cache.shape[3] or hq % hkv:
        raise ValueError(f"query heads {hq} x {d} do not fit KV heads {hkv} x {key_cache.shape[3]}")
    return hq, hkv, d


@dataclass
class _GroupPlan:
    """Index tensors for one group of requests (built once per step, shared by all layers)."""

    reqs: torch.Tensor       # [b] request indices (decode) or [b, Q] query-token rows (splitfuse)
    slots: torch.Tensor      # [b, L] flat cache slots
    masked: torch.Tensor     # [b, 1, M, L] bool, True = not attended
    out_rows: torch.Tensor   # [n] output token indices this group writes
    valid: torch.Tensor | None = None   # [b, Q] bool (splitfuse: real query rows)


def _plan(metadata: PagedAttentionMetadata, kind: str, hkv: int, g: int, d: int,
          sliding_window: int | None, max_elements: int) -> list[_GroupPlan]:
    key = ("plan", kind, hkv, g, d, sliding_window, max_elements)
    if key in metadata._cache:
        return metadata._cache[key]
    dev = metadata.device
    starts = metadata.query_start_loc
    plans = []
    for group in metadata.groups(kind, hkv, g, d, max_elements):
        lens = [metadata.seq_lens[b] for b in group]
        L, nb = max(lens), len(group)
        kpos = torch.arange(L, device=dev)
        slots = metadata.kv_slots(group, L)
        if kind == "decode":
            idx = torch.as_tensor(group, dtype=torch.long, device=dev)
            qpos = torch.as_tensor(lens, device=dev)[:, None] - 1                 # [b, 1]
            masked = kpos[None, :] > qpos
            if sliding_window is not None:
                masked = masked | (kpos[None, :] <= qpos - sliding_window)
            plans.append(_GroupPlan(idx, slots, masked[:, None, None, :], idx))
        else:
            qlens = [metadata.query_lens[b] for b in group]
            Q = max(qlens)
            # Token index of query row (b, i); rows past a request's query_len repeat its last
            # token (computed, then dropped), so no row is fully masked.
            rows = torch.tensor([[starts[b] + min(i, ql - 1) for i in range(Q)] for b, ql in zip(group, qlens)],
                                dtype=torch.long, device=dev)                          # [b, Q]
            qpos = metadata.query_positions()[rows]                                     # [b, Q]
            masked = kpos[None, None, :] > qpos[:, :, None]                            # [b, Q, L]
            if sliding_window is not None:
                masked = masked | (kpos[None, None, :] <= qpos[:, :, None] - sliding_window)
            for bi, b in enumerate(group):   # a tree: its chunk's tokens see their ancestors only
                vis = metadata.tree_visible.get(b)
                if vis is not None:
                    ql, ctx = qlens[bi], lens[bi] - qlens[bi]
                    masked[bi, :ql, ctx:ctx + ql] = ~vis.to(device=dev, dtype=torch.bool)
            masked = masked[:, :, None, :].expand(nb, Q, g, L).reshape(nb, 1, Q * g, L)
            valid = torch.arange(Q, device=dev)[None, :] < torch.as_tensor(qlens, device=dev)[:, None]
            plans.append(_GroupPlan(rows, slots, masked, rows[valid], valid))
    metadata._cache[key] = plans
    return plans


def paged_attention_decode(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                           metadata: PagedAttentionMetadata, scale: float | None = None,
                           sliding_window: int | None = None, impl: str = "gemm",
                           max_elements: int = DEFAULT_GROUP_ELEMENTS) -> torch.Tensor:
    """One query token per request: `query [B, num_heads, head_dim]` -> `[B, num_heads, head_dim]`.
    Request b's query sits at position seq_lens[b]-1 and attends to positions 0..seq_lens[b]-1."""
    hq, hkv, d = _check(query, key_cache, value_cache)
    if not metadata.is_decode_only or query.shape[0] != metadata.num_reqs:
        raise ValueError("the decode path takes exactly one query token per request; "
                         "use paged_attention_splitfuse for several")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    g = hq // hkv
    out = torch.empty(query.shape, dtype=torch.float32, device=query.device)
    if impl == "fixed-order":
        max_elements = max(1, max_elements // d)
    for p in _plan(metadata, "decode", hkv, g, d, sliding_window, max_elements):
        nb = p.reqs.shape[0]
        k, v = _gather_kv(key_cache, value_cache, p.slots)
        q = query[p.reqs].to(torch.float32).view(nb, hkv, g, d)
        o = _attend(q, k, v, p.masked, scale, impl)                                 # [b, Hkv, G, D]
        out[p.out_rows] = o.reshape(nb, hq, d)
    return out.to(query.dtype)


def paged_attention_splitfuse(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                              metadata: PagedAttentionMetadata, scale: float | None = None,
                              sliding_window: int | None = None, impl: str = "gemm",
                              max_elements: int = DEFAULT_GROUP_ELEMENTS) -> torch.Tensor:
    """Several query tokens per request: `query [num_tokens, num_heads, head_dim]` (request b's
    tokens at query_start_loc[b]:query_start_loc[b+1], the last of them at position
    seq_lens[b]-1) -> `[num_tokens, num_heads, head_dim]`. Query token i of request b attends
    to positions 0..seq_lens[b]-query_lens[b]+i (causal inside the chunk)."""
    hq, hkv, d = _check(query, key_cache, value_cache)
    if query.shape[0] != metadata.num_tokens:
        raise ValueError(f"query has {query.shape[0]} tokens, the metadata {metadata.num_tokens}")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    g = hq // hkv
    out = torch.empty(query.shape, dtype=torch.float32, device=query.device)
    if impl == "fixed-order":
        max_elements = max(1, max_elements // d)
    for p in _plan(metadata, "splitfuse", hkv, g, d, sliding_window, max_elements):
        nb, Q = p.reqs.shape
        k, v = _gather_kv(key_cache, value_cache, p.slots)
        q = query[p.reqs].to(torch.float32)                                    # [b, Q, Hq, D]
        q = q.view(nb, Q, hkv, g, d).permute(0, 2, 1, 3, 4).reshape(nb, hkv, Q * g, d)
        o = _attend(q, k, v, p.masked, scale, impl)                                 # [b, Hkv, Q*G, D]
        o = o.view(nb, hkv, Q, g, d).permute(0, 2, 1, 3, 4).reshape(nb, Q, hq, d)
        out[p.out_rows] = o[p.valid]
    return out.to(query.dtype)


def paged_attention(query, key_cache, value_cache, metadata: PagedAttentionMetadata, path: str,
                    scale: float | None = None, sliding_window: int | None = None,
                    impl: str = "gemm") -> torch.Tensor:
    """Dispatch on `path` ('decode' or 'splitfuse'); decode takes [B, H, D] == [num_tokens, H, D]."""
    if path == "decode":
        return paged_attention_decode(query, key_cache, value_cache, metadata, scale, sliding_window, impl)
    if path == "splitfuse":
        return paged_attention_splitfuse(query, key_cache, value_cache, metadata, scale, sliding_window, impl)
    raise ValueError(f"attention path {path!r}: use 'decode' or 'splitfuse'")


def dense_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                           sliding_window: int | None = None) -> torch.Tensor:
    """Unpaged float64 causal attention for one sequence (a test oracle): q [T, Hq, D],
    k/v [T, Hkv, D] -> [T, Hq, D] float64."""
    t, hq, d = q.shape
    hkv = k.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kk = k.double().repeat_interleave(hq // hkv, dim=1)
    vv = v.double().repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("thd,shd->hts", q.double(), kk) * scale
    pos = torch.arange(t, device=q.device)
    masked = pos[None, :] > pos[:, None]
    if sliding_window is not None:
        masked = masked | (pos[None, :] <= pos[:, None] - sliding_window)
    s = s.masked_fill(masked[None], float("-inf"))
    return torch.einsum("hts,shd->thd", torch.softmax(s, -1), vv)
