"""The kernel-pair registry of `samspec-bench op-equivalence`.

A pair is the attention kernel an engine uses for normal decoding (one query token per
request) and the one it uses to verify speculative tokens (k+1 query tokens per request,
causal inside the chunk). Fed the same paged KV cache and the same queries, an exact pair
returns the same output for every query token; any difference is what speculative decoding
changes numerically. The harness runs the verify kernel once over the whole batch and the
decode kernel once per query position (with the context cut at that token), then compares.

Registered pairs:

| name                  | decode                              | verify                                     | needs |
|-----------------------|-------------------------------------|--------------------------------------------|-------|
| reference             | attention.paged_attention_decode    | attention.paged_attention_splitfuse        | torch |
| reference-fixed-order | the same, fixed-order reductions    | the same, fixed-order reductions           | torch |
| torch-sdpa            | F.scaled_dot_product_attention, q=1 | F.scaled_dot_product_attention, q=k+1, mask | torch |
| npu                   | torch_npu._npu_paged_attention      | torch_npu._npu_paged_attention_splitfuse   | torch-npu + an NPU |
| npu-fia               | torch_npu._npu_paged_attention      | torch_npu.npu_fused_infer_attention_score  | torch-npu + an NPU |
| vllm-flash-attn       | vllm flash_attn_varlen_func, q=1    | vllm flash_attn_varlen_func, q=k+1         | vLLM (CUDA build) + a GPU |
| vllm-cpu-attn         | vllm-cpu cpu_attention_with_kv_cache, q=1 | the same kernel, q=k+1 (causal)      | vllm-cpu; block size 32k |

The torch-npu and vLLM pairs follow the calls that vLLM-Ascend and vLLM's FlashAttention
backend make (argument names and cache layouts as there); they are documented but were not run
on this project's CPU machines: `availability()` reports why a pair is skipped.

Adding a pair is one small class:

    @register_pair
    class MyPair(KernelPair):
        name = "my-kernels"
        description = "my decode kernel vs my verify kernel"
        def decode(self, case, query, seq_lens): ...   # [B, H, D] -> [B, H, D]
        def verify(self, case): ...                      # -> [num_tokens, H, D]
"""

from __future__ import annotations

import importlib.util
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
import torch

from samspec_bench.bench.engines.attention import (PagedAttentionMetadata, paged_attention_decode,
                                           paged_attention_splitfuse)
from samspec_bench.devices import device_kind

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class PagedCase:
    """Random paged attention inputs: B requests, query_lens[b] query tokens each (the last
    ones of their sequence), a shared paged cache with the requests' blocks scattered."""

    query: torch.Tensor            # [num_tokens, num_heads, head_dim]
    key_cache: torch.Tensor        # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor
    block_tables: torch.Tensor     # [B, max_blocks] int64
    seq_lens: list[int]            # context length per request, including its query tokens
    query_lens: list[int]
    scale: float
    seed: int = 0

    @property
    def num_heads(self) -> int:
        return self.query.shape[1]

    @property
    def num_kv_heads(self) -> int:
        return self.key_cache.shape[2]

    @property
    def head_dim(self) -> int:
        return self.query.shape[2]

    @property
    def block_size(self) -> int:
        return self.key_cache.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.query.dtype

    @property
    def device(self) -> torch.device:
        return self.query.device

    @property
    def query_start_loc(self) -> list[int]:
        out = [0]
        for q in self.query_lens:
            out.append(out[-1] + q)
        return out

    def metadata(self, seq_lens=None, query_lens=None) -> PagedAttentionMetadata:
        return PagedAttentionMetadata.build(self.block_tables, seq_lens or self.seq_lens,
                                            query_lens or self.query_lens, self.block_size, self.device)

    def to(self, device: str | torch.device) -> "PagedCase":
        return PagedCase(self.query.to(device), self.key_cache.to(device), self.value_cache.to(device),
                         self.block_tables.to(device), list(self.seq_lens), list(self.query_lens), self.scale,
                         self.seed)


