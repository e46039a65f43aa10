"""The check of a roofline against {B, q, C, ms} points (step_model_spec.check_step_model): the
points hold device time, the step totals add the model's host time to it, and the report says
which part is measured and which modelled instead of calling the sum measured."""

import json

import pytest

from samspec_bench.bench.simulation.step_model_spec import check_step_model, format_report
from samspec_bench.suites.step_model_check import build_config, execute

ROWS = [(1, 1, 1024, 7.269), (1, 4, 1024, 7.721), (8, 1, 1024, 8.115), (8, 4, 1024, 8.701)]


def test_the_modelled_host_time_in_the_step_totals_is_not_called_measured(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join(json.dumps({"B": B, "q": q, "C": C, "ms": ms}) for B, q, C, ms in ROWS) + "\n")
    rep = check_step_model("roofline:hardware=H100,model=Qwen3-8B,mode=graph", p)
    device_s = sum(r[3] for r in ROWS) / 1e3
    host = rep["overall"]["modelled_host_in_measured_s"]
    assert host > 0 and rep["overall"]["measured_total_s"] == pytest.approx(device_s + host)
    assert "host time" in rep["units"]
    text = format_report(rep)
    assert f"measured {device_s:.3f} s device + {host:.3f} s modelled host" in text
    assert f"measured {rep['overall']['measured_total_s']:.3f} s," not in text


def _file(tmp_path, rows, meta=None):
    p = tmp_path / "p.jsonl"
    head = [json.dumps({"meta": meta})] if meta is not None else []
    p.write_text("\n".join(head + [json.dumps({"B": B, "q": q, "C": C, "ms": ms}) for B, q, C, ms in rows]) + "\n")
    return p


def test_a_tp_above_1_against_one_gpus_points_is_said_a_different_configuration(tmp_path):
    p = _file(tmp_path, ROWS, {"device": "NVIDIA H100 80GB HBM3"})     # step_physics.py's meta: no tp
    rep = check_step_model("roofline:hardware=H100,model=Qwen3-8B,tp=4", p)
    tp = rep["points_tp"]
    assert tp["measured"] is None and tp["priced"] == 4 and tp["same"] is False
    assert "single-GPU measurements, tp unknown" in tp["warning"] and "a different configuration" in tp["warning"]
    assert f"WARNING: {tp['warning']}: the errors above compare two tensor-parallel sizes" in format_report(rep)
    one = check_step_model("roofline:hardware=H100,model=Qwen3-8B", p)
    assert one["points_tp"]["same"] and one["points_tp"]["warning"] is None
    assert "tensor-parallel" not in format_report(one)


def test_a_tp_the_points_meta_states_is_honoured(tmp_path):
    p = _file(tmp_path, ROWS, {"device": "NVIDIA H100 80GB HBM3", "tp": 4})
    assert check_step_model("roofline:hardware=H100,model=Qwen3-8B,tp=4", p)["points_tp"]["same"]
    rep = check_step_model("roofline:hardware=H100,model=Qwen3-8B", p)
    assert rep["points_tp"]["measured"] == 4 and "the points are tp=4 (meta tp)" in format_report(rep)


def test_a_partial_calibration_says_which_keys_came_from_the_file_and_which_from_the_row(tmp_path):
    cal = tmp_path / "c.json"
    cal.write_text(json.dumps({"kind": "samspec-bench roofline calibration", "format": 1, "hardware": "H100",
                               "op_efficiency": {"gemm_compute": 0.7, "gemm_memory": 0.8}}))
    rep = check_step_model(f"roofline:hardware=H100,model=Qwen3-8B,calibration={cal}", _file(tmp_path, ROWS))
    keys = rep["calibration_keys"]
    assert keys["from_file"] == ["gemm_compute", "gemm_memory"] and "elementwise_memory" in keys["from_row"]
    assert len(keys["from_file"]) + len(keys["from_row"]) == 11 and keys["row"] == "H100 SXM 80GB"
    text = format_report(rep)
    assert f"WARNING: calibration={cal} holds 2 of the 11 op_efficiency keys: from the file gemm_compute, gemm_memory; " \
           "from the H100 SXM 80GB row gemm_overlap_loss" in text
    assert "only gemm_compute, gemm_memory from the file" in " ".join(rep["describe"]["assumptions"])


def test_result_json_carries_the_tp_and_calibration_key_checks(tmp_path, capsys):
    cal = tmp_path / "c.json"
    cal.write_text(json.dumps({"kind": "samspec-bench roofline calibration", "format": 1, "hardware": "H100",
                               "op_efficiency": {"gemm_memory": 0.8}}))
    cfg = build_config(step_model=f"roofline:hardware=H100,model=Qwen3-8B,tp=2,calibration={cal}",
                       steps=str(_file(tmp_path, ROWS)), calibrate=None, also=())
    assert execute(cfg, output=str(tmp_path / "runs"), json_path=str(tmp_path / "r.json")) == 0
    m = json.loads((tmp_path / "r.json").read_text())["metrics"]
    assert m["points_tp"]["priced"] == 2 and "different configuration" in m["points_tp"]["warning"]
    assert m["calibration_keys"]["from_file"] == ["gemm_memory"]
    printed = capsys.readouterr().out
    assert "two tensor-parallel sizes" in printed and "holds 1 of the 11 op_efficiency keys" in printed
