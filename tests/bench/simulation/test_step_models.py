"""`--step-model` values -> step models (profile files of every format, roofline specs), every
bad value as a one-line UserError, measured steps from profiles and run folders, and the check
of a step model against measured steps (function and CLI)."""

import csv
import json

import numpy as np
import pytest

from samspec_bench.bench.simulation import hardware as hwmod
from samspec_bench.bench.simulation.roofline import RooflineStepModel
from samspec_bench.bench.simulation.fitted_step_model import FEATURES, StepTimeModel, extrapolation, fit_from_steps
from samspec_bench.bench.simulation.step_model_spec import (compare, format_report, load_measured_steps, load_step_model,
                                                        parse_roofline)
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import CATALOGUE

FAKE_CPU = {"gemm_flops": 5e10, "gemv_bytes_per_s": 2e10, "sum_bytes_per_s": 1e10, "eager_op_s": 5e-6,
            "measured_at": "now", "method": "fake"}


@pytest.fixture(autouse=True)
def _fake_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("SAMSPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hwmod, "probe_cpu", lambda dtype, threads: dict(FAKE_CPU))


def table(n=60, seed=0, spec=False):
    """A measured-like step table (scheduler column names) with times from a known linear model."""
    rng = np.random.default_rng(seed)
    run = rng.integers(1, 17, n)
    drafted = run * 3 * rng.integers(0, 2, n) if spec else np.zeros(n, dtype=int)
    ctx = run * rng.integers(10, 400, n)
    t = 2e-3 + 1e-3 * run + 2e-4 * drafted + 1e-7 * ctx
    return {"time_s": t, "num_running": run, "num_waiting": np.zeros(n, dtype=int), "num_scheduled_tokens": run + drafted,
            "num_prefill_tokens": np.zeros(n, dtype=int), "num_decode_reqs": run, "num_drafted": drafted,
            "speculative": drafted > 0, "context_tokens": ctx}


# ---------------- specs ----------------

def test_none_and_empty_mean_no_step_model():
    assert load_step_model(None) is None and load_step_model("  ") is None


def test_roofline_spec_with_every_key():
    m = load_step_model("roofline:hardware=h100,model=Qwen/Qwen3-32B,tp=8,dtype=float16,mode=eager")
    assert isinstance(m, RooflineStepModel)
    assert (m.tp, m.dtype, m.mode, m.shape.name) == (8, "float16", "eager", "Qwen/Qwen3-32B")
    d = m.describe()
    assert d["kind"] == "roofline" and d["spec"].startswith("roofline:") and m.valid_range() is None


def test_roofline_spec_defaults():
    m = load_step_model("roofline:hardware=910C,model=Qwen3-235B-A22B")
    assert (m.tp, m.dtype, m.mode) == (1, "bfloat16", "eager")       # Ascend's default mode: the seed ran eager
    assert load_step_model("roofline:hardware=H200,model=Qwen3-8B").mode == "graph"
    c = load_step_model("roofline:hardware=cpu,model=Qwen3-0.6B,threads=2")
    assert c.dtype == "float32" and "2 thread" in c.hw.name


def test_attention_tile_in_the_spec_replaces_the_rows_and_says_so():
    shipped = load_step_model("roofline:hardware=H100,model=Qwen3-8B")
    fa3 = load_step_model("roofline:hardware=H100,model=Qwen3-8B,attention_tile=128")
    assert shipped.eff["attention_tile_rows"] == 64 and fa3.eff["attention_tile_rows"] == 128
    # the other calibrated classes stay; the source keeps the calibration and names the override
    assert fa3.eff["attention_compute"] == shipped.eff["attention_compute"]
    src = fa3.hw.sources["op_efficiency"]
    assert "calibrated" in src and "attention tile 128 query rows for every step (one kernel): given in --step-model" in src
    assert shipped.eff["attention_split_below"] > 0 and fa3.eff["attention_split_below"] == 0   # no kernel switch
    # Qwen3-8B packs 4 query heads per KV head: q=17 is 68 rows, two 64-row tiles or one of 128
    step = dict(decode_tokens=8, draft_tokens=8 * 16, running=8, context_tokens=8 * 32768)
    a64, a128 = (m.components(**step)["ops"]["attention"]["t_compute_s"] for m in (shipped, fa3))
    assert float(a128) == pytest.approx(float(a64))
    step["draft_tokens"] = 8 * 32                     # q=33: 132 rows, three 64-row tiles or two of 128
    a64, a128 = (m.components(**step)["ops"]["attention"]["t_compute_s"] for m in (shipped, fa3))
    assert float(a128) / float(a64) == pytest.approx(256 / 192)
    none = load_step_model("roofline:hardware=910C,model=Qwen3-8B,attention_tile=1")
    assert none.eff["attention_tile_rows"] == 1


def test_roofline_spec_takes_a_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CATALOGUE["Qwen/Qwen3-8B"]))
    m = load_step_model(f"roofline:hardware=A100,model={tmp_path / 'config.json'},tp=2")
    assert m.shape.total_params == load_step_model("roofline:hardware=A100,model=Qwen3-8B").shape.total_params


