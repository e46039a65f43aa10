"""Bad and unusual inputs of `samspec-bench step-model --steps`: point files with non-finite,
huge or non-integer B, q, C or ms; measured step tables with NaN, empty, non-numeric, infinite,
negative or zero cells; `rollout profile` JSON (format 3) whose measured steps use step-feature
names; the shape and device a points file says it measured against the roofline's."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from samspec_bench.bench.simulation.fitted_step_model import fit_from_steps, step_features
from samspec_bench.bench.simulation.measured_points import device_check, load_points, measured_shape, shape_check
from samspec_bench.bench.simulation.step_model_spec import check_step_model, format_report, load_measured_steps
from samspec_bench.cli import group
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import load_shape

SPEC = "roofline:hardware=H100,model=Qwen3-8B,mode=graph"
HEADER = ("arm,source,step,num_running,num_scheduled_tokens,num_prefill_tokens,num_drafted,num_decode_reqs,"
          "context_tokens,speculative,time_s")
GOOD = ["off,measured,0,4,4,0,0,4,400,False,0.05", "off,measured,1,4,16,0,12,4,404,True,0.06",
        "off,measured,2,4,4,0,0,4,420,False,0.05"]


def _run(args, tmp_path):
    return CliRunner().invoke(group, ["step-model", *args, "--output", str(tmp_path / "runs")])


# ---------------- defect 1: point files ----------------

@pytest.mark.parametrize("cell, key", [
    ('"B": Infinity', "B"), ('"q": Infinity', "q"), ('"C": Infinity', "C"), ('"B": 1e300', "B"),
    ('"B": NaN', "B"), ('"B": 8.5', "B"), ('"q": 1.5', "q"), ('"C": 1024.7', "C"), ('"B": "8"', "B"),
    ('"B": true', "B"), ('"C": -1', "C"), ('"q": 0', "q"), ('"B": 100000000000000000000', "B"),
    ('"ms": Infinity', "ms"), ('"ms": NaN', "ms"), ('"ms": "7.2"', "ms"), ('"ms": true', "ms"), ('"ms": 0', "ms"),
    ('"ms": 1e400', "ms")])
def test_a_bad_point_value_is_a_one_line_error_naming_the_line_and_key(tmp_path, cell, key):
    base = {"B": "8", "q": "1", "C": "1024", "ms": "7.2"}
    k, v = cell.split(": ", 1)
    base[k.strip('"')] = v
    body = ", ".join(f'"{a}": {b}' for a, b in base.items())
    p = tmp_path / "p.jsonl"
    p.write_text('{"meta": {}}\n{"B": 1, "q": 1, "C": 64, "ms": 7.0}\n{' + body + "}\n")
    with pytest.raises(UserError, match=rf"line 3: {key}=") as e:
        load_points(p)
    assert "\n" not in str(e.value) and str(p) in str(e.value)
    res = _run(["--step-model", SPEC, "--steps", str(p)], tmp_path)
    assert isinstance(res.exception, UserError), res.output
    assert not (tmp_path / "runs").exists()


def test_a_meta_line_that_is_not_an_object_is_refused(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"meta": "H100"}\n{"B": 1, "q": 1, "C": 64, "ms": 7.0}\n{"B": 2, "q": 1, "C": 64, "error": "oom"}\n')
    with pytest.raises(UserError, match="line 1: the meta line holds str"):
        load_points(p)


def test_a_second_meta_line_is_refused_naming_both_lines(tmp_path):
    # two files joined: the second device's meta would silently replace the first's
    p = tmp_path / "p.jsonl"
    p.write_text('{"meta": {"device": "NVIDIA H100 80GB HBM3"}}\n{"B": 1, "q": 1, "C": 64, "ms": 7.0}\n'
                 '{"meta": {"device": "NVIDIA A100-SXM4-40GB"}}\n{"B": 2, "q": 1, "C": 64, "ms": 9.0}\n')
    with pytest.raises(UserError, match=r"line 3 is a second meta line \(the first is line 1\)"):
        load_points(p)


def test_a_point_measured_twice_with_two_times_is_refused_and_an_exact_repeat_counted(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"B": 8, "q": 1, "C": 64, "ms": 8.1}\n{"B": 8, "q": 4, "C": 64, "ms": 8.9}\n'
                 '{"B": 8, "q": 1, "C": 64, "ms": 99}\n')
    with pytest.raises(UserError, match=r"line 3 measures B=8 q=1 C=64 again \(99 ms; line 1: 8.1 ms\)"):
        load_points(p)
    p.write_text('{"B": 8, "q": 1, "C": 64, "ms": 8.1}\n{"B": 8.0, "q": 1, "C": 64, "ms": 8.1}\n')
    rows, meta = load_points(p)
    assert len(rows) == 1 and meta == {"rows_skipped_duplicate": 1}


def test_fields_beside_the_point_are_counted_by_name_and_shown(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"B": 8, "q": 1, "C": 1024, "ms": 8.1, "ms_std": 0.2}\n'
                 '{"B": 8, "q": 4, "C": 1024, "ms": 8.9, "ms_std": 0.3, "tree_ms": 9.0}\n')
    rows, meta = load_points(p)
    assert meta == {"fields_ignored": {"ms_std": 2, "tree_ms": 1}}
    res = _run(["--step-model", SPEC, "--steps", str(p)], tmp_path)
    assert res.exit_code == 0, res.output
    assert "fields of the point rows not read: ms_std (2 rows), tree_ms (1 rows)" in res.output


def test_integral_floats_are_whole_numbers_and_the_largest_exact_integer_prices(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"B": 8.0, "q": 1, "C": 1024.0, "ms": 7}\n{"B": 9007199254740992, "q": 1, "C": 0, "ms": 7.2}\n')
    rows, _ = load_points(p)
    assert rows[0] == {"B": 8.0, "q": 1.0, "C": 1024.0, "ms": 7.0} and rows[1]["B"] == 2.0 ** 53
    res = _run(["--step-model", SPEC, "--steps", str(p)], tmp_path)
    assert res.exit_code == 0, res.output


# ---------------- defect 2: measured step tables ----------------

@pytest.mark.parametrize("row, column, value", [
    ("off,measured,1,4,4,0,0,4,404,False,nan", "time_s", "'nan'"),
    ("off,measured,1,4,4,0,0,4,404,False,", "time_s", "''"),
    ("off,measured,1,four,4,0,0,4,404,False,0.05", "num_running", "'four'"),
    ("off,measured,1,4,4,0,0,4,404,False,inf", "time_s", "'inf'"),
    ("off,measured,1,4,4,0,0,4,404,False,-0.01", "time_s", "'-0.01'"),
    ("off,measured,1,-4,4,0,0,4,404,False,0.05", "num_running", "'-4'"),
    ("off,measured,1,4,4,0,0,4,-404,False,0.05", "context_tokens", "'-404'"),
    ("off,measured,1,4,4,0,0,4,inf,False,0.05", "context_tokens", "'inf'"),
    ("off,measured,1,4,4,0,0,4,404,maybe,0.05", "speculative", "'maybe'"),
    ("off,measured,1,4,4,0,0", "num_decode_reqs", "None")])
def test_a_bad_step_cell_is_a_one_line_error_naming_line_and_column(tmp_path, row, column, value):
    p = tmp_path / "steps.csv"
    p.write_text("\n".join([HEADER, GOOD[0], "sim,simulated,0,4,4,0,0,4,400,False,nan", row]) + "\n")
    with pytest.raises(UserError, match=rf"line 4, column {column}: {value} ") as e:
        load_measured_steps(p)
    assert "\n" not in str(e.value) and str(p) in str(e.value)
    res = _run(["--step-model", SPEC, "--steps", str(p)], tmp_path)
    assert isinstance(res.exception, UserError), res.output


def test_the_command_exits_2_with_one_line_for_a_bad_point_and_a_bad_step(tmp_path):
    import subprocess
    import sys

    (tmp_path / "p.jsonl").write_text('{"B": Infinity, "q": 1, "C": 1024, "ms": 7.2}\n')
    (tmp_path / "steps.csv").write_text("\n".join([HEADER, GOOD[0], "off,measured,1,4,4,0,0,4,404,False,nan"]) + "\n")
    for name, says in (("p.jsonl", "line 1: B=inf"), ("steps.csv", "line 3, column time_s: 'nan'")):
        got = subprocess.run([sys.executable, "-m", "samspec_bench.cli", "step-model", "--step-model", SPEC, "--steps",
                              str(tmp_path / name), "--output", str(tmp_path / "runs")], capture_output=True, text=True)
        assert got.returncode == 2 and says in got.stderr and got.stderr.count("\n") == 1, got.stderr


def test_zero_time_steps_are_counted_and_shown_and_kept_out_of_the_per_step_errors(tmp_path):
    p = tmp_path / "steps.csv"
    p.write_text("\n".join([HEADER, *GOOD, "off,measured,3,4,4,0,0,4,430,False,0"]) + "\n")
    rep = check_step_model(SPEC, p)
    assert rep["overall"]["steps"] == 3 and rep["overall"]["zero_time_steps"] == 1
    assert rep["overall"]["measured_total_s"] == pytest.approx(0.16)
    assert "1 steps measured 0 s" in format_report(rep)
    out = tmp_path / "r.json"
    res = _run(["--step-model", SPEC, "--steps", str(p), "--json", str(out)], tmp_path)
    assert res.exit_code == 0, res.output
    assert "1 steps measured 0 s" in res.output
    assert json.loads(out.read_text())["metrics"]["overall"]["zero_time_steps"] == 1


def test_a_table_whose_every_time_is_zero_is_refused(tmp_path):
    p = tmp_path / "steps.csv"
    p.write_text("\n".join([HEADER, "off,measured,0,4,4,0,0,4,400,False,0"]) + "\n")
    with pytest.raises(UserError, match="every measured step time is 0"):
        load_measured_steps(p)


def test_unknown_context_is_allowed_and_counted(tmp_path):
    p = tmp_path / "steps.csv"
    p.write_text("\n".join([HEADER, *GOOD, "off,measured,3,4,4,0,0,4,,False,0.05"]) + "\n")
    rep = check_step_model(SPEC, p)
    assert rep["context_known"] is False and rep["context_unknown_steps"] == 1
    assert "UNKNOWN (1 of 4 steps without): priced as 0" in format_report(rep)


# ---------------- defect 3: a format-3 profile as --steps ----------------

def _feature_profile(tmp_path, tab):
    feats = step_features(tab)
    doc = {"format": 3, "kind": "step-profile", "engine": "reference",
           "measured_steps": {"time_s": np.asarray(tab["time_s"], dtype=float).tolist(),
                              **{k: np.asarray(v, dtype=float).tolist() for k, v in feats.items()}},
           "model": fit_from_steps([tab]).describe()}
    p = tmp_path / "prof.json"
    p.write_text(json.dumps(doc))
    return p


def _table(n=30, seed=1):
    rng = np.random.default_rng(seed)
    run = rng.integers(1, 9, n)
    drafted = run * 3 * rng.integers(0, 2, n)
    prefill = np.where(rng.random(n) < 0.2, 64, 0)
    ctx = run * rng.integers(10, 400, n)
    return {"time_s": 2e-3 + 1e-3 * run + 2e-4 * drafted + 1e-5 * prefill + 1e-7 * ctx, "num_running": run,
            "num_scheduled_tokens": run + drafted + prefill, "num_prefill_tokens": prefill, "num_drafted": drafted,
            "num_decode_reqs": run, "speculative": drafted > 0, "context_tokens": ctx}


def test_a_rollout_profile_with_feature_names_reads_as_its_steps(tmp_path):
    tab = _table()
    p = _feature_profile(tmp_path, tab)
    got = load_measured_steps(p)
    want, have = step_features(tab), step_features(got)
    assert set(have) == set(want)
    for k in want:
        assert np.allclose(have[k], want[k]), k
    assert np.allclose(got["num_running"], tab["num_running"]) and np.allclose(got["time_s"], tab["time_s"])


def test_the_command_checks_a_profile_against_its_own_measured_steps(tmp_path):
    p = _feature_profile(tmp_path, _table())
    out = tmp_path / "r.json"
    res = _run(["--step-model", str(p), "--steps", str(p), "--json", str(out)], tmp_path)
    assert res.exit_code == 0, res.output
    overall = json.loads(out.read_text())["metrics"]["overall"]
    assert overall["steps"] == 30 and abs(overall["total_error"]) < 1e-6


def test_a_profile_with_unequal_or_bad_measured_steps_is_a_one_line_error(tmp_path):
    p = _feature_profile(tmp_path, _table(5))
    doc = json.loads(p.read_text())
    doc["measured_steps"]["running"] = doc["measured_steps"]["running"][:3]
    p.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="running has 3 values, time_s 5"):
        load_measured_steps(p)
    doc["measured_steps"]["running"] = [1, 2, None, 4, 5]
    p.write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"measured step 3, column running: None "):
        load_measured_steps(p)
    del doc["measured_steps"]["running"]
    p.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="running") as e:
        load_measured_steps(p)
    assert "decode_tokens" in str(e.value) or "running" in str(e.value)


# ---------------- defect 4: shape from model_shape, device against the hardware ----------------

SHARED_META = {"device": "NVIDIA H100 80GB HBM3", "model_shape": "Qwen3-8B (hidden 4096, 36 layers, 32 q heads, "
               "8 kv heads, head_dim 128, intermediate 12288, vocab 151936), random weights"}


def test_the_shape_is_read_from_a_model_shape_string():
    assert measured_shape(SHARED_META) == {"hidden_size": 4096, "num_hidden_layers": 36}
    assert shape_check(SHARED_META, load_shape("Qwen3-8B"))["same"] is True
    assert shape_check(SHARED_META, load_shape("Qwen3-32B"))["same"] is False
    assert measured_shape({"model_shape": "Qwen3-8B, random weights"}) is None


@pytest.mark.parametrize("device, same", [("NVIDIA H100 80GB HBM3", True), ("NVIDIA A100-SXM4-80GB", False),
                                          ("NVIDIA H200", False), ("a mystery card", None)])
def test_the_device_is_compared_with_the_hardware(device, same):
    got = device_check({"device": device}, "H100 SXM 80GB")
    assert (got if got is None else got["same"]) is same


def test_points_of_another_device_are_warned_and_stored(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"meta": {**SHARED_META, "device": "NVIDIA A100"}}) + "\n"
                 '{"B": 8, "q": 1, "C": 1024, "ms": 7.2}\n')
    out = tmp_path / "r.json"
    res = _run(["--step-model", SPEC, "--steps", str(p), "--json", str(out)], tmp_path)
    assert res.exit_code == 0, res.output
    assert "WARNING: the points were measured on 'NVIDIA A100' (A100)" in res.output
    assert "the points were measured on hidden" not in res.output   # same shape: no shape warning
    m = json.loads(out.read_text())["metrics"]
    assert m["points_device"]["same"] is False and m["points_device"]["measured_hardware"] == "A100"
    assert m["points_shape"]["same"] is True


def test_the_shared_h100_points_raise_no_warning(shared_data, tmp_path):
    path = shared_data / "hardware" / "h100_qwen3-8b_step_physics.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    out = tmp_path / "r.json"
    res = _run(["--step-model", SPEC, "--steps", str(path), "--json", str(out)], tmp_path)
    assert res.exit_code == 0, res.output
    assert "WARNING" not in res.output
    m = json.loads(out.read_text())["metrics"]
    assert m["points_shape"]["same"] is True and m["points_device"]["same"] is True
