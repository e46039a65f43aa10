"""Multi-path drafts (sam/draft_tree.py) and their profiles (bench/simulation/profiles.py)."""

import numpy as np
import pytest

from samspec_bench.bench.simulation.profiles import acceptance_profile, group_acceptance_profiles, profiles_for
from samspec_bench.errors import UserError
from samspec_bench.sam import make_drafter
from samspec_bench.sam.draft_tree import (add_path, depths, expected_tokens, flatten, propose_paths, tree_accepted,
                                          tree_size)
from samspec_bench.sam.strategies import NEEDS_TREE, parse_strategy


def test_tree_size_counts_shared_prefixes_once():
    assert tree_size([[1, 2, 3], [1, 2, 4], [5]]) == 5   # 1, 1-2, 1-2-3, 1-2-4, 5
    assert tree_size([]) == 0
    assert tree_size([[1, 2], [1, 2, 3], [1, 2], [4, 1]]) == 5   # 1, 1-2, 1-2-3, 4, 4-1: a prefix and a repeat add none


def test_tree_accepted_is_the_longest_path_the_tokens_follow():
    paths = [[1, 2, 3], [1, 2, 4, 6], [5]]
    assert tree_accepted(paths, [1, 2, 4, 6, 9]) == 4
    assert tree_accepted(paths, [1, 2, 9]) == 2
    assert tree_accepted(paths, [7]) == 0
    assert tree_accepted(paths, [1, 2]) == 2   # fewer tokens left than the path holds


def test_add_path_keeps_only_paths_that_add_tokens():
    paths = [[1, 2]]
    assert add_path(paths, [1, 2, 3]) and paths == [[1, 2, 3]]   # extends: replaces
    assert not add_path(paths, [1, 2])                          # already inside
    assert not add_path(paths, [])
    assert add_path(paths, [1, 4]) and paths == [[1, 2, 3], [1, 4]]


def test_expected_tokens_from_counts():
    # a match seen 4 times, 3 followed by the first draft token, 1 by the first two
    assert expected_tokens([4, 3, 1], None, at_end=False) == pytest.approx(1.0)
    # a dynamic source counts its own current occurrence, which has no continuation
    assert expected_tokens([4, 3, 1], None, at_end=True) == pytest.approx(4 / 3)
    assert expected_tokens([1, 0], None, at_end=True) == 0.0


def test_propose_paths_adds_the_other_continuation():
    d = make_drafter("sam-fixed", counts=True)
    # "7 1 2" is followed by "4 8", the shorter match "1 2" also by "3 9"
    d.start(0, [1, 2, 3, 9, 7, 1, 2, 4, 8, 7, 1, 2])
    own, paths = propose_paths(d, 0, 2, 3)
    assert own == [4, 8]
    assert sorted(paths) == [[3, 9], [4, 8]]
    assert tree_accepted(paths, [3, 9]) == 2 and tree_accepted([own], [3, 9]) == 0
    own1, paths1 = propose_paths(d, 0, 2, 1)   # one path: the drafter's own
    assert own1 == own and paths1 == [[4, 8]]


def test_propose_paths_needs_counts():
    d = make_drafter("sam-fixed")
    d.start(0, [1, 2, 1])
    with pytest.raises(ValueError, match="counts"):
        propose_paths(d, 0, 2, 2)


def _tokens(seed: int, n: int) -> list[int]:
    # repetitive text with variations: a few phrases recombined
    rng = np.random.default_rng(seed)
    phrases = [[5, 6, 7, 8], [5, 6, 9], [10, 11, 12], [5, 13, 7, 8, 14]]
    out: list[int] = []
    while len(out) < n:
        out += phrases[int(rng.integers(len(phrases)))]
    return out[:n]


@pytest.mark.parametrize("drafter", ["sam", "sam-fixed"])
def test_tree_profile_keeps_the_single_path_profile(drafter):
    """The tree adds paths after the drafter's own draft: the single-path profile is the one
    drafted without a tree, and the tree accepts at least as much at every position."""
    prompt, resp = _tokens(1, 40), _tokens(2, 300)
    single = acceptance_profile(make_drafter(drafter), prompt, resp, 6)
    d, a, td, ta = acceptance_profile(make_drafter(drafter, counts=True), prompt, resp, 6, paths=4)
    assert np.array_equal(d, single[0]) and np.array_equal(a, single[1])
    assert np.all(ta >= a) and np.all(td >= d)
    assert ta.sum() > a.sum()          # this text has alternatives the single path misses
    assert td.max() <= 4 * 6


def test_group_tree_profiles_keep_the_single_path_profiles():
    prompt = _tokens(3, 30)
    resps = [_tokens(s, 200) for s in (4, 5, 6)]
    single = group_acceptance_profiles(make_drafter("sam-fixed", group_sharing=True), prompt, resps, 4)
    tree = group_acceptance_profiles(make_drafter("sam-fixed", group_sharing=True, counts=True), prompt, resps, 4,
                                     paths=3)
    for (d, a), (d2, a2, td, ta) in zip(single, tree):
        assert np.array_equal(d, d2) and np.array_equal(a, a2)
        assert np.all(ta >= a)


def test_profiles_for_refuses_paths_without_sam():
    with pytest.raises(UserError, match="paths=2 with drafter 'ngram'"):
        profiles_for([([1, 2], [1, 2, 1, 2])], None, 3, "ngram", "own", paths=2)


def test_strategy_paths_option():
    st = parse_strategy("arctic:k=8:paths=4:tree_at=2@group")
    assert (st.k, st.paths, st.tree_running, st.sources) == (8, 4, 2, "group")
    assert NEEDS_TREE in st.needs and NEEDS_TREE not in parse_strategy("arctic").needs
    for bad in ("arctic:paths=0", "arctic:tree_at=4", "arctic:width=2", "arctic:k=8:paths=x", "arctic:k=8,paths=4"):
        with pytest.raises(ValueError, match="strategy"):
            parse_strategy(bad)


def test_flatten_gives_one_node_per_prefix_parents_first():
    paths = [[1, 2, 3], [1, 2, 4], [5], [1, 6]]
    tokens, parents = flatten(paths)
    assert tokens == [1, 2, 3, 4, 5, 6] and parents == [-1, 0, 1, 1, -1, 0]
    assert len(tokens) == tree_size(paths) and depths(parents) == [1, 2, 3, 3, 1, 2]
    assert flatten([]) == ([], [])
