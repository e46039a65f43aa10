"""Metric definitions (docs/architecture.md names), binning by position and the per-step encoding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from samspec_bench.metrics import (AcceptanceCounts, Bins, ResponseSteps, binned_counts, binned_metrics,
                                         decode_steps, encode_steps, speedup_estimate, step_cost, total_counts)


def steps(drafted, accepted, emitted=None, prompt_len=10, first=1, key="r"):
    drafted, accepted = np.asarray(drafted), np.asarray(accepted)
    emitted = accepted + 1 if emitted is None else np.asarray(emitted)
    position = first + np.concatenate([[0], np.cumsum(emitted[:-1])]) if len(drafted) else []
    return ResponseSteps(key=key, prompt_len=prompt_len, response_len=first + int(np.sum(emitted)),
                         position=position, drafted=drafted, accepted=accepted, emitted=emitted)


# A hand-worked example: 5 decode steps, k=3; two steps had no draft.
#   step:      1  2  3  4  5
#   drafted:   3  0  3  2  0
#   accepted:  2  0  0  2  0
#   emitted:   3  1  1  3  1   -> 9 tokens
HAND = dict(drafted=[3, 0, 3, 2, 0], accepted=[2, 0, 0, 2, 0])


def test_hand_worked_example():
    m = steps(**HAND).counts().metrics()
    assert m["tokens_per_step"] == pytest.approx(9 / 5)
    assert m["acceptance_length"] == pytest.approx(1 + 4 / 3)  # vLLM: only the 3 steps with a draft
    assert m["draft_hit_rate"] == pytest.approx(3 / 5)
    assert m["acceptance_rate"] == pytest.approx(4 / 8)
    # token 0 accepted in drafts 1 and 4, token 1 in drafts 1 and 4, token 2 in none
    assert m["per_position_acceptance"] == pytest.approx([2 / 3, 2 / 3, 0.0])
    assert m["counts"] == {"steps": 5, "tokens": 9, "drafts": 3, "drafted": 8, "accepted": 4,
                           "accepted_per_pos": [2, 2, 0]}


def test_no_drafts_gives_baseline_and_none_where_undefined():
    m = steps([0, 0, 0], [0, 0, 0]).counts().metrics()
    assert m["tokens_per_step"] == 1.0
    assert m["acceptance_length"] is None and m["acceptance_rate"] is None
    assert m["draft_hit_rate"] == 0.0 and m["per_position_acceptance"] == []
    assert AcceptanceCounts().metrics()["tokens_per_step"] is None


def test_acceptance_length_relates_to_tokens_per_step():
    # steps with a draft emit accepted + 1, the others 1: tokens = steps + accepted (no end effects)
    c = steps(**HAND).counts()
    assert c.tokens == c.steps + c.accepted
    assert c.acceptance_length == pytest.approx(1 + (c.tokens_per_step - 1) / c.draft_hit_rate)


def test_counts_add_up_and_pad_per_position():
    a = steps([1, 1], [1, 0]).counts()
    b = steps([4, 0], [3, 0]).counts()
    s = a + b
    assert (s.steps, s.tokens, s.drafts, s.drafted, s.accepted) == (4, 8, 3, 6, 4)
    assert s.accepted_per_pos == [2, 1, 1, 0]
    assert total_counts([steps([1, 1], [1, 0]), steps([4, 0], [3, 0])]) == s


def test_response_end_step_without_bonus():
    rs = steps([3, 3], [3, 2], emitted=[4, 2])  # the last step's draft covered the rest
    c = rs.counts()
    assert c.tokens == 6 and c.tokens_per_step == 3.0
    assert c.acceptance_length == pytest.approx(1 + 5 / 2)


def test_invalid_steps_are_rejected():
    with pytest.raises(ValueError):
        steps([1], [2])  # accepted > drafted
    with pytest.raises(ValueError):
        steps([2], [1], emitted=[3])  # more than accepted + 1
    with pytest.raises(ValueError):
        ResponseSteps("x", 0, 3, position=[1, 2], drafted=[0], accepted=[0], emitted=[1])


def test_default_bins_and_edges():
    b = Bins.parse("log2:64:32768")
    assert b.edges == tuple(2 ** i for i in range(6, 16))
    assert b.count == 11
    assert b.index(np.array([0, 63, 64, 127, 128, 32767, 32768, 10 ** 6])).tolist() == [0, 0, 1, 1, 2, 9, 10, 10]
    assert b.label(0) == "[0, 64)" and b.label(10) == "[32768, inf)"
    assert Bins.parse("100, 1000").edges == (100, 1000)
    for bad in ("log2:60:1024", "log2:64", "10,5", "a,b", "0,4", "", "100,,1000", "100,1000,", "100,100"):
        with pytest.raises(ValueError):
            Bins.parse(bad)


def test_binning_uses_the_position_at_drafting_time():
    # prompt 60; steps draft at response positions 1, 4, 5 -> sequence positions 61, 64, 65
    rs = steps([3, 0, 2], [2, 0, 1], prompt_len=60)
    assert rs.position.tolist() == [1, 4, 5]
    b = Bins((64,))
    seq = binned_counts([rs], b, "sequence")
    assert (seq[0].steps, seq[1].steps) == (1, 2)
    assert seq[0].accepted == 2 and seq[1].accepted == 1
    resp = binned_counts([rs], b, "response")
    assert (resp[0].steps, resp[1].steps) == (3, 0)
    with pytest.raises(ValueError):
        binned_counts([rs], b, "tokens")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), max_size=40), min_size=1, max_size=6),
       st.integers(0, 300))
def test_bins_sum_to_the_total(raw, prompt_len):
    recs = []
    for j, r in enumerate(raw):
        drafted = [d for d, _ in r]
        accepted = [min(a, d) for d, a in r]
        recs.append(steps(drafted, accepted, prompt_len=prompt_len, key=str(j)))
    bins = Bins.parse("log2:4:64")
    total = AcceptanceCounts()
    for c in binned_counts(recs, bins, "sequence"):
        total = total + c
    expect = total_counts(recs)
    assert (total.steps, total.tokens, total.drafts, total.drafted, total.accepted) == \
           (expect.steps, expect.tokens, expect.drafts, expect.drafted, expect.accepted)
    n = len(expect.accepted_per_pos)
    assert (total.accepted_per_pos + [0] * n)[:n] == expect.accepted_per_pos
    # steps per bin counted apart: a step drafted at sequence position p falls in the bin of the
    # edges (4, 8, 16, 32, 64) at or below p
    by_bin = [0] * (len(bins.edges) + 1)
    for rs in recs:
        for pos in rs.position:
            by_bin[sum(prompt_len + int(pos) >= e for e in (4, 8, 16, 32, 64))] += 1
    assert [r["counts"]["steps"] for r in binned_metrics(recs, bins)] == by_bin


def test_speedup_from_the_cost_model():
    c = steps(**HAND).counts()  # 9 tokens, 5 steps, 3 with a draft
    assert speedup_estimate(c, 1.0) == pytest.approx(c.tokens_per_step)
    assert step_cost(c, 1.5) == pytest.approx(2 + 3 * 1.5)
    assert speedup_estimate(c, 1.5) == pytest.approx(9 / 6.5)
    with pytest.raises(ValueError):
        speedup_estimate(c, 0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 35), st.integers(0, 35)), max_size=60), st.booleans())
def test_record_round_trip(pairs, short_end):
    drafted = [d for d, _ in pairs]
    accepted = [min(a, d, 34) for d, a in pairs]
    emitted = [a + 1 for a in accepted]
    if short_end and emitted:
        emitted[-1] -= 1
    rs = steps(drafted, accepted, emitted, prompt_len=7)
    rec = rs.to_record()
    assert ("step_emitted" in rec) == bool(short_end and emitted)
    back = ResponseSteps.from_record(rec)
    for name in ("position", "drafted", "accepted", "emitted"):
        assert getattr(back, name).tolist() == getattr(rs, name).tolist()
    assert (back.prompt_len, back.response_len, back.key) == (7, rs.response_len, "r")


def test_step_encoding():
    assert encode_steps(np.array([0, 9, 10, 35])) == "09az"
    assert decode_steps("09az").tolist() == [0, 9, 10, 35]
    with pytest.raises(ValueError):
        encode_steps(np.array([36]))
    with pytest.raises(ValueError):
        decode_steps("0-")
