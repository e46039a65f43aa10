"""The engine-free profiler's attention: KV heads read once for their query heads, and the split
into the cache (no mask) and the step's own tokens merged by log-sum-exp, against one plain
attention with every KV head repeated."""

import pytest
import torch

from samspec_bench.bench.simulation import gqa_attention
from samspec_bench.bench.simulation.gqa_attention import CONTEXT_KWARG, gqa_sdpa


def _reference(query, key, value, mask, scale):
    g = query.shape[1] // key.shape[1]
    k, v = key.repeat_interleave(g, dim=1), value.repeat_interleave(g, dim=1)
    s = (query.double() @ k.double().transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    return (torch.softmax(s, -1) @ v.double()).transpose(1, 2)


def _inputs(device, dtype, B=2, H=8, KV=2, L=5, C=37, D=16, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(B, H, L, D, generator=gen, device=device).to(dtype)
    k = torch.randn(B, KV, C + L, D, generator=gen, device=device).to(dtype)
    v = torch.randn(B, KV, C + L, D, generator=gen, device=device).to(dtype)
    parents = [-1, 0, 1, 0, 3]    # a tree over the step's tokens: each sees the context and its ancestors
    mask = torch.zeros(L, C + L, dtype=torch.bool, device=device)
    mask[:, :C] = True
    for i in range(L):
        j = i
        while j >= 0:
            mask[i, C + j] = True
            j = parents[j]
    return q, k, v, mask[None, None].expand(B, 1, L, C + L), C


@pytest.mark.parametrize("additive", [False, True])
@pytest.mark.parametrize("split", [False, True])
def test_gqa_attention_matches_repeated_heads(split, additive, monkeypatch):
    # split: the merge by log-sum-exp, run on the CPU in float32 (where it is only taken when forced)
    monkeypatch.setattr(gqa_attention, "flash_ready", lambda q: split)
    q, k, v, mask, C = _inputs("cpu", torch.float32)
    scale = 0.3
    given = torch.zeros(mask.shape).masked_fill(~mask, float("-inf")) if additive else mask
    out, _ = gqa_sdpa(None, q, k, v, given, scaling=scale, **({CONTEXT_KWARG: C} if split else {}))
    torch.testing.assert_close(out.double(), _reference(q, k, v, mask, scale), rtol=1e-5, atol=1e-5)


def test_split_is_taken_only_where_the_flash_kernel_runs_and_the_caller_vouches(monkeypatch):
    q, k, v, mask, C = _inputs("cpu", torch.float32)
    assert not gqa_attention.flash_ready(q) and not gqa_attention.flash_ready(q.bfloat16())   # the CPU
    calls = []
    monkeypatch.setattr(gqa_attention, "_split", lambda *a: calls.append(a) or torch.zeros(2, 2, 20, 16))
    gqa_sdpa(None, q, k, v, mask, scaling=0.3, **{CONTEXT_KWARG: C})
    assert not calls   # not on the CPU: one SDPA call
    monkeypatch.setattr(gqa_attention, "flash_ready", lambda q: True)
    gqa_sdpa(None, q, k, v, mask, scaling=0.3, **{CONTEXT_KWARG: C})
    assert len(calls) == 1 and calls[0][4] == C
    # a context of 0 or of the whole cache leaves one attention call; a wrong mask shape is refused
    calls.clear()
    for ctx in (0, C + q.shape[2]):
        out, _ = gqa_sdpa(None, q, k, v, mask, scaling=0.3, **{CONTEXT_KWARG: ctx})
        torch.testing.assert_close(out.double(), _reference(q, k, v, mask, 0.3), rtol=1e-5, atol=1e-5)
    assert not calls
    with pytest.raises(ValueError, match="mask of shape"):
        gqa_sdpa(None, q, k, v, mask.expand(2, 8, 5, C + 5), scaling=0.3)


@pytest.mark.cuda
def test_split_on_the_gpu_flash_kernel_matches(accel_device):
    # bf16 on CUDA: the cache part runs the flash kernel and hands back its log-sum-exp
    q, k, v, mask, C = _inputs(accel_device, torch.bfloat16, C=4096)
    out, _ = gqa_sdpa(None, q, k, v, mask, scaling=0.25, **{CONTEXT_KWARG: C})
    ref = _reference(q.float(), k.float(), v.float(), mask, 0.25)
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)
    one, _ = gqa_sdpa(None, q, k, v, mask, scaling=0.25)   # one masked call, no split
    torch.testing.assert_close(out.float(), one.float(), rtol=2e-2, atol=2e-2)
