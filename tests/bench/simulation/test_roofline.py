"""The analytic step-time model: properties of its formula that could fail (context, verify vs
decode, MoE expert reads, tensor parallelism, host overhead), its consistency with the
simulator, the hardware table and the measured cpu entry."""

import json

import numpy as np
import pytest

from samspec_bench.bench.policies import make_policy
from samspec_bench.bench.simulation import hardware as hwmod
from samspec_bench.bench.simulation.hardware import TABLE, hardware, with_overrides
from samspec_bench.bench.simulation.roofline import RooflineStepModel
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import load_shape


def model(name="Qwen3-8B", hw="H100", tp=1, **kw):
    return RooflineStepModel(load_shape(name), hardware(hw), tp=tp, **kw)


def decode(R, ctx_per_req=2000):
    return dict(decode_tokens=R, running=R, context_tokens=R * ctx_per_req)


def verify(R, k, ctx_per_req=2000):
    return dict(decode_tokens=R, draft_tokens=k * R, running=R, context_tokens=R * ctx_per_req,
                spec_requests=R, speculative=1)


def test_more_context_costs_more_time():
    m = model()
    ctx = np.array([0, 1_000, 10_000, 100_000, 1_000_000])
    t = m.predict(decode_tokens=np.full(5, 16), running=np.full(5, 16), context_tokens=ctx)
    assert np.all(np.diff(t) > 0)
    c = m.components(decode_tokens=16, running=16, context_tokens=ctx)
    assert np.all(np.diff(c["kv_read_bytes"]) > 0) and np.all(np.diff(c["flops"]) > 0)


@pytest.mark.parametrize("R", [1, 4, 16])
def test_verify_on_h100_costs_a_little_more_than_decode_far_less_than_k_plus_1_steps(R):
    m, k = model(), 3
    c = m.components(**decode(R))
    assert c["bound"] == "memory"            # small-batch decode of an 8B model on an H100
    td, tv = m.predict(**decode(R)), m.predict(**verify(R, k))
    assert td < tv < 1.2 * td
    assert tv < 0.5 * (k + 1) * td


def test_verify_on_compute_bound_hardware_approaches_k_plus_1_decode_steps():
    slow = with_overrides(hardware("H100"), peak_flops={"bfloat16": 1e12}, step_overhead_s=0.0, eager_op_s=0.0,
                          graph_op_s=0.0)
    slow = with_overrides(slow, op_efficiency={"gemm_tile_rows": 1.0})
    m, k = RooflineStepModel(load_shape("Qwen3-8B"), slow), 3
    assert m.components(**decode(64))["bound"] == "compute"
    gemm = lambda f: m.components(**f)["ops"]["gemm"]["t_s"]  # noqa: E731
    assert 0.98 * (k + 1) < gemm(verify(64, k)) / gemm(decode(64)) <= (k + 1) * 1.01
    ratio = m.predict(**verify(64, k)) / m.predict(**decode(64))   # at 1 TFLOP/s attention is compute-bound too
    assert 0.9 * (k + 1) < ratio <= (k + 1) * 1.01


def test_decode_and_verify_come_from_one_formula():
    # a verify step of R requests with k drafts prices like R*(k+1) decode tokens, apart from
    # its attention (each query token attends over its request's context) and the draft cost
    m = model()
    base = m.components(**verify(8, 3, ctx_per_req=0))
    flat = m.components(decode_tokens=32, running=32, context_tokens=0)
    assert base["flops"] == pytest.approx(flat["flops"])
    assert base["bytes"] == pytest.approx(flat["bytes"])


def test_moe_reads_fewer_expert_bytes_at_batch_1_than_at_batch_256():
    m = model("Qwen3-235B-A22B", "H100", tp=8)
    one, many = m.components(**decode(1)), m.components(**decode(256))
    assert one["experts_touched_per_layer"] == pytest.approx(8.0)
    assert 120 < many["experts_touched_per_layer"] <= 128
    assert one["weight_bytes"] < 0.25 * many["weight_bytes"]
    dense = model("Qwen3-32B", "H100", tp=8)
    assert dense.components(**decode(1))["weight_bytes"] == pytest.approx(dense.components(**decode(256))["weight_bytes"])
    # a verify step of one request touches more experts than its decode step: MoE verify is not free
    assert m.components(**verify(1, 3))["experts_touched_per_layer"] > one["experts_touched_per_layer"]


