"""The per-operator roofline on hand-computed steps: a pure memory-bound decode, a compute-bound
prefill, attention added at long context, GEMM and attention tile padding; device and host time apart; memory
(KV capacity per rank) and refusal of hardware rows that would price a step at 0 or NaN."""

import math

import numpy as np
import pytest

from samspec_bench.bench.simulation.hardware import hardware, with_overrides
from samspec_bench.bench.simulation.roofline import RooflineStepModel
from samspec_bench.bench.simulation.roofline_ops import attention_blocks, attention_tile
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import load_shape

IDEAL = {"gemm_compute": 1.0, "gemm_memory": 1.0, "gemm_overlap_loss": 0.0, "gemm_tile_rows": 1.0,
         "attention_compute": 1.0, "attention_memory": 1.0, "elementwise_memory": 1.0}
S = load_shape("Qwen3-8B")   # hidden 4096, 36 layers, 32 heads, 8 KV heads, head_dim 128, inter 12288, vocab 151936


def ideal(**over):
    return with_overrides(hardware("H100"), **{"op_efficiency": dict(IDEAL), **over})


def test_a_memory_bound_decode_step_reads_every_weight_once():
    hw = ideal(peak_flops={"bfloat16": 1e18})                  # compute free: memory alone
    m = RooflineStepModel(S, hw, mode="graph")
    c = m.components(decode_tokens=1, running=1, context_tokens=0)
    per_layer = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 2 * 4096 + 2 * 128 + 3 * 4096 * 12288
    weights = 2 * (36 * per_layer + 151936 * 4096)           # bf16: layers + LM head (untied); no embedding read
    assert c["weight_bytes"] == pytest.approx(weights)
    kv_write = 2 * 36 * 8 * 128 * 2                          # one token's keys and values, every layer
    assert c["ops"]["kv_write"]["bytes"] == pytest.approx(kv_write)
    act = c["ops"]["elementwise"]["bytes"]
    assert c["t_device_s"] == pytest.approx((weights + kv_write + act) / 3.35e12, rel=1e-6)
    assert c["t_host_s"] == pytest.approx(hw.step_overhead_s + 36 * hw.eager_ops_per_layer * hw.graph_op_s)
    assert c["total_s"] == pytest.approx(c["t_device_s"] + c["t_host_s"])


def test_a_compute_bound_prefill_prices_gemm_and_causal_attention_flops():
    hw = ideal(mem_bw=1e18)                                    # bytes free: compute alone
    m = RooflineStepModel(S, hw)
    P = 8192
    c = m.components(prefill_tokens=P, running=1)
    layer_params = 4096 * 4096 * 2 + 2 * 4096 * 1024 + 2 * 4096 + 2 * 128 + 3 * 4096 * 12288
    assert c["ops"]["gemm"]["t_s"] == pytest.approx(2 * P * 36 * layer_params / 989.5e12, rel=1e-9)
    assert c["ops"]["lm_head"]["t_s"] == pytest.approx(2 * 1 * 151936 * 4096 / 989.5e12)   # one row samples
    pairs = P * P / 2
    assert c["ops"]["attention"]["t_s"] == pytest.approx(4 * 128 * 32 * 36 * pairs / 989.5e12, rel=1e-9)
    assert c["bound"] == "compute"


def test_attention_over_a_long_context_adds_its_kv_reads_to_the_weight_reads():
    m = RooflineStepModel(S, ideal())
    B, C = 32, 32768
    short = m.components(decode_tokens=B, running=B, context_tokens=0)
    long = m.components(decode_tokens=B, running=B, context_tokens=B * C)
    kv = B * C * 2 * 36 * 8 * 128 * 2
    assert long["t_device_s"] - short["t_device_s"] == pytest.approx(kv / 3.35e12, rel=1e-6)   # added, not maxed
    assert long["ops"]["gemm"]["t_s"] == pytest.approx(short["ops"]["gemm"]["t_s"])


