import numpy as np
import pytest

from samspec_bench.bench.engines.replay import replay_response
from samspec_bench.bench.policies import AlwaysPolicy, OffPolicy, ThresholdPolicy
from samspec_bench.bench.simulation import fast_paths
from samspec_bench.bench.simulation.profile_table import ProfileTable
from samspec_bench.bench.simulation.profiles import (BLOCK, acceptance_profile, group_acceptance_profiles,
                                                     profiles_for, stretch_positions, walk_profile)
from samspec_bench.bench.simulation.reprice import reprice
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.errors import UserError
from samspec_bench.sam.strategies.switches import BatchSchedule
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


@pytest.mark.parametrize("n, max_tokens, drafted, emitted_last", [
    (12, None, 3 + 3 + 2, 3),    # the engine's limit is the end: the draft at p=9 is cut to 2 tokens left - 1
    (12, 20, 3 + 3 + 3, 3),      # an EOS end before max_tokens: it drafts 3 past it, 2 are kept
    (10, None, 3 + 3 + 0, 1),    # at the limit's last token nothing is drafted
    (10, 20, 3 + 3 + 3, 1),      # before an EOS it cannot see, the engine drafts k and keeps none
])
def test_drafts_are_cut_at_the_engines_limit_not_at_an_eos_end(n, max_tokens, drafted, emitted_last):
    prof = (np.full(n, 3, np.int16), np.full(n, 3, np.int16))
    for ff in (True, False):     # the closed-form end and the step-by-step walk
        r = simulate([SimRequest(4, n, *prof, max_tokens=max_tokens)], k=3, policy=AlwaysPolicy(),
                     step_model=ONE, fast_forward=ff)
        assert r.num_steps == 1 + 3 and r.steps["num_emitted"].sum() == n
        assert r.steps["num_drafted"].sum() == drafted and r.steps["num_emitted"][-1] == emitted_last


def test_a_response_longer_than_its_max_tokens_is_refused():
    with pytest.raises(ValueError, match="1 to max_tokens tokens"):
        simulate([SimRequest(4, 12, max_tokens=8)], k=0, policy=None, step_model=ONE)


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
        d, a = acceptance_profile(SamDrafter(length="fixed"), prompt, resp, k)
        pos, dr, ac, em = walk_profile(d, a, k)
        rs = replay_response(SamDrafter(length="fixed"), prompt, resp, k)
        assert list(rs.position) == pos and list(rs.drafted) == dr
        assert list(rs.accepted) == ac and list(rs.emitted) == em


@pytest.mark.parametrize("length, compiled", [
    (None, True), (None, False),                    # the evidence policy (sam's default), C and Python
    ("evidence:budget=0.7", True), ("evidence:budget=0.7", False),   # with a draft budget
])
def test_a_drafter_that_learns_from_acceptance_learns_along_the_decode_walk(length, compiled):
    # the evidence policy's record and per-request scale, and a budget, learn from each step's
    # emitted tokens: the profile judges its drafts along the walk a replay decodes, so walking
    # the profile is the replay step for step (judged one token at a time, every draft would look
    # accepted for at most one token, and the drafter would learn to draft less)
    rng = np.random.default_rng(3)
    resp = np.concatenate([rng.integers(0, 6, 150), np.tile(rng.integers(0, 6, 40), 6)])
    prompt = [0, 1, 2, 3]
    for k in (3, 8):
        d, a = acceptance_profile(SamDrafter(length=length, compiled=compiled), prompt, resp, k)
        pos, dr, ac, em = walk_profile(d, a, k)
        rs = replay_response(SamDrafter(length=length, compiled=compiled), prompt, resp, k)
        assert list(rs.position) == pos and list(rs.drafted) == dr
        assert list(rs.accepted) == ac and list(rs.emitted) == em
        assert sum(rs.drafted) > 0 and max(rs.accepted) >= 2


def test_simulation_acceptance_matches_replay_for_single_request():
    rng = np.random.default_rng(2)
    resp = rng.integers(0, 3, 300)
    d, a = acceptance_profile(SamDrafter(length="fixed"), [1, 2], resp, 3)
    r = simulate([SimRequest(2, len(resp), d, a)], k=3, policy=AlwaysPolicy(), step_model=ONE)
    rs = replay_response(SamDrafter(length="fixed"), [1, 2], resp, 3)
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
    model = StepTimeModel(0.01, {"running": 0.001, "decode_tokens": 0.0001, "prefill_tokens": 0.0001,
                                 "context_tokens": 1e-6, "speculative": 0.002})
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
    # one stored profile for the 2000 requests that share it, after the empty slot 0
    assert ProfileTable(reqs, np.full(2000, 2000)).drafts.size == 1 + 2000
    r = simulate(reqs, k=3, policy=ThresholdPolicy(8), step_model=ONE, max_num_seqs=256)
    assert np.isfinite(r.finish_time_s).all()
    assert r.steps["num_emitted"].sum() == 2000 * 2000
    # sharing is storage only: the same schedule as requests with their own copies
    few = reqs[:300]
    own = [SimRequest(100, 2000, d.copy(), a.copy()) for _ in range(300)]
    x, y = (simulate(q, k=3, policy=ThresholdPolicy(8), step_model=ONE, max_num_seqs=64) for q in (few, own))
    assert x.num_steps == y.num_steps and np.array_equal(x.steps["num_accepted"], y.steps["num_accepted"])


