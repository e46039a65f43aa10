"""Honest units in `samspec-bench rollout`: without a step model the rollout reports decode
steps (no key, line or figure says time); with a profile it reports modelled seconds and names
what priced them; extrapolation beyond the profile is flagged; a profile that never verified
the asked k is refused; the prediction-error arithmetic of the measured arms."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from samspec_bench import cli
from samspec_bench.bench.policies import make_policy
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel, fit_from_steps
from samspec_bench.reports.suite_headlines import SUITE_SUMMARIZERS
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout import measured as rm
from samspec_bench.suites.rollout import units as ou
from samspec_bench.suites.rollout.profile import profile_document, read_profile, write_profile

TRUE = StepTimeModel(0.02, {"decode_tokens": 2e-3, "prefill_tokens": 4e-4, "draft_tokens": 1.5e-3,
                            "context_tokens": 2e-6, "running": 0.0, "spec_requests": 0.0, "speculative": 5e-3})


def _keys(obj, prefix=""):
    """Every key of a nested dict (lists walked), as dotted paths."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"{prefix}{k}"
            yield from _keys(v, f"{prefix}{k}.")
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v, prefix)


def _profile(tmp_path, k=3, max_batch=8, prompt=(5, 60), name="p.json"):
    """A format-3 profile JSON fitted on simulated steps timed by TRUE (batches up to
    `max_batch`, verify steps of k + 1 tokens)."""
    rng = np.random.default_rng(0)
    tables = []
    for pol in ("off", "always"):
        reqs = [SimRequest(int(p), int(n), np.full(n, k, np.int16), np.full(n, k, np.int16))
                for p, n in zip(rng.integers(*prompt, 24), rng.integers(10, 40, 24))]
        st = simulate(reqs, k=k, policy=make_policy(pol), step_model=StepTimeModel.constant(1.0),
                      max_num_seqs=max_batch, max_num_batched_tokens=2048, fast_forward=False).steps
        st["time_s"] = TRUE.predict_steps(st)
        tables.append(st)
    m = fit_from_steps(tables, source="synthetic")
    meta = {"engine": {"name": "reference", "version": "test", "device": "cpu: test", "model": "m", "dtype": "float32",
                       "tp": 1, "threads": 1}, "grid": {"batch_sizes": [max_batch], "ks": [k]}}
    return write_profile(tmp_path / name, profile_document(m, tables, meta))


def _replay(shared_data, out, *extra):
    res = CliRunner().invoke(ro.command, ["--engine", "replay", "--data-dir", str(shared_data), "--prompts", "4",
                                          "--group-size", "4", "--max-num-seqs", "8", "--spec-threshold", "4",
                                          "-k", "3", "--output", str(out), *extra])
    return res


def _result(out):
    (run,) = list(out.iterdir())
    return run, json.loads((run / "result.json").read_text())


def test_to_step_units_renames_every_time_key():
    m = {"total_s": 10.0, "tail_steps": 3, "tail_s": 3.0, "speedup_overall": 1.2, "time_saved_fraction": 0.1,
         "completion": {"p50_s": 4.5, "makespan_s": 10.0}, "baseline_phases": {"total_s": 12.0},
         "rows": [{"head_s": 1.0}], "sim_seconds": 0.2}
    s = ou.to_step_units(m)
    assert s == {"total_steps": 10, "tail_steps": 3, "step_ratio_overall": 1.2, "steps_saved_fraction": 0.1,
                 "completion": {"p50_steps": 4.5, "makespan_steps": 10}, "baseline_phases": {"total_steps": 12},
                 "rows": [{"head_steps": 1}], "sim_seconds": 0.2}


