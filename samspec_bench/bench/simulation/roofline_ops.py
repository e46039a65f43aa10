"""The operator classes of one engine step, each priced on its own roofline and then added.

A step is a sequence of kernels, not one kernel: the weight GEMMs turn compute-bound as the
step's query tokens grow while attention stays bound by its KV reads, so their times ADD. Per
tensor-parallel rank, each class is priced as

    t_class = max(compute, memory) + overlap_loss * min(compute, memory)
    compute = FLOPs / (peak * class compute efficiency)
    memory  = bytes / (bandwidth * class memory efficiency)

(`overlap_loss` 0 is the ideal roofline; a GEMM that streams its weights does not hide all of
its tensor-core work behind the loads, so GEMMs carry a calibrated loss). The classes:

- gemm:        the dense weights every token passes through (q/k/v/o projections, dense MLPs,
               MoE router and shared expert): rows = query tokens, padded up to the GEMM tile
               height (a tile's idle rows still cost tensor-core time; one row is a GEMV, unpadded);
- lm_head:     the output projection over the rows that produce logits (decode and draft
               tokens, prefilling requests' last token), tile-padded;
- moe_experts: per MoE layer the distinct experts the step touches, E * (1 - (1 - k/E)^Q)
               (uniform, independent routing), each read once; rows per expert Q*k / touched,
               tile-padded; priced at the GEMM efficiencies;
- gemm_kernels: a fixed device time per weight-GEMM kernel (`gemm_kernel_us`: the launch gap
               inside a graph and the kernel's fill and drain, which a small GEMV does not hide
               behind its weight stream), `weight_gemm_kernels` per step; 0 where not calibrated;
- attention:   the KV cache read once per step (C tokens) and 4 * head_dim * heads * layers
               FLOPs per (query token, context token) pair; a decoding request's query rows
               (its tokens x the query heads sharing a KV head, packed as vLLM's and flash
               attention's kernels pack GQA) padded up to the kernel's tile height
               (`attention_tile_rows`; 1: no padding), so verifying up to a tile's worth of
               tokens costs no more tensor-core time than decoding one; the tile is the
               kernel's the step runs (`attention_tile`): few work blocks run flash
               attention's split-KV kernel, many its standard kernel with taller tiles;
- kv_write:    the step's Q new tokens' keys and values written (memory only);
- elementwise: norms, residual adds, rotary embedding and the SwiGLU activation on the
               activations of Q tokens (memory only; a fused engine's passes: two norms read and
               write hidden, two residual adds read two and write one hidden, the activation
               reads 2 x intermediate and writes one, rotary reads and writes q and k);
- tp_collectives: ring all-reduces (2 per layer + embedding) of Q x hidden and one float32
               logits gather, each latency + 2 (tp-1)/tp x size / link bandwidth (tp > 1).

Efficiencies per class come from `hardware.op_efficiencies(hw)` (calibrated rows say where).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from samspec_bench.bench.simulation.hardware import Hardware
from samspec_bench.models.shapes import ModelShape

CLASSES = ("gemm", "lm_head", "moe_experts", "gemm_kernels", "attention", "kv_write", "elementwise", "tp_collectives")


def padded(rows, tile: float):
    """Rows rounded up to whole GEMM tiles; 0 and 1 stay (a one-row product runs as a GEMV
    kernel, which has no tensor-core tile)."""
    t = np.maximum(np.asarray(tile, dtype=float), 1.0)
    r = np.asarray(rows, dtype=float)
    return np.where(r <= 1.0, r, np.ceil(r / t) * t)


def roof(flops, nbytes, peak: float, bw: float, overlap_loss: float = 0.0) -> dict[str, Any]:
    """One class on its roofline: compute and memory seconds, the bound and the time."""
    c = np.asarray(flops, dtype=float) / peak if peak > 0 else 0.0 * np.asarray(flops, dtype=float)
    m = np.asarray(nbytes, dtype=float) / bw if bw > 0 else 0.0 * np.asarray(nbytes, dtype=float)
    c, m = np.broadcast_arrays(c, m)
    return {"flops": flops, "bytes": nbytes, "t_compute_s": c, "t_memory_s": m,
            "t_s": np.maximum(c, m) + overlap_loss * np.minimum(c, m)}


def elementwise_elements_per_token(shape: ModelShape, tp: int) -> float:
    """Activation elements a fused engine reads and writes per token over all layers (this rank)."""
    s = shape
    h = s.hidden_size
    rope = 2 * (s.num_attention_heads + s.num_key_value_heads) * s.head_dim / tp
    dense_act = 3 * s.intermediate_size / tp
    moe_act = (3 * s.num_experts_per_tok * s.moe_intermediate_size + 3 * s.shared_expert_intermediate_size) / tp
    per_layer = 4 * h + 6 * h + rope
    return float(s.num_hidden_layers * per_layer + s.num_dense_layers * dense_act + s.num_moe_layers * moe_act + 2 * h)


def weight_gemm_kernels(shape: ModelShape) -> int:
    """Weight-GEMM kernels of one step: per layer the fused q/k/v and the output projection, and
    the MLP's fused gate/up and down (a MoE layer: its router, and the grouped experts' two
    kernels, plus the shared expert's two where it has one); then the LM head."""
    s = shape
    moe = 2 + 1 + 2 + (2 if s.shared_expert_intermediate_size else 0)
    return int(s.num_dense_layers * 4 + s.num_moe_layers * moe + 1)


def attention_blocks(requests, rows_per_request, kv_heads: int, g: float):
    """Work blocks of flash attention's forward kernel, as its split heuristic counts them:
    requests x KV heads x ceil(query rows / 64), the rows being a request's query tokens x the
    g query heads packed per KV head (flash-attention 2's set_params_splitkv; 64 whatever the
    kernel's own tile)."""
    rows = np.asarray(rows_per_request, dtype=float) * g
    return np.asarray(requests, dtype=float) * kv_heads * np.ceil(np.maximum(rows, 1.0) / 64.0)


def attention_tile(blocks, eff: dict[str, float]):
    """Query rows per tile of the attention kernel a step runs. Flash attention splits the KV of
    every block over the idle cores when the blocks would not fill the GPU (num_splits_heuristic:
    fewer than 0.8 x its 2 x SM slots), in its split-KV kernel (`attention_tile_rows`, 64 rows);
    otherwise its standard kernel runs a block a tile of `attention_unsplit_tile_rows` (128 for
    head_dim 128), and the padded rows cost tensor-core time. `attention_split_below` 0: one
    kernel, `attention_tile_rows` for every step."""
    b = np.asarray(blocks, dtype=float)
    if eff["attention_split_below"] <= 0:
        return eff["attention_tile_rows"] + 0.0 * b
    return np.where(b < eff["attention_split_below"], eff["attention_tile_rows"], eff["attention_unsplit_tile_rows"])


def ring_time(tp: int, hw: Hardware, n_allreduce: int, act_bytes, logit_bytes):
    """TP collectives: ring all-reduces of the activations and one gather of the logits."""
    if tp <= 1:
        return 0.0 * np.asarray(act_bytes, dtype=float)
    ring = 2.0 * (tp - 1) / tp
    return (n_allreduce * (hw.link_latency_s + ring * act_bytes / hw.link_bw)
            + hw.link_latency_s + (tp - 1) / tp * logit_bytes / hw.link_bw)
