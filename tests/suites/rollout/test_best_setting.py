"""The best setting is a recommendation only where it beats off: a speculating arm that ties or
loses is still named (the shortest of the speculating arms) but the line, the JSON and the
report headline say to keep speculation off."""

import json

import numpy as np
from click.testing import CliRunner

from samspec_bench.bench.policies import make_policy
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel, fit_from_steps
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.reports.suite_headlines import SUITE_SUMMARIZERS
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout.command import beats_off
from samspec_bench.suites.rollout.profile import profile_document, write_profile


def test_beats_off_is_strict():
    assert beats_off({"off": {"total_s": 2.0}, "a": {"total_s": 1.5}}, "a") is True
    assert beats_off({"off": {"total_s": 2.0}, "a": {"total_s": 2.0}}, "a") is False    # a tie recommends nothing
    assert beats_off({"off": {"total_s": 2.0}, "a": {"total_s": 2.5}}, "a") is False
    assert beats_off({"a": {"total_s": 1.0}}, "a") is None and beats_off({"off": {"total_s": 1.0}}, None) is None


def _profile(path, draft_cost):
    """A format-3 profile whose draft tokens cost `draft_cost` s each (decode 2 ms a token)."""
    true = StepTimeModel(0.02, {"decode_tokens": 2e-3, "prefill_tokens": 4e-4, "draft_tokens": draft_cost,
                                "context_tokens": 2e-6, "running": 0.0, "spec_requests": 0.0, "speculative": 0.0})
    rng = np.random.default_rng(0)
    tables = []
    for pol in ("off", "always"):
        reqs = [SimRequest(int(p), int(n), np.full(n, 3, np.int16), np.full(n, 3, np.int16))
                for p, n in zip(rng.integers(5, 60, 24), rng.integers(10, 40, 24))]
        st = simulate(reqs, k=3, policy=make_policy(pol), step_model=StepTimeModel.constant(1.0),
                      max_num_seqs=8, max_num_batched_tokens=2048, fast_forward=False).steps
        st["time_s"] = true.predict_steps(st)
        tables.append(st)
    meta = {"engine": {"name": "reference", "version": "test", "device": "cpu: test", "model": "m", "dtype": "float32",
                       "tp": 1, "threads": 1}, "grid": {"batch_sizes": [8], "ks": [3]}}
    return write_profile(path, profile_document(fit_from_steps(tables, source="synthetic"), tables, meta))


def _run(shared_data, tmp_path, draft_cost):
    prof = _profile(tmp_path / f"p{draft_cost}.json", draft_cost)
    out = tmp_path / f"out{draft_cost}"
    res = CliRunner().invoke(ro.command, ["--engine", "replay", "--data-dir", str(shared_data), "--prompts", "4",
                                          "--group-size", "4", "--max-num-seqs", "8", "--arms", "off,always",
                                          "-k", "3", "--step-model", str(prof), "--output", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads(next(out.rglob("result.json")).read_text())
    return res.output, result


def test_a_losing_best_setting_says_keep_off(shared_data, tmp_path):
    # drafts dearer than decoding a token (50 ms against 2 ms): speculating always loses
    text, result = _run(shared_data, tmp_path, 0.05)
    m = result["metrics"]
    assert m["arms"]["always k=3"]["total_s"] > m["arms"]["off"]["total_s"]
    assert m["best_setting"] == "always k=3" and m["best_setting_beats_off"] is False
    best_line = next(ln for ln in text.splitlines() if ln.startswith("best setting"))
    assert "keep speculation off" in best_line
    heads, _ = SUITE_SUMMARIZERS["rollout"](result)
    head = next(h for h in heads if h["name"] == "best setting")
    assert "keep speculation off" in head["note"]


def test_a_winning_best_setting_is_a_recommendation(shared_data, tmp_path):
    text, result = _run(shared_data, tmp_path, 1e-5)      # drafts nearly free: always wins
    m = result["metrics"]
    assert m["best_setting_beats_off"] is True
    assert "keep speculation off" not in next(ln for ln in text.splitlines() if ln.startswith("best setting"))