def test_gemm_rows_are_padded_to_tiles_except_a_single_row():
    m = RooflineStepModel(S, ideal(mem_bw=1e18, op_efficiency={**IDEAL, "gemm_tile_rows": 128.0}))
    t = lambda q: m.components(decode_tokens=q, running=q)["ops"]["gemm"]["t_s"]  # noqa: E731
    assert t(2) == pytest.approx(t(128)) and t(129) == pytest.approx(2 * t(128))
    assert t(1) == pytest.approx(t(128) / 128)          # one row: a GEMV, no tile


def test_attention_query_rows_are_padded_to_the_attention_tile():
    # Qwen3-8B packs 4 query heads per KV head: a 64-row tile holds 16 query tokens a request
    hw = ideal(mem_bw=1e18, op_efficiency={**IDEAL, "attention_tile_rows": 64.0})
    m = RooflineStepModel(S, hw)
    B, C = 8, 8 * 4096
    t = lambda q: m.components(decode_tokens=B, draft_tokens=B * (q - 1), running=B,  # noqa: E731
                               context_tokens=C)["ops"]["attention"]["t_s"]
    tile_flops = 4 * 128 * 36 * 8 * 64 * C              # per KV head and layer: 64 rows x every context token
    assert t(1) == pytest.approx(tile_flops / 989.5e12, rel=1e-9)
    assert t(16) == pytest.approx(t(1)) and t(17) == pytest.approx(2 * t(1)) and t(65) == pytest.approx(5 * t(1))


def test_attention_work_blocks_are_counted_as_flash_attention_counts_them():
    # requests x KV heads x 64-row query blocks; Qwen3-8B: q tokens x 4 query heads a KV head
    assert attention_blocks(8, 1, 8, 4.0) == 64
    assert attention_blocks(16, 16, 8, 4.0) == 128 and attention_blocks(16, 17, 8, 4.0) == 256
    assert attention_blocks(8, 65, 1, 8.0) == 8 * 9          # 520 rows: nine 64-row blocks


@pytest.mark.parametrize("B, q, tile", [(8, 1, 64), (52, 1, 64), (53, 1, 128), (27, 16, 64), (27, 17, 128),
                                        (11, 49, 64), (11, 65, 128)])
def test_few_blocks_run_the_split_kernel_and_many_the_standard_one(B, q, tile):
    # at tp=2 a rank holds 4 of the 8 KV heads: B x 4 x ceil(4q / 64) blocks against 211.2
    # (0.8 x 2 x 132 SMs): 52 one-token requests make 208, 53 make 212; 27 requests of q=17 make
    # 216 (two 64-row blocks each), of q=16 108; 11 of q=65 make 220, of q=49 176
    hw = ideal(mem_bw=1e18, op_efficiency={**IDEAL, "attention_tile_rows": 64.0, "attention_split_below": 211.2,
                                           "attention_unsplit_tile_rows": 128.0})
    m = RooflineStepModel(S, hw, tp=2)
    step = dict(decode_tokens=B, draft_tokens=B * (q - 1), running=B, context_tokens=B * 4096)
    c = m.components(**step)["ops"]["attention"]
    assert float(c["blocks"]) == attention_blocks(B, q, 4, 4.0)
    rows = math.ceil(q * 4 / tile) * tile                 # query rows a request's tiles hold
    pairs = B * 4096 * rows / 4
    assert float(c["t_s"]) == pytest.approx(4 * 128 * 16 * 36 * pairs / 989.5e12, rel=1e-9)
    assert attention_tile(float(c["blocks"]), hw.op_efficiency) == tile


def test_without_a_split_threshold_one_tile_prices_every_step():
    eff = {**IDEAL, "attention_tile_rows": 64.0, "attention_split_below": 0.0, "attention_unsplit_tile_rows": 128.0}
    assert list(attention_tile(np.array([1.0, 1e6]), eff)) == [64.0, 64.0]