def test_unpriced_replay_reports_steps_and_no_time(shared_data, tmp_path):
    res = _replay(shared_data, tmp_path / "a")
    assert res.exit_code == 0, res.output
    run, result = _result(tmp_path / "a")
    m = result["metrics"]
    assert m["units"] == "steps" and m["measured"] is False and m["priced_by"] is None
    assert m["speedup_definition"] == "step-count ratio, not time" and m["step_model"] is None
    keys = list(_keys(m["arms"]))
    assert not [k for k in keys if k.endswith("_s") or "speedup" in k or "time_saved" in k], keys
    thr = m["arms"]["threshold<=4 k=3"]
    assert thr["step_ratio_overall"] == pytest.approx(m["arms"]["off"]["total_steps"] / thr["total_steps"])
    # the terminal says steps and never seconds or speedup
    arm_lines = [ln for ln in res.output.splitlines() if ln.startswith(("off ", "always", "threshold"))]
    assert arm_lines and all(" steps" in ln and " s " not in ln and "speedup" not in ln for ln in arm_lines)
    assert "not time" in res.output
    # the report's headlines follow
    heads, _ = SUITE_SUMMARIZERS["rollout"](result)
    names = [h["name"] for h in heads]
    assert "threshold<=4 k=3: step-count ratio off / on (not time)" in names
    assert not [n for n in names if "speedup" in n or "time saved" in n]


def test_priced_replay_reports_modelled_seconds_and_names_its_profile(shared_data, tmp_path):
    prof = _profile(tmp_path, max_batch=8)
    res = _replay(shared_data, tmp_path / "b", "--step-model", str(prof))
    assert res.exit_code == 0, res.output
    run, result = _result(tmp_path / "b")
    m = result["metrics"]
    assert m["units"] == "s" and m["measured"] is False
    assert m["priced_by"]["kind"] == "fitted-profile" and m["priced_by"]["source"] == str(prof)
    assert m["priced_by"]["engine"]["name"] == "reference" and "r2" in m["priced_by"]["fit"]
    assert "modelled (priced by fitted-profile" in m["time_basis"]
    off = m["arms"]["off"]
    # the profile was fitted without noise on steps timed by TRUE: every arm's modelled time is
    # TRUE's price of that arm's steps (read back from steps.csv)
    import pandas as pd
    steps = pd.read_csv(run / "steps.csv")
    for lbl, a in m["arms"].items():
        tab = {c: v.to_numpy() for c, v in steps[steps["arm"] == lbl].items() if c != "arm"}
        assert a["total_s"] == pytest.approx(float(TRUE.predict_steps(tab).sum()), rel=1e-6), lbl
    assert off["head_s"] + off["tail_s"] == pytest.approx(off["total_s"])
    assert "modelled" in res.output and (run / "step_time_vs_batch.png").is_file()
    heads, _ = SUITE_SUMMARIZERS["rollout"](result)
    h = {x["name"]: x for x in heads}
    assert "modelled: priced by fitted-profile" in h["threshold<=4 k=3: speedup_makespan (rollout time off / on)"]["note"]
    # the trace contexts (hundreds of tokens per request, 8 requests) are beyond this profile's
    assert m["extrapolated"] is True
    e = m["extrapolation"]["off"]["context_tokens"]
    assert e["max"] > e["valid_max"] and 0 < e["steps_beyond"] <= 1
    assert "warning: off: the step model extrapolates" in res.output


def test_profile_covering_the_replay_flags_nothing(shared_data, tmp_path):
    prof = _profile(tmp_path, max_batch=8, prompt=(2500, 3000), name="big.json")   # long prompts: big contexts
    res = _replay(shared_data, tmp_path / "c", "--step-model", str(prof), "--arms", "off")
    assert res.exit_code == 0, res.output
    _, result = _result(tmp_path / "c")
    assert result["metrics"]["extrapolated"] is False and result["metrics"]["extrapolation"] is None