# ---------- KV capacity and preemption ----------

def test_kv_preemption_by_hand():
    # blocks of 4 tokens, 4 blocks; two requests (prompt 4, response 8). Steps 0-4 fit (each ends
    # with 8 KV tokens = 2 blocks); at step 5 r0 needs a third block: none free, so the latest
    # admitted (r1, 5 tokens emitted) is preempted; its recompute (4 + 5 tokens = 3 blocks) waits
    # until r0 finishes (step 7), runs at step 8 (emits token 6) and r1 ends at step 10.
    reqs = [SimRequest(4, 8), SimRequest(4, 8)]
    for ff in (True, False):
        r = simulate(reqs, k=0, policy=None, step_model=ONE, max_num_seqs=2, kv_capacity_tokens=16, block_size=4,
                     fast_forward=ff)
        assert r.num_steps == 11, ff
        assert list(r.finish_time_s) == [8.0, 11.0]
        assert r.steps["num_preempted"].sum() == 1 and r.steps["num_preempted"][5] == 1
        assert list(r.steps["num_running"][5:9]) == [1, 1, 1, 1]
        assert r.steps["num_scheduled_tokens"][8] == 9      # the recompute prefill
        # priced as a prefill of 9 tokens, not as a decode step (it samples, like a prompt's last chunk)
        assert r.steps["num_prefill_tokens"][8] == 9 and r.steps["num_decode_reqs"][8] == 0
        assert r.steps["num_emitted"].sum() == 16


def test_kv_unlimited_and_large_capacity_agree():
    rng = np.random.default_rng(4)
    reqs = [SimRequest(int(p), int(n), np.full(n, 2, np.int16), np.full(n, 1, np.int16))
            for p, n in zip(rng.integers(1, 40, 30), rng.integers(1, 200, 30))]
    a = simulate(reqs, k=3, policy=ThresholdPolicy(4), step_model=ONE, max_num_seqs=8)
    b = simulate(reqs, k=3, policy=ThresholdPolicy(4), step_model=ONE, max_num_seqs=8, kv_capacity_tokens=10**6)
    c = simulate(reqs, k=3, policy=ThresholdPolicy(4), step_model=ONE, max_num_seqs=8, kv_capacity_tokens=512,
                 block_size=16)
    assert a.num_steps == b.num_steps and np.array_equal(a.finish_time_s, b.finish_time_s)
    assert c.steps["num_preempted"].sum() > 0 and np.isfinite(c.finish_time_s).all()
    assert c.steps["num_emitted"].sum() == a.steps["num_emitted"].sum()
    # every step's KV footprint fits: context before the step + scheduled tokens <= capacity
    assert (c.steps["context_tokens"] + c.steps["num_scheduled_tokens"] <= 512).all()


def test_kv_capacity_too_small_is_a_user_error():
    with pytest.raises(UserError, match="kv-capacity-tokens"):
        simulate([SimRequest(10, 100)], k=0, policy=None, step_model=ONE, kv_capacity_tokens=64, block_size=16)


# ---------- repricing, stretched profiles, group profiles ----------

def test_reprice_equals_simulating_with_the_model():
    rng = np.random.default_rng(5)
    model = StepTimeModel(0.01, {"decode_tokens": 1e-3, "draft_tokens": 5e-4, "prefill_tokens": 1e-4,
                                 "context_tokens": 1e-6, "spec_requests": 2e-4, "speculative": 3e-3})
    reqs = [SimRequest(int(p), int(n), np.full(n, 3, np.int16), np.full(n, 2, np.int16))
            for p, n in zip(rng.integers(1, 60, 25), rng.integers(2, 300, 25))]
    a = simulate(reqs, k=3, policy=ThresholdPolicy(3), step_model=model, max_num_seqs=6, max_num_batched_tokens=64)
    b = reprice(simulate(reqs, k=3, policy=ThresholdPolicy(3), step_model=ONE, max_num_seqs=6,
                         max_num_batched_tokens=64), model)
    assert np.allclose(a.steps["time_s"], b.steps["time_s"]) and a.makespan_s == pytest.approx(b.makespan_s)
    assert np.allclose(a.finish_time_s, b.finish_time_s)


