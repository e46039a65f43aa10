"""Tree steps in the simulated rollout: multi-path drafts verified once nobody waits and at most
`tree_running` requests run, worked by hand, and the closed form against stepping one by one."""

import numpy as np
import pytest

from samspec_bench.bench.policies import AlwaysPolicy, ThresholdPolicy
from samspec_bench.bench.simulation import fast_paths
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.sam.strategies.switches import BatchSchedule

ONE = StepTimeModel.constant(1.0)
MODEL = StepTimeModel(0.01, {"running": 0.001, "decode_tokens": 1e-4, "prefill_tokens": 1e-4, "draft_tokens": 3e-4,
                             "context_tokens": 1e-6, "speculative": 0.002, "spec_requests": 1e-4})


def flat(n, d, a):
    return np.full(n, d, np.int16), np.full(n, a, np.int16)


def test_tree_steps_by_hand():
    # prompts of 1 (a prefill samples the first token), k 1, tree_k 3, tree_running 1, max_num_seqs 2.
    # linear profiles draft 1 and keep it; r2's tree profile drafts 5, keeps 2 at position 3 and 5 at 6.
    # step 0: r0, r1 admitted, r2 waits: prefills, pos 1, 1                      drafted 0, emitted 2
    # step 1: 2 run, r2 waits (no tree): r0 1 of 1 -> pos 3 done; r1 -> pos 3      drafted 2, emitted 4
    # step 2: r1 runs, r2 waits at the step's start (no tree), admitted: r1 -> 5; r2 prefill -> pos 1
    #                                                                             drafted 1, emitted 3
    # step 3: nobody waits but 2 run (> 1, no tree): r1 at 5 of 6 drafts 0 -> done; r2 1 of 1 -> pos 3
    #                                                                             drafted 1, emitted 3
    # step 4: r2 alone, nobody waits: tree; drafts min(3, 5) = 3, keeps min(2, 3, 8-3-1) = 2 -> pos 6
    # step 5: tree; drafts min(3, 5) = 3 (not capped by 8-6-1 = 1), keeps min(5, 3, 1) = 1 -> pos 8 done
    ta = np.full(8, 5, np.int16)
    ta[3] = 2
    reqs = [SimRequest(1, 3, *flat(3, 1, 1), tree_drafted=np.full(3, 5, np.int16), tree_accepted=np.full(3, 5, np.int16)),
            SimRequest(1, 6, *flat(6, 1, 1)),
            SimRequest(1, 8, *flat(8, 1, 1), tree_drafted=np.full(8, 5, np.int16), tree_accepted=ta)]
    for ff in (True, False):
        r = simulate(reqs, k=1, policy=AlwaysPolicy(), step_model=ONE, max_num_seqs=2, fast_forward=ff,
                     tree_running=1, tree_k=3)
        assert r.num_steps == 6, ff
        assert list(r.steps["num_drafted"]) == [0, 2, 1, 1, 3, 3], ff
        assert list(r.steps["num_accepted"]) == [0, 2, 1, 1, 2, 1], ff
        assert list(r.steps["num_emitted"]) == [2, 4, 3, 3, 3, 2], ff
        assert list(r.steps["tree"]) == [False] * 4 + [True] * 2, ff
        assert list(r.steps["num_waiting"]) == [1, 1, 0, 0, 0, 0], ff
        assert list(r.finish_time_s) == [2.0, 4.0, 6.0], ff


def assert_same(a, b):
    """Two simulations' step tables (every column) and finish times are identical."""
    assert a.num_steps == b.num_steps and set(a.steps) == set(b.steps)
    assert [c for c in a.steps if not np.array_equal(a.steps[c], b.steps[c])] == []
    assert np.array_equal(a.finish_time_s, b.finish_time_s)


def _random_requests(n, seed, tree_share=0.7):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        m = int(rng.integers(5, 300))
        d = rng.integers(0, 6, m).astype(np.int16)
        a = np.minimum(rng.integers(0, 4, m), d).astype(np.int16)
        td = rng.integers(4, 16, m).astype(np.int16)   # more than k = 3 where the profile reaches
        tree = (td, np.minimum(rng.integers(0, 9, m), td).astype(np.int16)) if rng.random() < tree_share else (None, None)
        out.append(SimRequest(int(rng.integers(1, 40)), int(rng.integers(2, 400)), d, a, stretch=bool(i % 5),
                              tree_drafted=tree[0], tree_accepted=tree[1]))
    return out


