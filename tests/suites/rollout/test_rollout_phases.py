"""The rollout suite's statistics (suites/rollout/phases.py), called directly on small step
tables worked out by hand."""

import numpy as np
import pytest

from samspec_bench.suites.rollout import phases as ph


def _steps(running, waiting, times):
    n = len(times)
    return {"time_s": np.asarray(times, float), "num_running": np.asarray(running), "num_waiting": np.asarray(waiting),
            "speculative": np.zeros(n, bool), "num_drafted": np.zeros(n, int), "num_accepted": np.zeros(n, int),
            "num_emitted": np.ones(n, int)}


def test_phase_split_sums_to_total_and_uses_waiting():
    st = _steps([8, 8, 4, 4, 2, 1], [3, 1, 1, 0, 0, 0], [1, 2, 3, 4, 5, 6])
    p = ph.phase_split(st, 4)
    assert p["total_s"] == 21 and p["head_s"] + p["tail_s"] == p["total_s"]
    assert p["tail_s"] == 15   # the step with 4 running but 1 waiting is head
    assert p["tail_steps"] == 3


def test_completion_stats_and_speedups():
    c = ph.completion_stats(np.array([1.0, 1.0, 1.0, 5.0]))
    assert c["makespan_s"] == 5.0 and c["straggler_ratio"] == pytest.approx(2.5)
    off = _steps([4, 2, 1], [0, 0, 0], [4, 4, 4])
    on = _steps([4, 2, 1], [0, 0, 0], [4, 2, 2])
    settings = [{"arm": "off", "label": "off"}, {"arm": "threshold", "label": "t"}]
    metrics = {"off": ph.arm_metrics(off, np.ones(3), 2), "t": ph.arm_metrics(on, np.ones(3), 2)}
    ph.add_speedups(metrics, settings, off, 2)
    assert metrics["t"]["speedup_overall"] == pytest.approx(1.5)
    assert metrics["t"]["speedup_tail"] == pytest.approx(2.0) and metrics["t"]["speedup_head"] == pytest.approx(1.0)
    assert ph.best_setting(metrics) == "t"


def test_tail_mask_boundaries():
    st = _steps([5, 4, 4, 3], [0, 0, 2, 0], [1, 1, 1, 1])
    # running <= T counts (4 <= 4); anybody waiting makes a step head
    assert list(ph.tail_mask(st, 4)) == [False, True, False, True]
    assert not ph.tail_mask(st, 0).any()
    p = ph.phase_split(st, 0)
    assert p["tail_s"] == 0 and p["head_steps"] == 4


def test_completion_stats_leave_out_unfinished():
    assert ph.completion_stats(np.array([np.nan, np.inf])) == {}
    c = ph.completion_stats([2.0, np.nan, 4.0])
    assert c["makespan_s"] == 4.0 and c["mean_s"] == 3.0 and c["p50_s"] == 3.0
    assert ph.completion_stats([0.0, 0.0])["straggler_ratio"] is None


def test_arm_metrics_counts_and_preemptions():
    st = _steps([2, 2, 1], [0, 0, 0], [1, 2, 3])
    st["speculative"] = np.array([False, True, True])
    st["num_drafted"] = np.array([0, 6, 3])
    st["num_accepted"] = np.array([0, 3, 3])
    m = ph.arm_metrics(st, np.array([3.0, 6.0]), 1)
    assert (m["steps"], m["spec_steps"], m["drafted"], m["accepted"], m["emitted"]) == (3, 2, 9, 6, 3)
    assert m["acceptance_rate"] == pytest.approx(6 / 9) and m["tail_threshold"] == 1
    assert m["tail_s"] == 3 and m["completion"]["makespan_s"] == 6.0
    assert "preemptions" not in m   # engines that record none
    st["num_preempted"] = np.array([0, 1, 0])
    assert ph.arm_metrics(st, [1.0], 1)["preemptions"] == 1
    st["num_drafted"][:] = 0
    assert ph.arm_metrics(st, [1.0], 1)["acceptance_rate"] is None


