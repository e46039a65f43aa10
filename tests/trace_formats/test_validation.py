"""verl's validation generations told apart from its rollouts."""

from __future__ import annotations

import json

from samspec_bench.trace_formats import read_any, validation_row


def test_a_validation_line_with_a_nan_score_is_still_a_validation_line(tmp_path):
    # verl's _validate stores the score under "reward" too; json.dumps writes a NaN score as NaN twice
    assert validation_row({"score": float("nan"), "reward": float("nan")})
    assert not validation_row({"score": float("nan"), "reward": 0.0})
    assert not validation_row({"score": float("nan")})
    rows = [{"input": "Q: 1+1?", "output": "2", "score": s, "reward": s, "step": 0} for s in (1.0, float("nan"))]
    (tmp_path / "0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    traces, _ = read_any(tmp_path)
    assert [bool(r.validation) for r in traces.records] == [True, True]