@pytest.mark.parametrize("policy, budget, kv, tree_running, closed", [
    (AlwaysPolicy(), 2048, None, 4, True),                      # one tree band below the linear one
    (ThresholdPolicy(8), 2048, 6000, 3, True),                  # threshold switch, a KV cache that holds all
    (BatchSchedule([(1, 2, 3), (3, 5, 1), (6, 12, 2)]), 2048, None, 4, True),   # tree_running inside a k band
    (AlwaysPolicy(), 30, None, 4, None),                        # budget < 4 x (tree_k + 1): stepped
    (ThresholdPolicy(8), 64, 900, 3, None),                     # a KV cache that preempts
])
def test_trees_fast_forward_equals_step_by_step(policy, budget, kv, tree_running, closed, monkeypatch):
    calls = []
    real = fast_paths.speculative_end
    monkeypatch.setattr(fast_paths, "speculative_end", lambda *a: calls.append(1) or real(*a))
    reqs = _random_requests(50, 3)
    a, b = (simulate(reqs, k=3, policy=policy, step_model=MODEL, max_num_seqs=12, max_num_batched_tokens=budget,
                     tail_threshold=6, position_edges=(16, 64), fast_forward=ff, kv_capacity_tokens=kv,
                     tree_running=tree_running, tree_k=10)
            for ff in (True, False))
    assert_same(a, b)
    assert a.makespan_s == b.makespan_s
    assert not [c for c in a.tail_acceptance if not np.array_equal(a.tail_acceptance[c], b.tail_acceptance[c])]
    tree = a.steps["tree"]
    assert tree.any() and (a.steps["num_drafted"][tree] > 3 * a.steps["num_running"][tree]).any()  # more than k
    assert (a.steps["num_running"][tree] <= tree_running).all() and (a.steps["num_waiting"][tree] == 0).all()
    if closed:
        assert len(calls) == 1   # only the fast-forwarding run took the closed form


@pytest.mark.parametrize("ff", [True, False])
def test_tree_running_zero_ignores_tree_profiles(ff):
    with_trees = _random_requests(40, 5, tree_share=1.0)
    without = [SimRequest(r.prompt_len, r.response_len, r.drafted, r.accepted, stretch=r.stretch) for r in with_trees]
    a = simulate(with_trees, k=3, policy=ThresholdPolicy(6), step_model=MODEL, max_num_seqs=10, fast_forward=ff,
                 tree_running=0, tree_k=10)
    b = simulate(without, k=3, policy=ThresholdPolicy(6), step_model=MODEL, max_num_seqs=10, fast_forward=ff)
    assert not a.steps["tree"].any()
    assert_same(a, b)
    # and the same profiles with tree steps on do change the schedule (the comparison can fail)
    c = simulate(with_trees, k=3, policy=ThresholdPolicy(6), step_model=MODEL, max_num_seqs=10, fast_forward=ff,
                 tree_running=6, tree_k=10)
    assert c.num_steps != b.num_steps


@pytest.mark.parametrize("ff", [True, False])
def test_a_request_without_a_tree_profile_reads_its_linear_one(ff):
    # k 1, tree_k 4, tree_running 2; r0 has no tree profile (linear: drafts 2, keeps 2), r1's tree drafts 4, keeps 4.
    # step 0: prefills -> pos 1, 1 (both waited: no tree)                          drafted 0, emitted 2
    # step 1: tree: r0 min(4, 2) = 2 (not k's 1), keeps 2 -> pos 4; r1 4, keeps 4 -> pos 6   drafted 6, emitted 8
    # step 2: tree: r0 2, keeps min(2, 2, 7-4-1) -> pos 7 done; r1 at 6 of 7 drafts 0 -> done  drafted 2, emitted 4
    reqs = [SimRequest(1, 7, *flat(7, 2, 2)),
            SimRequest(1, 7, *flat(7, 2, 2), tree_drafted=np.full(7, 4, np.int16), tree_accepted=np.full(7, 4, np.int16))]
    r = simulate(reqs, k=1, policy=AlwaysPolicy(), step_model=ONE, fast_forward=ff, tree_running=2, tree_k=4)
    assert list(r.steps["num_drafted"]) == [0, 6, 2]
    assert list(r.steps["num_emitted"]) == [2, 8, 4]
    assert list(r.steps["tree"]) == [False, True, True]
    assert list(r.finish_time_s) == [3.0, 3.0]
    # no request with a tree profile: every one reads its linear profile in tree steps
    alone = simulate(reqs[:1], k=1, policy=AlwaysPolicy(), step_model=ONE, fast_forward=ff, tree_running=1, tree_k=4)
    assert list(alone.steps["num_drafted"]) == [0, 2, 2] and list(alone.steps["num_emitted"]) == [1, 3, 3]