@pytest.mark.parametrize("spec, says", [
    ("roofline:hardware=H100", "missing model"),
    ("roofline:model=Qwen3-8B", "missing hardware"),
    ("roofline:hardware=H100,model=Qwen3-8B,tp=0", "tp='0'"),
    ("roofline:hardware=H100,model=Qwen3-8B,tp=two", "tp='two'"),
    ("roofline:hardware=H100,model=Qwen3-8B,tp=5", "does not divide"),
    ("roofline:hardware=H100,model=Qwen3-8B,dtype=fp8", "dtype='fp8'"),
    ("roofline:hardware=H100,model=Qwen3-8B,mode=fast", "mode='fast'"),
    ("roofline:hardware=H100,model=Qwen3-8B,speed=9", "unknown key 'speed'"),
    ("roofline:hardware=H100,model=Qwen3-8B,tp=2,tp=4", "tp given twice"),
    ("roofline:hardware=H100,model", "not key=value"),
    ("roofline:hardware=H100,model=Qwen3-8B,threads=2", "threads applies to hardware=cpu only"),
    ("roofline:hardware=H100,model=Qwen3-8B,attention_tile=0", "attention_tile='0'"),
    ("roofline:hardware=H100,model=Qwen3-8B,attention_tile=wide", "attention_tile='wide'"),
    ("roofline:hardware=B300,model=Qwen3-8B", "H100, H200, A100, H20, 910B, 910C, cpu"),
    ("roofline:hardware=H100,model=Qwen9-1T", "not in the catalogue"),
    ("roofline:hardware=cpu,model=Qwen3-8B,tp=2", "tp=2"),
    ("no/such/profile.json", "no such file"),
])
def test_bad_specs_are_one_line_user_errors(spec, says):
    with pytest.raises(UserError) as e:
        load_step_model(spec)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_config_without_needed_fields(tmp_path):
    cfg = {k: v for k, v in CATALOGUE["Qwen/Qwen3-8B"].items() if k not in ("num_attention_heads", "vocab_size")}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match="missing num_attention_heads, vocab_size"):
        load_step_model(f"roofline:hardware=H100,model={tmp_path}")


def test_parse_roofline_is_case_insensitive_in_keys():
    assert parse_roofline("roofline:Hardware=H100, MODEL=Qwen3-8B") == {"hardware": "H100", "model": "Qwen3-8B"}


# ---------------- profile files ----------------

def test_profile_files_of_formats_2_and_3(tmp_path):
    fitted = fit_from_steps([table()], source="synthetic")
    fitted.save(tmp_path / "m2.json")
    m2 = load_step_model(str(tmp_path / "m2.json"))
    assert isinstance(m2, StepTimeModel) and m2.coef == pytest.approx(fitted.coef)
    d = m2.describe()
    assert d["kind"] == "fitted-profile" and "seconds" in d["units"]
    assert set(m2.valid_range()) == set(fitted.fit["valid_range"]) >= set(fitted.fit["ranges"]) and all(lo <= hi for lo, hi in m2.valid_range().values())
    tab = table()
    prof = {"format": 3, "kind": "step-profile", "engine": {"name": "reference", "device": "cpu"}, "date": "today",
            "measured_steps": {k: np.asarray(v).tolist() for k, v in tab.items()}, "model": fitted.describe()}
    (tmp_path / "p3.json").write_text(json.dumps(prof))
    m3 = load_step_model(str(tmp_path / "p3.json"))
    assert m3.coef == pytest.approx(fitted.coef) and m3.fit["engine"]["name"] == "reference"
    (tmp_path / "p9.json").write_text(json.dumps({"format": 9}))
    with pytest.raises(UserError, match="not a step-time model"):
        load_step_model(str(tmp_path / "p9.json"))


