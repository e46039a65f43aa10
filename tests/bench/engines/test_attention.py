"""The two paged attention paths against a dense float64 oracle and against each other, and
the kernel-pair registry."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from samspec_bench.bench.engines.attention import (PagedAttentionMetadata, dense_causal_attention, paged_attention,
                                           paged_attention_decode, paged_attention_splitfuse)
from samspec_bench.bench.engines.kernels import PAIRS, KernelPair, PagedCase, available_pairs, make_case


def _dense_reference(case: PagedCase, window=None) -> torch.Tensor:
    """Oracle output for every query token of the case ([T, H, D] float64): the request's
    full context gathered from the cache, queries placed at their positions."""
    outs = []
    starts = case.query_start_loc
    bs, hkv, d = case.block_size, case.num_kv_heads, case.head_dim
    for b, (s, ql) in enumerate(zip(case.seq_lens, case.query_lens)):
        pos = torch.arange(s)
        slots = case.block_tables[b][pos // bs] * bs + pos % bs
        k = case.key_cache.view(-1, hkv, d)[slots]
        v = case.value_cache.view(-1, hkv, d)[slots]
        q = torch.zeros(s, case.num_heads, d, dtype=torch.float64)
        q[s - ql:] = case.query[starts[b]: starts[b + 1]].double()
        outs.append(dense_causal_attention(q, k, v, case.scale, window)[s - ql:])
    return torch.cat(outs)


@pytest.mark.parametrize("gqa", [1, 2, 4])
@pytest.mark.parametrize("block_size", [1, 16])
def test_splitfuse_matches_the_dense_oracle(gqa, block_size):
    case = make_case(num_seqs=5, query_len=4, min_seq_len=4, max_seq_len=70, block_size=block_size,
                     num_heads=8, num_kv_heads=8 // gqa, head_dim=32, seed=gqa * 10 + block_size)
    out = paged_attention_splitfuse(case.query, case.key_cache, case.value_cache, case.metadata(), case.scale)
    assert out.shape == case.query.shape and out.dtype == torch.float32
    assert torch.allclose(out.double(), _dense_reference(case), atol=2e-6, rtol=0)


def test_splitfuse_with_mixed_query_lengths_and_a_sliding_window():
    case = make_case(num_seqs=4, query_len=1, min_seq_len=10, max_seq_len=60, block_size=8, num_heads=4,
                     num_kv_heads=2, head_dim=16, seed=3)
    qlens = [1, 5, 10, 3]
    g = torch.Generator().manual_seed(0)
    case.query = torch.randn(sum(qlens), 4, 16, generator=g)
    case.query_lens = qlens
    for window in (None, 4):
        out = paged_attention_splitfuse(case.query, case.key_cache, case.value_cache, case.metadata(), case.scale,
                                        sliding_window=window)
        assert torch.allclose(out.double(), _dense_reference(case, window), atol=2e-6, rtol=0)


@pytest.mark.parametrize("window", [None, 5])
def test_decode_matches_the_dense_oracle(window):
    case = make_case(num_seqs=6, query_len=1, min_seq_len=1, max_seq_len=90, block_size=16, num_heads=6,
                     num_kv_heads=3, head_dim=16, seed=11)
    out = paged_attention_decode(case.query, case.key_cache, case.value_cache, case.metadata(), case.scale,
                                 sliding_window=window)
    assert torch.allclose(out.double(), _dense_reference(case, window), atol=2e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("gqa", [1, 3, 4])
def test_decode_and_splitfuse_agree_on_random_paged_inputs(dtype, gqa):
    """The kernel-level check of op-equivalence: every query token of a k+1 chunk (splitfuse)
    against the decode path at the same context length."""
    case = make_case(num_seqs=6, query_len=4, min_seq_len=4, max_seq_len=300, block_size=16, num_heads=12,
                     num_kv_heads=12 // gqa, head_dim=64, dtype=dtype, seed=gqa)
    a, b = PAIRS["reference"]().run(case)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert torch.allclose(a.float(), b.float(), atol=tol, rtol=0)
    fa, fb = PAIRS["reference-fixed-order"]().run(case)
    assert torch.equal(fa, fb)              # fixed-order reductions: bit for bit
    assert torch.allclose(fa.float(), a.float(), atol=tol, rtol=0)


def test_fixed_order_is_batch_invariant():
    """A request's output does not depend on the other requests of the batch (padding, grouping)."""
    case = make_case(num_seqs=5, query_len=3, min_seq_len=3, max_seq_len=200, block_size=16, num_heads=4,
                     num_kv_heads=2, head_dim=32, seed=5)
    full = paged_attention_splitfuse(case.query, case.key_cache, case.value_cache, case.metadata(), case.scale,
                                     impl="fixed-order")
    for b in range(5):
        meta = PagedAttentionMetadata.build(case.block_tables[b:b + 1], [case.seq_lens[b]], [3], case.block_size)
        alone = paged_attention_splitfuse(case.query[3 * b: 3 * b + 3], case.key_cache, case.value_cache, meta,
                                          case.scale, impl="fixed-order")
        assert torch.equal(alone, full[3 * b: 3 * b + 3])


