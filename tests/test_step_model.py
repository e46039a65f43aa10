import numpy as np
import pytest

from samspec_bench.bench.step_model import StepTimeModel, fit_from_steps, fit_step_model
from samspec_bench.errors import UserError


def test_fit_recovers_linear_coefficients():
    rng = np.random.default_rng(0)
    run = rng.integers(1, 64, 200)
    tok = run + rng.integers(0, 100, 200)
    ctx = rng.integers(0, 5000, 200)
    spec = rng.integers(0, 2, 200)
    t = 0.01 + 0.001 * run + 0.0002 * tok + 1e-6 * ctx + 0.003 * spec
    m = fit_step_model(t, {"running": run, "scheduled_tokens": tok, "context_tokens": ctx, "speculative": spec})
    assert m.intercept == pytest.approx(0.01, rel=1e-6)
    assert m.coef["running"] == pytest.approx(0.001, rel=1e-6)
    assert m.coef["scheduled_tokens"] == pytest.approx(0.0002, rel=1e-6)
    assert m.coef["context_tokens"] == pytest.approx(1e-6, rel=1e-5)
    assert m.coef["speculative"] == pytest.approx(0.003, rel=1e-6)
    assert m.fit["r2"] == pytest.approx(1.0)
    assert float(m.predict(10, 20, 100, 1)) == pytest.approx(0.01 + 0.01 + 0.004 + 1e-4 + 0.003)


def test_constant_columns_dropped_and_negative_coefficients_refit():
    run = np.arange(1, 21)
    t = 0.5 + 0.1 * run
    m = fit_step_model(t, {"running": run, "speculative": np.zeros(20), "scheduled_tokens": -run})
    assert "speculative" in m.dropped  # constant: not identifiable
    assert all(v >= 0 for v in m.coef.values())
    assert np.allclose(m.predict(run, -run), t)


def test_save_load_roundtrip(tmp_path):
    m = fit_step_model([1.0, 2.0, 3.0], {"running": [1, 2, 3]}, source="x")
    p = m.save(tmp_path / "m.json")
    m2 = StepTimeModel.load(p)
    assert m2.coef == m.coef and m2.intercept == m.intercept and m2.fit["source"] == "x"
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UserError, match="rollout profile"):
        StepTimeModel.load(tmp_path / "bad.json")


def test_fit_from_steps_tables():
    tab = {"time_s": np.array([1.0, 2.0, 3.0, 4.0]), "num_running": np.array([1, 2, 3, 4]),
           "num_scheduled_tokens": np.array([1, 2, 3, 4]), "speculative": np.zeros(4, bool)}
    m = fit_from_steps([tab])
    assert m.predict(5, 5) == pytest.approx(5.0)
    assert StepTimeModel.constant(2.0).predict(100, 1000, 10**6, 1) == 2.0
