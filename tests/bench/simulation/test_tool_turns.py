import itertools

import numpy as np
import pytest

from samspec_bench.bench.policies import AlwaysPolicy
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.bench.simulation.tool_turns import engine_spans, mask_spans, span_mask, turn_profile, turn_segments

ONE = StepTimeModel.constant(1.0)


def test_engine_spans_cut_the_tool_text_after_the_last_turn():
    assert engine_spans([(5, 9), (12, 15)], 20) == ([(5, 9), (12, 15)], 20)
    assert engine_spans([(12, 20), (5, 9)], 20) == ([(5, 9)], 12)      # tool text to the end: no turn follows
    assert engine_spans([(5, 9), (25, 30)], 20) == ([(5, 9)], 20)      # past the response (cut at max length)
    assert engine_spans([(5, 30)], 20) == ([], 5)


def test_span_mask_and_mask_spans_invert_each_other():
    spans = [(1, 3), (7, 8), (10, 12)]
    m = span_mask(spans, 12)
    assert m.sum() == 5 and mask_spans(m) == spans
    assert mask_spans(np.zeros(4, bool)) == []


def test_turn_profile_drafts_nothing_in_tool_text_and_keeps_drafts_to_the_turn_end():
    d = np.full(12, 3, np.int16)
    a = np.full(12, 3, np.int16)
    got_d, got_a = turn_profile((d, a), [(5, 8)])
    # positions 5..7 are tool text, 8 is the next turn's first token (sampled by the prefill)
    assert list(got_d) == [3, 3, 3, 3, 3, 0, 0, 0, 0, 3, 3, 3]
    # turn 1 ends at 5: at p a draft keeps at most 5 - 1 - p (the bonus token then reaches the end)
    assert list(got_a[:5]) == [3, 3, 2, 1, 0]
    assert list(got_a[9:]) == [2, 1, 0]          # the response's own end, as for L
    assert d[5] == 3 and a[3] == 3               # the input is not changed


def test_a_turn_leaves_the_engine_and_prefills_its_tool_text():
    # prompt 10, response 20 with tool text at [5, 9): steps 0-4 emit tokens 0-4, the request
    # leaves (its tool runs 3 s, the engine idles), then one chunk of 5 tokens (token 4, whose
    # KV was not written, and the 4 tool tokens) samples token 9; ten decode steps emit 10-19
    for ff in (True, False):
        r = simulate([SimRequest(10, 20, turns=[(5, 9)])], k=0, policy=None, step_model=ONE, tool_latency_s=3.0,
                     fast_forward=ff)
        st = r.steps
        assert r.num_steps == 16 and r.makespan_s == 19.0, ff
        assert list(st["num_prefill_tokens"][:6]) == [10, 0, 0, 0, 0, 5]
        assert st["num_decode_reqs"][5] == 0 and st["clock_s"][5] == 9.0   # 5 s of steps + 3 s away + this one
        assert st["num_emitted"].sum() == 16                                # tool tokens are never emitted
        assert r.turns == {"tool_calls": 1, "tool_tokens_prefilled": 4, "tool_latency_s": 3.0}
        assert r.finish_time_s[0] == 19.0


def test_a_request_away_frees_its_slot_for_a_waiting_one():
    # one slot: request 0 leaves for its tool after token 2, request 1 runs meanwhile
    reqs = [SimRequest(4, 10, turns=[(3, 5)]), SimRequest(4, 4)]
    r = simulate(reqs, k=0, policy=None, step_model=ONE, max_num_seqs=1, tool_latency_s=100.0)
    assert r.finish_time_s[1] == 7.0            # 3 steps of r0, then r1's 4 steps, while r0's tool runs
    # back at 103: one chunk of 3 tokens (token 2 and the 2 tool tokens) samples token 5, then 6..9
    assert r.finish_time_s[0] == 3.0 + 100.0 + 1 + 4
    assert r.steps["clock_s"][-1] == r.makespan_s == 108.0


def test_drafts_are_not_kept_past_a_turn_end():
    # a profile that would accept every draft: the turn still ends at its tool text
    n = 30
    full = np.full(n, 8, np.int16)
    r = simulate([SimRequest(4, n, full, full, turns=[(10, 14)])], k=8, policy=AlwaysPolicy(),
                 step_model=ONE, tool_latency_s=0.0)
    st = r.steps
    assert st["num_emitted"].sum() == n - 4
    # the step before the tool emits up to token 9 and stops there (no token of the tool text)
    assert r.turns["tool_calls"] == 1 and r.turns["tool_tokens_prefilled"] == 4
    assert st["num_prefill_tokens"].sum() == 4 + 5


def test_turns_with_and_without_closed_forms_agree():
    rng = np.random.default_rng(7)
    reqs = []
    for i in range(24):
        n = int(rng.integers(40, 200))
        s = int(rng.integers(5, n - 20))
        turns = [(s, s + int(rng.integers(1, 15)))] if i % 3 else None
        d = rng.integers(0, 4, n).astype(np.int16)
        reqs.append(SimRequest(int(rng.integers(5, 50)), n, d, np.minimum(d, rng.integers(0, 4, n)), turns=turns))
    # 32 slots: every request runs at once, so decode blocks run up to turn ends and returning tools
    for (pol, k), seqs, lat in itertools.product(((None, 0), (AlwaysPolicy(), 3)), (8, 32), (0.0, 2.5)):
        opts = dict(k=k, policy=pol, step_model=ONE, max_num_seqs=seqs, tool_latency_s=lat)
        a, b = simulate(reqs, fast_forward=True, **opts), simulate(reqs, fast_forward=False, **opts)
        assert np.array_equal(a.finish_time_s, b.finish_time_s) and a.num_steps == b.num_steps
        assert np.array_equal(a.steps["num_prefill_tokens"], b.steps["num_prefill_tokens"])
        assert a.turns["tool_calls"] == 16 and np.isfinite(a.finish_time_s).all()


def test_tool_spans_outside_the_response_are_refused():
    with pytest.raises(ValueError, match="tool spans"):
        simulate([SimRequest(4, 10, turns=[(0, 3)])], k=0, policy=None, step_model=ONE)


def test_turn_segments_are_the_models_turns():
    assert turn_segments([(5, 9), (12, 15)], 20) == [(0, 5), (9, 12), (15, 20)]
    assert turn_segments(None, 7) == [(0, 7)]


def test_a_length_rule_starts_afresh_at_every_turn():
    # AIMD (HistoSpec: start 2, x2 after a whole accept, within [2, 16]) on a profile that accepts
    # every draft of 16: the length grows 2, 4, 8, 16 in turn 1; the agent loop sends turn 2 as a
    # new request, so its first draft is 2 again
    from samspec_bench.sam.strategies import parse_strategy
    from samspec_bench.suites.rollout.replay_arm import rule_by_turn

    n = 120
    d = np.full(n, 16, np.int16)
    d, a = turn_profile((d, d.copy()), [(60, 70)])
    st = parse_strategy("histospec")
    got_d, _ = rule_by_turn(d, a, st, None, [(60, 70)])
    # the walk of turn 2 starts at 71 (70 is sampled by the prefill)
    assert got_d[1] == 2 and got_d[71] == 2
    # one request throughout (no restart): the length carries over, halved once by the draft the
    # turn's end cut (16 -> 8)
    whole_d, _ = rule_by_turn(d, a, st, None, None)
    assert whole_d[71] == 8
