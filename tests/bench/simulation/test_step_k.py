"""Per-step k in the simulated schedule: a policy's `step_k` caps each step's drafts (a batch
schedule's band k, the cost rule's k per running count), worked by hand."""

from types import SimpleNamespace

import numpy as np

from samspec_bench.bench.policies import AlwaysPolicy
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.sam.strategies.switches import BatchSchedule, CostK, parse_switch

ONE = StepTimeModel.constant(1.0)


def perfect(n):
    """A profile that drafts 4 tokens at every position, all accepted."""
    return np.full(n, 4, np.int16), np.full(n, 4, np.int16)


def test_batch_schedule_k_by_hand():
    # two requests, prompts of 1, responses of 3 and 13 tokens; k = 1 while 2 run, 4 while 1 runs.
    # step 0: prefills (first tokens) -> pos 1, 1; step 1 (2 running, k 1): each drafts 1, keeps it:
    # pos 3 (r0 done), 3; step 2 (1 running, k 4): drafts 4 -> pos 8; step 3: drafts min(4, 13-8-1) -> 13
    reqs = [SimRequest(1, 3, *perfect(3)), SimRequest(1, 13, *perfect(13))]
    sched = BatchSchedule([(1, 1, 4), (2, 2, 1)])
    for ff in (True, False):
        r = simulate(reqs, k=4, policy=sched, step_model=ONE, fast_forward=ff)
        assert list(r.steps["num_drafted"]) == [0, 2, 4, 4], ff
        assert list(r.steps["num_emitted"]) == [2, 4, 5, 5]
        assert list(r.finish_time_s) == [2.0, 4.0]
    # one k for the arm (always on, k 4): r1 drafts 4 at once in step 1, so step 3 drafts only 1
    r = simulate(reqs, k=4, policy=AlwaysPolicy(), step_model=ONE)
    assert list(r.steps["num_drafted"]) == [0, 5, 4, 1]


def test_the_arms_k_caps_a_band_and_a_zero_band_does_not_speculate():
    reqs = [SimRequest(1, 13, *perfect(13))]
    r = simulate(reqs, k=2, policy=BatchSchedule([(1, 8, 6)]), step_model=ONE)
    assert r.steps["num_drafted"].max() == 2
    r = simulate(reqs * 3, k=4, policy=BatchSchedule([(1, 2, 4), (3, 8, 0)]), step_model=ONE)
    spec = r.steps["speculative"]
    assert not spec[r.steps["num_running"] == 3].any() and spec[r.steps["num_running"] <= 2].all()


def running(n):
    return SimpleNamespace(num_running=n, num_waiting=0, num_decoding=n, step=0)


def test_cost_k_by_hand():
    # t(B, x) = 1 + 0.1 B + 0.1 x; cut to k = 0..3 the arm drafts 0, 1, 2, 3 and keeps 0, 0.8, 1.2, 1.4 a step.
    # B = 1: tokens per second 1/1.1, 1.8/1.2, 2.2/1.3, 2.4/1.4 -> k 3;  B = 2: 1/1.2, 1.8/1.4, 2.2/1.6, 2.4/1.8 -> 2
    # B = 3: 1/1.3, 1.8/1.6, 2.2/1.9, 2.4/2.2 -> 2;  B = 5: 1/1.5, 1.8/2, 2.2/2.5, 2.4/3 -> 1;
    # B = 10: 1/2, 1.8/3, 2.2/4, 2.4/5 -> 1;  B = 100: 1/11 > 1.8/21 -> 0
    ck = CostK(lambda b, x: 1 + 0.1 * b + 0.1 * x, [0, 1, 2, 3], [0, 0.8, 1.2, 1.4], max_running=100)
    assert [ck.step_k(running(b)) for b in (1, 2, 5, 10, 100)] == [3, 2, 1, 1, 0]
    assert ck(running(10)) and not ck(running(100))
    bands = ck.bands()
    assert bands[0] == [1, 1, 3] and bands[1] == [2, 3, 2] and bands[-1][1:] == [100, 0]
    assert [b[2] for b in bands] == sorted((b[2] for b in bands), reverse=True)   # larger k when fewer run
    assert ck.step_k(running(500)) == 0                                          # past max_running: the last count's
    built = parse_switch("costk", cost=lambda kind: kind)
    assert built == "costk"
