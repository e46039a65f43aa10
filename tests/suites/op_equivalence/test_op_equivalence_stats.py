"""op-equivalence's numbers (suites/op_equivalence/stats.py), called directly with known answers:
the full-distribution Accumulator, the sampled-token-only summary (vLLM's top-n logprobs), the
histogram, Pearson and the --tolerance gate."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from samspec_bench.suites.op_equivalence.config import OpEqConfig
from samspec_bench.suites.op_equivalence.diff_stats import (HIST_EDGES, Accumulator, apply_gate, histogram, pearson,
                                                       sampled_summary, sampled_token_metrics)


def _lp(x):
    return torch.log_softmax(x, -1)


# --- Accumulator: two paths' full distributions ---------------------------------------------------

def test_identical_paths_give_zero_everywhere():
    torch.manual_seed(0)
    a = _lp(torch.randn(20, 50))
    acc = Accumulator()
    acc.add(a, a.clone(), torch.randint(0, 50, (20,)))
    s = acc.summary()
    assert s["positions"] == 20
    for k in ("logprob_diff_max", "logprob_diff_mean", "logprob_diff_p99", "argmax_flip_rate", "kl_mean", "kl_max",
              "full_logprob_diff_max", "rollout_probs_diff_max", "rollout_probs_diff_mean", "rollout_probs_diff_std"):
        assert s[k] == 0, k
    assert s["exact_zero_fraction"] == 1 and s["full_exact_zero_fraction"] == 1
    assert s["rollout_actor_probs_pearson_corr"] == pytest.approx(1.0)
    assert s["histogram"]["zero"] == 20 and sum(s["histogram"]["counts"]) == 0


def test_metrics_against_hand_computed_values():
    la = _lp(torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 3.0]], dtype=torch.float64)).float()
    lb = _lp(torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]], dtype=torch.float64)).float()
    toks = torch.tensor([0, 2])
    acc = Accumulator()
    acc.add(la, lb, toks)
    s = acc.summary()
    d0 = abs(float(la[0, 0]) - float(lb[0, 0]))
    assert s["logprob_diff_max"] == pytest.approx(d0)
    assert s["exact_zero_fraction"] == 0.5
    assert s["argmax_flip_rate"] == 0.5
    pa, pb = la.double().exp(), lb.double().exp()
    kl0 = float((pa[0] * (pa[0].log() - pb[0].log())).sum())
    assert s["kl_max"] == pytest.approx(kl0, rel=1e-6)
    assert s["kl_mean"] == pytest.approx(kl0 / 2, rel=1e-6)
    pdiff = abs(float(pa[0, 0] - pb[0, 0]))
    assert s["rollout_probs_diff_max"] == pytest.approx(pdiff)
    assert s["rollout_probs_diff_mean"] == pytest.approx(pdiff / 2)
    assert s["rollout_probs_diff_std"] == pytest.approx(float(torch.tensor([pdiff, 0.0]).std()))


def test_kl_is_infinite_where_b_rules_out_a_token_a_allows():
    la = _lp(torch.tensor([[0.0, 0.0]]))
    lb = torch.tensor([[0.0, -math.inf]])
    acc = Accumulator()
    acc.add(la, lb, torch.tensor([0]))
    s = acc.summary()
    assert math.isinf(s["kl_max"]) and s["kl_infinite_positions"] == 1


def test_kl_of_two_coins_and_the_full_vocabulary_metrics():
    # a = (1/2, 1/2), b = (1/4, 3/4): KL(a||b) = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3)
    la = torch.log(torch.tensor([[0.5, 0.5]], dtype=torch.float64)).float()
    lb = torch.log(torch.tensor([[0.25, 0.75]], dtype=torch.float64)).float()
    acc = Accumulator()
    acc.add(la, lb, torch.tensor([1]))
    s = acc.summary()
    assert s["kl_max"] == pytest.approx(0.5 * math.log(4 / 3), rel=1e-6)
    assert s["kl_mean_finite"] == pytest.approx(s["kl_mean"]) and s["kl_infinite_positions"] == 0
    assert s["logprob_diff_max"] == pytest.approx(math.log(1.5), rel=1e-6)     # token 1: ln(3/4) - ln(1/2)
    assert s["full_logprob_diff_max"] == pytest.approx(math.log(2), rel=1e-6)  # token 0: ln(1/2) - ln(1/4)
    assert s["full_exact_zero_fraction"] == 0
    assert s["argmax_flip_rate"] == 1.0                                         # b's argmax is token 1
    assert s["rollout_probs_diff_max"] == pytest.approx(0.25, rel=1e-6)
    assert s["rollout_actor_probs_pearson_corr"] is None                        # one position: undefined


def test_attention_output_differences():
    acc = Accumulator()
    acc.add(_lp(torch.zeros(1, 3)), _lp(torch.zeros(1, 3)), torch.tensor([0]))
    acc.add_outputs(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 2.5], [3.0, 3.0]]))
    s = acc.summary()
    assert s["output_diff_max"] == 1.0
    assert s["output_diff_mean"] == pytest.approx(1.5 / 4)
    assert s["output_exact_zero_fraction"] == 0.5


def test_empty_accumulator():
    assert Accumulator().summary() == {"positions": 0}


# --- the sampled tokens alone (an engine with top-n logprobs) --------------------------------------

def test_sampled_summary_known_answer():
    # request 0: diffs 0, 1e-3, 0; request 1: diffs 0, 0 (then a flip); 6 positions compared, 1 flip
    s = sampled_summary([[-0.1, -0.2, -0.3], [-1.0, -2.0]], [[-0.1, -0.201, -0.3], [-1.0, -2.0]], flips=1, compared=6)
    assert s["positions"] == 5
    assert s["logprob_diff_max"] == pytest.approx(1e-3)
    assert s["logprob_diff_mean"] == pytest.approx(1e-3 / 5)
    assert s["exact_zero_fraction"] == pytest.approx(4 / 5)
    assert s["argmax_flip_rate"] == pytest.approx(1 / 6)
    assert s["rollout_probs_diff_max"] == pytest.approx(math.exp(-0.2) - math.exp(-0.201))
    assert s["rollout_actor_probs_pearson_corr"] == pytest.approx(1.0, abs=1e-5)
    h = s["histogram"]
    assert h["zero"] == 4 and h["counts"][HIST_EDGES.index(-3)] == 1 and sum(h["counts"]) == 1
    assert "kl_max" not in s and "rollout_probs_diff_std" not in s   # not measurable without full distributions


def test_sampled_summary_without_positions_is_none_not_zero():
    s = sampled_summary([[], []], [[], []], flips=0, compared=0)
    assert s["positions"] == 0
    for k in ("logprob_diff_max", "logprob_diff_mean", "logprob_diff_p99", "exact_zero_fraction",
              "rollout_probs_diff_max", "rollout_probs_diff_mean", "rollout_actor_probs_pearson_corr",
              "argmax_flip_rate"):
        assert s[k] is None, k
    assert s["histogram"]["zero"] == 0 and sum(s["histogram"]["counts"]) == 0
    assert sampled_summary([], [], 0, 0)["positions"] == 0


def test_sampled_token_metrics_p99_and_mean():
    d = np.array([0.0] * 99 + [1.0])
    m = sampled_token_metrics(d, np.ones(100), np.ones(100))
    assert m["logprob_diff_mean"] == pytest.approx(0.01)
    assert m["logprob_diff_p99"] == pytest.approx(0.01)     # numpy's linear interpolation at 0.99 of 0..99
    assert m["exact_zero_fraction"] == pytest.approx(0.99)
    assert m["rollout_probs_diff_max"] == 0 and m["rollout_actor_probs_pearson_corr"] is None   # constant series


def test_pearson():
    assert pearson(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0])) == pytest.approx(1.0)
    assert pearson(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    assert pearson(np.array([1.0]), np.array([1.0])) is None
    assert pearson(np.array([1.0, 1.0]), np.array([1.0, 2.0])) is None


# --- histogram and gate ---------------------------------------------------------------------------

def test_histogram_bins():
    h = histogram([0.0, 0.0, 1e-12, 3e-7, 5e-3, 2.0])
    assert h["zero"] == 2
    edges = h["log10_edges"]
    assert sum(h["counts"]) == 4
    assert h["counts"][0] == 1                          # below 1e-10 lands in the first bin
    assert h["counts"][edges.index(-7)] == 1            # 3e-7 in [1e-7, 1e-6)
    assert h["counts"][edges.index(-3)] == 1
    assert h["counts"][-1] == 1                         # 2.0 clipped into the last bin


def test_histogram_edges_are_lower_bounds():
    h = histogram([1e-5, 9.9e-5, 1e-4, 1.0])
    assert h["log10_edges"] == HIST_EDGES == [float(x) for x in range(-10, 1)]
    assert len(h["counts"]) == len(HIST_EDGES) - 1
    assert h["counts"][HIST_EDGES.index(-5)] == 2       # 1e-5 and 9.9e-5 in [1e-5, 1e-4)
    assert h["counts"][HIST_EDGES.index(-4)] == 1
    assert h["counts"][-1] == 1                         # 1.0 (the last edge) into the last bin
    assert histogram([]) == {"zero": 0, "log10_edges": HIST_EDGES, "counts": [0] * 10, "non_finite": 0}


def test_non_finite_differences_are_counted_not_dropped():
    # NaN and inf differences (a path scored NaN, or -inf on both sides) are in no bin: counted apart
    h = histogram([0.0, float("nan"), float("inf"), 1e-3])
    assert h["zero"] == 1 and sum(h["counts"]) == 1 and h["non_finite"] == 2
    s = sampled_summary([[-0.5, float("-inf"), -1.0]], [[-0.5, float("-inf"), float("nan")]], 0, 3)
    assert s["positions"] == 3 and s["logprob_diff_non_finite"] == 2 and s["histogram"]["non_finite"] == 2
    a = _lp(torch.randn(3, 8))
    b = a.clone()
    b[1, 4] = float("nan")                               # the sampled token of row 1 scored NaN under b
    acc = Accumulator()
    acc.add(a, b, torch.tensor([0, 4, 2]))
    out = acc.summary()
    assert out["logprob_diff_non_finite"] == 1 and math.isnan(out["logprob_diff_max"])
    assert out["histogram"]["zero"] + sum(out["histogram"]["counts"]) + out["histogram"]["non_finite"] == 3
    clean = Accumulator()
    clean.add(a, a, torch.tensor([0, 4, 2]))
    assert clean.summary()["logprob_diff_non_finite"] == 0


def test_gate():
    rows = {"kernel/a/float32": {"logprob_diff_max": 0.0}, "model/b/float32": {"logprob_diff_max": 1e-3}}
    assert apply_gate(OpEqConfig(), rows) is None
    g = apply_gate(OpEqConfig(tolerance=1e-4), rows)
    assert not g["passed"] and [f["row"] for f in g["failed"]] == ["model/b/float32"]
    assert apply_gate(OpEqConfig(tolerance=1e-2), rows)["passed"]


def test_gate_skips_missing_values_and_fails_nan():
    rows = {"x": {"kl_max": None}, "y": {}, "z": {"kl_max": float("nan")}}
    g = apply_gate(OpEqConfig(tolerance=1.0, tolerance_metric="kl_max"), rows)
    assert g["metric"] == "kl_max" and [f["row"] for f in g["failed"]] == ["z"]
    assert g["measured"] == 1 and g["not_measured"] == ["x", "y"]


def test_a_gate_that_measured_no_row_does_not_pass():
    # output_diff_max exists at the kernel level only: model rows, or no row at all, measured nothing
    for rows in ({"model/reference/float32": {"logprob_diff_max": 0.0}}, {}):
        g = apply_gate(OpEqConfig(tolerance=0.0, tolerance_metric="output_diff_max"), rows)
        assert not g["passed"] and g["failed"] == [] and g["measured"] == 0