def test_profile_without_the_asked_k_is_refused(shared_data, tmp_path, capsys):
    prof = _profile(tmp_path, k=3)
    with pytest.raises(SystemExit) as e:
        cli.main(["rollout", "--engine", "replay", "--data-dir", str(shared_data), "--prompts", "2", "-k", "3,5",
                  "--step-model", str(prof), "--output", str(tmp_path / "d")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "no verify steps of k=5" in err and "rollout profile -k 3,5" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()


def test_a_k_no_arm_drafts_with_is_not_asked_of_the_profile(shared_data, tmp_path):
    # only strategies draft (arms: off): the default -k 3 is nobody's, so a k=8 profile prices the run
    prof = _profile(tmp_path, k=8)
    res = CliRunner().invoke(ro.command, ["--engine", "replay", "--data-dir", str(shared_data), "--prompts", "2",
                                          "--strategy", "seed:k=8", "--step-model", str(prof),
                                          "--output", str(tmp_path / "d")])
    assert res.exit_code == 0, res.output


def test_read_profile_round_trip(tmp_path):
    prof = _profile(tmp_path)
    model, meta = read_profile(prof)
    doc = json.loads(prof.read_text())
    assert meta["engine"] == doc["engine"] and meta["kind"] == "step-profile"
    assert model.coef == doc["model"]["coef"] and model.fit["verify_widths"] == doc["model"]["fit"]["verify_widths"]
    # an older model JSON still loads (no profile metadata)
    old = model.save(tmp_path / "old.json")
    m2, meta2 = read_profile(old)
    assert meta2 is None and m2.coef == model.coef


def test_prediction_error_arithmetic():
    e = rm.prediction_error({"total_s": 10.0, "tail_s": 2.0, "accepted": 40}, {"total_s": 9.0, "tail_s": 2.5, "accepted": 40})
    assert e == pytest.approx({"total": -0.1, "tail": 0.25, "accepted": 0.0})
    assert rm.prediction_error({"total_s": 10.0, "tail_s": 0.0, "accepted": 0},
                               {"total_s": 10.0, "tail_s": 1.0, "accepted": 3})["tail"] is None
    metrics = {"off": {"sim_error": {"total": 0.05, "tail": -0.02}},
               "thr": {"sim_error": {"total": -0.08, "tail": 0.12}}}
    s = rm.error_summary(metrics)
    assert s["max_abs_total"] == pytest.approx(0.08) and s["max_abs_tail"] == pytest.approx(0.12)
    assert s["within_goal"] is False and s["per_arm"]["thr"] == {"total": -0.08, "tail": 0.12}
    metrics["thr"]["sim_error"]["tail"] = 0.09
    assert rm.error_summary(metrics)["within_goal"] is True
    assert rm.error_summary({"off": {"sim_error": {"total": None, "tail": None}}})["within_goal"] is False


def test_time_basis_and_priced_by_labels():
    assert "not time" in ou.time_basis("steps", False, None, "replay")
    p = ou.priced_by(TRUE, "x.json")
    assert p == {"kind": "fitted-profile", "source": "x.json", "units": TRUE.describe()["units"]}   # no fit, no ranges
    assert "seconds" in p["units"]
    assert ou.model_kind(StepTimeModel.constant(1.0)) == "constant-steps"
    assert ou.time_basis("s", False, p, "replay") == "seconds, modelled (priced by fitted-profile: x.json)"
    assert ou.time_basis("s", True, p, "vllm").startswith("seconds measured on the vllm engine")


@pytest.mark.parametrize("calibration, tag", [
    ({"file": "cal.json", "measured_range": {"running": [1.0, 8.0]}}, "; calibrated on measured points"),
    ({"file": "old.json", "measured_range": None}, "; calibrated, range unknown"),
])
def test_a_calibrated_roofline_says_so_and_carries_its_measured_range(calibration, tag):
    from samspec_bench.bench.simulation.hardware import hardware
    from samspec_bench.bench.simulation.roofline import RooflineStepModel
    from samspec_bench.models.shapes import load_shape
    model = RooflineStepModel(load_shape("Qwen3-8B"), hardware("H100"), calibration=calibration)
    p = ou.priced_by(model, "roofline:...")
    assert p["calibration"]["file"] == calibration["file"]
    assert p.get("valid_range") == calibration["measured_range"]
    assert ou.priced_label(p) == f"modelled (priced by roofline: roofline:...{tag})"


def test_replay_arms_report_the_cost_of_their_acceptance(shared_data, tmp_path):
    res = _replay(shared_data, tmp_path / "e")
    assert res.exit_code == 0, res.output
    run, result = _result(tmp_path / "e")
    import pandas as pd
    steps = pd.read_csv(run / "steps.csv")
    for lbl, a in result["metrics"]["arms"].items():
        s = steps[steps["arm"] == lbl]
        n, d, acc = s["num_decode_reqs"].sum(), s["num_drafted"].sum(), s["num_accepted"].sum()
        assert a["tokens_per_step"] == pytest.approx((n + acc) / n) and a["drafted_per_step"] == pytest.approx(d / n)
        assert a["verify_tokens_per_token"] == pytest.approx((n + d) / (n + acc))
    always = result["metrics"]["arms"]["always k=3"]
    assert always["drafted_per_step"] > 0 and always["verify_tokens_per_token"] > 1
    line = next(ln for ln in res.output.splitlines() if ln.startswith("always k=3"))
    assert f"drafted/step {always['drafted_per_step']:.2f}" in line and "verify tokens/emitted" in line
    heads, _ = SUITE_SUMMARIZERS["rollout"](result)
    assert any(h["name"] == "always k=3: tokens / drafted tokens / verify tokens per emitted" for h in heads)


def test_unpriced_dp_and_sensitivity_say_steps_everywhere(shared_data, tmp_path):
    res = _replay(shared_data, tmp_path / "f", "--dp", "2", "--sensitivity", "--length-dist", "lognormal:60:0.5",
                  "--max-response-len", "300")
    assert res.exit_code == 0, res.output
    run, result = _result(tmp_path / "f")
    m = result["metrics"]
    keys = list(_keys(m["arms"])) + list(_keys(m["sensitivity"]["rows"]))
    assert not [k for k in keys if k.endswith("_s") or "_s_" in k or "speedup" in k], keys
    thr = m["arms"]["threshold<=4 k=3"]
    assert thr["dp"]["mean_instance_makespan_steps"] > 0 and m["sensitivity"]["units"] == "steps"
    dp_lines = [ln for ln in res.output.splitlines() if ln.lstrip().startswith(("instance ", "off:", "threshold<="))]
    assert dp_lines and all(" s " not in ln and "speedup" not in ln for ln in dp_lines)
    assert "DECODE STEPS, not time" in res.output and "MODELLED" not in res.output
    heads, _ = SUITE_SUMMARIZERS["rollout"](result)
    names = [h["name"] for h in heads]
    assert any("step_ratio of the mean instance" in n for n in names)
    assert any("decode-step gain %, not time" in n for n in names)
    assert not [n for n in names if "speedup" in n or "modelled" in n]


def test_roofline_replay_names_its_hardware_and_assumptions(shared_data, tmp_path):
    spec = "roofline:hardware=H100,model=Qwen3-8B"
    res = _replay(shared_data, tmp_path / "g", "--step-model", spec, "--dp", "2")
    assert res.exit_code == 0, res.output
    _, result = _result(tmp_path / "g")
    m = result["metrics"]
    pb = m["priced_by"]
    assert m["units"] == "s" and pb["kind"] == "roofline" and pb["source"] == spec
    assert pb["assumptions"] and "H100" in json.dumps(pb["hardware"]) and "valid_range" not in pb
    assert m["extrapolated"] is False        # an analytic model claims no fitted range
    assert f"modelled (priced by roofline: {spec}; the hardware row's built-in parameters" in res.output
    assert pb["calibration"] is None and pb["range_note"].startswith("no calibration= file: the H100 SXM 80GB row's")
    assert "(calibrated" in pb["range_note"]   # the H100 row's parameters were fitted on measured points
    dp_head = next(ln for ln in res.output.splitlines() if ln.startswith("data-parallel"))
    assert dp_head.endswith("figures modelled")


def test_preset_with_an_empty_step_model_is_refused(shared_data, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["rollout", "--preset", "seed-qwen3-32b", "--data-dir", str(shared_data), "--step-model", "",
                  "--output", str(tmp_path / "h")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--preset seed-qwen3-32b" in err[0] and "--step-model" in err[0]


def test_a_roofline_priced_at_another_tp_than_its_points_says_so_in_the_time_basis():
    """The H100 row's parameters were fitted on one GPU's steps: priced at tp=8 the rollout's time
    basis carries the warning (it was only in result.json's assumptions)."""
    from samspec_bench.bench.simulation.hardware import hardware
    from samspec_bench.bench.simulation.roofline import RooflineStepModel
    from samspec_bench.models.shapes import load_shape
    at = lambda tp: ou.priced_label(ou.priced_by(RooflineStepModel(load_shape("Qwen3-8B"), hardware("H100"), tp=tp),  # noqa: E731
                                                 "roofline:..."))
    assert "WARNING" not in at(1)
    assert "WARNING: the H100 SXM 80GB row's built-in calibration: fitted on points measured at tp=1, priced at tp=8" \
        in at(8)
