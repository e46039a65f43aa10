"""An analytic step-time model for hardware we do not have: the time of one engine step from
the bytes it moves and the FLOPs it does, on one tensor-parallel rank.

Per step and per TP rank (features as in bench/simulation/step_model.py: D decode tokens, P
prefill tokens, K draft tokens, C context tokens, R requests in the step; Q = D + P + K query
tokens):

  weight bytes  = attention + dense MLP layers + (MoE) router and shared expert
                  + per MoE layer the expected number of DISTINCT experts the step's Q tokens
                    touch, E * (1 - (1 - k/E)^Q) (uniform, independent routing)
                  + the LM head (vocab-parallel), all divided over TP, each read ONCE per step
  KV bytes      = C * kv_bytes_per_token (read) + Q * kv_bytes_per_token (written), with this
                  rank's KV heads: kv_heads / tp, or 1 (replicated) when tp > kv_heads
  FLOPs         = 2 * (active params without the LM head) / tp * Q
                  + 2 * LM head / tp * (D + K + prefilling requests that sample)
                  + 4 * head_dim * (heads / tp) * layers * attention pairs,
                  pairs = C * (D + K) / D (decoding requests hold the context; each of a
                  request's k+1 verify tokens attends over it) + P^2 / (2 * prefilling requests)
  time          = max(FLOPs / (peak * compute_efficiency), bytes / (bandwidth * memory_efficiency))
                  + TP collectives: (2 per layer + embedding) ring all-reduces of Q x hidden and
                    one gather of the logits, each latency + 2 (tp-1)/tp * size / link bandwidth
                  + host overhead: step_overhead + layers * ops_per_layer * per-op cost (eager
                    launch, or in-graph gap in mode=graph) + draft cost per speculating request

Decode (K = 0) and verify (K = k per request) come out of the same formula: a verify step
reads the same weights and KV as a decode step and only adds FLOPs, KV writes and the LM head
rows of its K extra query tokens, so at small batch on a GPU (memory-bound) it costs little
more than a decode step, while on a CPU (compute-bound) it costs almost k+1 times as much.

Not modelled (printed with every prediction): activation traffic, kernel fusion details,
overlap of host work with device work (vLLM V1 async scheduling), routing skew (real routers
touch fewer distinct experts than uniform routing, so MoE weight bytes are an upper bound at
moderate batch), pipeline / expert parallelism, quantised weights or KV.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from samspec_bench.bench.simulation.hardware import Hardware
from samspec_bench.bench.simulation.fitted_step_model import FEATURES, step_features
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import ModelShape, dtype_bytes

MODES = ("eager", "graph")
DRAFT_COST_S = 10e-6   # assumption: host time per speculating request (SAM lookup, draft bookkeeping)


class RooflineStepModel:
    """Step time (seconds) of one engine instance of `tp` ranks running `shape` on `hw`."""

    def __init__(self, shape: ModelShape, hw: Hardware, tp: int = 1, dtype: str = "bfloat16",
                 mode: str | None = None, spec: str = ""):
        if not isinstance(tp, (int, np.integer)) or tp < 1:
            raise UserError(f"tp={tp!r}: give an integer >= 1 (tensor-parallel ranks of one engine instance)")
        if shape.num_attention_heads % tp:
            raise UserError(f"tp={tp} does not divide the {shape.num_attention_heads} attention heads of {shape.name}: "
                            "use a divisor of the head count")
        kvh = shape.num_key_value_heads
        if kvh % tp and tp % kvh:
            raise UserError(f"tp={tp} and the {kvh} KV heads of {shape.name}: one must divide the other "
                            "(vLLM's rule for splitting or replicating KV heads)")
        if tp > 1 and hw.link_bw <= 0:
            raise UserError(f"tp={tp} on {hw.name}: no interconnect is known for it; use tp=1")
        mode = mode or hw.default_mode
        if mode not in MODES:
            raise UserError(f"mode={mode!r}: use eager or graph")
        if dtype not in hw.peak_flops:
            raise UserError(f"dtype {dtype!r} on {hw.name}: use one of {', '.join(hw.peak_flops)}")
        self.shape, self.hw, self.tp, self.dtype, self.mode, self.spec = shape, hw, int(tp), dtype, mode, spec
        b = dtype_bytes(dtype)
        s = shape
        self.bytes_per_el = b
        self.kv_heads_per_rank = max(kvh // tp, 1)
        self.kv_replicated = tp > kvh
        self.kv_bytes_per_token = s.kv_bytes_per_token(dtype, self.kv_heads_per_rank)   # this rank, all layers
        dense_layers = s.num_dense_layers * s.dense_mlp_params
        self.w_fixed = (s.attention_params + dense_layers + s.moe_always_params) * b / tp   # bytes read every step
        self.w_expert_layer = s.expert_params * b / tp                                  # one expert, one layer
        self.w_lm = s.lm_head_params * b / tp
        self.flops_per_token = 2.0 * (s.attention_params + dense_layers + s.moe_always_params
                                      + s.num_moe_layers * s.num_experts_per_tok * s.expert_params) / tp
        self.flops_per_logit_row = 2.0 * s.lm_head_params / tp
        self.flops_per_pair = 4.0 * s.head_dim * (s.num_attention_heads // tp) * s.num_hidden_layers
        self.peak = hw.peak_flops[dtype] * hw.compute_efficiency
        self.bw = hw.mem_bw * hw.memory_efficiency
        op_s = hw.eager_op_s if mode == "eager" else hw.graph_op_s
        self.host_s = hw.step_overhead_s + s.num_hidden_layers * hw.eager_ops_per_layer * op_s
        self.n_allreduce = 2 * s.num_hidden_layers + 1 if tp > 1 else 0

    # ---------------- the formula ----------------
    def components(self, **features) -> dict[str, Any]:
        """Every term of the formula for the given FEATURES (scalars or arrays; missing = 0):
        flops, weight / kv bytes, compute / memory / comm / host seconds, the bound, total."""
        unknown = set(features) - set(FEATURES)
        if unknown:
            raise TypeError(f"unknown step features {sorted(unknown)}; known: {', '.join(FEATURES)}")
        f = {k: np.asarray(features.get(k, 0), dtype=float) for k in FEATURES}
        D, P, K, C, R = f["decode_tokens"], f["prefill_tokens"], f["draft_tokens"], f["context_tokens"], f["running"]
        s = self.shape
        Q = D + P + K
        n_pre = np.where(P > 0, np.maximum(R - D, 1.0), 0.0)          # requests in the step that are prefilling
        # weights, once per step
        w = self.w_fixed + self.w_lm + 0.0 * Q
        experts_touched = 0.0 * Q
        if s.is_moe:
            E, k = s.num_experts, s.num_experts_per_tok
            experts_touched = E * (1.0 - (1.0 - k / E) ** Q)
            w = w + s.num_moe_layers * experts_touched * self.w_expert_layer
        kv_read = C * self.kv_bytes_per_token
        kv_write = Q * self.kv_bytes_per_token
        nbytes = w + kv_read + kv_write
        # FLOPs
        pairs_dec = np.where(D > 0, C * (D + K) / np.maximum(D, 1.0), 0.0)
        pairs_pre = np.where(P > 0, P * P / (2.0 * np.maximum(n_pre, 1.0)) + np.where(D > 0, 0.0, P * C / np.maximum(R, 1.0)), 0.0)
        logit_rows = D + K + n_pre
        flops = self.flops_per_token * Q + self.flops_per_logit_row * logit_rows + self.flops_per_pair * (pairs_dec + pairs_pre)
        t_compute = flops / self.peak
        t_memory = nbytes / self.bw
        # tensor-parallel collectives (ring)
        t_comm = 0.0 * Q
        if self.tp > 1:
            ring = 2.0 * (self.tp - 1) / self.tp
            act = Q * s.hidden_size * self.bytes_per_el
            logits = logit_rows * s.vocab_size * 4.0            # float32 logits gathered to the sampler
            t_comm = (self.n_allreduce * (self.hw.link_latency_s + ring * act / self.hw.link_bw)
                      + self.hw.link_latency_s + (self.tp - 1) / self.tp * logits / self.hw.link_bw)
        spec_req = f["spec_requests"]
        t_host = self.host_s + DRAFT_COST_S * spec_req + 0.0 * Q
        total = np.maximum(t_compute, t_memory) + t_comm + t_host
        bound = np.where(t_compute >= t_memory, "compute", "memory")
        return {"query_tokens": Q, "flops": flops, "weight_bytes": w, "kv_read_bytes": kv_read, "kv_write_bytes": kv_write,
                "bytes": nbytes, "experts_touched_per_layer": experts_touched, "t_compute_s": t_compute,
                "t_memory_s": t_memory, "t_comm_s": t_comm, "t_host_s": t_host, "bound": bound, "total_s": total}

    def predict(self, **features):
        """Step time(s) in seconds (modelled) from FEATURES given as keywords."""
        t = self.components(**features)["total_s"]
        return float(t) if np.ndim(t) == 0 else t

    def predict_steps(self, steps: Mapping[str, np.ndarray]) -> np.ndarray:
        """Modelled time of every step of a per-step table (`scheduler.STEP_COLUMNS` names; a
        table without context_tokens is priced as if every step had no context)."""
        feats = step_features(steps)
        n = len(np.asarray(steps["num_running"]))
        return np.broadcast_to(np.asarray(self.predict(**feats), dtype=float), (n,)).astype(float)

    def valid_range(self) -> None:
        """None: an analytic model has no fitted range (its assumptions are in describe())."""
        return None

    def assumptions(self) -> list[str]:
        hw, s = self.hw, self.shape
        out = [f"{k}: {v}" for k, v in hw.sources.items()]
        out += [
            f"compute efficiency {hw.compute_efficiency:g} x peak, memory efficiency {hw.memory_efficiency:g} x bandwidth",
            f"mode={self.mode}: host overhead {self.host_s * 1e3:.3f} ms per step = {hw.step_overhead_s * 1e3:g} ms + "
            f"{s.num_hidden_layers} layers x {hw.eager_ops_per_layer} ops x "
            f"{(hw.eager_op_s if self.mode == 'eager' else hw.graph_op_s) * 1e6:.2f} us; added to device time (no overlap)",
            f"draft cost {DRAFT_COST_S * 1e6:g} us per speculating request (assumption: SAM lookup and bookkeeping)",
            "weights read once per step per rank; activations' memory traffic not counted",
            f"KV heads per rank {self.kv_heads_per_rank}" + (" (replicated: tp > KV heads)" if self.kv_replicated else ""),
            "attention: decoding requests hold the step's context (mean field over requests); prefill chunks attend "
            "causally within themselves",
        ]
        if s.is_moe:
            out.append(f"MoE: {s.num_experts} experts, top-{s.num_experts_per_tok}, uniform independent routing: a step "
                       f"of Q tokens reads E*(1-(1-k/E)^Q) distinct experts per MoE layer (real routing is skewed: "
                       f"fewer distinct experts, so this is an upper bound on expert bytes); experts split over TP "
                       f"(no expert parallelism)")
        if self.tp > 1:
            out.append(f"TP={self.tp}: {self.n_allreduce} ring all-reduces per step (2 per layer + embedding) of "
                       f"Q x {s.hidden_size} x {self.bytes_per_el} bytes, plus one float32 logits gather")
        return out

    def describe(self) -> dict[str, Any]:
        s = self.shape
        return {"kind": "roofline", "units": "seconds per engine step (modelled, not measured)", "spec": self.spec,
                "model": s.describe(), "hardware": self.hw.describe(), "tp": self.tp, "dtype": self.dtype,
                "mode": self.mode,
                "per_rank": {"weight_bytes_dense_part": self.w_fixed + self.w_lm,
                             "weight_bytes_per_expert_per_layer": self.w_expert_layer if s.is_moe else None,
                             "weight_bytes_all": s.weight_bytes(self.dtype) / self.tp,
                             "kv_bytes_per_token": self.kv_bytes_per_token, "kv_heads": self.kv_heads_per_rank,
                             "flops_per_query_token": self.flops_per_token, "host_overhead_s": self.host_s},
                "formula": "max(FLOPs / (peak x compute_eff), bytes / (bandwidth x memory_eff)) + TP collectives "
                           "+ host overhead (see bench/simulation/roofline.py)",
                "assumptions": self.assumptions(), "valid_range": None}
