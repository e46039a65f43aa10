"""The engine-free profiler's attention: grouped-query attention as serving engines run it, each
KV head read once for the query heads that share it.

transformers' `sdpa` path copies every KV head once per query head of its group (`repeat_kv`)
whenever a mask is given, and a step over a cache has one. On one H100 (Qwen3-8B, bf16, CUDA
graphs) that priced a step at B=8, C=32768 at 220 ms against 51 ms here, and at B=128, C=1024 at
115 ms against 25 ms: attention no engine pays. Here the G query heads of a KV head are folded
into the query length (B, KV, G x L, D), the mask repeated for them, and one SDPA call reads K/V
once, as vLLM's and vllm-ascend's attention kernels group them. Registered with transformers as
NAME (attention and mask builder).

One SDPA call with a mask runs a kernel that does not split the work along the KV length: at 32K
context and few requests it read the cache with few of the GPU's cores (B=1 decode 50 ms on the
H100). So the profiler, which knows that every query token sees the whole filled cache, says so
(CONTEXT_KWARG), and the attention runs in two parts, as engines' prefix / cascade attention does:
the cache with no mask (the flash kernel, which splits long KV, and returns its log-sum-exp), the
step's own tokens with their mask, merged by log-sum-exp. Only on CUDA in 16-bit, where the flash
kernel runs: elsewhere (an Ascend NPU, the CPU, float32) one SDPA call, as before. Measured on an H100 after the split:
B=1 decode at 32K 14.3 ms, and 21 points within 1.29 to 1.73 times shared/tools/step_physics.py's
hand-written layer stack (README, "Profile your own engine").
"""

from __future__ import annotations

NAME = "samspec_gqa"
CONTEXT_KWARG = "samspec_context"   # the profiler's hint: the first C cache slots are every query's context


def flash_ready(q) -> bool:
    """Whether the cache part can run the flash kernel: CUDA and 16-bit. Elsewhere (the CPU, an
    Ascend NPU, float32) the split would compute the cache's scores in float32, so gqa_sdpa makes
    one SDPA call instead (torch_npu maps it to its fused attention)."""
    import torch

    return bool(q.is_cuda) and q.dtype in (torch.float16, torch.bfloat16)


def _with_lse(q, k, v, mask, scale: float):
    """Attention output and the log-sum-exp of its scaled scores per query row. On CUDA in 16-bit
    with no mask: the flash kernel (it splits long KV across the GPU's cores and returns the
    log-sum-exp); elsewhere the scores are computed in float32."""
    import torch

    if mask is None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)[:2]
        return out, lse
    scores = (q.float() @ k.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.float()
    lse = torch.logsumexp(scores, dim=-1)
    return (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype), lse


def _split(q, key, value, mask, context: int, scale: float):
    """Attention over [context | new] as two parts merged by their log-sum-exp: the context, which
    every query row sees, with no mask (the flash kernel on a GPU), and the new slots with theirs."""
    import torch

    out_c, lse_c = _with_lse(q, key[:, :, :context], value[:, :, :context], None, scale)
    tail = None if mask is None else mask[..., context:]
    out_n, lse_n = _with_lse(q, key[:, :, context:], value[:, :, context:], tail, scale)
    lse = torch.logaddexp(lse_c.float(), lse_n.float())
    w_c, w_n = torch.exp(lse_c.float() - lse)[..., None], torch.exp(lse_n.float() - lse)[..., None]
    return (out_c.float() * w_c + out_n.float() * w_n).to(q.dtype)


def gqa_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
             is_causal: bool | None = None, **kwargs):
    """transformers' attention interface: query (B, H, L, D), key / value (B, KV, S, D), a boolean
    or additive mask (B or 1, 1, L, S) or None; returns ((B, L, H, D), None). With the keyword
    CONTEXT_KWARG = C (0 < C < S) the caller vouches that every query row sees the first C slots,
    and on CUDA in 16-bit those are attended with no mask (_split)."""
    import torch
    import torch.nn.functional as F

    B, H, L, D = query.shape
    kv, S = key.shape[1], key.shape[2]
    g = H // kv
    mask = attention_mask
    if mask is None and L > 1 and is_causal is not False:   # causal over the cache's last L slots
        mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril(S - L)[None, None]
    if mask is not None:
        if mask.dim() != 4 or mask.shape[1] != 1:
            raise ValueError(f"{NAME}: a mask of shape {tuple(mask.shape)}; expected (B or 1, 1, L, S)")
        mask = mask[:, :, None].expand(mask.shape[0], 1, g, L, S).reshape(mask.shape[0], 1, g * L, S)
    # query head kv x g + r (transformers' repeat_kv order) -> rows r x L + i of KV head kv
    q = query.reshape(B, kv, g * L, D)
    scale = scaling if scaling is not None else D ** -0.5
    context = kwargs.get(CONTEXT_KWARG)
    if context is not None and 0 < int(context) < S and flash_ready(q):
        out = _split(q, key, value, mask, int(context), scale)
    else:
        out = F.scaled_dot_product_attention(q, key, value, attn_mask=mask, dropout_p=0.0, scale=scale)
    return out.reshape(B, H, L, D).transpose(1, 2).contiguous(), None


def register() -> str:
    """Register NAME with transformers (attention function and the sdpa mask builder); returns NAME."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, gqa_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME
