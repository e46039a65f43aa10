"""What `step-model --calibrate` (roofline_calibration.calibrate_to_file) refuses before it fits
and writes: points whose meta names another model shape or another GPU than the row, fewer points
than fitted parameters, an output path the spec cannot carry (a comma) or that is one of the
inputs. Each is one line, exit 2, and leaves no calibration file behind (nor an overwritten input)."""

import json

import click
import pytest
from click.testing import CliRunner

from samspec_bench.bench.simulation.roofline_calibration import FITTED
from samspec_bench.cli import main

# the command as a user runs it: a UserError becomes one line on stderr and exit 2
_CLI = click.Command("samspec-bench", add_help_option=False, context_settings={"ignore_unknown_options": True},
                     params=[click.Argument(["argv"], nargs=-1, type=click.UNPROCESSED)],
                     callback=lambda argv: main(list(argv)))

SHAPE_8B = {"hidden": 4096, "layers": 36, "q_heads": 32, "kv_heads": 8, "head_dim": 128, "inter": 12288, "vocab": 151936}


def _points(path, n=12, device="NVIDIA H100 80GB HBM3", model=SHAPE_8B):
    """A points file as tools/step_physics.py writes it ({"info": ...} first)."""
    lines = [json.dumps({"info": {"device": device, "dtype": "torch.bfloat16", "model": model}})]
    grid = [(B, q) for B in (1, 8, 32, 64) for q in (1, 4, 9)][:n]
    lines += [json.dumps({"B": B, "q": q, "C": 1024, "ms": round(7.0 + 0.3 * B + 0.1 * q, 4)}) for B, q in grid]
    path.write_text("\n".join(lines) + "\n")
    return path


def _refused(tmp_path, steps, needle, out=None, spec="roofline:hardware=H100,model=Qwen3-8B", also=()):
    out = out or tmp_path / "cal.json"
    argv = ["step-model", "--step-model", spec, "--steps", str(steps), "--calibrate", str(out),
            "--output", str(tmp_path / "runs"), *[a for x in also for a in ("--also", x)]]
    res = CliRunner().invoke(_CLI, argv)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], res.stderr
    assert not (tmp_path / "runs").exists()
    return out


def test_too_few_points_for_the_fitted_parameters_are_refused(tmp_path):
    out = _refused(tmp_path, _points(tmp_path / "p.jsonl", n=len(FITTED)), f"7 point(s) for {len(FITTED)} fitted parameters")
    assert not out.exists()


def test_points_of_another_shape_are_refused_before_the_fit(tmp_path):
    p32 = _points(tmp_path / "p32.jsonl", model={**SHAPE_8B, "hidden": 5120, "layers": 64, "q_heads": 64})
    out = _refused(tmp_path, p32, "the points were measured on hidden 5120, 64 layers")
    assert not out.exists()
    # Qwen3-32B's points given as Qwen2.5-32B's (same hidden size and layers, other heads and widths)
    q3_32b = {"hidden": 5120, "layers": 64, "q_heads": 64, "kv_heads": 8, "head_dim": 128, "inter": 25600, "vocab": 151936}
    _refused(tmp_path, _points(tmp_path / "p8.jsonl"), "num_attention_heads 64 (priced 40)",
             also=[f"Qwen2.5-32B={_points(tmp_path / 'q.jsonl', model=q3_32b)}"])


def test_points_of_another_gpu_are_refused_naming_the_row_to_give(tmp_path):
    p = _points(tmp_path / "p.jsonl", device="NVIDIA H200")
    _refused(tmp_path, p, "measured on 'NVIDIA H200' (H200), the spec fits the H100 row; give hardware=H200")


def test_points_whose_meta_says_tp_above_1_are_refused_before_the_fit(tmp_path):
    p = _points(tmp_path / "p.jsonl")
    lines = p.read_text().splitlines()
    info = json.loads(lines[0])
    info["info"]["tensor_parallel_size"] = 4          # vLLM's name for it
    p.write_text("\n".join([json.dumps(info)] + lines[1:]) + "\n")
    out = _refused(tmp_path, p, "was measured at tp=4 (meta tensor_parallel_size); the fit prices one GPU")
    assert not out.exists()


def test_an_output_path_with_a_comma_is_refused_before_the_fit(tmp_path):
    out = _refused(tmp_path, _points(tmp_path / "p.jsonl"), "a comma in the path", out=tmp_path / "a,b.json")
    assert not out.exists()


