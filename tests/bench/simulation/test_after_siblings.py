"""A group member drawn longer than its siblings drafts, past their lengths, from their whole
responses: the after-siblings profile (profiles.after_siblings_profiles), the table reading it
from a position on (profile_table.LateProfile) and the rollout placing that position at the
longest simulated sibling (replay_arm.siblings_longest)."""

import numpy as np
import pytest

from samspec_bench.bench.policies import AlwaysPolicy
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.bench.simulation.profile_table import LateProfile, ProfileTable, tree_table
from samspec_bench.bench.draft_config import DraftConfig
from samspec_bench.bench.simulation.profiles import (_record_sharing, after_siblings_profiles,
                                                    group_acceptance_profiles, profiles_for)
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.sam import SamDrafter
from samspec_bench.suites.rollout.replay_arm import Replay, requests_for, siblings_longest

ONE = StepTimeModel.constant(1.0)


def _sam():
    return SamDrafter(group_sharing=True, length="fixed")


def test_after_siblings_sees_a_longer_siblings_future():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 1000, 300)
    b = a.copy()
    b[0] = 1001   # the same text after its first token: in lockstep a is never ahead of b
    lock = group_acceptance_profiles(_sam(), [1, 2], [a, b], 3)
    after = after_siblings_profiles(_sam, [1, 2], [a, b], 3)
    assert lock[1][1].sum() == 0
    # with a finished, b's continuation is a's text: from position 2 (b's last token then a[1], a
    # match in a) every draft of 3 is confirmed (the last two positions have fewer tokens left)
    assert after[1][1][1] == 0 and (after[1][1][2:-2] == 3).all()
    # each response drafts from the others only: a's own text is not in its sibling automaton
    alone = after_siblings_profiles(_sam, [1, 2], [a], 3)
    assert alone[0][1].sum() == 0


def test_after_siblings_needs_a_group_source():
    pair = ([1, 2], np.arange(10))
    with pytest.raises(ValueError, match="group source"):
        profiles_for([pair], None, 3, "sam", "own", after_siblings=True)
    # fixed-length drafts: each drafts 3 tokens of the other's identical text at every position
    got = profiles_for([pair, pair], ["g", "g"], 3, "sam-fixed", "group", after_siblings=True)
    assert len(got) == 2 and got[0][1][1:-2].min() == 3 and got[1][1][1:-2].min() == 3


def test_after_siblings_drafters_share_the_groups_record():
    make = _record_sharing(DraftConfig(drafter="sam", k=3, group=True), None)
    a, b = make(), make()
    assert a is not b and a.token_stats is not None and a.token_stats is b.token_stats
    assert _record_sharing(DraftConfig(drafter="sam", k=3, group=True), None)().token_stats is not a.token_stats


def test_table_reads_the_late_profile_from_its_position():
    d, a = np.full(10, 2, np.int16), np.zeros(10, np.int16)
    late = LateProfile(6, np.full(10, 4, np.int16), np.full(10, 3, np.int16))
    t = ProfileTable([SimRequest(1, 10, d, a, late=late), SimRequest(1, 10, d, a)], np.array([10, 10]))
    p = np.arange(1, 10)
    assert list(t.drafted(np.zeros(9, np.int64), p)) == [2] * 5 + [4] * 4
    assert list(t.accepted(np.zeros(9, np.int64), p)) == [0] * 5 + [3] * 4
    assert list(t.drafted(np.ones(9, np.int64), p)) == [2] * 9
    # stretched to 20 positions: position q reads source position q // 2 (blocks of 64 cover all)
    st = ProfileTable([SimRequest(1, 20, d, a, stretch=True, late=LateProfile(12, *late[1:3]))], np.array([20]))
    assert list(st.drafted(np.zeros(4, np.int64), np.array([10, 11, 12, 13]))) == [2, 2, 4, 4]
    with pytest.raises(ValueError, match="late profile"):
        ProfileTable([SimRequest(1, 10, d, a, late=LateProfile(0, d[:5], a[:5]))], np.array([10]))


def test_tree_table_reads_the_late_tree():
    d, a = np.full(10, 2, np.int16), np.zeros(10, np.int16)
    tree = np.full(10, 6, np.int16)
    late = LateProfile(4, np.full(10, 3, np.int16), np.ones(10, np.int16), np.full(10, 9, np.int16),
                       np.full(10, 5, np.int16))
    reqs = [SimRequest(1, 10, d, a, tree_drafted=tree, tree_accepted=a, late=late)]
    lin = ProfileTable(reqs, np.array([10]))
    tt = tree_table(reqs, np.array([10]), lin)
    p, idx = np.array([2, 3, 4, 5]), np.zeros(4, np.int64)
    assert list(tt.drafted(idx, p)) == [6, 6, 9, 9] and list(tt.accepted(idx, p)) == [0, 0, 5, 5]
    assert list(lin.drafted(idx, p)) == [2, 2, 3, 3]


def test_late_profile_shortens_the_simulated_request():
    n = 40
    d, a = np.full(n, 3, np.int16), np.zeros(n, np.int16)
    full = (np.full(n, 3, np.int16), np.full(n, 3, np.int16))
    base = simulate([SimRequest(1, n, d, a)], k=3, policy=AlwaysPolicy(), step_model=ONE)
    never = simulate([SimRequest(1, n, d, a, late=LateProfile(n, *full))], k=3, policy=AlwaysPolicy(), step_model=ONE)
    half = simulate([SimRequest(1, n, d, a, late=LateProfile(20, *full))], k=3, policy=AlwaysPolicy(), step_model=ONE)
    assert never.num_steps == base.num_steps == n        # prefill + 39 one-token steps
    # positions 1..19 one token a step (19 steps), then 4 a step from 20 to 39: 5 steps, + prefill
    assert half.num_steps == 1 + 19 + 5


def test_siblings_longest():
    got = siblings_longest(np.array([5, 9, 3, 7, 7, 1]), 3)
    assert list(got) == [9, 5, 9, 7, 7, 7]
    assert (siblings_longest(np.array([4, 8]), 1) == np.iinfo(np.int64).max).all()


def test_requests_read_late_past_the_longest_sibling_only():
    prof = (np.full(5, 1, np.int16), np.zeros(5, np.int16))
    late = [(np.full(5, 2, np.int16), np.ones(5, np.int16), None, None)] * 2
    rep = Replay(pairs=[([1], np.arange(5)), ([1], np.arange(5))], idx=[0, 1, 0, 1], n_prompts=1, group_size=4,
                 profiles={"key": [prof, prof]}, profile_s=0.0, late={"key": late})
    reqs = requests_for(rep, np.array([30, 50, 10, 20]), "key", stretch=True)
    assert [r.late.from_pos if r.late else None for r in reqs] == [None, 30, None, None]
    assert requests_for(rep, np.array([30, 50, 10, 20]), None, stretch=True)[1].late is None
