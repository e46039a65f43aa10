"""Bad `--step-model` values, round 2: a model JSON (formats 1 and 2) with a coefficient name
it does not know, a non-finite value or a number written as text is refused naming the key;
roofline specs whose hardware, model or tp is wrong name the option and the spec like the
key errors do."""

import json
import subprocess
import sys

import numpy as np
import pytest

from samspec_bench.bench.simulation.fitted_step_model import FEATURES, StepTimeModel, fit_from_steps
from samspec_bench.bench.simulation.step_model_spec import load_step_model
from samspec_bench.errors import UserError


def _fitted(tmp_path):
    rng = np.random.default_rng(5)
    run = rng.integers(1, 9, 30)
    drafted = run * 3 * rng.integers(0, 2, 30)
    tab = {"time_s": 2e-3 + 1e-3 * run + 2e-4 * drafted, "num_running": run, "num_scheduled_tokens": run + drafted,
           "num_prefill_tokens": np.zeros(30), "num_drafted": drafted, "num_decode_reqs": run,
           "speculative": drafted > 0}
    p = fit_from_steps([tab], source="synthetic").save(tmp_path / "m2.json")
    return p, json.loads(p.read_text())


def _refused(spec) -> str:
    with pytest.raises(UserError) as e:
        load_step_model(str(spec))
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_an_unknown_coefficient_key_in_a_format_2_file_is_named(tmp_path):
    p, d = _fitted(tmp_path)
    d["coef"]["bogus_feature"] = 5.0
    p.write_text(json.dumps(d))
    msg = _refused(p)
    assert msg.startswith(f"--step-model {p}: unknown coefficient(s) 'bogus_feature'")
    assert "known: " + ", ".join(FEATURES) in msg and "samspec-bench rollout profile" in msg


def test_an_unknown_coefficient_key_in_a_format_1_file_is_named(tmp_path):
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"format": 1, "intercept": 0.5, "coef": {"running": 0.1, "scheduled_tokens": 0.01,
                                                                     "decode_tokens": 0.02}}))
    msg = _refused(p)
    assert "unknown coefficient(s) 'decode_tokens'" in msg
    assert "known: scheduled_tokens, context_tokens, running, speculative" in msg


@pytest.mark.parametrize("key, value, says", [
    ("intercept", float("nan"), "intercept=nan is not a finite number"),
    ("intercept", float("-inf"), "intercept=-inf is not a finite number"),
    ("draft_tokens", float("inf"), "draft_tokens=inf is not a finite number"),
    ("intercept", "0.002", "intercept='0.002' is not a number"),
    ("running", None, "running=None is not a number"),
])
def test_a_value_that_is_no_finite_number_is_named(tmp_path, key, value, says):
    p, d = _fitted(tmp_path)
    (d if key == "intercept" else d["coef"])[key] = value
    p.write_text(json.dumps(d))
    assert says in _refused(p)


def test_a_format_1_file_names_its_own_non_finite_key(tmp_path):
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"format": 1, "intercept": 0.5, "coef": {"scheduled_tokens": float("nan")}}))
    assert "scheduled_tokens=nan is not a finite number" in _refused(p)


def test_a_format_3_file_without_a_model_says_so(tmp_path):
    p = tmp_path / "p3.json"
    p.write_text(json.dumps({"format": 3, "kind": "step-profile", "measured_steps": {}}))
    assert "not a step-time model (no model" in _refused(p)


def test_many_bad_ranges_are_counted_not_dropped(tmp_path):
    p, d = _fitted(tmp_path)
    d["fit"]["valid_range"] = {f: [1, 0] for f in FEATURES}
    p.write_text(json.dumps(d))
    assert f"(and {len(FEATURES) - 3} more)" in _refused(p)


def test_the_step_model_command_exits_2_on_an_unknown_key(tmp_path):
    p, d = _fitted(tmp_path)
    d["coef"]["bogus_feature"] = 5.0
    p.write_text(json.dumps(d))
    (tmp_path / "s.jsonl").write_text('{"B": 1, "q": 1, "C": 10, "ms": 1.0}\n')
    got = subprocess.run([sys.executable, "-m", "samspec_bench.cli", "step-model", "--step-model", str(p), "--steps",
                          str(tmp_path / "s.jsonl"), "--output", str(tmp_path / "runs")],
                         capture_output=True, text=True)
    assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert "'bogus_feature'" in got.stderr and f"--step-model {p}" in got.stderr


def test_a_valid_model_file_still_loads(tmp_path):
    p, d = _fitted(tmp_path)
    m = load_step_model(str(p))
    assert isinstance(m, StepTimeModel) and m.intercept == d["intercept"] and m.coef == d["coef"]


@pytest.mark.parametrize("spec, says", [
    ("roofline:hardware=XYZ,model=Qwen3-8B,tp=1", "hardware 'XYZ' is not known"),
    ("roofline:hardware=H100,model=/nonexistent/config.json,tp=1", "not in the catalogue and not a config.json path"),
    ("roofline:hardware=H100,model=Qwen3-8B,tp=3", "does not divide"),
    ("roofline:hardware=H100,model=Qwen9-1T", "not in the catalogue"),
])
def test_roofline_errors_name_the_option_and_the_spec(spec, says):
    msg = _refused(spec)
    assert msg.startswith(f"--step-model {spec!r}: ") and says in msg


def test_roofline_model_config_errors_name_the_option(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    spec = f"roofline:hardware=H100,model={tmp_path / 'config.json'}"
    msg = _refused(spec)
    assert msg.startswith(f"--step-model {spec!r}: model config ") and "not a JSON object" in msg
