"""The results format: run directories, appended samples, resume, schema checks."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from samspec_bench.errors import UserError
from samspec_bench.results import RunDir, load_result, to_jsonable


@dataclass
class Cfg:
    k: int
    path: object


def test_samples_are_appended_and_survive_a_torn_last_line(tmp_path):
    run = RunDir(tmp_path, "accept")
    run.append_sample({"id": 1, "x": np.float32(0.5)})
    run.append_sample({"id": 2, "x": np.int64(3)})
    with open(run.file("samples.jsonl"), "a") as f:
        f.write('{"id": 3, "x"')  # a crash mid-write
    resumed = RunDir(tmp_path, "accept", resume=run.path)
    assert [s["id"] for s in resumed.samples()] == [1, 2]
    assert resumed.path == run.path


def test_two_runs_in_the_same_second_get_distinct_directories(tmp_path):
    a, b = RunDir(tmp_path, "s"), RunDir(tmp_path, "s")
    assert a.path != b.path and a.path.is_dir() and b.path.is_dir()


def test_result_round_trip_and_schema_guard(tmp_path):
    run = RunDir(tmp_path, "drafters")
    run.write_result(Cfg(3, tmp_path), {"v": np.array([1.0, math.inf])}, {"t": [{"a": 1}]}, ["f.png"])
    data = load_result(run.path)
    assert data["config"] == {"k": 3, "path": str(tmp_path)}
    assert data["metrics"]["v"] == [1.0, None]  # non-finite floats become null, valid JSON
    assert data["environment"]["packages"]["numpy"] == np.__version__
    data["schema_version"] = 99
    (run.path / "result.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="schema_version"):
        load_result(run.path)


def test_bad_resume_and_missing_result_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="--resume"):
        RunDir(tmp_path, "x", resume=tmp_path / "nope")
    with pytest.raises(UserError, match="no result.json"):
        load_result(tmp_path)


def test_to_jsonable_handles_numpy_and_nested_values():
    assert to_jsonable({"a": (np.int32(1), [np.float64(2.5)])}) == {"a": [1, [2.5]]}
