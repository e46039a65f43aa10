"""A user's own calibration (`step-model --calibrate`, bench/simulation/calibration_file.py):
points made by a planted row are fitted back from an uncalibrated one and priced within 1 %;
the file round-trips into `--step-model roofline:...,calibration=FILE`; bad files and bad
combinations are one-line errors with exit 2."""

import json
from dataclasses import replace

import click
import pytest
from click.testing import CliRunner

from samspec_bench.bench.simulation.calibration_file import load_calibration
from samspec_bench.bench.simulation.hardware import hardware
from samspec_bench.bench.simulation.roofline import RooflineStepModel
from samspec_bench.bench.simulation.step_model_spec import load_step_model, spec_with
from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import load_shape

_CLI = click.Command("samspec-bench", add_help_option=False, context_settings={"ignore_unknown_options": True},
                     params=[click.Argument(["argv"], nargs=-1, type=click.UNPROCESSED)],
                     callback=lambda argv: main(list(argv)))
# the fit moves efficiencies, overlap loss and kernel time; tiles and attention's kernel switch
# are the row's, so the planted row keeps the A100 row's
PLANTED = {"gemm_compute": 0.75, "gemm_memory": 0.62, "gemm_overlap_loss": 0.3, "gemm_kernel_us": 9.0,
           "attention_compute": 0.4, "attention_memory": 0.55, "elementwise_memory": 0.2}


def _points(path, model, hw):
    """A points file of the planted A100 row's device times over a small grid."""
    m = RooflineStepModel(load_shape(model), hw, mode="graph")
    with open(path, "w") as f:
        f.write(json.dumps({"meta": {"device": "NVIDIA A100-SXM4-80GB", "model": {"hidden_size": m.shape.hidden_size,
                                                                                  "num_hidden_layers": m.shape.num_hidden_layers}}}) + "\n")
        for B in (1, 8, 32, 128):
            for q in (1, 4, 9):
                for C in (1024, 16384):
                    t = m.device_time(decode_tokens=B, draft_tokens=B * (q - 1), context_tokens=B * C, running=B)
                    f.write(json.dumps({"B": B, "q": q, "C": C, "ms": round(1e3 * t, 6)}) + "\n")
    return path


def test_points_of_a_planted_row_are_fitted_back_from_an_uncalibrated_one(tmp_path):
    planted = replace(hardware("A100"), op_efficiency={**hardware("A100").op_efficiency, **PLANTED})
    p8, p32 = _points(tmp_path / "a8.jsonl", "Qwen3-8B", planted), _points(tmp_path / "a32.jsonl", "Qwen3-32B", planted)
    out = tmp_path / "cal" / "a100.json"
    spec = "roofline:hardware=A100,model=Qwen3-8B,mode=graph"
    assert "not calibrated" in hardware("A100").sources["op_efficiency"]
    res = CliRunner().invoke(_CLI, ["step-model", "--step-model", spec, "--steps", str(p8), "--also", f"Qwen3-32B={p32}",
                                    "--calibrate", str(out), "--output", str(tmp_path / "runs"),
                                    "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert f"calibration written: {out}" in res.output and f"price with --step-model {spec},calibration={out}" in res.output
    doc = load_calibration(out)
    assert doc["fitted_on"][1] == {"file": str(p32), "model": "Qwen/Qwen3-32B", "points": 24, "dtype": None, "tp": None}
    assert doc["measured_on"] == ["NVIDIA A100-SXM4-80GB"] and doc["fit"]["max_abs_error"] < 0.01
    for k in ("gemm_memory", "attention_memory"):   # what the points' weight and KV streams tell
        assert doc["op_efficiency"][k] == pytest.approx(PLANTED[k], abs=0.03), k
    assert doc["op_efficiency"]["gemm_kernel_us"] == pytest.approx(PLANTED["gemm_kernel_us"], abs=1.5)
    # the file prices a step model anywhere a spec is read, and says where it came from
    m = load_step_model(f"roofline:hardware=A100,model=Qwen3-32B,tp=2,calibration={out}")
    assert m.eff["gemm_memory"] == doc["op_efficiency"]["gemm_memory"] and m.tp == 2
    assert "calibrated by `samspec-bench step-model --calibrate` on 48 measured points (NVIDIA A100-SXM4-80GB" \
        in m.hw.sources["op_efficiency"]
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["metrics"]["calibration"]["fit"]["points"] == 48 and r["metrics"]["points"]["max_abs_error"] < 0.01


@pytest.mark.parametrize("text, needle", [
    ("nope", "not JSON"),
    ('{"kind": "other"}', "not a roofline calibration"),
    ('{"kind": "samspec-bench roofline calibration", "format": 9, "op_efficiency": {"gemm_memory": 0.8}}',
     "format 9, this version reads format 1"),
    ('{"kind": "samspec-bench roofline calibration", "format": 1, "op_efficiency": {"gemm_speed": 0.8}}',
     "unknown op_efficiency keys gemm_speed"),
    ('{"kind": "samspec-bench roofline calibration", "format": 1, "op_efficiency": {"gemm_memory": NaN}}',
     "gemm_memory=nan"),
    ('{"kind": "samspec-bench roofline calibration", "format": 1, "op_efficiency": {"gemm_memory": -1}}',
     "gemm_memory=-1"),
    ('{"kind": "samspec-bench roofline calibration", "format": 1, "op_efficiency": {"gemm_memory": 1'
     + "0" * 400 + "}}", "gemm_memory=10000"),     # an integer no float holds: refused, not an OverflowError
])
def test_a_bad_calibration_file_is_one_line_naming_it(tmp_path, text, needle):
    p = tmp_path / "c.json"
    p.write_text(text)
    with pytest.raises(UserError, match=needle) as e:
        load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,calibration={p}")
    assert "\n" not in str(e.value) and f"calibration={p}" in str(e.value)


def test_a_zero_efficiency_in_a_file_is_refused_by_the_rows_own_check(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"kind": "samspec-bench roofline calibration", "format": 1, "hardware": "H100 SXM 80GB",
                             "op_efficiency": {"gemm_memory": 0.0}}))
    with pytest.raises(UserError, match="gemm_memory=0.0 would price steps at zero"):
        load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,calibration={p}")