def test_constant_model_says_it_counts_steps():
    c = StepTimeModel.constant(1.0)
    d = c.describe()
    assert d["kind"] == "constant-steps" and "not time" in d["units"] and c.valid_range() == {}


def test_roofline_never_flags_extrapolation():
    m = load_step_model("roofline:hardware=H100,model=Qwen3-8B")
    big = table()
    big["context_tokens"] = big["context_tokens"] * 1000
    assert extrapolation(m, big) == {}
    fitted = fit_from_steps([table()])
    assert "context_tokens" in extrapolation(fitted, big)


# ---------------- measured steps and the check ----------------

def test_measured_steps_from_a_profile_and_from_a_run_folder(tmp_path):
    tab = table(20)
    (tmp_path / "p.json").write_text(json.dumps({"format": 3, "measured_steps": {k: np.asarray(v).tolist()
                                                                                 for k, v in tab.items()}}))
    got = load_measured_steps(tmp_path / "p.json")
    assert np.allclose(got["time_s"], tab["time_s"]) and got["speculative"].dtype == float
    run = tmp_path / "run"
    run.mkdir()
    with (run / "steps.csv").open("w", newline="") as f:
        w = csv.writer(f)
        cols = list(tab)
        w.writerow(["arm", "source"] + cols)
        for i in range(20):
            w.writerow(["off", "measured"] + [tab[c][i] for c in cols])
            w.writerow(["off [sim]", "simulated"] + [tab[c][i] * 2 if c == "time_s" else tab[c][i] for c in cols])
    got = load_measured_steps(run)
    assert len(got["time_s"]) == 20 and np.allclose(got["time_s"], tab["time_s"]) and set(got["arm"]) == {"off"}


def test_measured_steps_bad_inputs(tmp_path):
    fit_from_steps([table()]).save(tmp_path / "m2.json")
    with pytest.raises(UserError, match="no measured_steps"):
        load_measured_steps(tmp_path / "m2.json")
    with pytest.raises(UserError, match="no steps.csv"):
        load_measured_steps(tmp_path)
    with pytest.raises(UserError, match="no such file"):
        load_measured_steps(tmp_path / "nope.csv")
    (tmp_path / "sim.csv").write_text("arm,source,time_s\nx,simulated,1\n")
    with pytest.raises(UserError, match="no measured steps"):
        load_measured_steps(tmp_path / "sim.csv")
    (tmp_path / "thin.csv").write_text("time_s,num_running\n1,2\n")
    with pytest.raises(UserError, match="num_scheduled_tokens"):
        load_measured_steps(tmp_path / "thin.csv")


def test_compare_reports_zero_error_for_the_true_model_and_the_error_of_a_wrong_one():
    tab = table(80, spec=True)
    true = StepTimeModel(2e-3, {**{f: 0.0 for f in FEATURES}, "decode_tokens": 1e-3, "draft_tokens": 2e-4,
                                "context_tokens": 1e-7})
    rep = compare(true, tab)
    assert rep["overall"]["total_error"] == pytest.approx(0, abs=1e-12)
    assert rep["overall"]["max_abs_rel_error"] == pytest.approx(0, abs=1e-12)
    double = StepTimeModel(4e-3, {**{f: 0.0 for f in FEATURES}, "decode_tokens": 2e-3, "draft_tokens": 4e-4,
                                  "context_tokens": 2e-7})
    rep2 = compare(double, tab)
    assert rep2["overall"]["total_error"] == pytest.approx(1.0)
    assert rep2["overall"]["median_abs_rel_error"] == pytest.approx(1.0)
    groups = {(g["num_running"], g["speculative"]) for g in rep2["groups"]}
    assert groups == set(zip(tab["num_running"].tolist(), tab["speculative"].tolist()))
    assert "total error +100.0%" in format_report(rep2)


