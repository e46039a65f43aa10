"""Instances pulling from one queue and Seer's divided rollout (shared_queue.py), on hand-worked
schedules: a constant 1 s step, one slot per instance, so a request of L tokens takes L steps
(its prefill step samples the first token)."""

import numpy as np
import pytest

from samspec_bench.bench.simulation.dp import simulate_dp
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.bench.simulation.shared_queue import simulate_shared

ONE_S = StepTimeModel.constant(1.0)


def one_slot(**kw):
    return dict(k=0, step_model=ONE_S, max_num_seqs=1, **kw)


def test_a_shared_queue_hands_the_waiting_requests_to_whichever_instance_is_free():
    """Lengths 10, 10, 1, 1 on two instances. Fixed shards ({0, 1}, {2, 3}): the first instance
    runs both long ones, 20 s. One queue: each instance takes a long one, then a short one: 11 s."""
    reqs = [SimRequest(4, n) for n in (10, 10, 1, 1)]
    fixed = simulate_dp(reqs, [np.array([0, 1]), np.array([2, 3])], policy=None, **one_slot())
    assert fixed.finish_time_s.tolist() == [10, 20, 1, 2]
    pulled = simulate_shared(reqs, 2, chunk_tokens=0, **one_slot())
    assert pulled.finish_time_s.tolist() == [10, 10, 11, 11]
    assert pulled.makespan_s == 11
    assert pulled.moves["chunks_released"] == 0


def test_a_chunk_is_not_continued_before_it_left_its_instance():
    """Lengths 1 then 10 on two instances, chunks of 4: the second instance runs the long one's
    first chunk (0-4 s) while the first, idle from 1 s, waits for it; it continues it from 4 s,
    so it ends at 10 s, as on one instance. Starting it at its own clock (1 s) would end at 7 s."""
    reqs = [SimRequest(4, 1), SimRequest(4, 10)]
    r = simulate_shared(reqs, 2, chunk_tokens=4, **one_slot())
    assert r.finish_time_s.tolist() == [1, 10]
    assert r.moves["chunks_released"] == 2            # after 4 and after 8 tokens
    # the first instance continues it at 4 tokens (KV: prompt 4 + 3 of them; the 4th not computed yet)
    assert r.moves["moved_between_instances"] == 1 and r.moves["kv_tokens_moved"] == 7
    emitted = sum(int(x.steps["num_emitted"].sum()) for x in r.instances)
    prefill = sum(int(x.steps["num_prefill_tokens"].sum()) for x in r.instances)
    assert emitted == 11 and prefill == 8   # every token once; a chunk's KV comes along, never prefilled again


def test_chunks_rotate_through_the_slots_under_first_come_first_served():
    """One instance, one slot, lengths 6 and 2, chunks of 3: the long one runs 3 tokens (3 s),
    goes to the back, the short one runs (5 s), the long one finishes (8 s)."""
    r = simulate_shared([SimRequest(4, 6), SimRequest(4, 2)], 1, chunk_tokens=3, **one_slot())
    assert r.finish_time_s.tolist() == [8, 5]


def test_one_instance_without_chunks_is_the_engine_simulation_step_for_step():
    rng = np.random.default_rng(3)
    n = 48
    drafted = [rng.integers(0, 4, 400).astype(np.int64) for _ in range(n)]
    reqs = [SimRequest(int(p), int(ln), drafted=d, accepted=np.minimum(d, rng.integers(0, 3, 400)), group=i // 4)
            for i, (p, ln, d) in enumerate(zip(rng.integers(10, 200, n), rng.integers(5, 400, n), drafted))]
    kw = dict(k=3, step_model=StepTimeModel.constant(1.0), max_num_seqs=6, max_num_batched_tokens=128,
              kv_capacity_tokens=2048, block_size=16)
    for order in ("fcfs", "context"):
        a = simulate(reqs, policy=None, admission=order, **kw)
        b = simulate_shared(reqs, 1, chunk_tokens=0, admission=order, **kw)
        assert np.array_equal(a.finish_time_s, b.finish_time_s)
        for col in ("num_running", "num_scheduled_tokens", "num_emitted", "num_preempted"):
            assert np.array_equal(a.steps[col], b.instances[0].steps[col]), col


def test_every_request_finishes_once_on_many_instances_with_a_kv_limit():
    rng = np.random.default_rng(5)
    reqs = [SimRequest(int(p), int(ln), group=i // 8)
            for i, (p, ln) in enumerate(zip(rng.integers(20, 300, 64), rng.integers(50, 2000, 64)))]
    r = simulate_shared(reqs, 4, chunk_tokens=256, admission="context", k=0, step_model=ONE_S, max_num_seqs=6,
                        max_num_batched_tokens=512, kv_capacity_tokens=8192, block_size=16)
    assert np.isfinite(r.finish_time_s).all()
    assert sorted(np.concatenate(r.shards).tolist()) == list(range(64))
    assert sum(int(x.steps["num_emitted"].sum()) for x in r.instances) == sum(q.response_len for q in reqs)
    assert r.makespan_s == pytest.approx(np.nanmax(r.finish_time_s))
    assert r.moves["moved_between_instances"] > 0
    for x in r.instances:   # a chunk brings its whole KV: it is admitted only where it fits
        assert int(np.max(x.steps["context_tokens"] + x.steps["num_scheduled_tokens"])) <= 8192


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="instance"):
        simulate_shared([SimRequest(4, 2)], 0, chunk_tokens=0, **one_slot())
    with pytest.raises(ValueError, match="chunk_tokens"):
        simulate_shared([SimRequest(4, 2)], 1, chunk_tokens=-1, **one_slot())


def test_closed_form_blocks_give_the_schedule_of_single_steps():
    """Decoding a full batch in closed form stops at the next chunk's end and at the first finish:
    the same schedule as stepping one by one."""
    rng = np.random.default_rng(11)
    reqs = [SimRequest(int(p), int(ln), group=i // 4)
            for i, (p, ln) in enumerate(zip(rng.integers(10, 100, 40), rng.integers(20, 900, 40)))]
    kw = dict(k=0, step_model=StepTimeModel.constant(0.5), max_num_seqs=4, max_num_batched_tokens=256)
    for chunk in (0, 64):
        fast = simulate_shared(reqs, 3, chunk_tokens=chunk, admission="context", **kw)
        slow = simulate_shared(reqs, 3, chunk_tokens=chunk, admission="context", fast_forward=False, **kw)
        assert np.array_equal(fast.finish_time_s, slow.finish_time_s)
        assert fast.moves == slow.moves
        for a, b in zip(fast.instances, slow.instances):
            # (not num_waiting: a block logs the queue as it was at its start; no switch reads it)
            for col in ("num_running", "num_emitted", "num_prefill_tokens", "clock_s"):
                assert np.allclose(a.steps[col], b.steps[col]), col