def _refused(argv, needle):
    res = CliRunner().invoke(_CLI, argv)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], res.stderr


def test_bad_calibration_requests_are_one_line_with_exit_2(tmp_path):
    pts = _points(tmp_path / "p.jsonl", "Qwen3-8B", hardware("H100"))
    base = ["step-model", "--steps", str(pts), "--output", str(tmp_path / "runs")]
    _refused([*base, "--step-model", "roofline:hardware=H100,model=Qwen3-8B", "--also", f"Qwen3-32B={pts}"],
             "--also adds points to a calibration: give --calibrate OUT.json too")
    _refused([*base, "--step-model", "roofline:hardware=H100,model=Qwen3-8B,tp=2", "--calibrate", str(tmp_path / "c.json")],
             "--calibrate: tp=2; fit on one GPU's points with tp=1")
    _refused([*base, "--step-model", "roofline:hardware=H100,model=Qwen3-8B", "--calibrate", str(tmp_path / "c.json"),
              "--also", "Qwen3-32B"], "--also 'Qwen3-32B': give MODEL=POINTS.jsonl")
    csv = tmp_path / "steps.csv"
    csv.write_text("time_s\n")
    _refused(["step-model", "--steps", str(csv), "--output", str(tmp_path / "runs"), "--step-model",
              "roofline:hardware=H100,model=Qwen3-8B", "--calibrate", str(tmp_path / "c.json")],
             "is not a .jsonl file of {B, q, C, ms} rows")
    _refused([*base, "--step-model", f"roofline:hardware=H100,model=Qwen3-8B,calibration={tmp_path / 'none.json'}"],
             "cannot read it")
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "runs").exists()


def test_spec_with_sets_or_replaces_one_key():
    assert spec_with("roofline:hardware=H100,model=Qwen3-8B", "calibration", "a.json") == \
        "roofline:hardware=H100,model=Qwen3-8B,calibration=a.json"
    assert spec_with("roofline:hardware=H100,calibration=old.json,model=X", "calibration", "b.json") == \
        "roofline:hardware=H100,model=X,calibration=b.json"


def _file(tmp_path, **kw):
    doc = {"kind": "samspec-bench roofline calibration", "format": 1, "hardware": "H100 SXM 80GB",
           "measured_on": ["NVIDIA H100 80GB HBM3"], "op_efficiency": {"gemm_memory": 0.8},
           "fitted_on": [{"file": "p.jsonl", "model": "Qwen/Qwen3-8B", "points": 30}], **kw}
    p = tmp_path / "c.json"
    p.write_text(json.dumps(doc))
    return p


def test_a_file_fitted_on_another_row_is_refused_naming_both(tmp_path):
    p = _file(tmp_path, hardware="H200 SXM 141GB")
    with pytest.raises(UserError, match=r"fitted on the H200 SXM 141GB row \(H200\), priced here on A100 SXM 80GB "
                                        r"\(A100\); give hardware=H200"):
        load_step_model(f"roofline:hardware=A100,model=Qwen3-8B,calibration={p}")
    assert load_step_model(f"roofline:hardware=H200,model=Qwen3-8B,calibration={p}").eff["gemm_memory"] == 0.8
    with pytest.raises(UserError, match="names no hardware row"):
        load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,calibration={_file(tmp_path, hardware=None)}")