def test_stretch_positions_keep_blocks_and_trend():
    p = np.arange(10 * BLOCK)
    q = stretch_positions(p, 2 * BLOCK, 10 * BLOCK)
    assert q[0] == 0 and q.max() == 2 * BLOCK - 1
    assert np.array_equal(q[:BLOCK], np.arange(BLOCK))            # a block is copied whole
    assert (np.diff(q[::BLOCK]) >= 0).all()                        # early positions read early ones
    assert np.array_equal(stretch_positions(p, 10 * BLOCK, 10 * BLOCK), p)   # same length: identity


def test_stretched_profile_simulates_target_lengths():
    d, a = np.full(300, 3, np.int16), np.full(300, 3, np.int16)
    d[:150] = 0
    a[:150] = 0     # no drafts in the first half of the source: the first half of the target neither
    r = simulate([SimRequest(5, 3000, d, a, stretch=True)], k=3, policy=AlwaysPolicy(), step_model=ONE)
    assert r.steps["num_emitted"].sum() == 3000
    q = stretch_positions(np.arange(3000), 300, 3000)
    full = simulate([SimRequest(5, 3000, d[q], a[q])], k=3, policy=AlwaysPolicy(), step_model=ONE)
    assert r.num_steps == full.num_steps and np.array_equal(r.steps["num_accepted"], full.steps["num_accepted"])
    # about 48 % of the target reads the draft-less first half of the source (block rounding)
    assert 1 + 0.4 * 3000 + 0.5 * 3000 / 4 < r.num_steps < 1 + 0.55 * 3000 + 0.45 * 3000 / 4


def test_group_profiles_lockstep():
    rng = np.random.default_rng(6)
    a = rng.integers(0, 1000, 300)
    b = a.copy()
    b[150] = 1001            # a sibling identical up to 150, then the same text again
    own = profiles_for([([1, 2], a), ([1, 2], b)], None, 3, "sam", "own")
    grp = group_acceptance_profiles(SamDrafter(group_sharing=True, length="fixed"), [1, 2], [a, b], 3)
    # random tokens: nothing to reuse from the own context; lockstep siblings are exactly as far,
    # so a member's next tokens are not in the group automaton yet either, until b's edit
    assert own[0][1].sum() == 0 and grp[0][1][:150].sum() == 0
    # after the edit both continue identically; the text the other has already emitted is not
    # ahead of them: still nothing to accept from a sibling at the same position
    assert grp[1][1].sum() == 0
    # a shorter sibling that finished is fully indexed: its text is ahead of the longer member
    short = a[:200]
    longer = np.concatenate([a[:100], a[:200]])
    g2 = group_acceptance_profiles(SamDrafter(group_sharing=True, length="fixed"), [1, 2], [short, longer], 3)
    assert g2[1][1][200:].mean() > 2   # positions 200+ repeat a[100:200], which `short` emitted by then
    with pytest.raises(UserError, match="different prompts"):
        profiles_for([([1, 2], a), ([3], b)], ["g", "g"], 3, "sam", "group")


# ---------- fast paths equal stepping one by one ----------