def test_tp_halves_weight_bytes_per_rank_and_splits_then_replicates_kv_heads():
    t1, t2, t16 = model(tp=1), model(tp=2), model(tp=16)        # Qwen3-8B: 32 heads, 8 KV heads
    w = lambda m: m.components(**decode(4, 0))["weight_bytes"]  # noqa: E731
    assert w(t2) == pytest.approx(w(t1) / 2)
    assert t2.kv_bytes_per_token * 2 == t1.kv_bytes_per_token
    assert t16.kv_heads_per_rank == 1 and t16.kv_replicated
    assert t16.kv_bytes_per_token * 8 == t1.kv_bytes_per_token     # not /16: KV heads are replicated
    assert t1.components(**decode(4))["t_comm_s"] == 0
    c2, c2big = t2.components(**decode(4)), t2.components(**decode(256))
    assert 0 < c2["t_comm_s"] < c2big["t_comm_s"]


def test_eager_mode_costs_more_host_time_than_graph_mode():
    e, g = model(mode="eager"), model(mode="graph")
    assert e.predict(**decode(1)) > g.predict(**decode(1))
    assert e.components(**decode(1))["t_host_s"] - g.components(**decode(1))["t_host_s"] == pytest.approx(
        36 * TABLE["H100"].eager_ops_per_layer * (TABLE["H100"].eager_op_s - TABLE["H100"].graph_op_s))


def test_prefill_costs_grow_faster_than_linearly_with_chunk_length():
    m = model()
    a = m.components(prefill_tokens=2048, running=1)["flops"]
    b = m.components(prefill_tokens=8192, running=1)["flops"]
    assert b > 4 * a        # the causal attention term is quadratic in the chunk


def test_arrays_and_scalars_agree_and_unknown_features_are_refused():
    m = model("Qwen3-30B-A3B", "H20")
    R = np.array([1, 8, 64])
    arr = m.predict(decode_tokens=R, running=R, context_tokens=R * 100)
    one = [m.predict(decode_tokens=int(r), running=int(r), context_tokens=int(r) * 100) for r in R]
    assert np.allclose(arr, one)
    with pytest.raises(TypeError, match="unknown step features"):
        m.predict(batch=3)


def test_simulation_priced_by_roofline_matches_repricing_its_table():
    # the simulator's fast-forward path prices arrays of steps; its per-step path scalars
    m = model()
    reqs = [SimRequest(prompt_len=50 + 7 * i, response_len=40 + 13 * i) for i in range(6)]
    r = simulate(reqs, k=0, policy=make_policy("off"), step_model=m, max_num_seqs=4)
    assert r.makespan_s == pytest.approx(float(m.predict_steps(r.steps).sum()))
    assert np.all(r.steps["time_s"] > 0)


def test_describe_prints_every_assumption_and_is_json():
    d = model("Qwen3-235B-A22B", "910C", tp=4).describe()
    assert d["kind"] == "roofline" and "modelled" in d["units"] and d["valid_range"] is None
    text = " ".join(d["assumptions"])
    for needle in ("uniform independent routing", "efficiency", "mode=eager", "all-reduce", "HUAWEI CONNECT",
                   "draft cost"):
        assert needle in text, needle
    json.dumps(d)
    assert model().valid_range() is None


def test_every_table_row_names_a_source_for_every_figure():
    for name, hw in TABLE.items():
        for f in ("peak_flops", "mem_bw", "link_bw", "link_latency_s", "step_overhead_s", "eager_op_s",
                  "compute_efficiency", "memory_efficiency"):
            assert hw.sources.get(f), (name, f)
        assert hw.peak_flops["bfloat16"] > hw.peak_flops["float32"] > 0 and hw.mem_bw > 0


def test_bad_model_inputs_are_one_line_user_errors():
    with pytest.raises(UserError, match="tp=0"):
        model(tp=0)
    with pytest.raises(UserError, match="does not divide the 32 attention heads"):
        model(tp=3)
    with pytest.raises(UserError, match="KV heads"):
        model("Qwen2.5-7B", tp=7)         # 28 heads, 4 KV heads: 7 splits neither way
    with pytest.raises(UserError, match="mode"):
        model(mode="turbo")
    with pytest.raises(UserError, match="dtype"):
        model(dtype="int4")
    with pytest.raises(UserError, match="H100, H200, A100, H20, 910B, 910C, cpu") as e:
        hardware("TPUv5")
    assert "\n" not in str(e.value)
    assert hardware("ascend910c") is TABLE["910C"] and hardware("h100") is TABLE["H100"]


