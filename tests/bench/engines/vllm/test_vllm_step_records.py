"""The records the vLLM engine rebuilds from what vLLM reports (`engines/vllm/step_records.py`),
against stand-ins for vLLM's objects: one StepRecord per engine-core step from its scheduler
stats, the tokens and logprobs of delta outputs, vLLM's cumulative counters. No vLLM needed:
these run in every venv (the real engine: test_vllm_engine.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.vllm.step_records import (LiveRequest, StepLog, add_raw, counter_diff,
                                                           hook_step_stats, new_raw_counts, response_steps,
                                                           steps_from_vllm_metrics)


def _sched(running, waiting, details=None, drafted=None, accepted=0):
    d = None if details is None else SimpleNamespace(num_ctx_requests=details[0], num_ctx_tokens=details[1],
                                                     num_generation_requests=details[2],
                                                     num_generation_tokens=details[3], elapsed_ms=details[4])
    sd = None if drafted is None else SimpleNamespace(num_draft_tokens=drafted, num_accepted_tokens=accepted)
    return SimpleNamespace(num_running_reqs=running, num_waiting_reqs=waiting, iteration_details=d,
                           spec_decoding_stats=sd)


def test_scheduler_stats_become_step_records():
    seen = []
    mgr = SimpleNamespace(record=lambda s=None, i=None, *a, **k: seen.append(s))
    sink = hook_step_stats(SimpleNamespace(llm_engine=SimpleNamespace(logger_manager=mgr)))
    mgr.record(_sched(3, 0, (3, 30, 0, 0, 2.0)))        # before a call collects: not kept
    log = StepLog(sink, drafting=True, threshold=2, requests=5)
    mgr.record(_sched(3, 2, (3, 30, 0, 0, 4.0)))        # the prefill of 3, 2 waiting
    log.step(10.0, num_outputs=3, emitted=3, finished=0)
    mgr.record(_sched(2, 0, (0, 0, 2, 8, 1.0), drafted=6, accepted=4))
    log.step(11.0, num_outputs=2, emitted=6, finished=1)
    log.close()
    assert sink.rows is None
    # vLLM's own loggers no longer see the iteration details (they would print a line per step)
    assert all(s.iteration_details is None for s in seen)
    a, b = log.steps
    assert (a.num_running, a.num_waiting, a.num_prefill_tokens, a.num_scheduled_tokens) == (3, 2, 30, 30)
    assert a.forward_s == 0.004 and a.num_emitted == 3 and a.step == 0
    assert a.speculative is True            # nothing was running before the first step: 0 <= 2
    assert (b.num_decode_reqs, b.num_drafted, b.num_accepted, b.num_finished) == (2, 6, 4, 1)
    assert b.speculative is False           # 3 were running before it: above the threshold
    assert b.time_s == 1.0
    assert log.finished == 1


def test_without_stats_the_outputs_make_the_steps():
    log = StepLog(None, drafting=False, threshold=None, requests=4)
    log.step(1.0, num_outputs=3, emitted=3, finished=1)
    log.step(2.0, num_outputs=0, emitted=0, finished=0)   # nothing scheduled: no step
    log.step(3.0, num_outputs=2, emitted=2, finished=2)
    assert [s.num_running for s in log.steps] == [3, 2]
    assert [s.num_waiting for s in log.steps] == [1, 1]   # 4 - finished before the step - running
    assert [s.speculative for s in log.steps] == [False, False]


def _lp(tok, logprob, rank):
    return SimpleNamespace(logprob=logprob, rank=rank)


def test_live_request_takes_delta_outputs():
    lv = LiveRequest(Request(0, [1, 2, 3], SamplingParams(logprobs=1)), 0, "k", top=[])
    assert lv.add(SimpleNamespace(token_ids=[], logprobs=None), 0.5) == 0 and lv.first_t is None
    got = lv.add(SimpleNamespace(token_ids=[7, 8], logprobs=[{7: _lp(7, -0.1, 1), 9: _lp(9, -2.0, 2)},
                                                              {5: _lp(5, -0.3, 1)}]), 1.5)
    assert got == 2 and lv.first_t == 1.5 and lv.tokens == [7, 8] and lv.emitted == [2]
    assert lv.logprobs[0] == -0.1 and math.isnan(lv.logprobs[1])   # 8 was not among the returned ones
    assert lv.top == [[(7, -0.1)], [(5, -0.3)]]                      # ranks above logprobs=1 dropped


def test_response_steps_per_source():
    one = LiveRequest(Request(0, [1, 2, 3]), 0, "k", tokens=list(range(4)), emitted=[1, 1, 1, 1])
    for method in (None, "sam", "ngram"):   # no record, no vLLM metrics: one token per step as emitted
        plain = response_steps(one, None, method, 3)
        assert plain.emitted.tolist() == [1, 1, 1] and plain.drafted.tolist() == [0, 0, 0]
        assert plain.position.tolist() == [1, 2, 3]
    lv = LiveRequest(Request(0, [1, 2, 3]), 0, "k", tokens=list(range(6)), emitted=[1, 1, 3, 1])
    rec = {"position": [1, 2, 5], "drafted": [3, 3, 3], "accepted": [0, 2, 3], "emitted": [1, 3, 4]}
    s = response_steps(lv, rec, "sam", 3)
    assert s.emitted.tolist() == [1, 3, 1] and s.accepted.tolist() == [0, 2, 1]   # cut at the response's end
    lv.spec_metrics = SimpleNamespace(per_step_drafted=[3, 3], per_step_accepted=[0, 2])
    for method in ("ngram", "suffix"):
        got = response_steps(lv, None, method, 3)
        assert got.drafted.tolist() == [3, 3, 0] and got.accepted.tolist() == [0, 2, 0]
        assert got.position.tolist() == [1, 2, 5]


def test_raw_counts_and_counter_differences():
    raw = new_raw_counts(3)
    add_raw(raw, {"drafted": [3, 0, 2], "accepted": [2, 0, 2]})
    assert raw == {"drafts": 2, "drafted": 5, "accepted": 4, "per_position_accepted": [2, 2, 0]}
    assert counter_diff([5, 3], [1, 1]) == [4, 2] and counter_diff([5, 3], None) == [5, 3]
    assert counter_diff(7, None) == 7 and counter_diff(None, 3) is None


def _live(tokens, emitted):
    lv = LiveRequest(Request(0, [1, 2, 3]), 0, "k")
    lv.tokens = list(tokens)
    lv.emitted = list(emitted)
    return lv


def test_vllm_metric_alignment_totals_exact():
    # steps: prefill 1 | no draft 1 | draft 3 acc 0 -> 1 | draft 3 acc 2 -> 3 | no draft 1 | draft 3 acc 3 cut to 2
    lv = _live(range(9), [1, 1, 1, 3, 1, 2])
    m = SimpleNamespace(per_step_drafted=[3, 3, 3], per_step_accepted=[0, 2, 3])
    s = steps_from_vllm_metrics(lv, m, 3)
    assert int(s.emitted.sum()) == 8
    assert int((s.drafted > 0).sum()) == 3 and int(s.drafted.sum()) == 9
    assert s.accepted.tolist() == [0, 0, 2, 0, 2]          # the last step was cut by max_tokens
    assert s.drafted.tolist() == [3, 0, 3, 0, 3]            # the rejected draft placed at the earliest 1-token step
    assert s.position.tolist() == [1, 2, 3, 6, 7]
