"""`Drafter.peek` and `Drafter.settle` (sam/drafter_base.py), which rollout profiles use to read
drafts off the decode walk without teaching the drafter anything (bench/simulation/profile_walk.py):
a peek gives the draft `propose` would give and changes nothing a later step sees (the evidence
policy's record and scale, a budget's credit and price, a length rule's state), on the compiled
and the Python path; `settle` judges the pending draft as `extend` with the same tokens would."""

import numpy as np
import pytest

from samspec_bench.sam import SamDrafter
from samspec_bench.sam.strategies.base import RuleDrafter
from samspec_bench.sam.strategies.rules import AimdLength

PROMPT = [1, 2, 3]


def _text(n=260, seed=5):
    rng = np.random.default_rng(seed)
    return [int(t) for t in np.concatenate([rng.integers(0, 6, 60), np.tile(rng.integers(0, 6, 25), 8)])][:n]


def _walk(d, resp, k, peek_every: bool):
    """Replay resp with `d` (propose, extend what the step emits); with peek_every, also peek at
    every position in between. Returns the drafts proposed."""
    d.start(0, PROMPT)
    d.extend(0, resp[:1])
    out, p = [], 1
    while p < len(resp):
        if peek_every:
            d.peek(0, k)
        draft = list(d.propose(0, k))
        out.append(draft)
        a = 0
        while a < len(draft) and p + a < len(resp) and draft[a] == resp[p + a]:
            a += 1
        e = a + 1 if p + a < len(resp) else a
        d.extend(0, resp[p:p + e])
        p += e
    d.stop(0)
    return out


@pytest.mark.parametrize("length", [None, "evidence:budget=0.7", "evidence:cost=0.1"])
@pytest.mark.parametrize("compiled", [True, False])
def test_a_peek_changes_nothing_a_later_step_sees(length, compiled):
    resp = _text()
    plain = _walk(SamDrafter(length=length, compiled=compiled), resp, 6, peek_every=False)
    peeked = _walk(SamDrafter(length=length, compiled=compiled), resp, 6, peek_every=True)
    assert plain == peeked and sum(map(len, plain)) > 20


@pytest.mark.parametrize("compiled", [True, False])
def test_a_peek_gives_the_draft_propose_would_give(compiled):
    resp = _text()
    d = SamDrafter(compiled=compiled)
    d.start(0, PROMPT)
    d.extend(0, resp[:120])
    seen = d.peek(0, 6)
    assert seen and seen == list(d.propose(0, 6))


@pytest.mark.parametrize("compiled", [True, False])
def test_settle_judges_as_extend_with_the_same_tokens_would(compiled):
    resp = _text()
    a, b = SamDrafter(compiled=compiled), SamDrafter(compiled=compiled)
    for d in (a, b):
        d.start(0, PROMPT)
        d.extend(0, resp[:120])
    da, db = list(a.propose(0, 6)), list(b.propose(0, 6))
    assert da == db and da
    emitted = resp[120:123]
    a.extend(0, emitted)                    # judged on extend
    b.settle(0, emitted)                    # judged first, then appended one at a time
    for t in emitted:
        b.extend(0, [t])
    for p in range(123, 200, 3):            # the two now learn and draft alike
        assert list(a.propose(0, 6)) == list(b.propose(0, 6))
        a.extend(0, resp[p:p + 3])
        b.extend(0, resp[p:p + 3])


def test_a_rule_drafter_peeks_within_its_rule_and_settles_its_rule():
    resp = _text()
    r = RuleDrafter(SamDrafter(length="fixed"), AimdLength())
    r.start(0, PROMPT)
    r.extend(0, resp[:120])
    before = r.peek(0, 16)
    assert before == list(r.propose(0, 16))[:len(before)]
    emitted = resp[120:120 + len(before) + 1]
    assert emitted[:len(before)] == before     # the draft is wholly accepted
    r.settle(0, emitted)
    for t in emitted:                          # appended one at a time, as a profile does
        r.extend(0, [t])
    # judged by the whole step, AIMD doubles; judged by one appended token, it would halve
    assert len(r.peek(0, 16)) == 2 * len(before)
