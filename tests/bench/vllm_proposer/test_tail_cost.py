"""Per-row draft cost of a draining batch (bench/vllm_proposer/tail_cost.py): with nothing to tell
the rows apart it is the batch throughput cost; the row that will finish last pays for drafts
at a lower acceptance, the rows ahead of it at a higher one."""

from __future__ import annotations

import pytest

from samspec_bench.bench.vllm_proposer.online_cost import draft_token_cost
from samspec_bench.bench.vllm_proposer.tail_cost import critical_probabilities, row_costs


def test_alike_rows_get_the_batch_throughput_cost():
    a, b, t, v = 0.06, 0.005, 1.4, 1.9
    for r in (1, 3, 8):
        costs = row_costs(a, b, [(200, t, v)] * r)
        assert costs == pytest.approx([draft_token_cost(a, b, r, t, v)] * r)


def test_the_laggard_drafts_cheaper_and_the_rows_ahead_dearer():
    a, b = 0.06, 0.005
    rows = [(40, 1.5, 2.0)] * 5 + [(160, 1.1, 2.0)]   # one row with four times the steps left
    costs = row_costs(a, b, rows)
    batch = draft_token_cost(a, b, 6, 1.5, 2.0)
    assert costs[-1] < batch < costs[0]
    assert costs[-1] == pytest.approx(1.1 / (2.0 + a / b), rel=0.05)   # nearly certain to finish last
    assert costs[0] == pytest.approx(1.5 / 2.0, rel=0.05)               # nearly certain not to
    assert costs[:5] == [costs[0]] * 5


def test_probabilities_and_guards():
    p = critical_probabilities([10.0, 10.0, 10.0, 10.0])
    assert p == pytest.approx([0.25] * 4)
    # temperature 0.1 x 100 + 4 = 14 steps: weights 1, e^(-50/14), e^(-100/14), normalised
    p = critical_probabilities([100.0, 50.0, 0.0])
    assert p == pytest.approx([0.971906, 0.027326, 0.000768], abs=1e-6)
    # the temperature grows with the remaining steps: the same 2:1 gap at ten times the scale is sharper
    assert critical_probabilities([1000.0, 500.0])[0] > critical_probabilities([100.0, 50.0])[0]
    assert critical_probabilities([]) == []
    assert row_costs(0.06, 0.0, [(10, 1.0, 1.0)]) is None      # no slope: the fit cannot price a draft
    assert row_costs(0.06, 0.005, []) is None
    assert all(0 <= c <= 0.5 for c in row_costs(0.0, 1.0, [(0, 5.0, 1.0)] * 2, max_cost=0.5))   # clipped