def make_case(*, num_seqs: int = 8, query_len: int = 4, min_seq_len: int = 16, max_seq_len: int = 1024,
              block_size: int = 16, num_heads: int = 8, num_kv_heads: int = 2, head_dim: int = 64,
              dtype: torch.dtype = torch.float32, device: str = "cpu", seed: int = 0,
              extra_blocks: int = 8) -> PagedCase:
    """Random inputs: sequence lengths uniform in [max(min_seq_len, query_len), max_seq_len],
    each request's blocks drawn at random from a shared pool (so tables are not contiguous),
    keys/values/queries standard normal (keys scaled so attention is neither flat nor one-hot).
    Drawn on the CPU (its generator) and moved to `device`: the same inputs on every device."""
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    g = torch.Generator().manual_seed(seed)
    lo = max(min_seq_len, query_len)
    if max_seq_len < lo:
        raise ValueError(f"max_seq_len {max_seq_len} < {lo}")
    seq_lens = torch.randint(lo, max_seq_len + 1, (num_seqs,), generator=g).tolist()
    nblk = [-(-s // block_size) for s in seq_lens]
    total = sum(nblk) + extra_blocks
    perm = torch.randperm(total, generator=g).tolist()
    tables, used = [], 0
    for n in nblk:
        tables.append(perm[used: used + n])
        used += n
    bt = torch.zeros((num_seqs, max(nblk)), dtype=torch.long)
    for i, t in enumerate(tables):
        bt[i, : len(t)] = torch.tensor(t)
    shape = (total, block_size, num_kv_heads, head_dim)
    kc = (torch.randn(shape, generator=g) * 1.5).to(dtype)
    vc = torch.randn(shape, generator=g).to(dtype)
    q = torch.randn((num_seqs * query_len, num_heads, head_dim), generator=g).to(dtype)
    return PagedCase(q, kc, vc, bt, seq_lens, [query_len] * num_seqs, 1.0 / math.sqrt(head_dim), seed).to(device)


class KernelPair(ABC):
    """A decode kernel and a verify kernel over the same paged cache, run on `device` (default:
    the kind its kernels need, else the CPU)."""

    name: str = "pair"
    description: str = ""
    decode_name: str = "decode"
    verify_name: str = "verify"
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)
    device_kind: str | None = None   # the device kind its kernels run on (None: any torch device)

    def __init__(self, device: str | None = None):
        self.on = str(device) if device is not None else (self.device_kind or "cpu")

    @classmethod
    def availability(cls) -> str | None:
        """None when the pair can run here, else why not (one line)."""
        return None

    def device(self) -> str:
        return self.on

    def device_mismatch(self) -> str | None:
        """Why the pair does not run on its device (its kernels need another kind), else None."""
        if self.device_kind is not None and device_kind(self.on) != self.device_kind:
            return f"its kernels run on {self.device_kind}, not on {self.on} (--device)"
        return None

    def supports(self, case: PagedCase) -> str | None:
        if case.dtype not in self.dtypes:
            return f"{self.name} does not take {str(case.dtype).removeprefix('torch.')}"
        return None

    @abstractmethod
    def decode(self, case: PagedCase, query: torch.Tensor, seq_lens: list[int]) -> torch.Tensor:
        """One query token per request, `query [B, H, D]`, request b at position seq_lens[b]-1."""

    @abstractmethod
    def verify(self, case: PagedCase) -> torch.Tensor:
        """All of `case.query` [num_tokens, H, D] in one call (causal inside each chunk)."""

    def run(self, case: PagedCase) -> tuple[torch.Tensor, torch.Tensor]:
        """(decode outputs, verify outputs), both [num_tokens, H, D] in case order."""
        case = case.to(self.device())
        b_out = self.verify(case)
        a_out = torch.empty_like(b_out)
        starts = case.query_start_loc
        for i in range(max(case.query_lens)):
            reqs = [b for b, ql in enumerate(case.query_lens) if ql > i]
            rows = torch.tensor([starts[b] + i for b in reqs], dtype=torch.long, device=case.device)
            lens = [case.seq_lens[b] - case.query_lens[b] + i + 1 for b in reqs]
            sub = case if len(reqs) == len(case.seq_lens) else _subset(case, reqs)
            a_out[rows] = self.decode(sub, case.query[rows], lens)
        return a_out, b_out


def _subset(case: PagedCase, reqs: list[int]) -> PagedCase:
    idx = torch.tensor(reqs, dtype=torch.long, device=case.device)
    return PagedCase(case.query, case.key_cache, case.value_cache, case.block_tables[idx],
                     [case.seq_lens[b] for b in reqs], [case.query_lens[b] for b in reqs], case.scale, case.seed)


PAIRS: dict[str, type[KernelPair]] = {}


def register_pair(cls: type[KernelPair]) -> type[KernelPair]:
    if cls.name in PAIRS:
        raise ValueError(f"kernel pair {cls.name!r} is registered twice")
    PAIRS[cls.name] = cls
    return cls


def available_pairs() -> dict[str, str | None]:
    """{name: None if it runs here, else the reason it does not}."""
    return {name: cls.availability() for name, cls in PAIRS.items()}


# --- the reference paths -------------------------------------------------------------------------

@register_pair
class ReferencePair(KernelPair):
    name = "reference"
    description = "reference engine: plain-PyTorch paged decode vs splitfuse (BLAS matrix products)"
    decode_name = "paged_attention_decode"
    verify_name = "paged_attention_splitfuse"
    impl = "gemm"

    def decode(self, case, query, seq_lens):
        meta = case.metadata(seq_lens, [1] * len(seq_lens))
        return paged_attention_decode(query, case.key_cache, case.value_cache, meta, case.scale, impl=self.impl)

    def verify(self, case):
        return paged_attention_splitfuse(case.query, case.key_cache, case.value_cache, case.metadata(), case.scale,
                                         impl=self.impl)


@register_pair
class ReferenceFixedOrderPair(ReferencePair):
    name = "reference-fixed-order"
    description = ("reference paths with fixed-order reductions (elementwise products + sum): "
                   "the control that shows where the BLAS path's differences come from")
    impl = "fixed-order"


def _gather(case: PagedCase, b: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    bs = case.block_size
    pos = torch.arange(length, device=case.device)
    slots = case.block_tables[b][pos // bs] * bs + pos % bs
    hkv, d = case.num_kv_heads, case.head_dim
    return case.key_cache.view(-1, hkv, d)[slots], case.value_cache.view(-1, hkv, d)[slots]


@register_pair
class TorchSdpaPair(KernelPair):
    """PyTorch's fused scaled_dot_product_attention (on CPU its flash-attention kernel) on the
    keys/values gathered from the paged cache, one request at a time."""

    name = "torch-sdpa"
    description = "torch scaled_dot_product_attention on gathered KV: 1 query token vs k+1 with a causal mask"
    decode_name = "sdpa(q_len=1)"
    verify_name = "sdpa(q_len=k+1, mask)"

    def _sdpa(self, case, q, b, length, qlen):
        k, v = _gather(case, b, length)
        g = case.num_heads // case.num_kv_heads
        k = k.repeat_interleave(g, dim=1).transpose(0, 1)[None]        # [1, H, L, D]
        v = v.repeat_interleave(g, dim=1).transpose(0, 1)[None]
        qq = q.transpose(0, 1)[None]                                   # [1, H, q, D]
        qpos = torch.arange(length - qlen, length, device=case.device)
        mask = torch.arange(length, device=case.device)[None, :] <= qpos[:, None]
        o = torch.nn.functional.scaled_dot_product_attention(qq, k, v, attn_mask=mask, scale=case.scale)
        return o[0].transpose(0, 1)                                    # [q, H, D]

    def decode(self, case, query, seq_lens):
        return torch.stack([self._sdpa(case, query[b:b + 1], b, seq_lens[b], 1)[0] for b in range(len(seq_lens))])

    def verify(self, case):
        starts = case.query_start_loc
        return torch.cat([self._sdpa(case, case.query[starts[b]: starts[b + 1]], b, case.seq_lens[b], ql)
                          for b, ql in enumerate(case.query_lens)])


# --- Ascend (torch-npu) ----------------------------------------------------------------------------

def _npu_reason() -> str | None:
    if importlib.util.find_spec("torch_npu") is None:
        return "torch-npu is not installed"
    try:
        import torch_npu  # noqa: F401
        if not torch.npu.is_available():  # type: ignore[attr-defined]
            return "torch-npu is installed but no NPU is available"
    except Exception as e:  # noqa: BLE001
        return f"torch-npu does not load ({type(e).__name__}: {e})"
    return None


@register_pair
class NpuPair(KernelPair):
    """The pair the seed validated: vLLM-Ascend's decode kernel and its split-fuse (chunked
    prefill / verify) kernel. Cache layout [num_blocks, block_size, num_kv_heads, head_dim];
    int32 block tables and lengths; the split-fuse mask is one row per query token over the
    longest context (0 = attend, -10000 = masked; the float mask vLLM-Ascend's v1 backend built
    with `get_splitfuse_attn_mask` before it moved to the compressed 2048x2048 int8 mask).
    Not run on this project's machines (no NPU)."""

    name = "npu"
    description = "torch_npu._npu_paged_attention vs torch_npu._npu_paged_attention_splitfuse"
    decode_name = "_npu_paged_attention"
    verify_name = "_npu_paged_attention_splitfuse"
    dtypes = (torch.float16, torch.bfloat16)

    device_kind = "npu"

    @classmethod
    def availability(cls):
        return _npu_reason()

    def decode(self, case, query, seq_lens):
        import torch_npu
        out = torch.empty_like(query)
        torch_npu._npu_paged_attention(
            query=query.contiguous(), key_cache=case.key_cache, value_cache=case.value_cache,
            num_kv_heads=case.num_kv_heads, num_heads=case.num_heads, scale_value=case.scale,
            block_table=case.block_tables.to(torch.int32),
            context_lens=torch.tensor(seq_lens, dtype=torch.int32), out=out)
        return out

    def splitfuse_mask(self, case):
        qpos = torch.tensor([s - q + i for s, q in zip(case.seq_lens, case.query_lens) for i in range(q)])
        kpos = torch.arange(max(case.seq_lens))
        mask = torch.zeros((qpos.numel(), kpos.numel()), dtype=case.dtype)
        mask.masked_fill_(kpos[None, :] > qpos[:, None], -10000.0)
        return mask.to(case.device)

    def verify(self, case):
        import torch_npu
        out = torch.empty_like(case.query)
        torch_npu._npu_paged_attention_splitfuse(
            query=case.query, key_cache=case.key_cache, value_cache=case.value_cache,
            mask=self.splitfuse_mask(case), block_table=case.block_tables.to(torch.int32),
            seq_len=torch.tensor(case.query_lens, dtype=torch.int32),
            context_lens=torch.tensor(case.seq_lens, dtype=torch.int32),
            num_kv_heads=case.num_kv_heads, num_heads=case.num_heads, scale_value=case.scale, out=out)
        return out


@register_pair
class NpuFiaPair(NpuPair):
    """Decode kernel vs the fused-infer-attention kernel newer vLLM-Ascend releases verify with
    (TND layout, paged KV through block_table, sparse_mode=3 with the 2048x2048 causal mask).
    Not run on this project's machines (no NPU)."""

    name = "npu-fia"
    description = "torch_npu._npu_paged_attention vs torch_npu.npu_fused_infer_attention_score (TND, paged)"
    verify_name = "npu_fused_infer_attention_score"

    def verify(self, case):
        import torch_npu
        nb, bs, hkv, d = case.key_cache.shape
        mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1).to(case.device)
        out, _ = torch_npu.npu_fused_infer_attention_score(
            case.query, case.key_cache.view(nb, bs, hkv * d), case.value_cache.view(nb, bs, hkv * d),
            num_heads=case.num_heads, num_key_value_heads=hkv, input_layout="TND", scale=case.scale,
            block_table=case.block_tables.to(torch.int32), block_size=bs,
            actual_seq_lengths=case.query_start_loc[1:], actual_seq_lengths_kv=list(case.seq_lens),
            atten_mask=mask, sparse_mode=3)
        return out


# --- vLLM (CUDA builds) ----------------------------------------------------------------------------

def _vllm_fa_reason() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed"
    if not torch.cuda.is_available():
        return "vLLM's flash-attention kernels need a CUDA GPU (none here)"
    try:
        from vllm.vllm_flash_attn import flash_attn_varlen_func  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return f"vllm.vllm_flash_attn does not import ({type(e).__name__})"
    return None


@register_pair
class VllmFlashAttnPair(KernelPair):
    """vLLM's FlashAttention backend calls the same varlen kernel for decode batches
    (max_seqlen_q = 1) and for verification batches (k+1 query tokens per request, causal);
    the pair compares those two calls. Cache layout [num_blocks, block_size, num_kv_heads,
    head_dim], int32 block tables and lengths. Not run on this project's machines (no GPU)."""

    name = "vllm-flash-attn"
    description = "vllm flash_attn_varlen_func: decode batch (q_len 1) vs verify batch (q_len k+1)"
    decode_name = "flash_attn_varlen_func(q=1)"
    verify_name = "flash_attn_varlen_func(q=k+1)"
    dtypes = (torch.float16, torch.bfloat16)

    device_kind = "cuda"

    @classmethod
    def availability(cls):
        return _vllm_fa_reason()

    def _call(self, case, query, seq_lens, query_lens):
        from vllm.vllm_flash_attn import flash_attn_varlen_func
        cu = torch.tensor([0] + list(torch.tensor(query_lens).cumsum(0).tolist()), dtype=torch.int32, device=case.device)
        return flash_attn_varlen_func(
            q=query.contiguous(), k=case.key_cache, v=case.value_cache, cu_seqlens_q=cu,
            max_seqlen_q=max(query_lens), seqused_k=torch.tensor(seq_lens, dtype=torch.int32, device=case.device),
            max_seqlen_k=max(seq_lens), softmax_scale=case.scale, causal=True,
            block_table=case.block_tables.to(torch.int32))

    def decode(self, case, query, seq_lens):
        return self._call(case, query, seq_lens, [1] * len(seq_lens))

    def verify(self, case):
        return self._call(case, case.query, case.seq_lens, case.query_lens)


def _vllm_cpu_reason() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed"
    try:
        from vllm.platforms import current_platform
        if not current_platform.is_cpu():
            return "not vLLM's CPU build (vllm-cpu)"
        from vllm import _custom_ops  # noqa: F401  (loads the torch.ops._C kernels)
        if not hasattr(torch.ops._C, "cpu_attention_with_kv_cache"):
            return "this vLLM build has no cpu_attention_with_kv_cache kernel"
    except Exception as e:  # noqa: BLE001
        return f"vLLM's CPU kernels do not load ({type(e).__name__})"
    return None


@register_pair
class VllmCpuAttnPair(KernelPair):
    """vLLM's CPU attention backend (vllm-cpu): the same kernel `cpu_attention_with_kv_cache`
    for decode batches (q_len 1) and verification batches (k+1 query tokens, causal), with
    the scheduler metadata vLLM builds for each batch. Its cache is head-major (keys and
    values of a block side by side: [num_blocks, num_kv_heads, 2 * block_size, head_dim]), its block
    size must be a multiple of 32 (pass --block-size 32). The case's keys and values are
    written into that cache with vLLM's own cpu_attn_reshape_and_cache."""

    name = "vllm-cpu-attn"
    description = "vllm-cpu cpu_attention_with_kv_cache: decode batch (q_len 1) vs verify batch (q_len k+1)"
    decode_name = "cpu_attention_with_kv_cache(q=1)"
    verify_name = "cpu_attention_with_kv_cache(q=k+1)"
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    device_kind = "cpu"

    @classmethod
    def availability(cls):
        return _vllm_cpu_reason()

    def supports(self, case):
        if case.block_size % 32:
            return f"{self.name} needs a block size that is a multiple of 32 (got {case.block_size})"
        if case.head_dim not in (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512):
            return f"{self.name} does not take head_dim {case.head_dim}"
        return super().supports(case)

    def _call(self, case, query, seq_lens, query_lens):
        from vllm import _custom_ops as ops
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

        isa = _get_attn_isa(case.dtype, case.block_size, case.head_dim)
        nb, bs, hkv, d = case.key_cache.shape
        # vLLM's CPU cache: [num_blocks, num_kv_heads, 2 * block_size, head_dim], keys then values
        # in each block, written by its own reshape_and_cache kernel (block interiors per ISA)
        kv = torch.zeros((nb, hkv, 2 * bs, d), dtype=case.dtype)
        kc, vc = kv.chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(case.key_cache.reshape(nb * bs, hkv, d), case.value_cache.reshape(nb * bs, hkv, d),
                                       kc, vc, torch.arange(nb * bs, dtype=torch.int64), isa)
        qsl = torch.tensor([0] + torch.tensor(query_lens).cumsum(0).tolist(), dtype=torch.int32)
        sl = torch.tensor(seq_lens, dtype=torch.int32)
        meta = ops.cpu_attn_get_scheduler_metadata(
            num_reqs=len(seq_lens), num_heads=case.num_heads, num_kv_heads=case.num_kv_heads,
            head_dim=case.head_dim, seq_lens=sl, dtype=case.dtype, query_start_loc=qsl, causal=True,
            sliding_window_size=-1, isa=isa, enable_kv_split=False)
        out = torch.empty_like(query)
        ops.cpu_attention_with_kv_cache(
            query=query.contiguous(), key_cache=kc, value_cache=vc, output=out, query_start_loc=qsl, seq_lens=sl,
            scale=case.scale, causal=True, alibi_slopes=None, sliding_window=-1,
            block_table=case.block_tables.to(torch.int32), softcap=0.0, scheduler_metadata=meta, s_aux=None)
        return out

    def decode(self, case, query, seq_lens):
        return self._call(case, query, seq_lens, [1] * len(seq_lens))

    def verify(self, case):
        return self._call(case, case.query, case.seq_lens, case.query_lens)


def get_pair(name: str, device: str | None = None) -> KernelPair:
    if name not in PAIRS:
        raise KeyError(name)
    return PAIRS[name](device)

