"""The H200 row against 105 steps measured on an H200 with the program that measured the H100's
(docs/measurements/h200_step_physics/: tools/step_physics.py, bf16, CUDA graphs, device time),
none of them fitted: the row takes the H100's calibration and the H200's datasheet bandwidth.
What the H200's extra bandwidth buys depends on attention's kernel: where few work blocks run
the split-KV kernel, the KV read is bound by memory and the H200 is about 1.3x faster; where the
standard kernel runs, its 128-row tiles make the read bound by the same tensor cores on both,
and the H200 is no faster. One kernel for every step priced the long-context H200 steps up to
34 % low."""

from pathlib import Path

import pytest

from samspec_bench.bench.simulation.hardware import hardware
from samspec_bench.bench.simulation.measured_points import load_points, point_report
from samspec_bench.bench.simulation.roofline import RooflineStepModel
from samspec_bench.bench.simulation.roofline_ops import attention_blocks
from samspec_bench.models.shapes import load_shape

DOCS = Path(__file__).resolve().parents[3] / "docs" / "measurements"
FILES = {"qwen3-8b.jsonl": "Qwen3-8B", "qwen3-8b_offgrid.jsonl": "Qwen3-8B", "qwen3-8b_wide.jsonl": "Qwen3-8B",
         "qwen3-32b.jsonl": "Qwen3-32B", "qwen3-32b_long.jsonl": "Qwen3-32B"}


def _rows(device: str, name: str) -> list:
    rows, meta = load_points(DOCS / f"{device}_step_physics" / name)
    assert device.upper() in meta["device"]
    return rows


def _model(hw_name: str, model: str) -> RooflineStepModel:
    return RooflineStepModel(load_shape(model), hardware(hw_name), mode="graph")


def test_every_h200_step_is_priced_within_18_percent_by_the_h100_calibration():
    errors, ratio_errors = [], []
    for name, model in FILES.items():
        rep = point_report(_model("H200", model), _rows("h200", name))
        errors += [abs(p["error"]) for p in rep["points"]]
        ratio_errors += [abs(p["ratio_error"]) for p in rep["points"] if p["ratio_error"] is not None]
    assert len(errors) == 105 and len(ratio_errors) == 67
    assert max(errors) < 0.18 and max(ratio_errors) < 0.20
    errors.sort()
    assert errors[len(errors) // 2] < 0.06           # the median step


def _step(B, q, C):
    return dict(decode_tokens=B, draft_tokens=B * (q - 1), context_tokens=B * C, running=B)


def test_the_h200_is_faster_where_the_split_kernel_runs_and_no_faster_where_the_standard_one_does():
    h100 = {(r["B"], r["q"], r["C"]): r["ms"] for r in _rows("h100", "qwen3-8b.jsonl")}
    m100, m200 = _model("H100", "Qwen3-8B"), _model("H200", "Qwen3-8B")
    split_below = hardware("H200").op_efficiency["attention_split_below"]
    kinds = set()
    for r in _rows("h200", "qwen3-8b.jsonl"):
        B, q, C = r["B"], r["q"], r["C"]
        if C != 32768 or B == 1:          # attention's read is most of these steps' time
            continue
        measured = h100[(B, q, C)] / r["ms"]
        modelled = m100.device_time(**_step(B, q, C)) / m200.device_time(**_step(B, q, C))
        split = bool(attention_blocks(B, q, 8, 4.0) < split_below)
        kinds.add(split)
        assert (measured > 1.25) is split and (modelled > 1.25) is split, (B, q)
        assert modelled == pytest.approx(measured, abs=0.07), (B, q)
    assert kinds == {True, False}


@pytest.mark.parametrize("name, model", [("qwen3-8b_switch.jsonl", "Qwen3-8B"), ("qwen3-32b_switch.jsonl", "Qwen3-32B")])
def test_the_step_time_jumps_at_the_batch_where_the_standard_kernel_takes_over(name, model):
    # measured after the model was written: one-token decodes at C=32768 on both sides of
    # 211.2 blocks (26 requests x 8 KV heads = 208, 27 x 8 = 216)
    measured = {r["B"]: r["ms"] for r in _rows("h200", name)}
    m = _model("H200", model)
    modelled = {B: m.device_time(**_step(B, 1, 32768)) * 1e3 for B in measured}
    for t in (measured, modelled):
        assert t[27] / t[26] > 1.5                           # the cliff, at the predicted batch
        assert t[26] / t[24] < 1.15 and t[28] / t[27] < 1.1  # and nowhere beside it
    assert all(modelled[B] == pytest.approx(measured[B], rel=0.12) for B in measured)


def test_verify_steps_jump_where_the_block_count_crosses_the_split_line():
    # measured after the model was written: verifies whose query rows make one or two 64-row
    # blocks a KV head; the jump sits where requests x 8 x blocks crosses 211.2, as counted
    split_below = hardware("H200").op_efficiency["attention_split_below"]
    crossings = 0
    for name, model, g in (("qwen3-8b_switch_verify.jsonl", "Qwen3-8B", 4.0),
                           ("qwen3-32b_switch_verify.jsonl", "Qwen3-32B", 8.0)):
        rows = _rows("h200", name)
        for q in sorted({r["q"] for r in rows}):
            t = sorted((r["B"], r["ms"]) for r in rows if r["q"] == q)
            for (b0, t0), (b1, t1) in zip(t, t[1:]):
                crosses = attention_blocks(b0, q, 8, g) < split_below <= attention_blocks(b1, q, 8, g)
                crossings += bool(crosses)
                assert (t1 / t0 > 1.15) is bool(crosses), (name, q, b0, b1)
        # the model prices them within 21 % (it misses the jump where two 64-row tiles and one
        # of 128 pad alike: docs/measurements/h200_step_physics/README.md)
        rep = point_report(_model("H200", model), rows)
        assert max(abs(p["error"]) for p in rep["points"]) < 0.21
    assert crossings == 3
