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


def _profile_model(tmp_path):
    """A fitted step model measured on 1 to 4 requests over 1,024 to 4,096 context tokens."""
    from samspec_bench.bench.simulation.fitted_step_model import fit_step_model
    B = [1.0, 2.0, 4.0, 1.0, 2.0, 4.0]
    C = [1024.0, 1024.0, 1024.0, 4096.0, 4096.0, 4096.0]
    model = fit_step_model([0.010 + 0.001 * b + 1e-7 * b * c for b, c in zip(B, C)],
                           {"decode_tokens": B, "running": B, "context_tokens": [b * c for b, c in zip(B, C)]})
    return model.save(tmp_path / "model.json")


def test_a_fitted_profile_priced_beyond_what_it_measured_is_flagged_extrapolated(tmp_path, capsys):
    far = _file(tmp_path, [(1, 1, 1024, 10.2), (64, 1, 32768, 250.0)])
    rep = check_step_model(str(_profile_model(tmp_path)), far)
    x = rep["extrapolation"]
    assert x["running"] == {"max": 64.0, "valid_max": 4.0, "steps_beyond": 0.5}
    assert x["context_tokens"]["max"] == 64 * 32768
    assert "WARNING: the step model extrapolates (EXTRAPOLATED predictions): " in format_report(rep)
    assert "running up to 64 (measured up to 4; 50 % of steps)" in format_report(rep)
    (tmp_path / "in").mkdir()
    inside = check_step_model(str(_profile_model(tmp_path)), _file(tmp_path / "in", [(2, 1, 1024, 12.2)]))
    assert "extrapolation" not in inside and "EXTRAPOLATED" not in format_report(inside)
    cfg = build_config(step_model=str(_profile_model(tmp_path)), steps=str(far), calibrate=None, also=())
    assert execute(cfg, output=str(tmp_path / "runs"), json_path=str(tmp_path / "r.json")) == 0
    assert json.loads((tmp_path / "r.json").read_text())["metrics"]["extrapolation"]["running"]["valid_max"] == 4.0


STEP_HEADER = "num_running,num_scheduled_tokens,num_prefill_tokens,num_drafted,num_decode_reqs,speculative,time_s"


@pytest.mark.parametrize("body, says", [
    (STEP_HEADER + ",time_s\n4,4,0,0,4,False,0.010,0.500\n", "names column(s) time_s twice"),
    (STEP_HEADER + "\n4,4,0,0,4,False,0.010,0.500\n", "line 2 has 8 cells, the header 7"),
    (STEP_HEADER + "\n4,16,0,12,4,True,0.012\n4,2,0,12,4,True,0.012\n",
     "line 3: num_scheduled_tokens 2 is fewer than num_prefill_tokens 0 + num_drafted 12"),
])
def test_a_steps_csv_that_would_lose_or_misread_a_value_is_refused_naming_it(tmp_path, body, says):
    from samspec_bench.errors import UserError
    p = tmp_path / "steps.csv"
    p.write_text(body)
    with pytest.raises(UserError, match="steps.csv") as e:
        check_step_model("roofline:hardware=H100,model=Qwen3-8B", p)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_steps_csv_with_a_byte_order_mark_reads_its_first_column(tmp_path):
    p = tmp_path / "steps.csv"
    p.write_bytes(b"\xef\xbb\xbf" + (STEP_HEADER + "\n4,4,0,0,4,False,0.010\n").encode())
    assert check_step_model("roofline:hardware=H100,model=Qwen3-8B", p)["overall"]["steps"] == 1


def _profile_steps(rows) -> dict:
    """A torch profile's measured steps of B requests verifying q - 1 drafts over C context, ms each."""
    return {"time_s": [ms / 1e3 for *_, ms in rows], "decode_tokens": [float(B) for B, *_ in rows],
            "prefill_tokens": [0.0] * len(rows), "draft_tokens": [float(B * (q - 1)) for B, q, *_ in rows],
            "context_tokens": [float(B * C) for B, _, C, _ in rows], "running": [float(B) for B, *_ in rows],
            "spec_requests": [float(B * (q > 1)) for B, q, *_ in rows], "speculative": [float(q > 1) for _, q, *_ in rows]}