def _profiled(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        m = int(rng.integers(5, 300))
        d = rng.integers(0, 6, m).astype(np.int16)
        out.append(SimRequest(int(rng.integers(1, 40)), int(rng.integers(2, 400)), d,
                              np.minimum(rng.integers(0, 4, m), d).astype(np.int16), stretch=bool(i % 2)))
    return out


@pytest.mark.parametrize("policy, budget, kv, closed", [
    (ThresholdPolicy(8), 64, None, True),      # the speculative end in closed form
    (AlwaysPolicy(), 64, None, True),          # always on: closed form once nobody waits
    (ThresholdPolicy(6), 2048, 4000, True),    # a KV cache that holds every request: still closed form
    (ThresholdPolicy(8), 20, None, None),      # budget < running x (k + 1): stepped; chunked prefills end on 1 token
    (ThresholdPolicy(8), 64, 700, None),       # a KV cache that preempts
    (BatchSchedule([(1, 3, 3), (4, 8, 1), (9, 12, 2)]), 64, None, True),   # per-step k: the end walked band by band
    (BatchSchedule([(1, 2, 3), (3, 12, 1)]), 20, 700, None),               # per-step k, stepped, preempting
])
def test_fast_paths_equal_step_by_step_exactly(policy, budget, kv, closed, monkeypatch):
    calls = []
    real = fast_paths.speculative_end
    monkeypatch.setattr(fast_paths, "speculative_end", lambda *a: calls.append(1) or real(*a))
    model = StepTimeModel(0.01, {"running": 0.001, "decode_tokens": 1e-4, "prefill_tokens": 1e-4, "draft_tokens": 3e-4,
                                 "context_tokens": 1e-6, "speculative": 0.002, "spec_requests": 1e-4})
    reqs = _profiled(60, 5)
    a, b = (simulate(reqs, k=3, policy=policy, step_model=model, max_num_seqs=12, max_num_batched_tokens=budget,
                     tail_threshold=8, position_edges=(16, 64, 128), fast_forward=ff, kv_capacity_tokens=kv)
            for ff in (True, False))
    assert a.num_steps == b.num_steps
    for c in a.steps:
        assert np.array_equal(a.steps[c], b.steps[c]), c
    assert np.array_equal(a.finish_time_s, b.finish_time_s) and a.makespan_s == b.makespan_s
    for key in a.tail_acceptance:
        assert np.array_equal(a.tail_acceptance[key], b.tail_acceptance[key]), key
    assert a.steps["speculative"].any() and a.steps["num_accepted"].sum() > 0
    if closed:
        assert len(calls) == 1   # only the fast-forwarding run took the closed form



@pytest.mark.parametrize("policy, seed", [(OffPolicy(), 0), (ThresholdPolicy(3), 1), (ThresholdPolicy(3), 2)])
def test_blocked_head_fast_path_equals_step_by_step(policy, seed, monkeypatch):
    # the decode fast path while the next waiting request's prefill needs more KV blocks than are
    # free (scheduler._head_blocked_by_kv); max_num_seqs is never reached (40 requests, 64 slots),
    # so a decode block taken while requests wait is one whose head the cache cannot hold
    waiting_blocks = []
    real = fast_paths.decode_block
    monkeypatch.setattr(fast_paths, "decode_block", lambda *a: waiting_blocks.append(a[3]) or real(*a))
    model = StepTimeModel(0.01, {"running": 0.001, "decode_tokens": 1e-4, "prefill_tokens": 1e-4, "draft_tokens": 3e-4,
                                 "context_tokens": 1e-6, "speculative": 0.002, "spec_requests": 1e-4})
    a, b = (simulate(_profiled(40, seed), k=3, policy=policy, step_model=model, max_num_seqs=64,
                     max_num_batched_tokens=512, tail_threshold=3, position_edges=(16, 64), fast_forward=ff,
                     kv_capacity_tokens=1200, block_size=8) for ff in (True, False))
    assert a.num_steps == b.num_steps and a.kv == b.kv and a.kv["preemptions"] > 0
    for c in a.steps:
        assert np.array_equal(a.steps[c], b.steps[c]), c
    assert np.array_equal(a.finish_time_s, b.finish_time_s) and a.makespan_s == b.makespan_s
    assert [w for w in waiting_blocks if w > 0]   # the fast path was taken with requests waiting

def _small_memory_roofline(kv_tokens):
    from samspec_bench.bench.simulation.hardware import hardware, with_overrides
    from samspec_bench.bench.simulation.roofline import RooflineStepModel
    from samspec_bench.models.shapes import load_shape

    shape = load_shape("Qwen3-0.6B")
    kvb = shape.kv_bytes_per_token("bfloat16")
    gib = (shape.weight_bytes("bfloat16") + (kv_tokens + 0.5) * kvb) / 0.9 / 2 ** 30
    return RooflineStepModel(shape, with_overrides(hardware("H100"), memory_gb=gib))


def test_a_roofline_caps_the_kv_cache_at_its_device_memory_and_the_result_says_so():
    m = _small_memory_roofline(1000)
    assert m.kv_capacity_tokens() == 1000
    reqs = [SimRequest(prompt_len=100, response_len=300) for _ in range(4)]   # 4 x 400 KV tokens > 1000
    r = simulate(reqs, k=0, policy=OffPolicy(), step_model=m, max_num_seqs=4)
    assert r.kv["capacity_tokens"] == 1000 and r.kv["source"].startswith("device memory")
    assert r.kv["preemptions"] == int(r.steps["num_preempted"].sum()) > 0
    given = simulate(reqs, k=0, policy=OffPolicy(), step_model=m, max_num_seqs=4, kv_capacity_tokens=1000)
    assert given.kv["source"] == "given" and given.num_steps == r.num_steps
    with pytest.raises(UserError, match="from device memory.*refused"):
        simulate([SimRequest(prompt_len=100, response_len=1000)], k=0, policy=OffPolicy(), step_model=m)


def test_weights_that_leave_no_room_are_noted_as_refused():
    m = _small_memory_roofline(0)
    r = simulate([SimRequest(prompt_len=10, response_len=5)], k=0, policy=OffPolicy(), step_model=m)
    assert r.kv["capacity_tokens"] is None and "REFUSED by memory" in r.kv["note"]
    assert simulate([SimRequest(prompt_len=10, response_len=5)], k=0, policy=OffPolicy(),
                    step_model=StepTimeModel.constant()).kv["source"].startswith("unlimited")