def test_groups_bounded_by_max_elements_give_the_same_result():
    case = make_case(num_seqs=7, query_len=2, min_seq_len=2, max_seq_len=120, block_size=4, num_heads=4,
                     num_kv_heads=1, head_dim=8, seed=2)
    meta = case.metadata()
    big = paged_attention_splitfuse(case.query, case.key_cache, case.value_cache, meta, case.scale)
    small_meta = case.metadata()
    small = paged_attention_splitfuse(case.query, case.key_cache, case.value_cache, small_meta, case.scale,
                                      max_elements=1)
    assert len(small_meta.groups("splitfuse", 1, 4, 8, 1)) == 7
    assert torch.allclose(big, small, atol=1e-6, rtol=0)


def test_bad_inputs_are_refused():
    case = make_case(num_seqs=2, query_len=2, max_seq_len=20, seed=0)
    with pytest.raises(ValueError, match="one query token"):
        paged_attention_decode(case.query, case.key_cache, case.value_cache, case.metadata(), case.scale)
    with pytest.raises(ValueError, match="query_len"):
        PagedAttentionMetadata.build(case.block_tables, [1, 1], [2, 2], case.block_size)
    with pytest.raises(ValueError, match="path"):
        paged_attention(case.query, case.key_cache, case.value_cache, case.metadata(), "prefill")
    with pytest.raises(ValueError, match="impl"):
        paged_attention_splitfuse(case.query, case.key_cache, case.value_cache, case.metadata(), impl="fast")


def test_registry_lists_every_pair_and_says_why_one_cannot_run():
    avail = available_pairs()
    for name in ("reference", "reference-fixed-order", "torch-sdpa", "npu", "npu-fia", "vllm-flash-attn"):
        assert name in avail
    assert avail["reference"] is None and avail["torch-sdpa"] is None
    # the reason follows from what this machine lacks, looked up here apart from the registry
    if importlib.util.find_spec("torch_npu") is None:
        assert avail["npu"] == avail["npu-fia"] == "torch-npu is not installed"
    if importlib.util.find_spec("vllm") is None:
        assert avail["vllm-flash-attn"] == "vLLM is not installed"
    elif not torch.cuda.is_available():
        assert "CUDA GPU" in avail["vllm-flash-attn"]


def test_a_new_pair_is_one_small_class():
    class Shifted(KernelPair):
        name = "test-shifted"

        def decode(self, case, query, seq_lens):
            meta = case.metadata(seq_lens, [1] * len(seq_lens))
            return paged_attention_decode(query, case.key_cache, case.value_cache, meta, case.scale)

        def verify(self, case):
            out = paged_attention_splitfuse(case.query, case.key_cache, case.value_cache, case.metadata(), case.scale)
            return out + 1e-3

    case = make_case(num_seqs=3, query_len=3, max_seq_len=50, seed=1)
    a, b = Shifted().run(case)
    assert torch.allclose(b - a, torch.full_like(a, 1e-3), atol=1e-5)


def test_torch_sdpa_pair_is_close():
    case = make_case(num_seqs=3, query_len=4, max_seq_len=100, num_heads=4, num_kv_heads=2, head_dim=32, seed=4)
    a, b = PAIRS["torch-sdpa"]().run(case)
    assert torch.allclose(a, b, atol=1e-5, rtol=0)
    assert torch.allclose(b.double(), _dense_reference(case), atol=1e-5, rtol=0)
