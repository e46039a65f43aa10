"""`samspec-bench rollout --engine vllm`: the three arms (off / always / threshold) measured
inside vLLM on CPU with the built-in model, the seed's batch-size switch running in the SAM
proposer, per-step drafted / accepted from vLLM's scheduler stats. One rollout run (one
engine) for the module; greedy float32, so the arms must emit the same tokens.

Run in the vLLM venv (README, 'vLLM back end'): pytest -m vllm. Skipped where vLLM does not
import."""

from __future__ import annotations

import csv
import json

import pytest

pytestmark = pytest.mark.vllm

from vllm_tier import require_vllm  # noqa: E402

require_vllm()

from samspec_bench.suites.rollout import RolloutConfig, run  # noqa: E402

T = 2
K = 3
PROMPTS, GROUP = 3, 2


@pytest.fixture(scope="module")
def rollout(tmp_path_factory):
    cfg = RolloutConfig(engine="vllm", prompts=PROMPTS, group_size=GROUP, temperature=0.0,
                        length_dist="lognormal:40:0.6", max_response_len=160, ignore_eos=True,
                        thresholds=[T], ks=[K], max_num_seqs=8, seed=0)
    path, summary = run(cfg, output=str(tmp_path_factory.mktemp("rollout")))
    with open(path / "steps.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    steps: dict[str, list[dict]] = {}
    for r in rows:
        if r["source"] == "measured":
            steps.setdefault(r["arm"], []).append({k: (r[k] == "True" if k == "speculative" else r[k])
                                                   for k in r})
    result = json.loads((path / "result.json").read_text(encoding="utf-8"))
    return summary, steps, result


def _i(row, name):
    return int(float(row[name]))


def test_threshold_arm_drafts_only_when_the_batch_is_small(rollout):
    _, steps, _ = rollout
    thr = steps[f"threshold<={T} k={K}"]
    drafted = [r for r in thr if _i(r, "num_drafted") > 0]
    assert drafted, "the threshold arm never drafted: nothing tested"
    # vLLM's batch of every step that verified drafts is within the threshold, and the
    # policy's recorded decision for it is on
    assert all(_i(r, "num_running") <= T and r["speculative"] for r in drafted), \
        [(r["step"], r["num_running"], r["num_drafted"]) for r in drafted if _i(r, "num_running") > T]
    # and the switch was really off while the batch was larger (the head has decode steps)
    big = [r for r in thr if _i(r, "num_running") > T and _i(r, "num_decode_reqs") > 0]
    assert big and all(_i(r, "num_drafted") == 0 and not r["speculative"] for r in big)
    # the always-on arm drafts with the larger batch too
    always = steps[f"always k={K}"]
    assert any(_i(r, "num_drafted") > 0 and _i(r, "num_running") > T for r in always)


def test_off_arm_never_drafts_and_accepted_within_drafted(rollout):
    _, steps, _ = rollout
    assert all(_i(r, "num_drafted") == 0 and _i(r, "num_accepted") == 0 and not r["speculative"]
               for r in steps["off"])
    for arm, rows in steps.items():
        assert all(0 <= _i(r, "num_accepted") <= _i(r, "num_drafted") for r in rows), arm
        # scheduled tokens of a step = its batch's query tokens: one per decoding request plus drafts
        for r in rows:
            if _i(r, "num_prefill_tokens") == 0:
                assert _i(r, "num_scheduled_tokens") == _i(r, "num_decode_reqs") + _i(r, "num_drafted"), (arm, r)


def test_arms_emit_the_same_tokens_and_the_same_workload(rollout):
    summary, steps, _ = rollout
    arms = summary["arms"]
    for lbl, m in arms.items():
        assert m["outputs_identical_to_off"] == 1.0, lbl
        # every arm emitted the same number of tokens (same requests, same target lengths)
        assert m["emitted"] == arms["off"]["emitted"], lbl
        assert sum(_i(r, "num_finished") for r in steps[lbl]) == PROMPTS * GROUP, lbl
    # per-step drafted / accepted add up to the arm totals the summary reports
    for lbl, rows in steps.items():
        assert sum(_i(r, "num_drafted") for r in rows) == arms[lbl]["drafted"]


def test_completion_times_and_simulation_reported(rollout):
    summary, _, _ = rollout
    for lbl, m in summary["arms"].items():
        c = m["completion"]
        assert 0 < c["p50_s"] <= c["p90_s"] <= c["makespan_s"], lbl
        # the last request finishes within the measured rollout time (steps cover the run)
        assert c["makespan_s"] <= m["total_s"] * 1.05 + 0.05, lbl
        assert m["simulated"]["total_s"] > 0 and "total" in m["sim_error"], lbl
        if lbl != "off":
            assert m["speedup_overall"] == pytest.approx(summary["arms"]["off"]["total_s"] / m["total_s"])
    # vLLM's schedule (batch and scheduled tokens, step by step) is the simulation's, for every
    # arm: the drafts the simulation replays are the ones vLLM verified, capped the same way
    assert {lbl: m["scheduler_match"] for lbl, m in summary["arms"].items()} == \
        {lbl: True for lbl in summary["arms"]}


def test_simulation_priced_by_vllms_own_profile(rollout):
    """Without --step-model the rollout measures vLLM's own profile before its arms, prices the
    simulation with it and records the prediction error of every arm."""
    summary, _, _ = rollout
    assert summary["units"] == "s" and summary["measured"] is True
    pb = summary["priced_by"]
    assert pb["kind"] == "fitted-profile" and "profile of the vllm engine" in pb["source"]
    assert pb["engine"]["name"] == "vllm" and "vllm" in pb["engine"]["version"]
    assert pb["verify_widths"].get(str(K), 0) >= 3   # the oracle drafted full-width verify steps
    pe = summary["prediction_error"]
    assert set(pe["per_arm"]) == set(summary["arms"])
    for lbl, m in summary["arms"].items():
        e = m["sim_error"]
        assert e["total"] == pytest.approx(m["simulated"]["total_s"] / m["total_s"] - 1), lbl


def test_vllm_profile_json(tmp_path):
    """`rollout profile --engine vllm`: verify steps of k + 1 tokens per request for every k
    (SAM's proposer in oracle mode), the engine named with its version, every run's context
    reproduced by the simulation."""
    from samspec_bench.suites.rollout import profile as pr

    m, tables, meta = pr.profile("builtin:smollm2-135m", [1, 3], 9, [2, 3], 1, "float32", prompt_pads=(0, 24),
                                 engine="vllm")
    doc = pr.profile_document(m, tables, meta)
    e = doc["engine"]
    assert e["name"] == "vllm" and e["version"].startswith("vllm ") and e["tp"] == 1 and e["dtype"] == "float32"
    assert all(r["context"] for r in doc["runs"]), doc["runs"]
    fit = doc["model"]["fit"]
    assert fit["verify_widths"].get("2", 0) >= 3 and fit["verify_widths"].get("3", 0) >= 3
    assert fit["valid_range"]["running"] == [1.0, 3.0] and fit["n_steps"] == len(doc["measured_steps"]["time_s"])
    assert isinstance(fit["median_rel_error"], float) and isinstance(fit["r2"], float)
