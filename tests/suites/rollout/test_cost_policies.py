"""The cost policies' inputs from an arm's profiles: drafted / accepted tokens per decode
position with the drafts cut to each k, by hand."""

from types import SimpleNamespace

import numpy as np
import pytest

from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.sam.strategies.switches import CostK, CostSwitch
from samspec_bench.suites.rollout.cost_policies import acceptance_by_k, cost_switch


def test_acceptance_by_k_by_hand():
    # one response of 4 positions (3 decode positions): drafts 3, 3, 1 after the first; 2, 0, 1 accepted
    prof = [(np.array([0, 3, 3, 1]), np.array([0, 2, 0, 1]))]
    d, a = acceptance_by_k(prof, 3)
    assert d == pytest.approx([0, 3 / 3, 5 / 3, 7 / 3])      # min(d, k) summed: 0; 1+1+1; 2+2+1; 3+3+1
    assert a == pytest.approx([0, 2 / 3, 3 / 3, 3 / 3])      # min(a, k): 0; 1+0+1; 2+0+1; 2+0+1


def test_one_policy_per_kind_serves_every_instance():
    prof = [(np.array([0, 3, 3, 1]), np.array([0, 2, 0, 1]))]
    rep = SimpleNamespace(profiles={"p": prof}, pairs=[([1, 2], [3, 4, 5, 6])], idx=[0] * 10)
    build = cost_switch(rep, "p", np.array([4] * 10), StepTimeModel.constant(1.0), max_num_seqs=64, k_max=3)
    ck = build("costk")
    assert isinstance(ck, CostK) and build("costk") is ck and isinstance(build("cost"), CostSwitch)
    assert len(ck.ks) == 11                    # running counts 0..10: no more than the run's 10 requests
    # a step costs the same whatever it verifies, so the k that keeps the most: k 3 keeps no more than k 2
    # (1 token a step each), and a tie goes to the smaller k
    assert set(ck.ks[1:]) == {2}
