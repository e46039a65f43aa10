"""Accelerators for the analytic (roofline) step-time model: peak dense FLOP/s, memory
bandwidth, the interconnect a tensor-parallel all-reduce runs over, and the engine's fixed
costs per step. Every figure carries where it comes from: a public datasheet (named), a
figure reported publicly but not in a datasheet (named and marked "reported"), an
assumption (marked, with the reasoning), or a measurement on this machine (`cpu`).

Units: FLOP/s, bytes/s, seconds. Peaks are dense (no 2:4 sparsity): NVIDIA's datasheets
print bf16 tensor throughput "with sparsity"; the dense figure is half of it.

`cpu` is not a table row: `hardware("cpu", dtype, threads)` MEASURES the machine it runs on
(a torch GEMM for FLOP/s, a weight-streaming GEMV for bytes/s, a tiny-op loop for the cost of
one eager operator), about a second, cached under samspec_bench.paths.cache_dir()/hardware/
keyed by host, CPU model, torch version, dtype and threads. torch is imported only there.
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from samspec_bench.errors import UserError
from samspec_bench.paths import cache_dir

PROBE_FORMAT = 1


@dataclass(frozen=True)
class Hardware:
    name: str
    peak_flops: dict[str, float]          # dtype -> dense FLOP/s
    mem_bw: float                         # bytes/s (HBM / DRAM)
    link_bw: float                        # bytes/s one way per device, for ring all-reduce
    link_latency_s: float                 # per all-reduce (small messages)
    step_overhead_s: float                # per engine step: scheduling, input preparation, sampling
    eager_op_s: float                     # host cost of launching one operator in eager mode
    eager_ops_per_layer: int              # operators per decoder layer the engine launches in eager mode
    graph_op_s: float                     # per operator inside a captured graph (mode=graph)
    default_mode: str                     # "eager" | "graph"
    compute_efficiency: float             # fraction of peak FLOP/s large GEMMs reach
    memory_efficiency: float              # fraction of peak bandwidth weight streaming reaches
    sources: dict[str, str] = field(default_factory=dict)   # field -> datasheet / "assumption: ..." / "measured: ..."
    memory_gb: float | None = None
    op_efficiency: dict[str, float] = field(default_factory=dict)   # per operator class (OP_KEYS); missing: defaults
    # the tp of the measured points op_efficiency was fitted on (None: fitted on none, or their tp unknown):
    # a row priced at another tp carries one configuration's parameters to another (RooflineStepModel says so)
    calibration_tp: int | None = None

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "op_efficiency": op_efficiencies(self)}


# Per operator class (bench/simulation/roofline_ops.py): fractions of peak FLOP/s or bandwidth,
# the GEMMs' overlap loss and tile height, attention's tile height (query rows), and the fixed device time of one weight-GEMM kernel
# (gemm_kernel_us). Attention's two kernels (roofline_ops.attention_tile): a step of fewer
# than attention_split_below work blocks runs the split-KV kernel, tiles of attention_tile_rows
# query rows; a step of more runs the standard kernel, tiles of attention_unsplit_tile_rows
# (attention_split_below 0: one kernel, attention_tile_rows for every step).
# A row without them takes `default_op_efficiency`.
OP_KEYS = ("gemm_compute", "gemm_memory", "gemm_overlap_loss", "gemm_tile_rows", "gemm_kernel_us",
           "attention_compute", "attention_memory", "attention_tile_rows", "attention_split_below",
           "attention_unsplit_tile_rows", "elementwise_memory")
NOT_EFFICIENCIES = ("gemm_overlap_loss", "gemm_tile_rows", "gemm_kernel_us", "attention_tile_rows",
                    "attention_split_below", "attention_unsplit_tile_rows")   # OP_KEYS that are not fractions


def default_op_efficiency(hw: "Hardware") -> dict[str, float]:
    """A row's per-class efficiencies when it has no calibration: its whole-step compute and
    memory efficiencies for every class, an ideal roofline (no overlap loss), no tile padding,
    no fixed time per kernel."""
    return {"gemm_compute": hw.compute_efficiency, "gemm_memory": hw.memory_efficiency, "gemm_overlap_loss": 0.0,
            "gemm_tile_rows": 1.0, "gemm_kernel_us": 0.0, "attention_compute": hw.compute_efficiency,
            "attention_memory": hw.memory_efficiency, "attention_tile_rows": 1.0, "attention_split_below": 0.0,
            "attention_unsplit_tile_rows": 1.0, "elementwise_memory": hw.memory_efficiency}


def op_efficiencies(hw: "Hardware") -> dict[str, float]:
    return {**default_op_efficiency(hw), **hw.op_efficiency}




T, G = 1e12, 1e9

# Assumptions shared by the GPU rows (not fitted to anything; printed with every prediction)
_NV_ASSUME = {
    "link_latency_s": "assumption: 10 us per all-reduce of a small message (NCCL / vLLM custom all-reduce over NVLink)",
    "step_overhead_s": "assumption: 1.5 ms per step on the host (vLLM / SGLang scheduler, input preparation, sampler)",
    "eager_op_s": "assumption: 6 us host time per eager PyTorch operator launch",
    "eager_ops_per_layer": "assumption: 15 kernels per decoder layer (fused norm, qkv, rope, attention, o, MLP, all-reduce)",
    "graph_op_s": "assumption: 0.5 us per kernel inside a CUDA graph (launch gaps)",
    "compute_efficiency": "assumption: 0.7 of dense peak for bf16 GEMMs",
    "memory_efficiency": "assumption: 0.8 of peak HBM bandwidth when streaming weights and KV",
}
_ASCEND_ASSUME = {
    "link_latency_s": "assumption: 20 us per HCCL all-reduce of a small message",
    "step_overhead_s": "assumption: 2 ms per step on the host (vLLM-Ascend scheduler, input preparation, sampler)",
    "eager_op_s": "assumption: 15 us host time per eager torch_npu operator launch",
    "eager_ops_per_layer": "assumption: 15 operators per decoder layer (fused kernels of vLLM-Ascend)",
    "graph_op_s": "assumption: 1 us per operator inside a captured graph (ACL graph / torchair)",
    "compute_efficiency": "assumption: 0.6 of dense peak for bf16 GEMMs",
    "memory_efficiency": "assumption: 0.7 of peak HBM bandwidth when streaming weights and KV",
}
_NV_COMMON = dict(link_latency_s=10e-6, step_overhead_s=1.5e-3, eager_op_s=6e-6, eager_ops_per_layer=15,
                  graph_op_s=0.5e-6, default_mode="graph", compute_efficiency=0.7, memory_efficiency=0.8)
_ASCEND_COMMON = dict(link_latency_s=20e-6, step_overhead_s=2e-3, eager_op_s=15e-6, eager_ops_per_layer=15,
                      graph_op_s=1e-6, default_mode="eager", compute_efficiency=0.6, memory_efficiency=0.7)

# Calibrated by bench/simulation/roofline_calibration.calibrate_sets on two model sizes measured
# with the same program (tools/step_physics.py: bf16, CUDA graphs, device time): every row of the
# shared H100 measurement of the Qwen3-8B shape (../shared/data/hardware/
# h100_qwen3-8b_step_physics.jsonl, C=1024 and 32768, 30 points) and the C=1024 rows of this
# project's measurement of the Qwen3-32B shape on an H100 (docs/measurements/h100_step_physics/
# qwen3-32b.jsonl, 12 points); held out and checked (tests/bench/simulation/test_roofline_h100.py):
# the C=8192 rows of both shapes, the off-grid 8B rows, the wide verifies and the 32B at C=32768.
# Two sizes tell the fixed time per weight-GEMM kernel from the weight stream's efficiency. Not
# fitted, read off the kernels: 128-row GEMM tiles (the CTA tile of Hopper's bf16 tensor-core
# GEMMs) and attention's two kernels as flash attention 2 chooses them (num_splits_heuristic,
# set_params_splitkv): fewer than 0.8 x 2 x 132 SMs = 211.2 work blocks (request x KV head x
# 64-row query block) run the split-KV kernel (kBlockM 64), more run the standard forward
# kernel (kBlockM 128 for head_dim 128). Without the switch one attention efficiency had to
# price both kernels and missed the 8B's B=8 steps at C=32768 by 14 %
# (docs/measurements/h100_step_physics/README.md).
H100_CALIBRATED = {"gemm_compute": 0.966, "gemm_memory": 0.881, "gemm_overlap_loss": 0.224, "gemm_tile_rows": 128.0,
                   "gemm_kernel_us": 14.1, "attention_compute": 0.316, "attention_memory": 0.901,
                   "attention_tile_rows": 64.0, "attention_split_below": 211.2, "attention_unsplit_tile_rows": 128.0,
                   "elementwise_memory": 0.174}
H100_CAL_SOURCE = ("calibrated (per operator class) on the shared H100 measurement of the Qwen3-8B shape "
                   "(data/hardware/h100_qwen3-8b_step_physics.jsonl, tools/step_physics.py) and the C=1024 rows of "
                   "one of the Qwen3-32B shape (docs/measurements/h100_step_physics/); C=8192 rows of both held "
                   "out; tile heights and attention's kernel switch read off the kernels, not fitted: 128 rows for "
                   "GEMMs (Hopper bf16 GEMM CTA tile); attention 64 query rows below 211.2 work blocks (flash "
                   "attention 2's split-KV kernel) and 128 above (its standard kernel), 211.2 = 0.8 x 2 x 132 SMs")
H100_CAL_TP = 1   # tools/step_physics.py times one GPU (its points' meta records no tp)
# The H200 has the H100's SMs (132, datasheets; max SM clock 1,980 MHz by nvidia-smi on the
# measured H200, the H100 SXM's boost clock) and more bandwidth; its row takes the H100's calibration. Checked, not fitted, on 105 steps measured on
# an H200 with the same program (docs/measurements/h200_step_physics/,
# tests/bench/simulation/test_roofline_h200.py).

# The A100 row is not calibrated (its efficiencies are _NV_COMMON's assumptions), but its
# kernels are read off like the H100's: 128-row GEMM tiles, and flash attention 2's switch at
# 0.8 x 2 x 108 SMs = 172.8 work blocks between its split-KV kernel (64-row tiles) and its
# standard kernel (on sm80, not an "sm8x" part: kBlockM 128 for head_dim 128), so that a fit on
# A100 points (`step-model --calibrate`) keeps them.
A100_KERNELS = {"gemm_tile_rows": 128.0, "attention_tile_rows": 64.0, "attention_split_below": 172.8,
                "attention_unsplit_tile_rows": 128.0}
A100_KERNELS_SOURCE = ("assumption: the whole-step efficiencies for every operator class (not calibrated); tile heights "
                       "and attention's kernel switch read off the kernels: 128-row GEMM tiles, attention 64 query rows "
                       "below 172.8 work blocks (flash attention 2's split-KV kernel) and 128 above (its standard "
                       "kernel on sm80), 172.8 = 0.8 x 2 x 108 SMs (A100 datasheet)")

TABLE: dict[str, Hardware] = {
    "H100": Hardware(
        "H100 SXM 80GB", {"bfloat16": 989.5 * T, "float16": 989.5 * T, "float32": 67 * T}, 3.35e12, 450 * G,
        memory_gb=80, op_efficiency=H100_CALIBRATED, calibration_tp=H100_CAL_TP, **_NV_COMMON, sources={
            "op_efficiency": H100_CAL_SOURCE,
            "peak_flops": "NVIDIA H100 Tensor Core GPU datasheet (SXM): BF16 1,979 TFLOPS with sparsity -> 989.5 "
                          "dense; FP32 67 TFLOPS",
            "mem_bw": "NVIDIA H100 datasheet (SXM): 3.35 TB/s HBM3",
            "link_bw": "NVIDIA H100 datasheet: NVLink 900 GB/s (both directions) -> 450 GB/s one way", **_NV_ASSUME}),
    "H200": Hardware(
        "H200 SXM 141GB", {"bfloat16": 989.5 * T, "float16": 989.5 * T, "float32": 67 * T}, 4.8e12, 450 * G,
        memory_gb=141, op_efficiency=H100_CALIBRATED, calibration_tp=H100_CAL_TP, **_NV_COMMON, sources={
            "op_efficiency": "assumption: the H100's calibration (the same 132 Hopper SMs and kernels); checked on 105 "
                             "H200 steps measured with the same program, none fitted "
                             "(docs/measurements/h200_step_physics/); " + H100_CAL_SOURCE,
            "peak_flops": "NVIDIA H200 Tensor Core GPU datasheet (SXM): BF16 1,979 TFLOPS with sparsity -> 989.5 "
                          "dense; FP32 67 TFLOPS",
            "mem_bw": "NVIDIA H200 datasheet: 4.8 TB/s HBM3e",
            "link_bw": "NVIDIA H200 datasheet: NVLink 900 GB/s (both directions) -> 450 GB/s one way", **_NV_ASSUME}),
    "A100": Hardware(
        "A100 SXM 80GB", {"bfloat16": 312 * T, "float16": 312 * T, "float32": 19.5 * T}, 2.039e12, 300 * G,
        memory_gb=80, op_efficiency=A100_KERNELS, **_NV_COMMON, sources={
            "op_efficiency": A100_KERNELS_SOURCE,
            "peak_flops": "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM): BF16 312 TFLOPS dense (624 with "
                          "sparsity); FP32 19.5 TFLOPS",
            "mem_bw": "NVIDIA A100 datasheet (80GB SXM): 2,039 GB/s HBM2e",
            "link_bw": "NVIDIA A100 datasheet: NVLink 600 GB/s (both directions) -> 300 GB/s one way", **_NV_ASSUME}),
    "H20": Hardware(
        "H20 96GB", {"bfloat16": 148 * T, "float16": 148 * T, "float32": 44 * T}, 4.0e12, 450 * G,
        memory_gb=96, **_NV_COMMON, sources={
            "peak_flops": "reported (NVIDIA H20 product brief as quoted by the trade press; no public datasheet): "
                          "BF16 148 TFLOPS dense, FP32 44 TFLOPS",
            "mem_bw": "reported (same source): 4.0 TB/s HBM3, 96 GB",
            "link_bw": "reported (same source): NVLink 900 GB/s (both directions) -> 450 GB/s one way", **_NV_ASSUME}),
    "910B": Hardware(
        "Ascend 910B", {"bfloat16": 313 * T, "float16": 313 * T, "float32": 78 * T}, 1.6e12, 196 * G,
        memory_gb=64, **_ASCEND_COMMON, sources={
            "peak_flops": "reported: Huawei Atlas 800T A2 training server (8 x Ascend 910B) 2.5 PFLOPS FP16 -> "
                          "313 TFLOPS per NPU; FP32 a quarter of it (assumption)",
            "mem_bw": "reported: 64 GB HBM2e at 1.6 TB/s per Ascend 910B (trade press; no public datasheet)",
            "link_bw": "reported: HCCS 392 GB/s per NPU in the Atlas 800T A2 (7 links x 56 GB/s, both directions) "
                       "-> 196 GB/s one way", **_ASCEND_ASSUME}),
    "910C": Hardware(
        "Ascend 910C (one die; the seed counts TP in dies)", {"bfloat16": 400 * T, "float16": 400 * T,
                                                                 "float32": 100 * T},
        1.6e12, 196 * G, memory_gb=64, **_ASCEND_COMMON, sources={
            "peak_flops": "Huawei Ascend roadmap, HUAWEI CONNECT 2025 keynote: 910C 800 TFLOPS FP16 per package "
                          "of two dies -> 400 per die (SemiAnalysis, Apr 2025: CloudMatrix 384 = 300 PFLOPS dense "
                          "BF16 over 384 packages, ~390 per die); FP32 a quarter of it (assumption)",
            "mem_bw": "same keynote: 128 GB at 3.2 TB/s per package -> 1.6 TB/s and 64 GB per die",
            "link_bw": "same keynote: 784 GB/s interconnect per package -> 392 GB/s per die both directions -> "
                       "196 GB/s one way (matches the CloudMatrix 384 figure of 196 GB/s UB per NPU die)",
            **_ASCEND_ASSUME}),
}

ALIASES = {"h100": "H100", "h100-sxm": "H100", "h100sxm": "H100", "h200": "H200", "a100": "A100", "a100-80gb": "A100",
           "h20": "H20", "910b": "910B", "ascend910b": "910B", "ascend-910b": "910B", "910c": "910C",
           "ascend910c": "910C", "ascend-910c": "910C", "cpu": "cpu"}


def _name_key(name: str) -> str:
    return str(name).strip().lower().replace("_", "-").replace(" ", "")


# the rows' own names as printed ("H100 SXM 80GB") and their SXM forms name them too
ALIASES.update({_name_key(hw.name): key for key, hw in TABLE.items()})
ALIASES.update({"h200sxm": "H200", "h200-sxm": "H200", "a100sxm": "A100", "a100-sxm": "A100"})


def known_names() -> list[str]:
    return list(TABLE) + ["cpu"]


def hardware(name: str, dtype: str = "bfloat16", threads: int = 1, refresh: bool = False) -> Hardware:
    """The table row for `name` (case-insensitive; Ascend also as ascend910b / ascend910c), or
    for `cpu` the measured entry of this machine. Unknown -> UserError listing the names."""
    key = ALIASES.get(_name_key(name))
    if key is None:
        raise UserError(f"hardware {name!r} is not known: use one of {', '.join(known_names())}")
    if key == "cpu":
        return cpu_hardware(dtype, threads, refresh=refresh)
    hw = TABLE[key]
    if dtype not in hw.peak_flops:
        raise UserError(f"dtype {dtype!r} on {hw.name}: use one of {', '.join(hw.peak_flops)}")
    return hw


# ---------------- the measured CPU entry ----------------

CPU_ASSUME = {
    "link_bw": "not applicable: one CPU process (tp=1 only; 0 here)",
    "link_latency_s": "not applicable",
    "step_overhead_s": "assumption: 1 ms per step of Python scheduling, input preparation and sampling in the "
                       "reference engine",
    "eager_ops_per_layer": "assumption: 50 PyTorch operators per decoder layer in the reference engine's forward "
                           "(counted in bench/engines/paged_decoder.py: norms, projections, rope, paged attention, "
                           "MLP, residuals)",
    "graph_op_s": "not applicable: the reference engine has no graph mode (mode=graph prices ops as eager)",
    "compute_efficiency": "1.0: the peak is the measured GEMM rate, not a datasheet peak",
    "memory_efficiency": "1.0: the bandwidth is the measured weight-streaming (GEMV) rate",
}


def _fingerprint(dtype: str, threads: int) -> dict[str, Any]:
    import torch  # imports torch: the probe runs on it
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"format": PROBE_FORMAT, "host": platform.node(), "cpu": cpu, "torch": torch.__version__,
            "dtype": dtype, "threads": int(threads)}


def _best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def probe_cpu(dtype: str = "float32", threads: int = 1) -> dict[str, Any]:
    """Measure this CPU with torch at `threads` threads: GEMM FLOP/s (1024^3), weight-streaming
    bytes/s (a 1 x 4096 by 4096 x 8192 GEMV reading 128 MB in float32), plain read bytes/s
    (sum of the same matrix), and the host time of one tiny eager operator. Best of a few runs."""
    import torch  # imports torch: the probe runs on it
    tdt = getattr(torch, dtype)
    old = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        with torch.inference_mode():
            n = 1024
            a, b = torch.randn(n, n, dtype=tdt), torch.randn(n, n, dtype=tdt)
            torch.mm(a, b)
            gemm_s = _best_time(lambda: torch.mm(a, b), 3)
            w = torch.randn(8192, 4096, dtype=tdt)
            x = torch.randn(1, 4096, dtype=tdt)
            torch.nn.functional.linear(x, w)
            gemv_s = _best_time(lambda: torch.nn.functional.linear(x, w), 5)
            sum_s = _best_time(lambda: w.sum(), 5)
            s = torch.zeros(16)
            k = 2000
            op_s = _best_time(lambda: [s.add_(1.0) for _ in range(k)], 3) / k
    finally:
        torch.set_num_threads(old)
    nbytes = w.numel() * w.element_size()
    return {"gemm_flops": 2 * n ** 3 / gemm_s, "gemv_bytes_per_s": nbytes / gemv_s, "sum_bytes_per_s": nbytes / sum_s,
            "eager_op_s": op_s, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "method": "torch.mm 1024^3; linear(1x4096, 8192x4096) weight bytes / time; w.sum(); 2000 x add_ on 16 "
                      "floats; best of 3-5 runs"}


def cpu_hardware(dtype: str = "float32", threads: int = 1, refresh: bool = False) -> Hardware:
    """The `cpu` entry: this machine measured by probe_cpu (cached per host, CPU, torch, dtype, threads)."""
    if dtype not in ("float32", "bfloat16", "float16"):
        raise UserError(f"dtype {dtype!r} on cpu: use float32, bfloat16 or float16")
    if int(threads) < 1:
        raise UserError(f"threads={threads} for the cpu entry: give an integer >= 1")
    key = _fingerprint(dtype, threads)
    path = cache_dir() / "hardware" / "cpu-probe.json"
    cache: list = []
    try:
        cache = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = []
    hit = None if refresh else next((c for c in cache if isinstance(c, dict) and c.get("key") == key), None)
    if hit is None:
        hit = {"key": key, "probe": probe_cpu(dtype, threads)}
        cache = [c for c in cache if isinstance(c, dict) and c.get("key") != key] + [hit]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(cache, indent=1) + "\n", encoding="utf-8")
            tmp.replace(path)
        except OSError:
            pass   # an unwritable cache only costs a re-measurement next time
    p = hit["probe"]
    where = f"measured on this machine ({key['cpu']}, host {key['host']}, torch {key['torch']}, {threads} thread(s), " \
            f"{p['measured_at']}; cache {path})"
    return Hardware(
        name=f"cpu ({key['cpu']}, {threads} thread(s))", peak_flops={dtype: float(p["gemm_flops"])},
        mem_bw=float(p["gemv_bytes_per_s"]), link_bw=0.0, link_latency_s=0.0, step_overhead_s=1e-3,
        eager_op_s=float(p["eager_op_s"]), eager_ops_per_layer=50, graph_op_s=float(p["eager_op_s"]),
        default_mode="eager", compute_efficiency=1.0, memory_efficiency=1.0,
        sources={"peak_flops": f"{where}: {dtype} GEMM 1024^3",
                 "mem_bw": f"{where}: weight-streaming GEMV (plain read by sum(): {p['sum_bytes_per_s'] / G:.1f} GB/s)",
                 "eager_op_s": f"{where}: one tiny eager operator", **CPU_ASSUME})


def with_overrides(hw: Hardware, **kw) -> Hardware:
    """A copy of `hw` with some fields replaced (their source becomes 'override')."""
    return replace(hw, **kw, sources={**hw.sources, **{k: "override" for k in kw}})


def one_attention_kernel(hw: Hardware, rows: float, given: str) -> Hardware:
    """A copy of `hw` whose attention runs one kernel of `rows`-row query tiles for every step
    (no switch between split-KV and standard kernels); `given` says who set it, in the source."""
    return replace(hw, op_efficiency={**hw.op_efficiency, "attention_tile_rows": float(rows),
                                      "attention_split_below": 0.0},
                   sources={**hw.sources, "op_efficiency": "; ".join(
                       x for x in (hw.sources.get("op_efficiency"), given) if x)})


def check_hardware(hw: Hardware, dtype: str) -> None:
    """Refuse a row that could price a step at zero, below zero or not at all: peak, bandwidth
    and every efficiency finite and > 0 (efficiencies at most 1.5: a calibration may beat a
    datasheet a little, not by half), host costs, overlap loss, tile height and kernel time
    finite and >= 0."""
    eff = op_efficiencies(hw)
    positive = {"peak_flops": hw.peak_flops.get(dtype, float("nan")), "mem_bw": hw.mem_bw,
                **{k: v for k, v in eff.items() if k not in NOT_EFFICIENCIES}}
    bad = [f"{k}={v!r}" for k, v in positive.items() if not (math.isfinite(v) and v > 0)]
    bad += [f"{k}={eff[k]!r}" for k in ("gemm_compute", "gemm_memory", "attention_compute", "attention_memory",
                                        "elementwise_memory") if math.isfinite(eff[k]) and eff[k] > 1.5]
    nonneg = {"step_overhead_s": hw.step_overhead_s, "eager_op_s": hw.eager_op_s, "graph_op_s": hw.graph_op_s,
              "link_latency_s": hw.link_latency_s, "link_bw": hw.link_bw,
              "gemm_overlap_loss": eff["gemm_overlap_loss"], "gemm_tile_rows": eff["gemm_tile_rows"],
              "gemm_kernel_us": eff["gemm_kernel_us"], "attention_tile_rows": eff["attention_tile_rows"],
              "attention_split_below": eff["attention_split_below"], "attention_unsplit_tile_rows": eff["attention_unsplit_tile_rows"]}
    bad += [f"{k}={v!r}" for k, v in nonneg.items() if not (math.isfinite(v) and v >= 0)]
    if bad:
        raise UserError(f"hardware {hw.name}: {', '.join(bad)} would price steps at zero, below zero or NaN; "
                        "give finite positive rates and efficiencies in (0, 1.5]")
