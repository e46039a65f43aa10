"""profiles_for reports its progress: every pair once, whatever the source."""

import pytest

from samspec_bench.bench.simulation.profiles import profiles_for


@pytest.mark.parametrize("sources,groups", [("own", None), ("group", [0, 0, 1, 1, 1])])
def test_profiles_for_counts_every_pair_once(sources, groups):
    pairs = [([1, 2, 3], [1, 2, 3, 1, 2, 4][: 3 + i]) for i in range(5)]
    seen = []
    profs = profiles_for(pairs, groups, 3, "sam-fixed", sources, done=seen.append)
    assert sum(seen) == len(pairs) == len(profs)
    if groups is not None:   # a group's members are profiled together: one call per group
        assert seen == [2, 3]
