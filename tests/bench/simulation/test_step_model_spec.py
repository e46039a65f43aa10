"""The check of a roofline against {B, q, C, ms} points (step_model_spec.check_step_model): the
points hold device time, the step totals add the model's host time to it, and the report says
which part is measured and which modelled instead of calling the sum measured."""

import json

import pytest

from samspec_bench.bench.simulation.step_model_spec import check_step_model, format_report

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