# ---------------- the measured cpu entry ----------------

FAKE = {"gemm_flops": 5e10, "gemv_bytes_per_s": 2e10, "sum_bytes_per_s": 1e10, "eager_op_s": 5e-6,
        "measured_at": "now", "method": "fake"}


def test_cpu_entry_is_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SAMSPEC_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(hwmod, "probe_cpu", lambda dtype, threads: calls.append((dtype, threads)) or dict(FAKE))
    a = hardware("cpu", "float32", 1)
    b = hardware("CPU", "float32", 1)
    assert calls == [("float32", 1)] and a.mem_bw == b.mem_bw == 2e10
    assert "measured on this machine" in a.sources["peak_flops"] and "measured" in a.sources["mem_bw"]
    hardware("cpu", "float32", 2)
    assert calls[-1] == ("float32", 2)
    hardware("cpu", "float32", 1, refresh=True)
    assert len(calls) == 3
    with pytest.raises(UserError, match="tp=2"):
        RooflineStepModel(load_shape("Qwen3-0.6B"), a, tp=2, dtype="float32")
    with pytest.raises(UserError, match="threads"):
        hardware("cpu", "float32", 0)


def test_cpu_probe_turns_its_timings_into_rates_by_the_operations_sizes(monkeypatch):
    import torch  # the probe's own library: only to read the thread count it sets
    timings = iter([0.5, 0.25, 0.125, 0.2])          # gemm, gemv, sum, 2000 eager ops (seconds)
    seen = []

    def fake_best_time(fn, repeats):
        fn()                                          # the timed operation runs
        seen.append(torch.get_num_threads())
        return next(timings)

    monkeypatch.setattr(hwmod, "_best_time", fake_best_time)
    before = torch.get_num_threads()
    want = 2 if before != 2 else 1
    p = hwmod.probe_cpu("float32", want)
    weight_bytes = 8192 * 4096 * 4                    # the 8192 x 4096 float32 matrix the GEMV streams
    assert p["gemm_flops"] == pytest.approx(2 * 1024 ** 3 / 0.5)
    assert p["gemv_bytes_per_s"] == pytest.approx(weight_bytes / 0.25)
    assert p["sum_bytes_per_s"] == pytest.approx(weight_bytes / 0.125)
    assert p["eager_op_s"] == pytest.approx(0.2 / 2000)
    assert seen == [want] * 4 and torch.get_num_threads() == before   # measured at the asked threads, restored


def test_a_calibrations_range_flags_simulated_steps_beyond_it_as_a_fitted_profiles_does():
    from samspec_bench.bench.simulation.fitted_step_model import extrapolation
    cal = {"file": "c.json", "measured_range": {"running": [1.0, 8.0], "context_tokens": [1024.0, 8192.0]}}
    reqs = [SimRequest(prompt_len=64, response_len=20) for _ in range(32)]
    steps = simulate(reqs, k=0, policy=make_policy("off"), step_model=model(), max_num_seqs=32).steps
    flagged = extrapolation(model(calibration=cal), steps)
    assert flagged["running"]["max"] == 32 and flagged["running"]["valid_max"] == 8.0
    assert extrapolation(model(), steps) == {} and "no calibration= file" in model().describe()["range_note"]
    kept = model(calibration=cal).with_hardware(hardware("H100"))   # e.g. --sensitivity's other attention kernel
    assert kept.valid_range() == {"running": [1.0, 8.0], "context_tokens": [1024.0, 8192.0]}


def test_a_rows_built_in_calibration_priced_at_tp_above_1_is_warned():
    """The H100 row's parameters were fitted on one GPU's points (tools/step_physics.py): a tp=8
    preset priced with them says so; an uncalibrated row (A100: assumptions) claims no points."""
    tc = model(tp=8).calibration_tp()
    assert (tc["measured"], tc["priced"], tc["same"]) == (1, 8, False)
    assert tc["warning"].startswith("the H100 SXM 80GB row's built-in calibration: fitted on points measured at "
                                    "tp=1, priced at tp=8")
    assert model(tp=8).describe()["calibration_tp"] == tc and f"WARNING: {tc['warning']}" in model(tp=8).assumptions()
    assert model().calibration_tp()["warning"] is None
    assert model(hw="A100", tp=8).calibration_tp() is None