def test_a_torch_profile_json_is_checked_as_its_points_device_time(tmp_path):
    pts = _file(tmp_path, ROWS, {"device": "NVIDIA H100 80GB HBM3"})
    prof = tmp_path / "prof.json"
    prof.write_text(json.dumps({"format": 3, "kind": "step-profile", "engine": {"name": "torch", "tp": 1,
                                                                                 "device": "cuda: NVIDIA H100 80GB HBM3"},
                                "measured_steps": _profile_steps(ROWS)}))
    spec = "roofline:hardware=H100,model=Qwen3-8B,mode=graph"
    a, b = check_step_model(spec, prof), check_step_model(spec, pts)
    assert a["overall"]["modelled_host_in_measured_s"] > 0 and "host time" in a["units"]
    assert a["overall"] == pytest.approx(b["overall"]) and a["points"]["summary"] == b["points"]["summary"]


def test_the_modelled_host_time_is_not_lost_on_a_point_priced_at_years(tmp_path):
    rep = check_step_model("roofline:hardware=H100,model=Qwen3-8B", _file(tmp_path, [(2 ** 53, 1, 2 ** 53, 1.0)]))
    o = rep["overall"]
    assert o["zero_time_steps"] == 0 and o["steps"] == 1
    assert o["modelled_host_in_measured_s"] == pytest.approx(o["measured_total_s"] - 1e-3) and o["measured_total_s"] > 1e-3


def test_each_group_says_how_much_of_its_measured_time_is_modelled_host_time(tmp_path):
    rep = check_step_model("roofline:hardware=H100,model=Qwen3-8B,mode=graph", _file(tmp_path, ROWS))
    groups = rep["groups"]
    assert all(g["modelled_host_in_measured_s"] > 0 for g in groups)
    assert sum(g["modelled_host_in_measured_s"] for g in groups) == pytest.approx(
        rep["overall"]["modelled_host_in_measured_s"])
    fitted = check_step_model(str(_profile_model(tmp_path)), _file(tmp_path, ROWS))   # step time: nothing added
    assert all("modelled_host_in_measured_s" not in g for g in fitted["groups"])


def _calibration(tmp_path, **kw):
    """A calibration file as a fit on points of 1 to 8 requests over 1,024 context tokens writes it."""
    doc = {"kind": "samspec-bench roofline calibration", "format": 1, "hardware": "H100 SXM 80GB",
           "op_efficiency": {"gemm_memory": 0.8},
           "measured_range": {"running": [1, 8], "decode_tokens": [1, 8], "draft_tokens": [0, 24],
                              "context_tokens": [1024, 8192]}, **kw}
    p = tmp_path / "cal.json"
    p.write_text(json.dumps({k: v for k, v in doc.items() if v is not None}))
    return p


def test_a_calibrated_roofline_priced_beyond_its_points_is_flagged_extrapolated(tmp_path, capsys):
    spec = f"roofline:hardware=H100,model=Qwen3-8B,calibration={_calibration(tmp_path)}"
    far = _file(tmp_path, [(100_000, 1, 1024, 9e4)])
    rep = check_step_model(spec, far)
    assert rep["extrapolation"]["running"] == {"max": 100_000.0, "valid_max": 8.0, "steps_beyond": 1.0}
    assert rep["describe"]["valid_range"]["running"] == [1.0, 8.0]
    text = format_report(rep)
    assert "WARNING: the step model extrapolates (EXTRAPOLATED predictions): running up to 100,000 (measured up to 8" \
        in text
    (tmp_path / "in").mkdir()
    inside = check_step_model(spec, _file(tmp_path / "in", [(8, 4, 1024, 9.0)]))
    assert "extrapolation" not in inside and "EXTRAPOLATED predictions" not in format_report(inside)
    cfg = build_config(step_model=spec, steps=str(far), calibrate=None, also=())
    assert execute(cfg, output=str(tmp_path / "runs"), json_path=str(tmp_path / "r.json")) == 0
    m = json.loads((tmp_path / "r.json").read_text())["metrics"]
    assert m["extrapolation"]["running"]["valid_max"] == 8.0 and "EXTRAPOLATED predictions" in capsys.readouterr().out


