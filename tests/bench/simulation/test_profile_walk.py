"""The decode walk a rollout profile follows (bench/simulation/profile_walk.py), by hand: the
positions an always-speculating decode drafts at, what each step emits within its turn, and
where a multi-turn response's tool text and next-turn first tokens draft nothing."""

from samspec_bench.bench.simulation.profile_walk import DecodeWalk


def _visit(walk, n, accepted):
    """Walk positions 1..n-1 with `accepted[p]` confirmed at each drafting position."""
    steps = []
    for p in range(1, n):
        if walk.on(p):
            steps.append((p, walk.step(p, accepted.get(p, 0))))
    return steps


def test_a_single_turn_walk_moves_by_accepted_plus_one_and_takes_no_bonus_past_the_end():
    w = DecodeWalk(10)
    assert _visit(w, 10, {1: 3, 5: 1, 7: 5}) == [(1, 4), (5, 2), (7, 3)]   # 7 + 2 tokens left: no bonus
    assert not w.restarts and not w.skip.any()


def test_tool_text_and_the_next_turns_first_token_draft_nothing_and_a_step_stops_at_its_turn():
    # response positions 0..19; tool text 6..9 (span [6, 10)); the next turn's first token, 10,
    # comes from the prefill; a draft at 3 confirmed for 5 tokens is kept up to the turn's end
    w = DecodeWalk(20, [(6, 10)])
    assert list(w.skip.nonzero()[0]) == [6, 7, 8, 9, 10] and w.restarts == {10}
    assert list(w.end[:6]) == [6] * 6 and w.end[11] == 20
    assert _visit(w, 20, {1: 1, 3: 5, 11: 2}) == [(1, 2), (3, 3), (11, 3), (14, 1), (15, 1), (16, 1), (17, 1),
                                                  (18, 1), (19, 1)]


def test_a_span_at_the_end_starts_no_turn():
    w = DecodeWalk(8, [(5, 8)])
    assert w.restarts == set() and list(w.skip.nonzero()[0]) == [5, 6, 7]
