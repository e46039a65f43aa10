"""Predictions with their spread (suites/rollout/spread.py, draws.py): every modelled figure is the
median [min, max] over draws of the lengths; a published figure is matched only inside that
range; the KV cache and its preemptions as the simulation counted them."""

from types import SimpleNamespace

import numpy as np
import pytest

from samspec_bench.bench.policies import OffPolicy
from samspec_bench.bench.simulation.dp import simulate_dp
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.suites.rollout.config import RolloutConfig
from samspec_bench.suites.rollout.draws import draw_seeds, kv_block, run_draws
from samspec_bench.suites.rollout.lines import kv_lines
from samspec_bench.suites.rollout.phases import arm_metrics
from samspec_bench.suites.rollout.presets import PRESETS, comparison
from samspec_bench.suites.rollout.spread import fmt, matched, single, spread

ONE = StepTimeModel.constant(1.0)
# what each seed's stub draw gives: a speculating arm's speedup and the off arm's preemptions
SPEEDUP = {10: 1.10, 11: 1.02, 12: 1.30, 13: 1.05, 14: 1.20}
PREEMPTED = {10: 0, 11: 4, 12: 2, 13: 7, 14: 1}


def _stub_draw(seed):
    """One draw's (sims, metrics) with known figures: two one-instance arms, four steps each."""
    steps = {"time_s": np.array([1.0, 1.0, 0.5, 0.5]), "num_waiting": np.array([2, 0, 0, 0]),
             "num_running": np.array([4, 4, 2, 1])}
    sims = {lbl: SimpleNamespace(steps=steps, kv={"capacity_tokens": 64, "source": "given",
                                                  "preemptions": PREEMPTED[seed] if lbl == "off" else 0})
            for lbl in ("off", "arm")}
    base = {"tail_threshold": 2, "total_s": 3.0, "head_s": 2.0, "tail_s": 1.0}
    metrics = {"off": {**base, "preemptions": PREEMPTED[seed]},
               "arm": {**base, "speedup_overall": SPEEDUP[seed], "speedup_tail": None if seed == 13 else 1.5,
                       "preemptions": 0}}
    return sims, metrics


def test_every_figure_is_the_median_and_range_over_the_draws():
    cfg = RolloutConfig(length_dist="lognormal:100:0.5", seed=10, draws=5)
    sims, metrics = _stub_draw(10)
    block = run_draws(cfg, sims, metrics, _stub_draw)
    assert block["seeds"] == [10, 11, 12, 13, 14] and block["shown_seed"] == 10
    sp = metrics["arm"]["spread"]["speedup_overall"]
    assert (sp["median"], sp["min"], sp["max"], sp["n"]) == (1.10, 1.02, 1.30, 5)
    assert sp["values"] == [1.10, 1.02, 1.30, 1.05, 1.20]          # in seed order
    tail = metrics["arm"]["spread"]["speedup_tail"]                # a draw without a value is left out
    assert tail["n"] == 4 and tail["values"][3] is None and tail["median"] == 1.5
    pre = metrics["off"]["kv"]["preemptions_spread"]
    assert (pre["median"], pre["min"], pre["max"]) == (2, 0, 7)
    assert metrics["off"]["kv"]["preemptions"] == 0 and metrics["off"]["kv"]["capacity_tokens"] == 64   # shown draw
    # an even number of draws: the median is the mean of the middle two
    sims, metrics = _stub_draw(10)
    run_draws(RolloutConfig(length_dist="lognormal:100:0.5", seed=10, draws=4), sims, metrics, _stub_draw)
    assert metrics["arm"]["spread"]["speedup_overall"]["median"] == pytest.approx((1.05 + 1.10) / 2)


def test_draw_seeds_only_where_the_lengths_are_drawn():
    assert draw_seeds(RolloutConfig(length_dist="lognormal:100:0.5", seed=3)) == [3, 4, 5, 6, 7]
    assert draw_seeds(RolloutConfig(length_dist="pareto:50:1.5", seed=0, draws=2)) == [0, 1]
    assert draw_seeds(RolloutConfig(length_dist="fixed:100", seed=3, draws=4)) == [3]   # every draw the same
    assert draw_seeds(RolloutConfig(length_dist=None, seed=3)) == [3]                   # the traces' own lengths


@pytest.mark.parametrize("published, expect", [
    (1.0, (True, 0.0)), (3.0, (True, 0.0)), (2.5, (True, 0.0)),   # the edges are inside
    (0.5, (False, 0.5)),                                           # below: nearest end minus published, > 0
    (3.25, (False, -0.25)),                                        # above: < 0
    (None, (None, None)),
])
def test_matched_only_inside_the_range(published, expect):
    assert matched(published, spread([3.0, 1.0, 2.0])) == expect