def test_an_output_path_that_is_an_input_is_refused_and_the_input_kept(tmp_path):
    p = _points(tmp_path / "p.jsonl")
    before = p.read_text()
    _refused(tmp_path, p, "one of the points files the fit reads", out=tmp_path / "." / "p.jsonl")
    assert p.read_text() == before


@pytest.mark.parametrize("n", [len(FITTED) + 1])
def test_enough_points_of_the_row_and_shape_are_fitted(tmp_path, n):
    out = tmp_path / "sub" / "cal.json"
    res = CliRunner().invoke(_CLI, ["step-model", "--step-model", "roofline:hardware=H100,model=Qwen3-8B",
                                     "--steps", str(_points(tmp_path / "p.jsonl", n=n)), "--calibrate", str(out),
                                     "--output", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["fitted_on"][0]["points"] == n


def test_torch_profiler_points_of_another_gpu_are_refused_by_the_fit_itself(tmp_path):
    """Every caller of calibrate_to_file gets the device check, whatever the meta's form."""
    from samspec_bench.bench.simulation.roofline_calibration import calibrate_to_file
    from samspec_bench.bench.simulation.step_model_spec import load_step_model
    from samspec_bench.errors import UserError
    p = _points(tmp_path / "p.jsonl", n=3)
    lines = p.read_text().splitlines()
    meta = {"meta": {"profiler": "torch", "model": "Qwen3-8B", "layers": 36,
                     "device": {"device": "cuda", "type": "cuda", "name": "NVIDIA H200"}}}
    p.write_text("\n".join([json.dumps(meta)] + lines[1:]) + "\n")
    with pytest.raises(UserError) as e:
        calibrate_to_file(load_step_model("roofline:hardware=H100,model=Qwen3-8B"), str(p), (), str(tmp_path / "c.json"))
    msg = str(e.value)
    assert "\n" not in msg and f"{p} was measured on 'NVIDIA H200' (H200)" in msg and "give hardware=H200" in msg
    assert not (tmp_path / "c.json").exists()


def test_the_fit_records_its_measured_range_and_points_of_another_dtype(tmp_path):
    from samspec_bench.bench.simulation.roofline_calibration import calibrate_to_file
    from samspec_bench.bench.simulation.step_model_spec import load_step_model
    p = _points(tmp_path / "p.jsonl", n=len(FITTED) + 1)   # B 1, 8, 32 x q 1, 4, 9 at C 1024, cut to 8 points
    p.write_text(p.read_text().replace("torch.bfloat16", "torch.float32"))
    said = []
    doc = calibrate_to_file(load_step_model("roofline:hardware=H100,model=Qwen3-8B"), str(p), (),
                            str(tmp_path / "c.json"), say=said.append)
    assert doc["measured_range"]["running"] == [1.0, 32.0] and doc["measured_range"]["draft_tokens"] == [0.0, 96.0]
    assert doc["measured_range"]["context_tokens"] == [1024.0, 32 * 1024.0]
    assert doc["dtype"] == "bfloat16" and doc["fitted_on"][0]["dtype"] == "float32"
    assert [(m["file"], m["measured"], m["priced"]) for m in doc["dtype_mismatch"]] == [(str(p), "float32", "bfloat16")]
    warned = [s for s in said if "measured in float32" in s]
    assert len(warned) == 1 and warned[0].startswith("WARNING: --calibrate: ") and "\n" not in warned[0]
    m = load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,calibration={tmp_path / 'c.json'}")
    assert m.valid_range()["running"] == [1.0, 32.0]
    # step_physics.py's meta states no tp: recorded unknown, naming the file; priced at tp=2 it is said
    assert doc["tp"] is None and doc["fitted_on"][0]["tp"] is None and f"the meta of {p} records no tp" in doc["tp_source"]
    two = load_step_model(f"roofline:hardware=H100,model=Qwen3-8B,tp=2,calibration={tmp_path / 'c.json'}")
    assert "the tp of the points they were fitted on is unknown; priced at tp=2" in two.calibration_tp()["warning"]


def test_the_calibrations_tp_is_1_only_where_every_points_files_meta_states_it():
    from samspec_bench.bench.simulation.roofline_calibration import _points_tp
    assert _points_tp([{"file": "a.jsonl", "tp": 1}, {"file": "b.jsonl", "tp": 1}])[0] == 1
    tp, why = _points_tp([{"file": "a.jsonl", "tp": 1}, {"file": "b.jsonl", "tp": None}])
    assert tp is None and why.startswith("the meta of b.jsonl records no tp")
