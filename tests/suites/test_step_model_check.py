"""`samspec-bench step-model`'s flags (suites/step_model_check.py): bad ones are refused before
any work is done, each named by its own flag; --calibrate's points checked for the GPU whatever
their meta's form."""

import json

import pytest

from samspec_bench.errors import UserError
from samspec_bench.suites.step_model_check import build_config, execute


def test_a_calibrate_path_that_is_a_folder_is_refused_before_the_fit(tmp_path):
    with pytest.raises(UserError, match=r"--calibrate .*: a folder; give the path of the calibration file") as e:
        build_config(step_model="roofline:hardware=H100,model=Qwen3-8B", steps="p.jsonl", calibrate=str(tmp_path),
                     also=())
    assert "calibration.json" in str(e.value)
    cfg = build_config(step_model="roofline:hardware=H100,model=Qwen3-8B", steps="p.jsonl",
                       calibrate=str(tmp_path / "c.json"), also=())
    assert cfg.calibrate == str(tmp_path / "c.json")


def _points(path, meta):
    rows = [{"B": b, "q": q, "C": 1024, "ms": 5.0 + b + q} for b in (1, 8) for q in (1, 4)]
    path.write_text("\n".join(json.dumps(r) for r in [{"meta": meta}, *rows]) + "\n")
    return str(path)


def test_an_unreadable_also_file_is_named_as_also(tmp_path):
    steps = _points(tmp_path / "p.jsonl", {"device": "NVIDIA H100 80GB HBM3"})
    missing = tmp_path / "missing.jsonl"
    cfg = build_config(step_model="roofline:hardware=H100,model=Qwen3-8B", steps=steps,
                       calibrate=str(tmp_path / "c.json"), also=(f"Qwen3-32B={missing}",))
    with pytest.raises(UserError) as e:
        execute(cfg, output=str(tmp_path / "runs"))
    assert str(e.value).startswith(f"--also Qwen3-32B={missing}: cannot read it") and "--steps" not in str(e.value)
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "runs").exists()


def test_calibrate_refuses_torch_profiler_points_of_another_gpu(tmp_path):
    meta = {"profiler": "torch", "model": "Qwen3-8B", "layers": 36,
            "device": {"device": "cuda", "type": "cuda", "name": "NVIDIA H100 80GB HBM3"}}
    cfg = build_config(step_model="roofline:hardware=H200,model=Qwen3-8B", steps=_points(tmp_path / "p.jsonl", meta),
                       calibrate=str(tmp_path / "c.json"), also=())
    with pytest.raises(UserError, match=r"measured on 'NVIDIA H100 80GB HBM3' \(H100\), the spec fits the H200 row"):
        execute(cfg, output=str(tmp_path / "runs"))
    assert not (tmp_path / "c.json").exists()


def test_a_tp_8_spec_on_the_h100_rows_one_gpu_calibration_is_warned_in_terminal_and_json(tmp_path, capsys):
    steps = _points(tmp_path / "p.jsonl", {"device": "NVIDIA H100 80GB HBM3", "tp": 8})
    cfg = build_config(step_model="roofline:hardware=H100,model=Qwen3-8B,tp=8", steps=steps, calibrate=None, also=())
    assert execute(cfg, output=str(tmp_path / "runs"), json_path=str(tmp_path / "r.json")) == 0
    tc = json.loads((tmp_path / "r.json").read_text())["metrics"]["calibration_tp"]
    assert (tc["measured"], tc["priced"], tc["same"]) == (1, 8, False)
    assert f"WARNING: {tc['warning']}" in capsys.readouterr().out.splitlines()
