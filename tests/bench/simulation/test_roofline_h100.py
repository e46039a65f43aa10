"""The roofline against measured H100 steps (tools/step_physics.py: bf16, CUDA graphs, device
time). The H100 row was calibrated on the shared measurement of the Qwen3-8B shape
(../shared/data/hardware/h100_qwen3-8b_step_physics.jsonl) and the C=1024 rows of this project's
measurement of the Qwen3-32B shape (docs/measurements/h100_step_physics/); held out: the C=8192
rows of both sizes, the off-grid 8B rows (q 2 and 17, C 4096 and 16384), the wide verifies and
the 32B at C=32768. Every point within 8 % and every verify/decode ratio within 7 % (the
calibration on the 8B alone priced the 32B 20 % high; one attention kernel for every step
missed the 8B's B=8 steps at C=32768 by 14 % and the wide verifies by 13 %). A fresh
calibration from an uncalibrated row finds the shipped values. The `step-model` command reads the same files (a
meta first line) and prints the table."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from samspec_bench.bench.simulation.hardware import hardware
from samspec_bench.bench.simulation.measured_points import load_points, point_report
from samspec_bench.bench.simulation.roofline import RooflineStepModel
from samspec_bench.bench.simulation.roofline_calibration import calibrate_sets
from samspec_bench.bench.simulation.step_model_spec import load_step_model
from samspec_bench.cli import group
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import load_shape

SPEC = "roofline:hardware=H100,model=Qwen3-8B,tp=1,mode=graph"


@pytest.fixture(scope="module")
def h100_rows(shared_data):
    path = shared_data / "hardware" / "h100_qwen3-8b_step_physics.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    rows, meta = load_points(path)
    assert "H100" in meta["device"]
    return path, rows


def _bounds(rep):
    errs = [abs(p["error"]) for p in rep["points"]]
    ratios = [abs(p["ratio_error"]) for p in rep["points"] if p["ratio_error"] is not None]
    return max(errs), max(ratios, default=0.0), len(ratios)


def test_every_shared_h100_point_within_15_percent_and_every_ratio_within_5(h100_rows):
    _, rows = h100_rows
    rep = point_report(load_step_model(SPEC), rows)
    assert rep["basis"] == "device"
    worst, worst_ratio, n_ratios = _bounds(rep)
    assert len(rows) == 30 and n_ratios == 20
    assert worst < 0.08 and worst_ratio < 0.05


MEASURED = Path(__file__).resolve().parents[3] / "docs" / "measurements" / "h100_step_physics"


def _ours(name: str, C: int | None = None) -> list:
    rows, meta = load_points(MEASURED / name)
    assert "H100" in meta["device"]
    return [r for r in rows if C is None or r["C"] == C]


def test_a_fresh_two_size_calibration_finds_the_shipped_values(h100_rows):
    _, rows = h100_rows
    kernels = ("gemm_tile_rows", "attention_tile_rows", "attention_split_below", "attention_unsplit_tile_rows")
    uncalibrated = replace(hardware("H100"), op_efficiency={k: hardware("H100").op_efficiency[k] for k in kernels})
    eff = calibrate_sets([(load_shape("Qwen3-8B"), rows), (load_shape("Qwen3-32B"), _ours("qwen3-32b.jsonl", 1024))],
                         uncalibrated)
    shipped = hardware("H100").op_efficiency
    for k, v in eff.items():
        assert shipped[k] == pytest.approx(v, abs=1.0 if k == "gemm_kernel_us" else 0.05), k
    assert shipped["gemm_kernel_us"] > 5   # the fixed kernel time is what two sizes tell apart


@pytest.mark.parametrize("name, model, C, bound, ratio_bound, n, n_ratios", [
    ("qwen3-8b.jsonl", "Qwen3-8B", 8192, 0.08, 0.05, 15, 10),
    ("qwen3-8b_offgrid.jsonl", "Qwen3-8B", None, 0.08, None, 8, 0),   # no q = 1 row: no ratio
    ("qwen3-32b.jsonl", "Qwen3-32B", 8192, 0.08, 0.07, 12, 8),
    ("qwen3-32b.jsonl", "Qwen3-32B", 1024, 0.08, 0.05, 12, 8),
    # measured after the fit, beyond every fitted row (q up to 65; the 32B at C=32768): without
    # the attention tile the roofline priced them up to 21 % and 33 % high, with one tile for
    # both kernels 13 % and 15 % (docs/measurements/h100_step_physics)
    ("qwen3-8b_wide.jsonl", "Qwen3-8B", None, 0.08, 0.07, 16, 12),
    ("qwen3-32b_long.jsonl", "Qwen3-32B", None, 0.08, 0.07, 12, 9),
])
def test_the_shipped_row_prices_the_other_measured_points(name, model, C, bound, ratio_bound, n, n_ratios):
    rows = _ours(name, C)
    assert len(rows) == n
    rep = point_report(RooflineStepModel(load_shape(model), hardware("H100"), mode="graph"), rows)
    worst, worst_ratio, got_ratios = _bounds(rep)
    assert worst < bound and got_ratios == n_ratios
    assert ratio_bound is None or worst_ratio < ratio_bound


def test_the_kernel_time_counts_once_per_weight_gemm_and_not_in_an_empty_step():
    shape = load_shape("Qwen3-8B")
    hw = hardware("H100")
    off = RooflineStepModel(shape, replace(hw, op_efficiency={**hw.op_efficiency, "gemm_kernel_us": 0.0}), mode="graph")
    on = RooflineStepModel(shape, hw, mode="graph")
    d = on.device_time(decode_tokens=8, context_tokens=8 * 1024, running=8) - \
        off.device_time(decode_tokens=8, context_tokens=8 * 1024, running=8)
    assert d == pytest.approx((36 * 4 + 1) * hw.op_efficiency["gemm_kernel_us"] * 1e-6)
    assert on.components(decode_tokens=0)["ops"]["gemm_kernels"]["t_s"] == 0


def test_the_step_model_command_prints_and_stores_the_point_errors(h100_rows, tmp_path):
    path, rows = h100_rows
    out = tmp_path / "r.json"
    res = CliRunner().invoke(group, ["step-model", "--step-model", SPEC, "--steps", str(path), "--json", str(out),
                                     "--output", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert "verify/decode ratio |error| median" in res.output and "ratio err" in res.output
    d = json.loads(out.read_text())
    assert d["metrics"]["points"]["points"] == 30 and d["metrics"]["points"]["max_abs_ratio_error"] < 0.05
    table = d["tables"]["points"]
    base = next(p for p in table if (p["B"], p["q"], p["C"]) == (128, 1, 1024))
    top = next(p for p in table if (p["B"], p["q"], p["C"]) == (128, 9, 1024))
    assert top["measured_ratio"] == pytest.approx(42.2647 / 16.4066, rel=1e-4)
    assert top["predicted_ratio"] == pytest.approx(top["predicted_ms"] / base["predicted_ms"])


def test_bad_point_files_are_one_line_errors(tmp_path):
    p = tmp_path / "p.jsonl"
    for text, needle in (('{"meta": {}}\n{"B": 1, "q": 1, "C": 5}\n', "has no ms"),
                         ('{"B": 0, "q": 1, "C": 5, "ms": 1}\n', "B >= 1"), ("nope\n", "not JSON"),
                         ('{"meta": {}}\n', "no {B, q, C, ms} rows")):
        p.write_text(text)
        with pytest.raises(UserError, match=needle) as e:
            load_points(p)
        assert "\n" not in str(e.value)


def test_error_rows_are_counted_and_said(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"meta": {}}\n{"B": 1, "q": 1, "C": 64, "ms": 7.0}\n{"B": 256, "q": 9, "C": 65536, "error": "oom"}\n')
    rows, meta = load_points(p)
    assert len(rows) == 1 and meta["rows_skipped_error"] == 1
    res = CliRunner().invoke(group, ["step-model", "--step-model", SPEC, "--steps", str(p), "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "1 rows of the points file were measurement errors" in res.output


@pytest.mark.parametrize("spec, flagged", [(SPEC, True), ("roofline:hardware=H100,model=Qwen3-32B,mode=graph", False)])
def test_points_of_another_model_size_are_flagged(tmp_path, spec, flagged):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(group, ["step-model", "--step-model", spec, "--steps", str(MEASURED / "qwen3-32b.jsonl"),
                                     "--json", str(out), "--output", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert ("WARNING: the points were measured on hidden 5120, 64 layers" in res.output) is flagged
    shape = json.loads(out.read_text())["metrics"]["points_shape"]
    assert shape["same"] is (not flagged) and shape["measured"] == {"hidden_size": 5120, "num_hidden_layers": 64}
