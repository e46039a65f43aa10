import json

import numpy as np
import pytest

from samspec_bench.suites import rollout as ro


def _steps(running, waiting, times):
    n = len(times)
    return {"time_s": np.asarray(times, float), "num_running": np.asarray(running), "num_waiting": np.asarray(waiting),
            "speculative": np.zeros(n, bool), "num_drafted": np.zeros(n, int), "num_accepted": np.zeros(n, int),
            "num_emitted": np.ones(n, int)}


def test_phase_split_sums_to_total_and_uses_waiting():
    st = _steps([8, 8, 4, 4, 2, 1], [3, 1, 1, 0, 0, 0], [1, 2, 3, 4, 5, 6])
    p = ro.phase_split(st, 4)
    assert p["total_s"] == 21 and p["head_s"] + p["tail_s"] == p["total_s"]
    assert p["tail_s"] == 15   # the step with 4 running but 1 waiting is head
    assert p["tail_steps"] == 3


def test_completion_stats_and_speedups():
    c = ro.completion_stats(np.array([1.0, 1.0, 1.0, 5.0]))
    assert c["makespan_s"] == 5.0 and c["straggler_ratio"] == pytest.approx(2.5)
    off = _steps([4, 2, 1], [0, 0, 0], [4, 4, 4])
    on = _steps([4, 2, 1], [0, 0, 0], [4, 2, 2])
    settings = [{"arm": "off", "label": "off"}, {"arm": "threshold", "label": "t"}]
    metrics = {"off": ro.arm_metrics(off, np.ones(3), 2), "t": ro.arm_metrics(on, np.ones(3), 2)}
    ro.add_speedups(metrics, settings, off, 2)
    assert metrics["t"]["speedup_overall"] == pytest.approx(1.5)
    assert metrics["t"]["speedup_tail"] == pytest.approx(2.0) and metrics["t"]["speedup_head"] == pytest.approx(1.0)
    assert ro.best_setting(metrics) == "t"


def test_draw_lengths_deterministic_and_clipped():
    a = ro.draw_lengths("lognormal:32:1.0", 100, 7, 4, 64)
    b = ro.draw_lengths("lognormal:32:1.0", 100, 7, 4, 64)
    assert np.array_equal(a, b) and a.min() >= 4 and a.max() <= 64
    assert np.array_equal(ro.draw_lengths("fixed:9", 3, 0, 1, 100), [9, 9, 9])
    from samspec_bench.errors import UserError
    with pytest.raises(UserError, match="length-dist"):
        ro.draw_lengths("weird:1", 3, 0, 1, 10)


def test_replay_rollout_on_shared_traces(shared_data, tmp_path):
    from click.testing import CliRunner
    res = CliRunner().invoke(ro.command, ["--engine", "replay", "--data-dir", str(shared_data), "--prompts", "6",
                                          "--group-size", "4", "--max-num-seqs", "8", "--spec-threshold", "2,4",
                                          "-k", "3", "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    result = json.loads((run / "result.json").read_text())
    arms = result["metrics"]["arms"]
    assert set(arms) == {"off", "always k=3", "threshold<=2 k=3", "threshold<=4 k=3"}
    assert result["metrics"]["best_setting"] in arms
    for lbl, m in arms.items():
        assert m["head_s"] + m["tail_s"] == pytest.approx(m["total_s"])
        assert m["emitted"] == arms["off"]["emitted"]      # same requests, same tokens in every arm
    assert arms["off"]["drafted"] == 0 and arms["always k=3"]["accepted"] > 0
    # the threshold arm only speculates in small batches, so its head equals the baseline's head
    assert arms["threshold<=4 k=3"]["head_s"] == pytest.approx(arms["threshold<=4 k=3"]["baseline_phases"]["head_s"])
    for f in ("steps.csv", "running_vs_time.png", "step_time_vs_batch.png", "ccdf.png"):
        assert (run / f).stat().st_size > 0
    import pandas as pd
    df = pd.read_csv(run / "steps.csv")
    assert set(df["arm"]) == set(arms)


@pytest.mark.slow
def test_reference_rollout_tiny_model(tmp_path):
    """A tiny measured rollout: greedy, ignore-eos lengths; both arms emit the same tokens and
    the simulation reproduces the engine's schedule step for step."""
    cfg = ro.RolloutConfig(engine="reference", model="builtin:tiny-qwen3", prompts=2, group_size=2,
                           temperature=0.0, length_dist="lognormal:12:0.6", min_len=3, max_response_len=24,
                           max_num_seqs=4, thresholds=[2], ks=[3], arms=["off", "threshold"])
    path, summary = ro.run(cfg, str(tmp_path))
    arms = summary["arms"]
    assert set(arms) == {"off", "threshold<=2 k=3"}
    assert arms["off"]["emitted"] == arms["threshold<=2 k=3"]["emitted"]
    for m in arms.values():
        assert m["scheduler_match"] is True
        assert m["outputs_identical_to_off"] == 1.0   # greedy, float32: speculation is lossless
        assert m["head_s"] + m["tail_s"] == pytest.approx(m["total_s"])
        assert m["simulated"]["steps"] == m["steps"]
        assert np.isfinite(m["sim_error"]["total"])
    assert (path / "result.json").exists()