def test_speedups_use_the_arms_own_tail_and_guard_zero():
    off = _steps([4, 2, 1], [0, 0, 0], [4, 4, 4])
    arm = _steps([4, 2, 1], [0, 0, 0], [4, 4, 0])
    settings = [{"arm": "off", "label": "off"}, {"arm": "always", "label": "a"}]
    metrics = {"off": ph.arm_metrics(off, [1.0], 1), "a": ph.arm_metrics(arm, [1.0], 1)}
    ph.add_speedups(metrics, settings, off, 99)   # the last argument is not used
    a = metrics["a"]
    assert a["baseline_phases"] == ph.phase_split(off, 1)
    assert a["speedup_tail"] is None                 # the arm's tail took no time
    assert a["speedup_overall"] == pytest.approx(1.5) and a["time_saved_fraction"] == pytest.approx(1 / 3)
    assert "speedup_overall" not in metrics["off"]
    assert ph.ratio(1.0, 0) is None and ph.ratio(1.0, None) is None and ph.ratio(3.0, 2.0) == 1.5


def test_best_setting_ignores_off():
    assert ph.best_setting({"off": {"total_s": 1.0}}) is None
    assert ph.best_setting({"off": {"total_s": 1.0}, "x": {"total_s": 3.0}, "y": {"total_s": 2.0}}) == "y"


def test_tail_acceptance_rows_by_position_bin():
    assert ph.bin_label(0) == "[0,64)" and ph.bin_label(1) == "[64,128)"
    assert ph.bin_label(len(ph.POSITION_EDGES)) == "[16384,inf)"
    nb = len(ph.POSITION_EDGES) + 1
    drafted, accepted = np.zeros(nb, int), np.zeros(nb, int)
    drafted[[0, nb - 1]], accepted[[0, nb - 1]] = (8, 4), (2, 4)
    rows = ph.tail_acceptance_rows({"drafted": drafted, "accepted": accepted})
    assert rows == [{"bin": "[0,64)", "drafted": 8, "accepted": 2, "acceptance_rate": 0.25},
                    {"bin": "[16384,inf)", "drafted": 4, "accepted": 4, "acceptance_rate": 1.0}]


def test_acceptance_cost_from_the_counts():
    # 3 steps: 4 requests decode in each; step 2 drafts 3 per request and accepts 4 in all; the
    # first step also emits the 4 requests' prefill tokens (an engine counts them in num_emitted)
    st = _steps([4, 4, 4], [0, 0, 0], [1, 1, 1])
    st["num_decode_reqs"] = np.array([4, 4, 4])
    st["num_drafted"] = np.array([0, 12, 0])
    st["num_accepted"] = np.array([0, 4, 0])
    st["num_emitted"] = np.array([8, 8, 4])
    m = ph.arm_metrics(st, np.ones(4), 2)
    assert m["decode_request_steps"] == 12
    assert m["tokens_per_step"] == pytest.approx((12 + 4) / 12)
    assert m["drafted_per_step"] == pytest.approx(12 / 12)
    assert m["verify_tokens_per_token"] == pytest.approx((12 + 12) / (12 + 4))
    # without speculation every verified token is kept, whatever the prefills emitted
    st["num_drafted"], st["num_accepted"] = np.zeros(3, int), np.zeros(3, int)
    m = ph.arm_metrics(st, np.ones(4), 2)
    assert (m["tokens_per_step"], m["drafted_per_step"], m["verify_tokens_per_token"]) == (1.0, 0.0, 1.0)
    # a sharded arm: the cost of the summed counts, not a mean of ratios
    a, b = dict(st), dict(st)
    b["num_drafted"], b["num_accepted"] = np.array([6, 6, 6]), np.array([4, 4, 4])
    d = ph.dp_arm_metrics([a, b], [np.ones(4), np.ones(4)], 2, np.ones(8), [4, 4])
    assert d["drafted_per_step"] == pytest.approx(18 / 24) and d["tokens_per_step"] == pytest.approx(36 / 24)
    assert d["verify_tokens_per_token"] == pytest.approx((24 + 18) / 36)


