"""verl's `file` logger (JSONL, `{"step": N, "data": {...}}` a line): read and detected like the
other formats, with NaN/inf of both of verl's writers (json.dumps' NaN/Infinity, orjson's null),
a broken line and a torn last line counted, never silent."""

from __future__ import annotations

import json

import pytest

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs import detect_format, load_run


def _line(step: int, data: dict) -> str:
    # what verl's FileLogger.log writes (json.dumps up to v0.7; allow_nan: NaN / Infinity literals)
    return json.dumps({"step": step, "data": data}) + "\n"


def test_file_logger_records_with_every_kind_of_damage(tmp_path):
    text = "".join(_line(s, {"critic/score/mean": 0.1 * s, "timing_s/gen": 30.0 + s}) for s in range(1, 6))
    text += _line(6, {"critic/score/mean": float("nan"), "timing_s/gen": float("inf")})
    text += '{"step": 7, "data": {"critic/score/mean": null, "timing_s/gen": 37.0, "note": "text"}}\n'   # orjson
    text += "not a record\n"
    text += _line(8, {"critic/score/mean": 0.8, "timing_s/gen": 38.0})
    text += '{"step": 9, "data": {"critic/score/me'                                                        # torn
    p = tmp_path / "demo_experiment.jsonl"
    p.write_text(text)
    assert detect_format(p) == "jsonl"
    run = load_run(p)
    assert run.format == "jsonl" and run.label == "demo_experiment" and run.read["records"] == 8
    assert run.series["critic/score/mean"].steps.tolist() == [1, 2, 3, 4, 5, 8]
    assert run.series["timing_s/gen"].values.tolist() == [31.0, 32.0, 33.0, 34.0, 35.0, 37.0, 38.0]
    assert run.non_finite["critic/score/mean"] == {"count": 2, "steps": 8, "first_step": 6, "nan": 2, "inf": 0}
    assert run.non_finite["timing_s/gen"]["inf"] == 1
    assert run.counts == {"truncated_lines": 1, "broken_lines": 1, "null_values": 1, "non_numeric_fields": 1,
                          "non_finite_values": 3}
    assert any("torn" in n for n in run.notes) and any("null" in n for n in run.notes)


def test_file_logger_is_sniffed_without_its_suffix_and_not_taken_for_others(tmp_path):
    p = tmp_path / "metrics"
    p.write_text(_line(1, {"actor/entropy": 0.5}) + _line(2, {"actor/entropy": 0.4}))
    assert detect_format(p) == "jsonl"
    other = tmp_path / "trace.jsonl"                  # a JSONL that is not verl's file logger
    other.write_text(json.dumps({"id": 1, "prompt": "x", "response": "y"}) + "\n")
    with pytest.raises(UserError, match="not a known training log format"):
        load_run(other)
    forced = tmp_path / "empty.jsonl"
    forced.write_text("{}\n")
    with pytest.raises(UserError, match="no verl file-logger record"):
        load_run(forced, format="jsonl")