def _decode_and_prefill_steps(n_decode: int, n_prefill: int) -> dict[str, np.ndarray]:
    """n_decode one-row decode steps (one token, short context) then n_prefill steps that
    prefill 8192 prompt tokens: the textbook memory-bound and compute-bound steps."""
    n = n_decode + n_prefill
    pre = np.r_[np.zeros(n_decode), np.full(n_prefill, 8192.0)]
    return {"time_s": np.full(n, 0.01), "num_running": np.ones(n), "num_waiting": np.zeros(n),
            "num_scheduled_tokens": np.r_[np.ones(n_decode), pre[n_decode:]], "num_prefill_tokens": pre,
            "num_drafted": np.zeros(n), "num_decode_reqs": np.r_[np.ones(n_decode), np.zeros(n_prefill)],
            "speculative": np.zeros(n, dtype=bool), "context_tokens": np.r_[np.full(n_decode, 100.0), np.zeros(n_prefill)]}


def test_compare_a_roofline_reports_its_bounding_terms():
    """On an H100 an 8B model's one-token decode step reads 16 GB of weights for 16 GFLOP
    (memory-bound), an 8192-token prefill computes 130 TFLOP (compute-bound); one GPU has no
    collectives, two do."""
    tab = _decode_and_prefill_steps(7, 5)
    rep = compare(load_step_model("roofline:hardware=H100,model=Qwen3-8B,tp=1"), tab)
    assert (rep["terms"]["steps_memory_bound"], rep["terms"]["steps_compute_bound"]) == (7, 5)
    assert rep["terms"]["share_comm"] == 0.0 and rep["terms"]["share_host"] > 0
    assert rep["context_known"]
    rep2 = compare(load_step_model("roofline:hardware=H100,model=Qwen3-8B,tp=2"), tab)
    assert rep2["terms"]["share_comm"] > 0