@pytest.mark.parametrize("ff", [True, False])
def test_tree_accepted_is_capped_by_the_tokens_left_but_not_the_drafted(ff):
    # one request, response 4: step 0 prefill (pos 1); step 1 tree: drafts min(8, 8) = 8 although only
    # 4-1-1 = 2 tokens are left to draft, keeps min(8, 8, 2) = 2, emits 3 -> done
    req = SimRequest(1, 4, *flat(4, 8, 8), tree_drafted=np.full(4, 8, np.int16), tree_accepted=np.full(4, 8, np.int16))
    r = simulate([req], k=8, policy=AlwaysPolicy(), step_model=ONE, fast_forward=ff, tree_running=1, tree_k=8)
    assert list(r.steps["num_drafted"]) == [0, 8] and list(r.steps["num_accepted"]) == [0, 2]
    assert list(r.steps["num_emitted"]) == [1, 3] and list(r.steps["num_scheduled_tokens"]) == [1, 9]
    lin = simulate([req], k=8, policy=AlwaysPolicy(), step_model=ONE, fast_forward=ff)
    assert list(lin.steps["num_drafted"]) == [0, 2]   # a linear draft is capped by the tokens left
    # at the last token a tree drafts nothing: response 2, step 1 at position 1 of 2
    last = SimRequest(1, 2, *flat(2, 8, 8), tree_drafted=np.full(2, 8, np.int16), tree_accepted=np.full(2, 8, np.int16))
    r = simulate([last], k=8, policy=AlwaysPolicy(), step_model=ONE, fast_forward=ff, tree_running=1, tree_k=8)
    assert list(r.steps["num_drafted"]) == [0, 0] and list(r.steps["num_emitted"]) == [1, 1]


@pytest.mark.parametrize("ff", [True, False])
def test_tree_tokens_count_against_the_token_budget(ff):
    # budget 12, k 1, tree_k 8, tree_running 2; two requests of 12 tokens whose trees draft 8 and keep 8.
    # linear drafts of 2 running fit (2 x 2 <= 12), trees do not (2 x 9 > 12): no closed form until 1 runs.
    # step 0: prefills -> pos 1, 1                                                  scheduled 2
    # step 1: tree: r0 1 + 8 (keeps 8 -> pos 10); r1 gets the 3 left: 1 + 2 (keeps 2 -> pos 4)   scheduled 12
    # step 2: r0 1 + 8, keeps min(8, 8, 12-10-1) = 1 -> done; r1 1 + 2 -> pos 7        scheduled 12
    # step 3: r1 alone: 1 + 8, keeps min(8, 8, 12-7-1) = 4 -> done                    scheduled 9
    tree = dict(tree_drafted=np.full(12, 8, np.int16), tree_accepted=np.full(12, 8, np.int16))
    reqs = [SimRequest(1, 12, *flat(12, 8, 8), **tree), SimRequest(1, 12, *flat(12, 8, 8), **tree)]
    r = simulate(reqs, k=1, policy=AlwaysPolicy(), step_model=ONE, max_num_batched_tokens=12, fast_forward=ff,
                 tree_running=2, tree_k=8)
    assert list(r.steps["num_scheduled_tokens"]) == [2, 12, 12, 9]
    assert list(r.steps["num_drafted"]) == [0, 10, 10, 8] and list(r.steps["num_emitted"]) == [2, 12, 5, 5]
    assert list(r.finish_time_s) == [3.0, 4.0]


def test_tree_running_without_tree_k_is_refused():
    with pytest.raises(ValueError, match="tree_k"):
        simulate([SimRequest(1, 3)], k=1, policy=AlwaysPolicy(), step_model=ONE, tree_running=2)