def test_without_an_attention_tile_attention_flops_follow_the_query_tokens():
    m = RooflineStepModel(S, ideal(mem_bw=1e18))            # IDEAL has no attention tile: 1 row, no padding
    B, C = 8, 8 * 4096
    t = m.components(decode_tokens=B, draft_tokens=B * 3, running=B, context_tokens=C)["ops"]["attention"]["t_s"]
    assert t == pytest.approx(4 * 128 * 32 * 36 * 4 * C / 989.5e12, rel=1e-9)   # 4 query tokens per request
    assert "not padded" in " ".join(m.assumptions())


def test_overlap_loss_adds_a_share_of_the_smaller_side():
    base = RooflineStepModel(S, ideal())
    lossy = RooflineStepModel(S, ideal(op_efficiency={**IDEAL, "gemm_overlap_loss": 0.5}))
    f = dict(decode_tokens=64, running=64)
    g = base.components(**f)["ops"]["gemm"]
    assert lossy.components(**f)["ops"]["gemm"]["t_s"] == pytest.approx(
        max(g["t_compute_s"], g["t_memory_s"]) + 0.5 * min(g["t_compute_s"], g["t_memory_s"]))


def test_describe_shows_device_and_host_time_and_memory():
    d = RooflineStepModel(S, hardware("H100"), spec="x").describe()
    assert set(d["time"]) == {"device", "host"} and "operator classes" in d["time"]["device"]
    assert d["op_efficiency"]["gemm_tile_rows"] == 128 and "C=1024" in d["hardware"]["sources"]["op_efficiency"]
    text = " ".join(d["assumptions"])
    assert "ADDED" in text and "GiB x 0.9" in text


def test_kv_capacity_is_memory_times_utilisation_less_the_weights_per_rank():
    m = RooflineStepModel(S, hardware("H100"), tp=2)
    mem = m.memory()
    usable = 80 * 2 ** 30 * 0.9
    assert mem["weight_bytes"] == pytest.approx(S.weight_bytes("bfloat16") / 2)
    assert mem["kv_capacity_tokens"] == math.floor((usable - mem["weight_bytes"]) / (2 * 36 * 4 * 128 * 2))
    # the example: 128 requests of 8192 tokens need 154 GB of KV on one 80 GB card
    one = RooflineStepModel(S, hardware("H100"))
    assert not bool(one.fits(128 * 8192)) and bool(one.fits(64 * 4096))
    big = RooflineStepModel(load_shape("Qwen3-235B-A22B"), hardware("H100"), tp=1)
    assert big.memory()["fits_weights"] is False and big.kv_capacity_tokens() == 0
    assert RooflineStepModel(load_shape("Qwen3-0.6B"), with_overrides(hardware("H100"), memory_gb=None)).memory()[
        "kv_capacity_tokens"] is None


@pytest.mark.parametrize("over, needle", [
    ({"mem_bw": 0.0}, "mem_bw=0.0"),
    ({"peak_flops": {"bfloat16": float("nan")}}, "peak_flops=nan"),
    ({"op_efficiency": {"gemm_memory": -0.5}}, "gemm_memory=-0.5"),
    ({"op_efficiency": {"attention_memory": 3.0}}, "attention_memory=3.0"),
    ({"step_overhead_s": -1e-3}, "step_overhead_s=-0.001"),
    ({"op_efficiency": {"attention_tile_rows": -64.0}}, "attention_tile_rows=-64.0"),
])
def test_a_row_that_would_price_a_step_at_zero_or_nan_is_refused(over, needle):
    with pytest.raises(UserError, match="would price steps at zero") as e:
        RooflineStepModel(S, with_overrides(hardware("H100"), **over))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_every_step_of_a_grid_prices_positive_and_finite():
    m = RooflineStepModel(load_shape("Qwen3-30B-A3B"), hardware("910C"), tp=4)
    R = np.array([1, 1, 8, 64, 256])
    t = m.predict(decode_tokens=R, draft_tokens=3 * R, running=R, context_tokens=R * 40000, prefill_tokens=[0, 9, 0, 0, 0])
    assert np.all(np.isfinite(t)) and np.all(t > 0)
