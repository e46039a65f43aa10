"""Fixtures shared by the rollout suite's tests."""

import pytest


@pytest.fixture
def small(shared_data, tmp_path):
    src = shared_data / "traces" / "qwen25math_math_100x8.jsonl"
    p = tmp_path / "small.jsonl"
    p.write_text("".join(src.read_text().splitlines(keepends=True)[:16]))   # 2 groups of 8
    return p
