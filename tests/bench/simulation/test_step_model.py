import json

import numpy as np
import pytest

from samspec_bench.bench.simulation.fitted_step_model import (FEATURES, StepTimeModel, extrapolation, fit_from_steps,
                                                      fit_step_model, step_features, uncovered_ks, verify_widths)
from samspec_bench.errors import UserError

TRUE = {"decode_tokens": 2e-4, "prefill_tokens": 5e-5, "draft_tokens": 1e-4, "context_tokens": 1e-6,
        "running": 1e-3, "spec_requests": 3e-4, "speculative": 2e-3}


def _synthetic(n, rng):
    dec = rng.integers(0, 64, n)
    pre = np.where(rng.random(n) < 0.2, rng.integers(1, 500, n), 0)
    spec = rng.integers(0, 2, n)
    spec_req = dec * spec
    draft = spec_req * rng.integers(0, 4, n)
    run = dec + (pre > 0) * rng.integers(1, 4, n)
    ctx = rng.integers(0, 50_000, n)
    return {"decode_tokens": dec, "prefill_tokens": pre, "draft_tokens": draft, "context_tokens": ctx,
            "running": run, "spec_requests": spec_req, "speculative": spec}


def test_fit_recovers_every_coefficient_including_verify_tokens():
    rng = np.random.default_rng(0)
    x = _synthetic(400, rng)
    t = 0.01 + sum(TRUE[f] * x[f] for f in FEATURES)
    m = fit_step_model(t, x)
    assert m.dropped == []
    assert m.intercept == pytest.approx(0.01, rel=1e-6)
    for f in FEATURES:
        assert m.coef[f] == pytest.approx(TRUE[f], rel=1e-5), f
    assert m.fit["r2"] == pytest.approx(1.0)
    assert float(m.predict(**{f: 1 for f in FEATURES})) == pytest.approx(0.01 + sum(TRUE.values()))


def test_fit_with_noise_prices_draft_tokens_apart_from_decode_tokens():
    rng = np.random.default_rng(1)
    x = _synthetic(3000, rng)
    t = 0.01 + sum(TRUE[f] * x[f] for f in FEATURES)
    t = t + 2e-4 * rng.standard_normal(t.size)   # 0.2 ms timer noise
    m = fit_step_model(t, x)
    assert m.coef["draft_tokens"] == pytest.approx(TRUE["draft_tokens"], rel=0.1)
    assert m.coef["decode_tokens"] == pytest.approx(TRUE["decode_tokens"], rel=0.1)
    # a model with one price for every token is off on speculative steps; this one is not
    spec = x["speculative"] == 1
    assert abs(m.predict(**{f: v[spec] for f, v in x.items()}).sum() / t[spec].sum() - 1) < 0.01


def test_unidentifiable_features_are_left_out_with_reasons():
    run = np.arange(1, 41)
    t = 0.5 + 0.1 * run
    m = fit_step_model(t, {"running": run, "decode_tokens": run, "speculative": np.zeros(40),
                           "prefill_tokens": -run + (run % 3)})
    r = m.fit["dropped_reason"]
    assert r["speculative"] == "constant" and r["draft_tokens"] == "absent"
    assert r["running"].startswith("collinear") and "decode_tokens" in r["running"]
    assert all(v >= 0 for v in m.coef.values())
    assert np.allclose(m.predict(decode_tokens=run), t)


def test_step_features_from_a_table():
    tab = {"time_s": np.ones(3), "num_running": np.array([4, 4, 2]), "num_scheduled_tokens": np.array([100, 10, 2]),
           "num_prefill_tokens": np.array([97, 0, 0]), "num_drafted": np.array([0, 6, 0]),
           "num_decode_reqs": np.array([3, 4, 2]), "speculative": np.array([False, True, True])}
    f = step_features(tab)
    assert list(f["decode_tokens"]) == [3, 4, 2] and list(f["draft_tokens"]) == [0, 6, 0]
    # the third step speculated but drafted nothing: it ran as a decode step
    assert list(f["spec_requests"]) == [0, 4, 0] and list(f["speculative"]) == [0, 1, 0]
    assert "context_tokens" not in f
    m = fit_from_steps([tab, tab])
    assert m.fit["n_steps"] == 6


def test_save_load_roundtrip_and_format_1(tmp_path):
    m = fit_step_model([1.0, 2.0, 3.0], {"running": [1, 2, 3]}, source="x")
    m2 = StepTimeModel.load(m.save(tmp_path / "m.json"))
    assert m2.coef == m.coef and m2.intercept == m.intercept and m2.fit["source"] == "x"
    old = {"format": 1, "intercept": 0.5, "coef": {"running": 0.1, "scheduled_tokens": 0.01, "context_tokens": 0.0,
                                                   "speculative": 0.2}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    m1 = StepTimeModel.load(tmp_path / "old.json")
    t = m1.predict(running=2, decode_tokens=2, draft_tokens=3, speculative=1)
    assert t == pytest.approx(0.5 + 0.2 + 0.05 + 0.2)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UserError, match="rollout profile"):
        StepTimeModel.load(tmp_path / "bad.json")
    assert StepTimeModel.constant(2.0).predict(running=100, decode_tokens=1000, speculative=1) == 2.0


