"""The modelled speed-up of a speculative arm (bench/engines/vllm/wall_model.py): step time =
a + b x verified tokens, as counted, with exact drafts and with free verification."""

from __future__ import annotations

import random

import pytest

from samspec_bench.bench.engines.vllm.wall_model import modelled_ratios


def test_free_verification_is_the_step_ratio_and_bounds_the_others():
    rng = random.Random(3)
    for _ in range(200):
        a, b = rng.uniform(1, 100), rng.uniform(0.01, 10)
        s0 = rng.randint(50, 300)
        v0 = rng.randint(s0, 8 * s0)
        s = rng.randint(20, s0)
        drafted = rng.randint(0, 4 * s)
        rejected = rng.randint(0, drafted)
        v = rng.randint(s, 8 * s) + drafted
        m = modelled_ratios(a, b, s0, v0, s, v, rejected)
        assert m["as_counted"] == pytest.approx((s0 * a + v0 * b) / (s * a + v * b))
        assert m["exact_drafts"] == pytest.approx((s0 * a + v0 * b) / (s * a + (v - rejected) * b))
        assert m["free_verification"] == pytest.approx(s0 / s)
        assert m["as_counted"] <= m["exact_drafts"]
        assert m["unit"] == "x" and m["source"].startswith("modelled")


def test_limits():
    # b = 0: every figure is the engine-step ratio; no rejected tokens: exact drafts = as counted
    m = modelled_ratios(50.0, 0.0, 256, 1500, 200, 2400, 300)
    assert m["as_counted"] == m["exact_drafts"] == m["free_verification"] == pytest.approx(256 / 200)
    m = modelled_ratios(50.0, 3.0, 256, 1500, 200, 2100, 0)
    assert m["as_counted"] == m["exact_drafts"] < m["free_verification"]
    # a = 0 (all cost per token): drafting can only lose when it adds verified tokens
    assert modelled_ratios(0.0, 3.0, 256, 1500, 200, 2100, 600)["as_counted"] == pytest.approx(1500 / 2100)


@pytest.mark.parametrize("args", [(-1.0, 3.0, 256, 1500, 200, 2100, 0), (50.0, -0.1, 256, 1500, 200, 2100, 0),
                                  (50.0, 3.0, 256, 1500, 0, 0, 0), (50.0, 3.0, 0, 0, 200, 2100, 0),
                                  (None, 3.0, 256, 1500, 200, 2100, 0)])
def test_no_figure_from_a_fit_or_counts_that_cannot_give_one(args):
    assert modelled_ratios(*args) is None
