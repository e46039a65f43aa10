import numpy as np
import pytest

from samspec_bench.bench.replay import replay_response
from samspec_bench.bench.scheduler_sim import (AlwaysPolicy, OffPolicy, SimRequest, ThresholdPolicy,
                                               acceptance_profile, simulate, walk_profile)
from samspec_bench.bench.step_model import StepTimeModel
from samspec_bench.sam import SamDrafter

ONE = StepTimeModel.constant(1.0)


def test_constant_step_time_makespan_is_step_count_by_hand():
    # max_num_seqs 2, responses 3, 10, 4, 7 tokens: r0 ends step 3, r2 admitted step 4 ends step 7,
    # r3 admitted step 8 ends step 14; r1 ends step 10.
    reqs = [SimRequest(5, n) for n in (3, 10, 4, 7)]
    for ff in (True, False):
        r = simulate(reqs, k=0, policy=None, step_model=ONE, max_num_seqs=2, fast_forward=ff)
        assert r.num_steps == 14 and r.makespan_s == 14.0
        assert list(r.finish_time_s) == [3.0, 10.0, 7.0, 14.0]
        assert r.steps["num_emitted"].sum() == 24
        assert list(r.steps["num_running"]) == [2] * 10 + [1] * 4


def test_chunked_prefill_and_budget():
    # budget 4 tokens, prompt 6: prefill takes 2 steps (4 then 2), the first token comes with the second
    r = simulate([SimRequest(6, 3)], k=0, policy=None, step_model=ONE, max_num_batched_tokens=4)
    assert list(r.steps["num_scheduled_tokens"]) == [4, 2, 1, 1]
    assert list(r.steps["num_emitted"]) == [0, 1, 1, 1]
    assert r.first_token_time_s[0] == 2.0


def test_perfect_drafts_cut_steps():
    n = 13
    prof = (np.full(n, 3, np.int16), np.full(n, 3, np.int16))
    off = simulate([SimRequest(4, n, *prof)], k=3, policy=OffPolicy(), step_model=ONE)
    on = simulate([SimRequest(4, n, *prof)], k=3, policy=AlwaysPolicy(), step_model=ONE)
    assert off.num_steps == n            # prefill + 12 decode steps
    assert on.num_steps == 1 + 3         # 12 tokens at 4 per step
    assert on.steps["num_accepted"].sum() == 9 and on.steps["num_emitted"].sum() == n


def test_threshold_policy_speculates_only_in_small_batches():
    prof = lambda n: (np.full(n, 2, np.int16), np.full(n, 1, np.int16))  # noqa: E731
    reqs = [SimRequest(3, n, *prof(n)) for n in (5, 5, 5, 40)]
    r = simulate(reqs, k=2, policy=ThresholdPolicy(1), step_model=ONE, max_num_seqs=4, tail_threshold=1,
                 position_edges=(10,))
    spec = r.steps["speculative"]
    # step 0 runs nobody yet (0 <= 1: the policy says yes, as the engine's would; nothing drafts)
    assert spec[0] and r.steps["num_drafted"][0] == 0
    assert not spec[1:5].any() and spec[5:].all()
    assert (r.steps["num_running"][spec][1:] <= 1).all()
    ta = r.tail_acceptance
    assert ta["drafted"].sum() == r.steps["num_drafted"].sum() > 0
    assert ta["accepted"].sum() == r.steps["num_accepted"].sum()


def test_profile_walk_equals_replay():
    rng = np.random.default_rng(1)
    resp = rng.integers(0, 4, 400)
    prompt = [0, 1, 2, 3]
    for k in (1, 3, 5):
        d, a = acceptance_profile(SamDrafter(), prompt, resp, k)
        pos, dr, ac, em = walk_profile(d, a, k)
        rs = replay_response(SamDrafter(), prompt, resp, k)
        assert list(rs.position) == pos and list(rs.drafted) == dr
        assert list(rs.accepted) == ac and list(rs.emitted) == em


def test_simulation_acceptance_matches_replay_for_single_request():
    rng = np.random.default_rng(2)
    resp = rng.integers(0, 3, 300)
    d, a = acceptance_profile(SamDrafter(), [1, 2], resp, 3)
    r = simulate([SimRequest(2, len(resp), d, a)], k=3, policy=AlwaysPolicy(), step_model=ONE)
    rs = replay_response(SamDrafter(), [1, 2], resp, 3)
    # identical up to the last step: the simulation follows the engine's max_tokens rule
    # (drafts capped at max_tokens - output - 1, the last token is always a bonus token), replay
    # lets a draft cover the end without a bonus token
    sim_acc = list(r.steps["num_accepted"][1:])
    n = min(len(sim_acc), len(rs.accepted)) - 1
    assert n > 50 and sim_acc[:n] == list(rs.accepted[:n])
    assert abs(r.num_steps - (1 + len(rs.position))) <= 1
    assert r.steps["num_emitted"].sum() == len(resp)


def test_fast_forward_equals_step_by_step_with_linear_model():
    rng = np.random.default_rng(3)
    model = StepTimeModel(0.01, {"running": 0.001, "scheduled_tokens": 0.0001, "context_tokens": 1e-6,
                                 "speculative": 0.002})
    reqs = [SimRequest(int(p), int(n)) for p, n in zip(rng.integers(1, 50, 40), rng.integers(1, 300, 40))]
    a = simulate(reqs, k=0, policy=None, step_model=model, max_num_seqs=8, max_num_batched_tokens=64)
    b = simulate(reqs, k=0, policy=None, step_model=model, max_num_seqs=8, max_num_batched_tokens=64,
                 fast_forward=False)
    assert a.num_steps == b.num_steps
    assert a.makespan_s == pytest.approx(b.makespan_s)
    assert np.allclose(a.finish_time_s, b.finish_time_s)
    assert np.array_equal(a.steps["context_tokens"], b.steps["context_tokens"])


def test_large_tiled_workload_shares_profiles():
    d, a = np.full(2000, 3, np.int16), np.full(2000, 1, np.int16)
    reqs = [SimRequest(100, 2000, d, a) for _ in range(2000)]
    r = simulate(reqs, k=3, policy=ThresholdPolicy(8), step_model=ONE, max_num_seqs=256)
    assert np.isfinite(r.finish_time_s).all()
    assert r.steps["num_emitted"].sum() == 2000 * 2000
