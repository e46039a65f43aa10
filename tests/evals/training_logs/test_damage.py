"""What damage cost (damage.py): a torn tail after the last intact step is not said to have held
only a sparser tag's point: nothing after it tells what it held (a TF1 writer's merged summary
puts a whole step in one record)."""

from __future__ import annotations

from samspec_bench.evals.training_logs.damage import lost_points, untold_text


def test_torn_tail_of_whole_step_records_is_unknown_not_sparse():
    tags = {"critic/score/mean": range(1, 60), "actor/entropy": range(1, 60)}   # step 60's record torn
    untold: list = []
    assert lost_points(tags, [(59, None)], untold) == {}
    text = untold_text(untold)
    assert "after step 59" in text and "possibly whole" in text
    assert "sparser tag" not in text


def test_damage_between_intact_steps_keeps_its_inference():
    untold: list = []
    lost_points({"a": range(1, 11), "v": (5,)}, [(5, 5)], untold)
    assert "so the record held a sparser tag's point or none" in untold_text(untold)