def test_matched_one_draw_and_formatting():
    assert matched(2.0, single(2.0)) == (True, 0.0)
    ok, gap = matched(2.001, single(2.0))
    assert ok is False and gap == pytest.approx(-0.001)
    assert matched(1.0, spread([None, None])) == (None, None)
    assert fmt(spread([3.0, 1.0, 2.0]), ".1f", " %") == "2.0 % [1.0, 3.0]"
    assert fmt(single(2.0), ".1f") == "2.0" and fmt(None) == "n/a"


def test_preset_comparison_calls_a_figure_matched_at_the_range_edge():
    arm = {"spread": {"speedup_tail": spread([1.35, 1.40, 1.50]), "speedup_overall": spread([1.02, 1.03, 1.04])}}
    rows = {r["figure"]: r for r in comparison(PRESETS["seed-qwen3-235b"], arm, "t")["rows"]}
    assert rows["long-tail speedup"]["matched"] is True and rows["long-tail speedup"]["gap"] == 0.0
    gain = rows["per-step inference gain"]            # published 11.52 %, modelled 2..4 %: short by 7.52 pp
    assert gain["matched"] is False and gain["gap"] == pytest.approx(4.0 - 11.52)
    assert (gain["min"], gain["max"]) == pytest.approx((2.0, 4.0))
    arm["spread"]["speedup_tail"] = spread([1.2, 1.3, 1.34])
    tail = {r["figure"]: r for r in comparison(PRESETS["seed-qwen3-235b"], arm, "t")["rows"]}["long-tail speedup"]
    assert tail["matched"] is False and tail["gap"] == pytest.approx(1.34 - 1.35)


# ---------- the KV cache and its preemptions, as the simulation counted them ----------

def _forced(n=3):
    """n requests of 4 prompt + 20 response tokens, running together in a 48-token cache of
    4-token blocks: at 16 tokens each the cache is full, so a step that needs a block preempts."""
    return [SimRequest(4, 20) for _ in range(n)]


def test_kv_block_is_the_simulations_own_count_under_forced_preemption():
    r = simulate(_forced(), k=0, policy=OffPolicy(), step_model=ONE, max_num_seqs=3, kv_capacity_tokens=48,
                 block_size=4)
    counted = int(r.steps["num_preempted"].sum())
    assert counted > 0                                                 # forced by the sizes above
    kv = kv_block(r)
    assert kv["capacity_tokens"] == 48 and kv["source"] == "given" and kv["preemptions"] == counted
    assert arm_metrics(r.steps, r.finish_time_s, 2)["preemptions"] == counted
    # sharded: per instance and summed
    d = simulate_dp(_forced(6), [np.arange(3), np.arange(3, 6)], k=0, step_model=ONE, max_num_seqs=3,
                    kv_capacity_tokens=48, block_size=4)
    per = [int(x.steps["num_preempted"].sum()) for x in d.instances]
    kvd = kv_block(d)
    assert kvd["preemptions_per_instance"] == per and kvd["preemptions"] == sum(per) and min(per) > 0
    # what the terminal says
    metrics = {"off": {"kv": {**kvd, "preemptions_spread": spread([sum(per), 0, 2 * sum(per)])}}}
    lines = kv_lines({"arms": metrics})
    assert lines[0].startswith("KV cache (simulated, per instance): 48 tokens, from given")
    assert f"preemptions: off {sum(per)} [0, {2 * sum(per)}]" in lines[-1]


def test_weights_that_do_not_fit_are_noted_as_refused():
    from samspec_bench.bench.simulation.step_model_spec import load_step_model
    model = load_step_model("roofline:hardware=910C,model=Qwen/Qwen3-235B-A22B,tp=4")
    assert model.memory()["fits_weights"] is False       # 235B of bf16 weights over 4 dies of 64 GiB
    r = simulate(_forced(), k=0, policy=OffPolicy(), step_model=model, max_num_seqs=3)
    kv = kv_block(r)
    assert kv["capacity_tokens"] is None and kv["note"].startswith("REFUSED by memory")
    lines = kv_lines({"arms": {"off": {"kv": kv}}})
    assert "unlimited" in lines[0] and lines[1].strip().startswith("REFUSED by memory")


def test_an_instance_that_waited_idle_ends_at_its_clock_and_its_tail_starts_on_it():
    from samspec_bench.suites.rollout.draws import phase_record
    # steps of 1 s, 1 s, then a 5 s wait for a chunk, then a 2 s tail step (<= 2 running, nobody waiting)
    steps = {"time_s": np.array([1.0, 1.0, 2.0]), "clock_s": np.array([1.0, 2.0, 9.0]),
             "num_running": np.array([4, 4, 1]), "num_waiting": np.array([1, 0, 0])}
    p = phase_record(steps, 2)
    assert (p["total_s"], p["tail_s"], p["tail_start_s"], p["tail_start_step"]) == (9.0, 2.0, 7.0, 2)
    # without a wait the clock and the summed steps agree: the sums, as before
    steps["clock_s"] = np.array([1.0, 2.0, 4.0])
    assert (phase_record(steps, 2)["total_s"], phase_record(steps, 2)["tail_start_s"]) == (4.0, 2.0)
