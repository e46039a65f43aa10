import json

import numpy as np
import pytest

from samspec_bench.bench.policies import make_policy
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.errors import UserError
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout.lines import workload_lines
from samspec_bench.suites.rollout import measured as rm
from samspec_bench.suites.rollout import outputs as rollout_outputs
from samspec_bench.suites.rollout.lines import source_lines

# phase split, completion stats, speedups and the best setting: tests/suites/rollout/test_rollout_phases.py


def test_draw_lengths_deterministic_and_clipped():
    a = ro.draw_lengths("lognormal:32:1.0", 100, 7, 4, 64)
    b = ro.draw_lengths("lognormal:32:1.0", 100, 7, 4, 64)
    assert np.array_equal(a, b) and a.min() >= 4 and a.max() <= 64
    assert np.array_equal(ro.draw_lengths("fixed:9", 3, 0, 1, 100), [9, 9, 9])
    with pytest.raises(UserError, match="length-dist"):
        ro.draw_lengths("weird:1", 3, 0, 1, 10)


def test_replay_rollout_on_shared_traces(shared_data, tmp_path):
    from click.testing import CliRunner
    res = CliRunner().invoke(ro.command, ["--engine", "replay", "--data-dir", str(shared_data), "--prompts", "6",
                                          "--group-size", "4", "--max-num-seqs", "8", "--spec-threshold", "2,4",
                                          "-k", "3", "--output", str(tmp_path), "--json", "-"])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    result = json.loads((run / "result.json").read_text())
    assert json.loads(res.stdout) == result   # --json -: stdout holds the result JSON and nothing else
    arms = result["metrics"]["arms"]
    assert set(arms) == {"off", "always k=3", "threshold<=2 k=3", "threshold<=4 k=3"}
    # the best setting is the speculating arm with the fewest steps (the unit here)
    assert result["metrics"]["best_setting"] == min((lbl for lbl in arms if lbl != "off"),
                                                    key=lambda lbl: arms[lbl]["total_steps"])
    assert result["metrics"]["units"] == "steps"   # no step model: decode steps, not time
    for lbl, m in arms.items():
        assert m["head_steps"] + m["tail_steps"] == m["total_steps"] == m["steps"]
        assert m["emitted"] == arms["off"]["emitted"]      # same requests, same tokens in every arm
    assert arms["off"]["drafted"] == 0 and arms["always k=3"]["accepted"] > 0
    # the threshold arm only speculates in small batches, so its head equals the baseline's head
    assert arms["threshold<=4 k=3"]["head_steps"] == arms["threshold<=4 k=3"]["baseline_phases"]["head_steps"]
    for f in ("steps.csv", "running_vs_time.png", "ccdf.png"):
        assert (run / f).stat().st_size > 0
    assert not (run / "step_time_vs_batch.png").exists()   # every step counts 1: no step-time figure
    import pandas as pd
    df = pd.read_csv(run / "steps.csv")
    assert set(df["arm"]) == set(arms)
    pq = pd.read_parquet(run / "steps.parquet")
    assert list(pq.columns) == list(df.columns) and len(pq) == len(df)
    assert np.array_equal(pq["num_emitted"].to_numpy(), df["num_emitted"].to_numpy())
    # per arm, the table's steps add up to the arm's metrics; no time column without a step model
    assert "time_s" not in pq.columns and "clock_s" not in pq.columns
    for lbl, m in arms.items():
        assert pq[pq["arm"] == lbl]["clock_steps"].max() == m["total_steps"]
        assert int(pq[pq["arm"] == lbl]["num_accepted"].sum()) == m["accepted"]


def _replay(shared_data, tmp_path, *extra):
    from click.testing import CliRunner
    out = tmp_path / str(len(list(tmp_path.iterdir())) if tmp_path.exists() else 0)
    res = CliRunner().invoke(ro.command, ["--engine", "replay", "--data-dir", str(shared_data), "--prompts", "6",
                                          "--group-size", "8", "--max-num-seqs", "16", "--spec-threshold", "4",
                                          "-k", "3", "--arms", "off,threshold", "--output", str(out), *extra])
    assert res.exit_code == 0, res.output
    (run,) = list(out.iterdir())
    return json.loads((run / "result.json").read_text())["metrics"]