def test_check_step_model_and_the_command(tmp_path):
    from click.testing import CliRunner

    from samspec_bench.bench.simulation.step_model_spec import check_step_model
    from samspec_bench.cli import group
    from samspec_bench.reports.collect import collect
    from samspec_bench.results import load_result

    tab = table(25)
    (tmp_path / "p.json").write_text(json.dumps({"format": 3, "measured_steps": {k: np.asarray(v).tolist()
                                                                                 for k, v in tab.items()}}))
    spec = "roofline:hardware=cpu,model=Qwen3-0.6B"
    rep = check_step_model(spec, tmp_path / "p.json")
    assert rep["describe"]["kind"] == "roofline" and rep["overall"]["steps"] == 25 and rep["step_model_spec"] == spec
    out = tmp_path / "rep.json"
    res = CliRunner().invoke(group, ["step-model", "--step-model", spec, "--steps", str(tmp_path / "p.json"),
                                     "--json", str(out), "--output", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert "total error" in res.output
    (run,) = list((tmp_path / "runs").iterdir())
    result = load_result(run)
    assert result["suite"] == "step-model" and result["config"] == {"step_model": spec, "steps": str(tmp_path / "p.json"),
                                                                 "calibrate": None, "also": []}
    assert result["metrics"]["overall"] == pytest.approx(rep["overall"])
    # the groups table: one row per batch size seen in the table
    assert sorted(g["num_running"] for g in result["tables"]["groups"]) == sorted(set(tab["num_running"].tolist()))
    assert json.loads(out.read_text())["metrics"]["describe"]["kind"] == "roofline"
    # `samspec-bench report` reads the run: the errors as headlines, the groups as a table
    heads = {h["name"]: h["value"] for h in collect([run]).groups[0].runs[0].headlines}
    assert heads["total-time error"] == pytest.approx(rep["overall"]["total_error"])
    assert heads["steps checked"] == 25
    md = CliRunner().invoke(group, ["report", "md", str(run), "--output", str(tmp_path / "r.md")])
    assert md.exit_code == 0, md.output
    assert "total-time error" in (tmp_path / "r.md").read_text()


def test_step_model_command_errors(tmp_path):
    import subprocess
    import sys

    (tmp_path / "p.json").write_text(json.dumps({"format": 3, "measured_steps": {k: np.asarray(v).tolist()
                                                                                 for k, v in table(5).items()}}))
    got = subprocess.run([sys.executable, "-m", "samspec_bench.cli", "step-model", "--step-model",
                          "roofline:hardware=XPU,model=Qwen3-8B", "--steps", str(tmp_path / "p.json"),
                          "--output", str(tmp_path / "runs")], capture_output=True, text=True)
    assert got.returncode == 2 and got.stderr.count("\n") == 1
    assert got.stderr.startswith("error: --step-model 'roofline:hardware=XPU,model=Qwen3-8B': hardware 'XPU'")
    assert not (tmp_path / "runs").exists()   # nothing made for a bad input


def test_rollout_replay_priced_by_a_roofline_spec(shared_data, tmp_path):
    from click.testing import CliRunner

    from samspec_bench.suites import rollout as ro
    spec = "roofline:hardware=H100,model=Qwen3-8B,tp=1"
    res = CliRunner().invoke(ro.command, ["--engine", "replay", "--data-dir", str(shared_data), "--prompts", "4",
                                          "--group-size", "4", "--max-num-seqs", "8", "--spec-threshold", "4", "-k", "3",
                                          "--arms", "off,always,threshold", "--step-model", spec,
                                          "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    result = json.loads((run / "result.json").read_text())["metrics"]
    assert result["step_model"]["kind"] == "roofline" and result["step_model_fitted_on"] == spec
    arms = result["arms"]
    for m in arms.values():
        assert m["step_model_extrapolation"] is None     # an analytic model has no fitted range
    # memory-bound H100 decode: a verify step costs about a decode step, so always-on speculation
    # cannot cost much more than off
    assert arms["always k=3"]["total_s"] < 1.1 * arms["off"]["total_s"]
    res = CliRunner().invoke(ro.command, ["--engine", "replay", "--data-dir", str(shared_data), "--prompts", "2",
                                          "--step-model", "roofline:hardware=H100,model=Qwen3-8B,tp=3",
                                          "--output", str(tmp_path / "bad")])
    assert isinstance(res.exception, UserError) and "does not divide" in str(res.exception)   # the CLI exits 2


@pytest.mark.parametrize("intercept, coef, needle", [
    (-0.001, {"decode_tokens": -1e-4}, "negative coefficient(s) intercept=-0.001, decode_tokens=-0.0001"),
    (0.001, {"running": float("nan")}, "running=nan is not a finite number"),
    (0.0, {"draft_tokens": 1e-4}, "would cost 0 s"),
])
def test_a_profile_that_could_price_a_step_at_zero_or_below_is_refused_when_it_loads(tmp_path, intercept, coef,
                                                                                      needle):
    d = {"format": 2, "intercept": intercept, "coef": {f: 0.0 for f in FEATURES} | coef}
    p = tmp_path / "P.json"
    p.write_text(json.dumps(d))
    with pytest.raises(UserError) as e:
        load_step_model(str(p))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_issue_32s_all_negative_profile_exits_2_on_the_command_line(tmp_path):
    import subprocess
    import sys

    p = tmp_path / "P.json"
    p.write_text(json.dumps({"format": 2, "intercept": -0.01, "coef": {f: -1e-3 for f in FEATURES}}))
    (tmp_path / "s.jsonl").write_text('{"B": 1, "q": 1, "C": 10, "ms": 1.0}\n')
    got = subprocess.run([sys.executable, "-m", "samspec_bench.cli", "step-model", "--step-model", str(p), "--steps",
                          str(tmp_path / "s.jsonl"), "--output", str(tmp_path / "runs")], capture_output=True, text=True)
    assert got.returncode == 2 and "negative coefficient" in got.stderr and len(got.stderr.strip().splitlines()) == 1


def test_a_fitted_profile_is_checked_on_points_by_its_whole_prediction(tmp_path):
    from samspec_bench.bench.simulation.step_model_spec import check_step_model

    d = {"format": 2, "intercept": 0.002, "coef": {f: 0.0 for f in FEATURES} | {"decode_tokens": 1e-4,
                                                                                  "draft_tokens": 5e-5}}
    (tmp_path / "P.json").write_text(json.dumps(d))
    (tmp_path / "s.jsonl").write_text('{"meta": {"device": "x"}}\n{"B": 10, "q": 1, "C": 10, "ms": 3.0}\n'
                                      '{"B": 10, "q": 4, "C": 10, "ms": 6.0}\n')
    rep = check_step_model(str(tmp_path / "P.json"), tmp_path / "s.jsonl")
    pts = rep["points"]["points"]
    assert rep["points"]["basis"] == "step" and pts[0]["predicted_ms"] == pytest.approx(3.0)   # 2 + 10 x 0.1 ms
    assert pts[1]["predicted_ms"] == pytest.approx(4.5)                                        # + 30 drafts x 0.05
    assert pts[1]["ratio_error"] == pytest.approx((4.5 / 3.0) / (6.0 / 3.0) - 1)
    assert rep["points_meta"] == {"device": "x"}
