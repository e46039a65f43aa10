"""verl's validation generations told apart from its rollouts."""

from __future__ import annotations

import json

from samspec_bench.trace_formats import read_any, split_validation, validation_row
from samspec_bench.trace_formats.validation import SHAPE_REASON, validation_line


def test_a_validation_line_with_a_nan_score_is_still_a_validation_line(tmp_path):
    # verl's _validate stores the score under "reward" too; json.dumps writes a NaN score as NaN twice
    assert validation_row({"score": float("nan"), "reward": float("nan")})
    assert not validation_row({"score": float("nan"), "reward": 0.0})
    assert not validation_row({"score": float("nan")})
    rows = [{"input": "Q: 1+1?", "output": "2", "score": s, "reward": s, "step": 0} for s in (1.0, float("nan"))]
    (tmp_path / "0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    traces, _ = read_any(tmp_path)
    assert [bool(r.validation) for r in traces.records] == [True, True]


def test_a_validation_score_of_a_reward_function_matches_its_float32_reward():
    # _validate's "reward" is the float32 token_level_scores summed; a reward function returning {"score": 0.1}
    # overwrites verl's "score" with its own Python float
    assert validation_row({"score": 0.1, "reward": 0.10000000149011612})
    assert not validation_row({"score": 0.1, "reward": 0.2})


def _dapo_dump(path, val: bool):
    # DAPORewardManager with math_dapo's dict score and the overlong buffer logged: validation lines carry
    # "reward" = score + overlong_reward (the token-level sum), "score" is the reward function's own
    rows = []
    for i, penalty in enumerate((0, 0, -0.25, 0)):
        row = {"input": f"Q{i % 2}: 1+1?", "output": f"2 (try {i})", "gts": "2", "score": 1.0 + penalty, "step": 0}
        if val:
            row["reward"] = 1.0 + penalty
        row |= {"score": 1.0, "acc": True, "pred": "2", "overlong_reward": penalty, "overlong": penalty < 0}
        rows.append(row)
    path.mkdir()
    (path / "0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_a_validation_dump_with_an_overlong_penalty_is_validation_whole(tmp_path):
    # a validation line whose reward differs from score by DAPO's overlong penalty is not an RL rollout
    _dapo_dump(tmp_path / "eval_dumps", val=True)
    _dapo_dump(tmp_path / "rollouts", val=False)
    traces, _ = read_any([tmp_path / "eval_dumps", tmp_path / "rollouts"])
    marked = {(r.source.parent.name, bool(r.validation)) for r in traces.records}
    assert marked == {("eval_dumps", True), ("rollouts", False)}
    assert len(traces.records) == 8


def test_the_validation_line_says_what_was_left_out_and_points_at_the_option_for_shaped_files():
    files = {f"run/{i}.jsonl": SHAPE_REASON for i in range(6)} | {"val/0.jsonl": "in a folder named 'val'"}
    info = {"responses": 28, "files": files, "rollout_responses": 40, "excluded": 28, "included": False,
            "handling": "left out: (--history-includes-validation replays them as steps)"}
    line = validation_line(info)
    assert line.startswith("validation generations: 28 response(s) in 7 file(s): run/0.jsonl, run/1.jsonl, "
                           "run/2.jsonl, run/3.jsonl and 2 more (verl's validation shape")
    assert "val/0.jsonl (in a folder named 'val')" in line and "28 left out, 40 rollout responses replayed" in line
    assert line.count("--history-includes-validation") == 1 and "in every line look the same" in line
    # by folder only, or included: no hint that rollouts look the same
    assert "look the same" not in validation_line({**info, "files": {"val/0.jsonl": "in a folder named 'val'"}})
    assert "look the same" not in validation_line({**info, "included": True, "excluded": 0})
    assert validation_line(None) is None


def test_validation_files_of_a_reward_manager_that_writes_reward_are_left_out_beside_rollouts(tmp_path):
    rows = [{"input": "Q: 1+1?", "output": f"2 (try {i})", "score": 1.0, "step": s} for s in (1, 2) for i in range(2)]
    for s in (1, 2):
        mine = [{**r, "reward": 1.0} if s == 2 else r for r in rows if r["step"] == s]
        (tmp_path / f"{s}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mine), encoding="utf-8")
    traces, _ = read_any(tmp_path)
    kept, info = split_validation(traces, include=False)
    assert [r.step for r in kept.records] == [1, 1] and info["excluded"] == 2
    assert "2 left out, 2 rollout responses replayed" in validation_line(info)
    kept, info = split_validation(traces, include=True)
    assert sorted(r.step for r in kept.records) == [1, 1, 2, 2] and "look the same" not in validation_line(info)
