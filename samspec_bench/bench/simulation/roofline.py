"""An analytic step-time model for hardware we do not have: the time of one engine step from
the bytes it moves and the FLOPs it does, on one tensor-parallel rank, operator class by
operator class.

Per step and per TP rank (features as in bench/simulation/fitted_step_model.py: D decode
tokens, P prefill tokens, K draft tokens, C context tokens, R requests in the step; Q = D + P
+ K query tokens):

  device time = the operator classes of roofline_ops.py ADDED, each on its own roofline:
                weight GEMMs (Q rows), a fixed time per weight-GEMM kernel, the LM head (D + K + prefilling requests' rows), the MoE
                experts the Q tokens touch, attention over the C context tokens (KV read once,
                4 * head_dim * heads * layers FLOPs per query/context pair), KV writes of Q
                tokens, elementwise passes (norms, residuals, rotary, activation) and the TP
                collectives; per-class efficiencies from hardware.op_efficiencies
  host time   = step_overhead + layers * ops_per_layer * per-op cost (eager launch, or the
                in-graph gap in mode=graph) + draft cost per speculating request
  step time   = device + host (no overlap: vLLM V1's async scheduling would hide some host time)

`components()` returns every class and both times; `describe()` says how each is priced.
Decode (K = 0) and verify (K = k per request) come out of the same formula: at small batch the
GEMMs are bound by their weight reads and a verify step costs little more than a decode step;
at large batch and short context the GEMMs turn compute-bound while attention stays bound by
its KV reads, so a verify step of k+1 tokens per request costs up to k+1 times the GEMM part.

Memory (`memory()`): the engine takes memory_gb GiB x 0.9 (vLLM's gpu_memory_utilization) per
rank; the weights per rank come off it and the rest holds KV (`kv_capacity_tokens()`); the
rollout simulation caps its KV cache there when priced by this model.

Not modelled (printed with every prediction): kernel fusion beyond the counted passes, overlap
of host work with device work, routing skew (real routers touch fewer distinct experts than
uniform routing, so MoE weight bytes are an upper bound at moderate batch), pipeline / expert
parallelism, quantised weights or KV, activation memory beside the KV cache.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from samspec_bench.bench.simulation.calibration_file import tp_check
from samspec_bench.bench.simulation.hardware import Hardware, check_hardware, op_efficiencies
from samspec_bench.bench.simulation.roofline_ops import (attention_blocks, attention_tile,
                                                        elementwise_elements_per_token, padded, ring_time, roof,
                                                        weight_gemm_kernels)
from samspec_bench.bench.simulation.fitted_step_model import FEATURES, step_features
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import ModelShape, dtype_bytes

MODES = ("eager", "graph")
MEMORY_UTILIZATION = 0.9   # share of device memory the engine takes (vLLM's gpu_memory_utilization default)
GIB = 2 ** 30
DRAFT_COST_S = 10e-6   # assumption: host time per speculating request (SAM lookup, draft bookkeeping)


class RooflineStepModel:
    """Step time (seconds) of one engine instance of `tp` ranks running `shape` on `hw`."""

    def __init__(self, shape: ModelShape, hw: Hardware, tp: int = 1, dtype: str = "bfloat16",
                 mode: str | None = None, spec: str = "", memory_utilization: float = MEMORY_UTILIZATION,
                 calibration: Mapping[str, Any] | None = None):
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
        if not (0 < memory_utilization <= 1):
            raise UserError(f"memory_utilization={memory_utilization!r}: give a fraction in (0, 1] (vLLM's "
                            "gpu_memory_utilization)")
        self.shape, self.hw, self.tp, self.dtype, self.mode, self.spec = shape, hw, int(tp), dtype, mode, spec
        # a calibration file's calibration_file.calibration_record (None: the row's own parameters, no range claimed)
        self.calibration = dict(calibration) if calibration is not None else None
        self.memory_utilization = float(memory_utilization)
        b = dtype_bytes(dtype)
        s = shape
        self.bytes_per_el = b
        self.kv_heads_per_rank = max(kvh // tp, 1)
        self.q_per_kv = s.num_attention_heads / kvh   # query heads packed per KV head (attention's rows)
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
        self.flops_fixed_per_token = 2.0 * (s.attention_params + dense_layers + s.moe_always_params) / tp
        self.flops_per_expert_row = 2.0 * s.expert_params / tp
        self.act_bytes_per_token = elementwise_elements_per_token(s, tp) * b
        check_hardware(hw, dtype)
        self.eff = op_efficiencies(hw)
        self.peak_raw, self.bw_raw = hw.peak_flops[dtype], hw.mem_bw
        op_s = hw.eager_op_s if mode == "eager" else hw.graph_op_s
        self.host_s = hw.step_overhead_s + s.num_hidden_layers * hw.eager_ops_per_layer * op_s
        self.n_allreduce = 2 * s.num_hidden_layers + 1 if tp > 1 else 0

    def with_hardware(self, hw: Hardware) -> "RooflineStepModel":
        """The same model, tensor parallelism, dtype, mode and memory share on another row."""
        return RooflineStepModel(self.shape, hw, tp=self.tp, dtype=self.dtype, mode=self.mode, spec=self.spec,
                                 memory_utilization=self.memory_utilization, calibration=self.calibration)

    def _attention_rows(self, q, tile):
        """Query tokens per decoding request that attention's tensor cores work on: a kernel
        packs the G query heads of a KV head into one tile of query rows (q x G rows), padded
        up to whole tiles of `tile` rows (1: no padding, the tokens themselves)."""
        g, q = self.q_per_kv, np.asarray(q, dtype=float)
        return np.where(np.asarray(tile) <= 1.0, q, padded(q * g, tile) / g)

    # ---------------- the formula ----------------
    def components(self, **features) -> dict[str, Any]:
        """Every term for the given FEATURES (scalars or arrays; missing = 0): per operator class
        (roofline_ops.CLASSES) its FLOPs, bytes, compute / memory / time seconds; the sums
        (flops, weight / kv bytes, t_compute_s, t_memory_s over the classes), t_device_s (the
        classes added), t_comm_s (the TP collectives, part of device time), t_host_s, the GEMMs'
        bound and total_s = device + host."""
        unknown = set(features) - set(FEATURES)
        if unknown:
            raise TypeError(f"unknown step features {sorted(unknown)}; known: {', '.join(FEATURES)}")
        f = {k: np.asarray(features.get(k, 0), dtype=float) for k in FEATURES}
        D, P, K, C, R = f["decode_tokens"], f["prefill_tokens"], f["draft_tokens"], f["context_tokens"], f["running"]
        s, e, tile = self.shape, self.eff, self.eff["gemm_tile_rows"]
        Q = D + P + K
        n_pre = np.where(P > 0, np.maximum(R - D, 1.0), 0.0)          # requests in the step that are prefilling
        logit_rows = D + K + n_pre
        gemm_peak, gemm_bw = self.peak_raw * e["gemm_compute"], self.bw_raw * e["gemm_memory"]
        loss = e["gemm_overlap_loss"]
        ops: dict[str, dict[str, Any]] = {}
        ops["gemm"] = roof(self.flops_fixed_per_token * padded(Q, tile), self.w_fixed + 0.0 * Q, gemm_peak, gemm_bw, loss)
        ops["lm_head"] = roof(self.flops_per_logit_row * padded(logit_rows, tile), self.w_lm + 0.0 * Q,
                              gemm_peak, gemm_bw, loss)
        experts_touched = 0.0 * Q
        if s.is_moe:
            E, k = s.num_experts, s.num_experts_per_tok
            experts_touched = E * (1.0 - (1.0 - k / E) ** Q)
            rows = padded(Q * k / np.maximum(experts_touched, 1e-12), tile) * (Q > 0)
            ops["moe_experts"] = roof(self.flops_per_expert_row * s.num_moe_layers * experts_touched * rows,
                                      s.num_moe_layers * experts_touched * self.w_expert_layer, gemm_peak, gemm_bw, loss)
        else:
            ops["moe_experts"] = roof(0.0 * Q, 0.0 * Q, gemm_peak, gemm_bw)
        t_kernels = weight_gemm_kernels(s) * e["gemm_kernel_us"] * 1e-6 * (Q > 0)
        ops["gemm_kernels"] = {"flops": 0.0 * Q, "bytes": 0.0 * Q, "t_compute_s": 0.0 * Q, "t_memory_s": 0.0 * Q,
                               "t_s": t_kernels}
        q_dec = (D + K) / np.maximum(D, 1.0)
        blocks = (attention_blocks(D, q_dec, self.kv_heads_per_rank, self.q_per_kv) * (D > 0)
                  + attention_blocks(n_pre, P / np.maximum(n_pre, 1.0), self.kv_heads_per_rank, self.q_per_kv) * (P > 0))
        pairs_dec = np.where(D > 0, C * self._attention_rows(q_dec, attention_tile(blocks, e)), 0.0)
        pairs_pre = np.where(P > 0, P * P / (2.0 * np.maximum(n_pre, 1.0)) + np.where(D > 0, 0.0, P * C / np.maximum(R, 1.0)), 0.0)
        kv_read = C * self.kv_bytes_per_token
        ops["attention"] = roof(self.flops_per_pair * (pairs_dec + pairs_pre), kv_read,
                                self.peak_raw * e["attention_compute"], self.bw_raw * e["attention_memory"])
        ops["attention"]["blocks"] = blocks
        ops["kv_write"] = roof(0.0 * Q, Q * self.kv_bytes_per_token, 1.0, self.bw_raw * e["elementwise_memory"])
        ops["elementwise"] = roof(0.0 * Q, Q * self.act_bytes_per_token, 1.0, self.bw_raw * e["elementwise_memory"])
        t_comm = ring_time(self.tp, self.hw, self.n_allreduce, Q * s.hidden_size * self.bytes_per_el,
                           logit_rows * s.vocab_size * 4.0)           # float32 logits gathered to the sampler
        ops["tp_collectives"] = {"flops": 0.0 * Q, "bytes": 0.0 * Q, "t_compute_s": 0.0 * Q, "t_memory_s": 0.0 * Q,
                                 "t_s": t_comm + 0.0 * Q}
        t_device = sum(o["t_s"] for o in ops.values())
        t_host = self.host_s + DRAFT_COST_S * f["spec_requests"] + 0.0 * Q
        gemm_c = ops["gemm"]["t_compute_s"] + ops["lm_head"]["t_compute_s"] + ops["moe_experts"]["t_compute_s"]
        gemm_m = ops["gemm"]["t_memory_s"] + ops["lm_head"]["t_memory_s"] + ops["moe_experts"]["t_memory_s"]
        w = ops["gemm"]["bytes"] + ops["lm_head"]["bytes"] + ops["moe_experts"]["bytes"]
        return {"query_tokens": Q, "ops": ops, "flops": sum(o["flops"] for o in ops.values()), "weight_bytes": w,
                "kv_read_bytes": kv_read, "kv_write_bytes": Q * self.kv_bytes_per_token,
                "bytes": sum(o["bytes"] for o in ops.values()), "experts_touched_per_layer": experts_touched,
                "t_compute_s": sum(o["t_compute_s"] for o in ops.values()),
                "t_memory_s": sum(o["t_memory_s"] for o in ops.values()), "t_comm_s": t_comm + 0.0 * Q,
                "t_device_s": t_device, "t_host_s": t_host,
                "bound": np.where(gemm_c >= gemm_m, "compute", "memory"), "total_s": t_device + t_host}

    def device_time(self, **features):
        """Device seconds of a step (operator classes added, collectives included; no host time)."""
        t = self.components(**features)["t_device_s"]
        return float(t) if np.ndim(t) == 0 else t

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

    def valid_range(self) -> dict[str, list[float]] | None:
        """The step features its calibration's points span ({feature: [lo, hi]}; steps beyond are
        flagged as a fitted profile's are, fitted_step_model.extrapolation); None where it claims
        none: the row's built-in parameters (no calibration= file) or a calibration file that records
        no range."""
        vr = (self.calibration or {}).get("measured_range")
        return {k: list(v) for k, v in vr.items()} if vr else None

    def range_note(self) -> str:
        """One line: calibrated on which measured range (a calibration= file), calibrated with the
        range unknown, or the hardware row's built-in parameters (where they come from, by the
        row's sources; no range claimed, nothing flagged as extrapolated)."""
        if self.calibration is None:
            src = str(self.hw.sources.get("op_efficiency", "")).split(" (")[0].split(";")[0]
            return (f"no calibration= file: the {self.hw.name} row's built-in parameters price every step"
                    + (f" ({src})" if src else "") + "; they claim no measured range, so no step is flagged as "
                    "extrapolated")
        where, vr = f"calibration={self.calibration.get('file')}", self.valid_range()
        if vr is None:
            return (f"{where} records no measured range (written before ranges were): range unknown, steps beyond its "
                    "points are not flagged; calibrate again to record it")
        return (f"calibrated on measured points ({where}): " + ", ".join(f"{k} {lo:g}-{hi:g}" for k, (lo, hi) in
                                                                         vr.items())
                + " per step; steps beyond are flagged EXTRAPOLATED")

    def calibration_tp(self) -> dict[str, Any] | None:
        """Whether the measured points its parameters were fitted on (a calibration= file's, or the
        row's built-in calibration) ran at the tp it prices (calibration_file.tp_check: a one-line
        warning where not); None where no points were fitted (the row's assumptions)."""
        if self.calibration is not None:
            return tp_check(self.calibration.get("tp"), self.calibration.get("tp_source")
                            or f"calibration={self.calibration.get('file')}", self.tp)
        if self.hw.calibration_tp is None:
            return None
        return tp_check(self.hw.calibration_tp, f"the {self.hw.name} row's built-in calibration", self.tp)

    # ---------------- memory ----------------
    def memory(self) -> dict[str, Any]:
        """Device memory per rank: what the engine takes (memory_gb GiB x utilisation), the
        weights, and the KV tokens left (None where the hardware's memory is unknown)."""
        w = self.shape.weight_bytes(self.dtype) / self.tp
        if self.hw.memory_gb is None:
            return {"memory_bytes": None, "weight_bytes": w, "kv_capacity_tokens": None, "fits_weights": None,
                    "utilization": self.memory_utilization}
        usable = self.hw.memory_gb * GIB * self.memory_utilization
        kv_tokens = max(int((usable - w) // self.kv_bytes_per_token), 0)
        return {"memory_bytes": usable, "weight_bytes": w, "kv_capacity_tokens": kv_tokens, "fits_weights": w < usable,
                "utilization": self.memory_utilization,
                "rule": f"{self.hw.memory_gb:g} GiB x {self.memory_utilization:g} - weights per rank, divided by "
                        f"{self.kv_bytes_per_token} KV bytes per token per rank (activations not reserved)"}

    def kv_capacity_tokens(self) -> int | None:
        """KV tokens that fit beside the weights on each rank (None: memory unknown)."""
        return self.memory()["kv_capacity_tokens"]

    def fits(self, context_tokens, query_tokens=0):
        """Whether a step's KV (context + its new tokens) fits beside the weights (True when unknown)."""
        cap = self.kv_capacity_tokens()
        tokens = np.asarray(context_tokens, dtype=float) + np.asarray(query_tokens, dtype=float)
        return np.ones_like(tokens, dtype=bool) if cap is None else tokens <= cap

    def assumptions(self) -> list[str]:
        hw, s = self.hw, self.shape
        out = [f"{k}: {v}" for k, v in hw.sources.items()]
        out += [
            "operator classes priced separately and ADDED (roofline_ops.py): " + ", ".join(
                f"{k} {v:g}" for k, v in self.eff.items()) + " (" + hw.sources.get(
                "op_efficiency", "assumption: the row's whole-step efficiencies for every class, no overlap loss, "
                "no tile padding") + ")",
            f"mode={self.mode}: host overhead {self.host_s * 1e3:.3f} ms per step = {hw.step_overhead_s * 1e3:g} ms + "
            f"{s.num_hidden_layers} layers x {hw.eager_ops_per_layer} ops x "
            f"{(hw.eager_op_s if self.mode == 'eager' else hw.graph_op_s) * 1e6:.2f} us; added to device time (no overlap)",
            f"draft cost {DRAFT_COST_S * 1e6:g} us per speculating request (assumption: SAM lookup and bookkeeping)",
            "weights read once per step per rank; activations counted as a fused engine's elementwise passes",
            f"memory: {self.memory().get('rule', 'device memory unknown: KV capacity not limited')}",
            f"KV heads per rank {self.kv_heads_per_rank}" + (" (replicated: tp > KV heads)" if self.kv_replicated else ""),
            "attention: decoding requests hold the step's context (mean field over requests); prefill chunks attend "
            "causally within themselves; a decoding request's query rows (its query tokens x "
            f"{s.num_attention_heads // s.num_key_value_heads} query heads per KV head) "
            + (f"padded to tiles of {self.eff['attention_tile_rows']:g} rows" if self.eff["attention_tile_rows"] > 1
               else "not padded (no attention tile)")
            + (f"; from {self.eff['attention_split_below']:g} work blocks (requests x KV heads x 64-row query "
               f"blocks) on, the standard kernel's tiles of {self.eff['attention_unsplit_tile_rows']:g} rows (flash "
               "attention's split heuristic)" if self.eff["attention_split_below"] > 0 else ""),
        ]
        if s.is_moe:
            out.append(f"MoE: {s.num_experts} experts, top-{s.num_experts_per_tok}, uniform independent routing: a step "
                       f"of Q tokens reads E*(1-(1-k/E)^Q) distinct experts per MoE layer (real routing is skewed: "
                       f"fewer distinct experts, so this is an upper bound on expert bytes); experts split over TP "
                       f"(no expert parallelism)")
        if self.tp > 1:
            out.append(f"TP={self.tp}: {self.n_allreduce} ring all-reduces per step (2 per layer + embedding) of "
                       f"Q x {s.hidden_size} x {self.bytes_per_el} bytes, plus one float32 logits gather")
        warn = (self.calibration_tp() or {}).get("warning")
        if warn:   # rollout's result.json records the assumptions
            out.append(f"WARNING: {warn}")
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
                "op_efficiency": dict(self.eff), "memory": self.memory(),
                "time": {"device": "sum over operator classes (gemm, lm_head, moe_experts, attention, kv_write, "
                                   "elementwise, tp_collectives) of max(compute, memory) + overlap loss x min",
                         "host": f"{self.host_s * 1e3:.3f} ms per step + {DRAFT_COST_S * 1e6:g} us per speculating "
                                 f"request (mode={self.mode})"},
                "formula": "device (operator classes added, see bench/simulation/roofline_ops.py) + host overhead",
                "assumptions": self.assumptions(), "valid_range": self.valid_range(),
                "calibration": self.calibration, "calibration_tp": self.calibration_tp(),
                "range_note": self.range_note()}
