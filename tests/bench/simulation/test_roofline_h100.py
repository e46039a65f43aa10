"""The roofline against the measured H100 (../shared/data/hardware/h100_qwen3-8b_step_physics.jsonl:
Qwen3-8B shape, bf16, CUDA graphs, device time): every point within 15 %, every verify/decode
ratio within 5 %; the per-class efficiencies were calibrated on the C=1024 rows only, so the
C=32768 rows are held out, and a fresh calibration on C=1024 meets the bounds on C=32768 too.
The `step-model` command reads the same file (a meta first line) and prints the table."""

import json

import pytest
from click.testing import CliRunner

from samspec_bench.bench.simulation.hardware import hardware
from samspec_bench.bench.simulation.measured_points import load_points, point_report
from samspec_bench.bench.simulation.roofline import RooflineStepModel
from samspec_bench.bench.simulation.roofline_calibration import calibrate, with_efficiencies
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
    return max(errs), max(ratios), len(ratios)


def test_every_shared_h100_point_within_15_percent_and_every_ratio_within_5(h100_rows):
    _, rows = h100_rows
    rep = point_report(load_step_model(SPEC), rows)
    assert rep["basis"] == "device"
    worst, worst_ratio, n_ratios = _bounds(rep)
    assert len(rows) == 30 and n_ratios == 20
    assert worst < 0.15 and worst_ratio < 0.05
    held_out = point_report(load_step_model(SPEC), [r for r in rows if r["C"] == 32768])
    assert _bounds(held_out)[0] < 0.15 and _bounds(held_out)[1] < 0.05


def test_a_calibration_on_short_contexts_holds_on_the_long_ones(h100_rows):
    _, rows = h100_rows
    shape, hw = load_shape("Qwen3-8B"), hardware("H100")
    eff = calibrate([r for r in rows if r["C"] == 1024], shape, hw)
    m = RooflineStepModel(shape, with_efficiencies(hw, eff), mode="graph")
    worst, worst_ratio, _ = _bounds(point_report(m, [r for r in rows if r["C"] == 32768]))
    assert worst < 0.15 and worst_ratio < 0.05
    # the shipped row's efficiencies are that calibration's (rounded)
    for k, v in eff.items():
        assert hw.op_efficiency[k] == pytest.approx(v, abs=0.05), k


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
