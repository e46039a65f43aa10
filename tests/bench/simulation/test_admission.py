"""The simulated engine's admission order (bench/simulation/admission.py): first come first
served by default; Seer's context-aware order admits every group's probe first, then the rest
longest estimated group first, from what has finished only."""

import numpy as np
import pytest

from samspec_bench.bench.simulation.admission import ContextAwareOrder, make_order
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate

STEP = StepTimeModel.constant(1.0)   # clock = step count


def _reqs(groups_lengths):
    """Requests numbered group-major: [(group, length), ...] -> SimRequests (prompt 1 token)."""
    return [SimRequest(1, n, group=g) for g, n in groups_lengths]


def test_probes_first_in_submission_order_then_unknown_groups_then_longest_known():
    # groups a (0,1,2), b (3,4), c (5,6); lengths only read for finished requests
    order = ContextAwareOrder(["a", "a", "a", "b", "b", "c", "c"], np.array([5, 5, 5, 50, 50, 20, 20]))
    picked = []
    for _ in range(3):
        i = order.peek()
        order.take(i)
        picked.append(i)
    assert picked == [0, 3, 5]                       # one probe per group, first come first served
    order.finished(np.array([0]))                    # a's probe ended at 5: a is known short
    assert order.peek() == 4                         # b: nothing finished, counts as longest
    order.take(4)
    assert order.peek() == 6                         # c unknown beats a known 5
    order.take(6)
    order.finished(np.array([5]))                    # c known 20
    assert order.peek() == 1                         # only a is left: its earliest waiting member
    order2 = ContextAwareOrder(["a", "a", "b", "b"], np.array([5, 5, 30, 30]))
    for _ in range(2):
        order2.take(order2.peek())
    order2.finished(np.array([0, 2]))                # a known 5, b known 30: b's member goes first
    assert order2.peek() == 3


def test_a_waiting_requests_own_length_is_never_read():
    base = ContextAwareOrder(["a", "a", "b", "b"], np.array([5, 5, 30, 30]))
    other = ContextAwareOrder(["a", "a", "b", "b"], np.array([5, 900, 30, 1]))   # waiting members differ
    for o in (base, other):
        o.take(o.peek())
        o.take(o.peek())
        o.finished(np.array([0, 2]))
    assert base.peek() == other.peek() == 3


def test_make_order_refuses_unknown_names_and_missing_groups():
    assert make_order("fcfs", [None], np.array([3])) is None
    with pytest.raises(ValueError, match="use one of fcfs, context"):
        make_order("lifo", [0], np.array([3]))
    with pytest.raises(ValueError, match="needs every request's group"):
        make_order("context", [0, None], np.array([3, 3]))


def test_context_admission_runs_the_long_group_early_and_shortens_the_rollout():
    # two slots; group s: three short responses submitted first, group l: three long ones
    reqs = _reqs([("s", 10), ("s", 10), ("s", 10), ("l", 100), ("l", 100), ("l", 100)])
    fcfs = simulate(reqs, k=0, policy=None, step_model=STEP, max_num_seqs=2)
    ctx = simulate(reqs, k=0, policy=None, step_model=STEP, max_num_seqs=2, admission="context")
    # first come first served: s1 starts before l0 (submission order)
    assert fcfs.first_token_time_s[1] < fcfs.first_token_time_s[3]
    # context: the probes s0 and l0 first; when s0 ends short, l1 (unknown group) goes before s1
    assert ctx.first_token_time_s[3] <= ctx.first_token_time_s[1]
    assert ctx.first_token_time_s[4] < ctx.first_token_time_s[1]
    assert ctx.makespan_s < fcfs.makespan_s
    # the same work: every request emits its whole length under both orders
    assert np.all(np.isfinite(ctx.finish_time_s)) and int(ctx.steps["num_emitted"].sum()) == 330


def test_first_come_first_served_is_the_default_and_ignores_groups():
    reqs = _reqs([("s", 10), ("s", 10), ("l", 100), ("l", 100)])
    default = simulate(reqs, k=0, policy=None, step_model=STEP, max_num_seqs=1)
    # one slot, submission order: each request starts when the one before it ends
    starts = default.first_token_time_s
    assert list(np.argsort(starts, kind="stable")) == [0, 1, 2, 3]