@pytest.mark.parametrize("kw, needle", [({"fitted_on": [{"points": "many"}, {"points": 12}]}, "on 12 measured points ("),
                                        ({"measured_on": "NVIDIA H100 80GB HBM3"}, "points (NVIDIA H100 80GB HBM3;"),
                                        ({"fitted_on": "p.jsonl", "measured_on": 7}, "on 0 measured points (a device")])
def test_damaged_bookkeeping_fields_are_read_without_a_traceback(tmp_path, kw, needle):
    m = load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,calibration={_file(tmp_path, **kw)}")
    assert needle in m.hw.sources["op_efficiency"]


@pytest.mark.parametrize("key, value", [("gemm_kernel_us", 1e9), ("gemm_overlap_loss", 3.0)])
def test_values_beyond_what_a_fit_writes_are_refused(tmp_path, key, value):
    with pytest.raises(UserError, match=f"{key}={value!r}: beyond what a fit writes"):
        load_calibration(_file(tmp_path, op_efficiency={key: value}))


def _hand_file(tmp_path, **extra):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"kind": "samspec-bench roofline calibration", "format": 1, "hardware": "H100",
                             "op_efficiency": {"gemm_memory": 0.8}, **extra}))
    return p


def test_tp_check_warns_where_the_points_tp_differs_or_is_unknown_at_tp_above_1():
    from samspec_bench.bench.simulation.calibration_file import tp_check
    assert tp_check(None, "src", 1)["warning"] is None and tp_check(2, "src", 2)["same"]
    unknown = tp_check(None, "src", 4)
    assert unknown["same"] is False and unknown["warning"].startswith("src: the tp of the points they were fitted "
                                                                      "on is unknown; priced at tp=4")
    known = tp_check(1, "src", 8)
    assert known["same"] is False and "fitted on points measured at tp=1, priced at tp=8" in known["warning"]
    assert "\n" not in known["warning"] and "\n" not in unknown["warning"]


def test_a_calibration_fitted_at_tp_1_priced_at_tp_4_is_warned_and_recorded(tmp_path):
    from samspec_bench.bench.simulation.step_model_spec import check_step_model, format_report
    cal = _hand_file(tmp_path, tp=1, tp_source="every points file's meta states tp=1")
    m = load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,tp=4,calibration={cal}")
    tc = m.describe()["calibration_tp"]
    assert (tc["measured"], tc["priced"], tc["same"]) == (1, 4, False)
    assert tc["warning"].startswith(f"calibration={cal} (every points file's meta states tp=1): fitted on points "
                                    "measured at tp=1, priced at tp=4")
    assert f"WARNING: {tc['warning']}" in m.assumptions()   # rollout's result.json records the assumptions
    assert m.describe()["calibration"]["tp"] == 1
    pts = tmp_path / "p.jsonl"
    pts.write_text("\n".join(json.dumps({"B": b, "q": q, "C": 1024, "ms": 7.0 + b + q}) for b in (1, 8) for q in (1, 4)))
    rep = check_step_model(f"roofline:hardware=H100,model=Qwen3-8B,tp=4,calibration={cal}", pts)
    assert rep["calibration_tp"] == tc and f"WARNING: {tc['warning']}" in format_report(rep).splitlines()
    same = load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,calibration={cal}")
    assert same.calibration_tp()["warning"] is None and not any("WARNING" in a for a in same.assumptions())


def test_a_calibration_without_a_tp_is_unknown_and_warned_only_at_tp_above_1(tmp_path):
    cal = _hand_file(tmp_path)   # written before calibrations recorded tp
    two = load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,tp=2,calibration={cal}").calibration_tp()
    assert two["measured"] is None and "written before calibrations recorded it" in two["source"]
    assert "the tp of the points they were fitted on is unknown; priced at tp=2" in two["warning"]
    one = load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,calibration={cal}").calibration_tp()
    assert one["same"] and one["warning"] is None


@pytest.mark.parametrize("tp", [0, "1", True, 1.5])
def test_a_bad_tp_in_a_calibration_file_is_one_line(tmp_path, tp):
    cal = _hand_file(tmp_path, tp=tp)
    with pytest.raises(UserError, match=r"tp .* is not a whole number >= 1") as e:
        load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,calibration={cal}")
    assert "\n" not in str(e.value) and f"calibration={cal}" in str(e.value)


def test_a_partial_files_row_keys_are_in_the_models_calibration_record(tmp_path):
    """What rollout's result.json copies of the step model (describe()["calibration"]) names the
    keys the hardware row kept, not only the file."""
    cal = _hand_file(tmp_path)
    rec = load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,calibration={cal}").describe()["calibration"]
    assert rec["from_file"] == ["gemm_memory"] and "gemm_compute" in rec["from_row"] and len(rec["from_row"]) == 10
