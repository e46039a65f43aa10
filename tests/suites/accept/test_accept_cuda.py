"""`samspec-bench accept --engine reference --device cuda`: the model writes its responses on the
device (built-in GSM8K prompts, no traces needed) and every decode step is counted."""

from __future__ import annotations

import json

import pytest

from device_cli import device_type, run_cli

pytestmark = pytest.mark.cuda

PROMPTS, TOKENS = 2, 16


@pytest.fixture(scope="module")
def accepted(small_qwen3, tmp_path_factory, accel_device):
    out = tmp_path_factory.mktemp("accept")
    result = run_cli(["accept", "--model", small_qwen3, "--engine", "reference", "--device", accel_device,
                      "--benchmark", "gsm8k", "--limit-groups", PROMPTS, "--max-tokens", TOKENS,
                      "--drafter", "sam,ngram", "--output", out / "runs", "--no-progress"], out / "result.json")
    (run_dir,) = (out / "runs").iterdir()
    rows = [json.loads(x) for x in (run_dir / "responses.jsonl").read_text().splitlines()]
    return result, rows


def test_accept_runs_the_reference_engine_on_the_device(accepted, accel_kind):
    result, _ = accepted
    assert device_type(result) == accel_kind and result["environment"]["device"]["used"] is True
    assert result["inputs"]["responses"] == PROMPTS


def test_every_decode_step_is_counted(accepted):
    result, rows = accepted
    assert {r["config"] for r in rows} == {"sam k=3 own", "ngram k=3 own"}
    for r in rows:
        assert 0 < r["response_tokens"] <= TOKENS
        assert r["steps"] == r["tokens"] == r["response_tokens"] - 1   # every token after the first
        assert 0 <= r["accepted"] <= r["drafted"] <= 3 * r["steps"]
    for label, m in result["metrics"].items():
        assert m["responses"] == PROMPTS and m["tokens_per_step"] >= 1.0, (label, m)
