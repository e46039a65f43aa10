"""A dominance cell's interval and held-out side (bench/dominance_spread.py)."""

from __future__ import annotations

import numpy as np
import pytest

from samspec_bench.bench.dominance_spread import (cluster_sums, dev_groups, fmt_interval, margin_interval,
                                                  side_summary)
from samspec_bench.metrics import AcceptanceCounts


def _counts(tokens, steps, drafted):
    return AcceptanceCounts(steps=steps, tokens=tokens, drafts=steps, drafted=drafted, accepted=0)


def test_groups_alike_give_an_interval_of_one_point():
    """Every group emits 2 tokens a step with SAM against 1.5, drafting 1 against 1.25: whatever
    groups a resample draws, the margins are +0.5 and -0.25 exactly."""
    sizes = np.array([[10], [40], [7], [100]], dtype=float)
    sam = np.hstack([2 * sizes, sizes, sizes])
    anchor = np.hstack([1.5 * sizes, sizes, 1.25 * sizes])
    iv = margin_interval(sam, anchor, resamples=300)
    assert iv["tokens_per_step_diff"] == pytest.approx([0.5, 0.5])
    assert iv["drafted_per_step_diff"] == pytest.approx([-0.25, -0.25])
    assert iv["holds"] is True and iv["dominating_share"] == 1.0 and iv["groups"] == 4


def test_a_margin_carried_by_one_group_is_not_sure():
    """Nine groups where SAM emits less, one large group where it emits far more: the pooled margin
    is positive, but resamples without the large group are negative, so the interval straddles 0."""
    sam = np.array([[9, 10, 5]] * 9 + [[400, 100, 50]], dtype=float)
    anchor = np.array([[10, 10, 5]] * 9 + [[200, 100, 50]], dtype=float)
    pooled = sam[:, 0].sum() / sam[:, 1].sum() - anchor[:, 0].sum() / anchor[:, 1].sum()
    assert pooled > 0
    iv = margin_interval(sam, anchor, resamples=2000)
    lo, hi = iv["tokens_per_step_diff"]
    assert lo < 0 < hi and iv["holds"] is False and 0 < iv["dominating_share"] < 1


def test_one_group_has_no_interval_and_shapes_must_pair():
    iv = margin_interval(np.array([[3.0, 2.0, 1.0]]), np.array([[2.0, 2.0, 1.0]]))
    assert iv["tokens_per_step_diff"] is None and iv["holds"] is None and "no interval" in iv["note"]
    with pytest.raises(ValueError, match="shape"):
        margin_interval(np.zeros((3, 3)), np.zeros((2, 3)))


def test_the_interval_is_the_same_every_run():
    rng = np.random.default_rng(5)
    sam, anchor = rng.integers(1, 50, (30, 3)).astype(float), rng.integers(1, 50, (30, 3)).astype(float)
    assert margin_interval(sam, anchor) == margin_interval(sam, anchor)


def test_units_of_one_prompt_are_summed_into_its_group():
    counts = [_counts(5, 2, 1), _counts(7, 3, 2), _counts(11, 4, 0)]
    assert cluster_sums(counts, ["a", "b", "a"]).tolist() == [[16, 6, 1], [7, 3, 2]]
    assert cluster_sums(counts, ["a", "b", "a"], keep={"b"}).tolist() == [[7, 3, 2]]
    held = side_summary(counts, ["a", "b", "a"], {"a"})
    assert held["steps"] == 6 and held["tokens_per_step"] == pytest.approx(16 / 6)


@pytest.mark.parametrize("share, n, dev", [(0.25, 8, ["g0", "g1"]), (0.01, 8, ["g0"]), (0.99, 4, ["g0", "g1", "g2"])])
def test_dev_side_is_the_first_groups_in_file_order(share, n, dev):
    clusters = [f"g{i}" for i in range(n) for _ in range(2)]   # two units a group
    assert dev_groups(clusters, share) == set(dev)


def test_one_group_has_no_split_and_the_terminal_says_the_range():
    assert dev_groups(["only", "only"], 0.5) == set()
    iv = {"tokens_per_step_diff": [0.01, 0.05], "drafted_per_step_diff": [-0.3, -0.1], "level": 0.95, "groups": 12}
    assert fmt_interval(iv) == "   margin +0.010..+0.050 tok, -0.300..-0.100 drafted (95%, 12 groups)"
    assert fmt_interval(None) == "" and fmt_interval({"tokens_per_step_diff": None}) == ""