def test_an_old_calibration_without_a_range_says_range_unknown_once_and_prices(tmp_path):
    spec = f"roofline:hardware=H100,model=Qwen3-8B,calibration={_calibration(tmp_path, measured_range=None)}"
    rep = check_step_model(spec, _file(tmp_path, [(100_000, 1, 1024, 9e4)]))
    assert "extrapolation" not in rep and rep["describe"]["valid_range"] is None
    assert format_report(rep).count("range unknown") == 1
    assert "WARNING: calibration=" in format_report(rep)


def test_a_roofline_without_a_calibration_file_claims_no_range_and_says_whose_parameters_price(tmp_path):
    rep = check_step_model("roofline:hardware=H100,model=Qwen3-8B", _file(tmp_path, [(100_000, 1, 1024, 9e4)]))
    assert "extrapolation" not in rep and rep["describe"]["calibration"] is None
    assert "no calibration= file: the H100 SXM 80GB row's built-in parameters price every step (calibrated" \
        in format_report(rep)
    rep = check_step_model("roofline:hardware=A100,model=Qwen3-8B", _file(tmp_path, [(8, 1, 1024, 9.0)]))
    assert "row's built-in parameters price every step (assumption: the whole-step efficiencies" in format_report(rep)


def test_a_measured_range_that_is_no_range_is_refused_naming_the_file(tmp_path):
    from samspec_bench.bench.simulation.step_model_spec import load_step_model
    from samspec_bench.errors import UserError
    for bad, says in (({"running": [8, 1]}, r"measured_range running=\[8, 1\]"), ({"B": [1, 8]}, "measured_range keys B")):
        cal = _calibration(tmp_path, measured_range=bad)
        with pytest.raises(UserError, match=says) as e:
            load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,calibration={cal}")
        assert f"calibration={cal}" in str(e.value) and "\n" not in str(e.value)


def test_points_of_another_dtype_are_warned_in_one_line_and_recorded(tmp_path, capsys):
    spec = "roofline:hardware=H100,model=Qwen3-8B"   # prices bfloat16
    rep = check_step_model(spec, _file(tmp_path, ROWS, {"dtype": "float32"}))
    assert rep["points_dtype"] == {"measured": "float32", "priced": "bfloat16", "same": False}
    warned = [ln for ln in format_report(rep).splitlines() if "measured in float32" in ln]
    assert len(warned) == 1 and warned[0].startswith("WARNING: ") and "prices bfloat16" in warned[0]
    same = check_step_model(spec, _file(tmp_path, ROWS, {"dtype": "torch.bfloat16"}))   # tools/step_physics.py's name
    assert same["points_dtype"]["same"] and "measured in" not in format_report(same)
    cfg = build_config(step_model=spec, steps=str(_file(tmp_path, ROWS, {"dtype": "float32"})), calibrate=None, also=())
    assert execute(cfg, output=str(tmp_path / "runs"), json_path=str(tmp_path / "r.json")) == 0
    assert json.loads((tmp_path / "r.json").read_text())["metrics"]["points_dtype"]["measured"] == "float32"


def test_a_torch_profile_jsons_dtype_is_checked_like_its_points(tmp_path):
    prof = tmp_path / "prof.json"
    prof.write_text(json.dumps({"format": 3, "kind": "step-profile",
                                "engine": {"name": "torch", "tp": 1, "dtype": "float32", "device": "cuda: NVIDIA H100"},
                                "measured_steps": _profile_steps(ROWS)}))
    rep = check_step_model("roofline:hardware=H100,model=Qwen3-8B", prof)
    assert rep["points_dtype"] == {"measured": "float32", "priced": "bfloat16", "same": False}