@pytest.mark.parametrize("prompts, group, sizes, verl, said", [
    # 6 prompts over --dp 4: verl cuts the 48 rows into chunks of 12 (a group over two instances)
    ("6", "8", [16, 16, 8, 8], "groups split", "cuts the 48 rows into 4 contiguous chunks of 12"),
    # 15 rows over --dp 4: verl refuses the batch (it pads validation batches only)
    ("5", "3", [6, 3, 3, 3], "refused", "15 rows (5 prompts x 3) do not divide by --dp 4: verl refuses them"),
])
def test_an_uneven_dp_count_is_said(shared_data, tmp_path, prompts, group, sizes, verl, said):
    """The simulation keeps whole groups and pads nothing; the rule line says its words hold where
    the count divides, and the next line what verl does with this one."""
    from click.testing import CliRunner
    res = CliRunner().invoke(ro.command, ["--data-dir", str(shared_data), "--prompts", prompts, "--group-size", group,
                                          "--max-num-seqs", "16", "--arms", "off", "--dp", "4", "--draws", "1",
                                          "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    dp = json.loads((run / "result.json").read_text())["metrics"]["workload"]["dp"]
    assert dp["requests_per_instance"] == sizes and dp["verl"] == verl and said in dp["uneven"]
    assert "rule group (where the count divides, verl: rows repeated" in res.output
    assert f"  uneven: {dp['uneven']}" in res.output


def test_group_sources_draft_from_siblings(shared_data, tmp_path):
    own = _replay(shared_data, tmp_path, "--sources", "own")
    grp = _replay(shared_data, tmp_path, "--sources", "group")
    lbl = "threshold<=4 k=3"
    assert grp["workload"]["sources"] == "group" and "lockstep" in grp["workload"]["group_profiles"] \
        and "after-siblings" in grp["workload"]["group_profiles"]
    assert own["arms"]["off"]["total_steps"] == grp["arms"]["off"]["total_steps"]   # the baseline does not draft
    # the terminal says how the group source was modelled, and only where one drafts
    assert source_lines({"workload": grp["workload"]}) == [f"group source (modelled): {grp['workload']['group_profiles']}"]
    assert source_lines({"workload": own["workload"]}) == []
    # siblings share a lot of text: more accepted tokens in the same tail steps' positions
    assert grp["arms"][lbl]["acceptance_rate"] > own["arms"][lbl]["acceptance_rate"]
    assert grp["arms"][lbl]["emitted"] == own["arms"][lbl]["emitted"]


def test_source_lines_name_the_history_split():
    w = {"history": {"steps": "RL steps from the traces: step 3 is the rollout", "stores": {}}, "group_profiles": None}
    assert source_lines({"workload": w}) == ["history source (modelled): RL steps from the traces: step 3 is the rollout"]
    assert source_lines({"workload": {"history": None, "group_profiles": None}}) == []


def test_length_distribution_stretches_profiles(shared_data, tmp_path):
    m = _replay(shared_data, tmp_path, "--length-dist", "lognormal:6000:0.5", "--max-response-len", "12000")
    w = m["workload"]
    assert 6000 < w["response_len_max"] <= 12000 and w["response_len_median"] > 2500
    assert "block resampling" in w["profile_resampling"]
    assert m["arms"]["off"]["emitted"] == w["response_tokens"]
    assert m["arms"]["threshold<=4 k=3"]["accepted"] > 0
    rows = m["arms"]["threshold<=4 k=3"]["tail_acceptance_by_position"]
    # the tail drafts at positions beyond every trace response (at most about 2,100 tokens)
    assert any(r["bin"] in ("[4096,8192)", "[8192,16384)") and r["drafted"] > 0 for r in rows)


def test_kv_capacity_option(shared_data, tmp_path):
    m = _replay(shared_data, tmp_path, "--kv-capacity-tokens", "4096")
    free = _replay(shared_data, tmp_path)
    assert m["arms"]["off"]["emitted"] == free["arms"]["off"]["emitted"]
    assert free["arms"]["off"]["preemptions"] == 0 and m["arms"]["off"]["preemptions"] > 0
    assert m["arms"]["off"]["total_steps"] > free["arms"]["off"]["total_steps"]   # recomputation costs steps
    from click.testing import CliRunner
    res = CliRunner().invoke(ro.command, ["--engine", "replay", "--data-dir", str(shared_data), "--prompts", "2",
                                          "--kv-capacity-tokens", "100", "--output", str(tmp_path / "x")])
    assert res.exit_code != 0 and "--kv-capacity-tokens" in str(res.exception or res.output)


@pytest.mark.slow
def test_a_measured_rollout_counts_the_lengths_it_raised_to_the_shortest(tmp_path):
    # fixed:2 below min_len 8: the engine generates 8 tokens a request, and says so
    cfg = ro.RolloutConfig(engine="reference", model="builtin:tiny-qwen3", prompts=2, group_size=2,
                           temperature=0.0, length_dist="fixed:2", min_len=8, max_response_len=24,
                           max_num_seqs=4, thresholds=[2], ks=[3], arms=["off", "threshold"])
    _, summary = ro.run(cfg, str(tmp_path))
    w = summary["workload"]
    assert (w["requests_raised_to_min_len"], w["min_len"], w["lengths"]["max"]) == (4, 8, 8)
    assert workload_lines(summary) == ["workload: 4 requests (100.0 %) drawn shorter than 8 tokens run 8 (the "
                                       "shortest response generated or simulated)"]


@pytest.mark.slow
def test_reference_rollout_tiny_model(tmp_path):
    """A tiny measured rollout: greedy, ignore-eos lengths; both arms emit the same tokens and
    the simulation reproduces the engine's schedule step for step."""
    cfg = ro.RolloutConfig(engine="reference", model="builtin:tiny-qwen3", prompts=2, group_size=2,
                           temperature=0.0, length_dist="lognormal:12:0.6", min_len=3, max_response_len=24,
                           max_num_seqs=4, thresholds=[2], ks=[3], arms=["off", "threshold"], repeats=2)
    path, summary = ro.run(cfg, str(tmp_path))
    arms = summary["arms"]
    assert set(arms) == {"off", "threshold<=2 k=3"}
    # measured seconds; the simulation priced by the engine's own profile, measured in this run
    assert summary["units"] == "s" and summary["measured"] is True and "measured" in summary["time_basis"]
    assert summary["priced_by"]["kind"] == "fitted-profile" and "step_profile.json" in summary["priced_by"]["source"]
    assert "before its arms" in summary["priced_by"]["note"]
    assert (path / "step_profile.json").is_file()   # the engine's own profile, reusable with --step-model
    assert summary["priced_by"]["engine"]["name"] == "reference"
    assert summary["step_model"]["fit"]["verify_widths"].get("3", 0) >= 1
    pe = summary["prediction_error"]
    assert set(pe["per_arm"]) == set(arms) and pe["max_abs_total"] == max(abs(v["total"]) for v in pe["per_arm"].values())
    assert arms["off"]["emitted"] == arms["threshold<=2 k=3"]["emitted"]
    for m in arms.values():
        assert m["scheduler_match"] is True
        assert m["outputs_identical_to_off"] == 1.0   # greedy, float32: speculation is lossless
        assert m["head_s"] + m["tail_s"] == pytest.approx(m["total_s"])
        assert m["simulated"]["steps"] == m["steps"]
        assert np.isfinite(m["sim_error"]["total"])
        assert m["repeats"]["n"] == 2 and m["repeats"]["same_schedule"] is True
        assert m["simulated"]["accepted"] == m["accepted"]   # greedy, own context: the profiles are exact
        assert "step_profile.json" in m["sim_fit"]["priced_by"]
        assert "out of sample" in m["sim_error_arms_fit"]["fitted_on"] and np.isfinite(m["sim_error_arms_fit"]["total"])
    # measured tail acceptance by position: placed by the matched schedule, totals checked
    thr = arms["threshold<=2 k=3"]
    rows = thr["tail_acceptance_by_position"]
    assert rows is not None and sum(r["drafted"] for r in rows) > 0
    assert sum(r["accepted"] for r in rows) <= thr["accepted"]
    assert (path / "steps.parquet").exists()


def _sim_table(reqs, policy, k):
    return simulate(reqs, k=k, policy=policy, step_model=StepTimeModel.constant(1.0), max_num_seqs=8,
                    max_num_batched_tokens=128, fast_forward=False).steps


def test_arm_step_models_are_out_of_sample_and_price_verify_tokens():
    """Synthetic 'measured' arms timed by a known model: each arm's leave-one-arm-out model
    predicts it exactly, and an arm's own times never enter its model."""
    rng = np.random.default_rng(0)
    reqs = [SimRequest(int(p), int(n), rng.integers(0, 4, n).astype(np.int16), None)
            for p, n in zip(rng.integers(5, 60, 40), rng.integers(5, 120, 40))]
    for r in reqs:
        r.accepted = np.minimum(r.drafted, rng.integers(0, 3, len(r.drafted))).astype(np.int16)
    true = StepTimeModel(0.02, {"decode_tokens": 2e-3, "prefill_tokens": 4e-4, "draft_tokens": 1.5e-3,
                                "context_tokens": 2e-6, "running": 0.0, "spec_requests": 0.0, "speculative": 5e-3})
    measured = {}
    for lbl, pol in (("off", make_policy("off")), ("always", make_policy("always")),
                     ("threshold", make_policy("threshold", 4))):
        st = _sim_table(reqs, pol, 3)
        st["time_s"] = true.predict_steps(st)
        measured[lbl] = st
    models, fitted_on = rm.arm_step_models(measured)
    for lbl, st in measured.items():
        assert models[lbl].predict_steps(st).sum() == pytest.approx(st["time_s"].sum(), rel=1e-6), lbl
        assert lbl in fitted_on[lbl] and "out of sample" in fitted_on[lbl]
    assert models["always"].coef["draft_tokens"] == pytest.approx(1.5e-3, rel=1e-4)
    # the held-out arm's times do not enter its model
    spoiled = dict(measured, always=dict(measured["always"], time_s=measured["always"]["time_s"] * 10))
    models2, _ = rm.arm_step_models(spoiled)
    assert models2["always"].coef == models["always"].coef and models2["off"].coef != models["off"].coef
    # an arm the others cannot price is flagged: off alone cannot price draft tokens
    m_off = rm.arm_step_models({"off": measured["off"], "x": measured["off"]})[0]["x"]
    assert {"draft_tokens", "spec_requests", "speculative"} <= set(rm.unidentified_used(m_off, measured["always"]))
    assert rm.unidentified_used(models["always"], measured["always"]) == []


def test_large_step_tables_keep_only_parquet(shared_data, tmp_path, monkeypatch):
    monkeypatch.setattr(rollout_outputs, "CSV_MAX_ROWS", 10)
    m = _replay(shared_data, tmp_path)
    assert m["step_tables"]["files"] == ["steps.parquet"] and "read steps.parquet" in m["step_tables"]["csv"]
    (run,) = [p for d in tmp_path.iterdir() for p in d.iterdir()]
    assert not (run / "steps.csv").exists()
    import pandas as pd
    assert len(pd.read_parquet(run / "steps.parquet")) == m["step_tables"]["rows"] > 10


@pytest.mark.slow
def test_reference_preemption_matches_simulation(tmp_path):
    # A cache too small for the batch: the engine preempts (recompute), and the simulation,
    # which reserves blocks as it schedules, reproduces its schedule step for step.
    cfg = ro.RolloutConfig(engine="reference", model="builtin:tiny-qwen3", prompts=2, group_size=2,
                           temperature=0.0, length_dist="lognormal:12:0.6", min_len=3, max_response_len=24,
                           max_num_seqs=4, max_num_batched_tokens=16, thresholds=[2], ks=[3],
                           arms=["off", "threshold"], kv_capacity_tokens=96, block_size=4)
    _, summary = ro.run(cfg, str(tmp_path))
    for m in summary["arms"].values():
        assert m["preemptions"] > 0 and m["scheduler_match"] is True