def test_extrapolation_flags_features_beyond_the_fitted_range():
    rng = np.random.default_rng(2)
    x = _synthetic(200, rng)
    m = fit_step_model(0.01 + sum(TRUE[f] * x[f] for f in FEATURES), x)
    assert m.fit["ranges"]["context_tokens"][1] == x["context_tokens"].max()
    tab = {"time_s": np.ones(2), "num_running": np.array([4, 4]), "num_scheduled_tokens": np.array([4, 4]),
           "num_prefill_tokens": np.zeros(2), "num_drafted": np.zeros(2), "num_decode_reqs": np.array([4, 4]),
           "speculative": np.zeros(2, bool), "context_tokens": np.array([1000, 10**6])}
    e = extrapolation(m, tab)
    assert list(e) == ["context_tokens"]
    assert e["context_tokens"] == {"max": 10**6, "valid_max": float(x["context_tokens"].max()), "steps_beyond": 0.5}
    tab["context_tokens"] = np.array([1000, 2000])
    assert extrapolation(m, tab) == {}
    # just past the measured maximum is already beyond the valid range; a factor widens it
    tab["context_tokens"] = np.array([1000, x["context_tokens"].max() + 1])
    assert list(extrapolation(m, tab)) == ["context_tokens"] and extrapolation(m, tab, factor=2.0) == {}
    assert extrapolation(StepTimeModel.constant(1.0), tab) == {}   # a constant claims no range


def test_valid_range_covers_every_measured_feature_even_unidentified_ones():
    run = np.arange(1, 41)
    m = fit_step_model(0.5 + 0.1 * run, {"running": run, "decode_tokens": run, "speculative": np.zeros(40)})
    assert "running" in m.dropped and m.fit["valid_range"]["running"] == [1.0, 40.0]
    assert m.fit["valid_range"]["speculative"] == [0.0, 0.0]
    # a table that speculates is outside a profile that never did
    tab = {"time_s": np.ones(1), "num_running": np.array([4]), "num_scheduled_tokens": np.array([16]),
           "num_prefill_tokens": np.zeros(1), "num_drafted": np.array([12]), "num_decode_reqs": np.array([4]),
           "speculative": np.array([True])}
    assert "speculative" in extrapolation(m, tab)


def test_fit_reports_residuals():
    rng = np.random.default_rng(3)
    x = _synthetic(500, rng)
    t = 0.01 + sum(TRUE[f] * x[f] for f in FEATURES)
    noisy = t * np.where(np.arange(t.size) == 7, 1.5, 1.0)   # one step 50 % slow
    m = fit_step_model(noisy, x)
    pred = m.predict(**x)
    rel = np.abs(pred - noisy) / noisy
    assert m.fit["median_rel_error"] == pytest.approx(np.median(rel))
    assert m.fit["max_rel_error"] == pytest.approx(rel.max()) and m.fit["max_rel_error"] > 0.2
    assert m.fit["p90_rel_error"] <= m.fit["max_rel_error"] and 0 < m.fit["r2"] < 1
    exact = fit_step_model(t, x)
    assert exact.fit["max_rel_error"] == pytest.approx(0, abs=1e-6) and exact.fit["r2"] == pytest.approx(1.0)


def _table(widths, running=4):
    """Speculative steps where every request drafts `w` tokens, one step per w (0: a decode step)."""
    n = len(widths)
    w = np.asarray(widths)
    return {"time_s": np.ones(n), "num_running": np.full(n, running), "num_decode_reqs": np.full(n, running),
            "num_prefill_tokens": np.zeros(n), "num_drafted": w * running,
            "num_scheduled_tokens": running + w * running, "speculative": w > 0}


def test_verify_widths_and_uncovered_ks():
    tab = _table([0, 3, 3, 3, 5, 2])
    tab["num_drafted"][-1] = 5   # mixed widths in one step (4 requests, 5 drafts): not counted
    assert verify_widths(tab) == {"3": 3, "5": 1}
    m = fit_from_steps([tab, _table([0, 1, 3, 3])])
    assert m.fit["verify_widths"] == {"1": 1, "3": 5, "5": 1}
    assert uncovered_ks(m, [3]) == [] and uncovered_ks(m, [3, 5, 8]) == [5, 8]   # 5: too few steps
    assert uncovered_ks(StepTimeModel.constant(1.0), [8]) == []   # no widths recorded: no claim


def test_a_negative_intercept_is_refitted_through_zero():
    run = np.arange(1, 11, dtype=float)
    y = -0.05 + 0.1 * run          # every step positive, but the least-squares intercept is not
    m = fit_step_model(y, {"running": run})
    # least squares through the origin: slope = sum(x y) / sum(x^2) = (0.1 * 385 - 0.05 * 55) / 385
    assert m.intercept == 0.0 and m.coef["running"] == pytest.approx((0.1 * 385 - 0.05 * 55) / 385)
    assert m.fit["dropped_reason"]["intercept"].startswith("negative")
    assert (m.predict(running=run) > 0).all()   # no step priced at nothing
    ok = fit_step_model(0.05 + 0.1 * run, {"running": run})
    assert ok.intercept == pytest.approx(0.05) and "intercept" not in ok.fit["dropped_reason"]