def test_tokens_per_step_by_phase():
    # head: 2 steps, 4 requests decode with 1 waiting, 8 accepted in all -> (8 + 8) / 8 = 2.0;
    # tail (<= 2 running, nobody waiting): 2 steps of 2 then 1 requests, 1 accepted -> (3 + 1) / 3
    st = _steps([4, 4, 2, 1], [1, 1, 0, 0], [1, 1, 1, 1])
    st["num_decode_reqs"] = np.array([4, 4, 2, 1])
    st["num_accepted"] = np.array([4, 4, 1, 0])
    m = ph.arm_metrics(st, np.ones(4), 2)
    assert m["tokens_per_step_head"] == pytest.approx(2.0)
    assert m["tokens_per_step_tail"] == pytest.approx(4 / 3)
    # the tail's two steps decode 2 then 1 requests (1.5 a step) and emit 1 token each (_steps)
    assert m["running_per_step_tail"] == pytest.approx(1.5) and m["emitted_tail"] == 2
    # sharded: the tail's steps of both instances pooled (1 + 3 accepted over 3 + 3 decode steps)
    b = dict(st, num_accepted=np.array([4, 4, 2, 1]))
    d = ph.dp_arm_metrics([st, b], [np.ones(4), np.ones(4)], 2, np.ones(8), [4, 4])
    assert d["tokens_per_step_tail"] == pytest.approx((6 + 1 + 3) / 6)
    # a table without per-request decode counts has no per-phase figure
    del st["num_decode_reqs"]
    assert ph.arm_metrics(st, np.ones(4), 2)["tokens_per_step_tail"] is None


def test_a_baseline_without_a_tail_gives_no_tail_speedup_not_zero():
    from samspec_bench.suites.rollout.phases import tail_ratio
    assert tail_ratio(0.0, 5.0) is None and tail_ratio(None, 5.0) is None
    assert tail_ratio(10.0, 4.0) == 2.5 and tail_ratio(10.0, 0.0) is None


def test_the_last_tenth_of_requests_is_seers_tail():
    """Ten requests each: Seer's tail is from the 90th percentile of the finish times to the
    last one (off: past 6 to 10; the arm: past 5 to 6), whatever the steps' running counts say."""
    steps = _steps([2, 1], [0, 0], [1, 1])
    off_f = np.array([1, 1, 2, 2, 3, 3, 4, 5, 6, 10], float)
    arm_f = np.array([1, 1, 2, 2, 3, 3, 4, 4, 5, 6], float)
    settings = [{"arm": "off", "label": "off"}, {"arm": "always", "label": "a"}]
    metrics = {"off": ph.arm_metrics(steps, off_f, 1), "a": ph.arm_metrics(steps, arm_f, 1)}
    assert metrics["off"]["last10_s"] == pytest.approx(10 - np.percentile(off_f, 90))
    ph.add_speedups(metrics, settings, steps, 1)
    want = (10 - np.percentile(off_f, 90)) / (6 - np.percentile(arm_f, 90))
    assert metrics["a"]["speedup_last10"] == pytest.approx(want)
    assert ph.last_decile_s({}) is None


def test_an_instance_that_waited_for_work_ends_at_its_clock_with_the_wait_in_its_head():
    # instance a steps 1 s, 1 s, waits 5 s for a chunk from the shared queue, steps 2 s: its
    # clock ends at 9 s, 4 s of steps; b steps 3 s, 3 s without a gap
    a = dict(_steps([4, 4, 1], [1, 0, 0], [1, 1, 2]), clock_s=np.array([1.0, 2.0, 9.0]))
    b = dict(_steps([4, 1], [1, 0], [3, 3]), clock_s=np.array([3.0, 6.0]))
    d = ph.dp_arm_metrics([a, b], [np.ones(4), np.ones(4)], 2, np.ones(8), [4, 4])
    assert d["total_s"] == 9 and d["dp"]["slowest_instance"] == 0
    assert d["tail_s"] == 2 and d["head_s"] == 7
    assert [r["idle_s"] for r in d["instances"]] == [5, 0]
    assert d["dp"]["tail_s_pooled"] == 5 and d["dp"]["head_s_pooled"] == 10
