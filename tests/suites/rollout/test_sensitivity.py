"""What a prediction rests on (suites/rollout/sensitivity.py): a draw's phases re-read under other
host overheads, tail readings and rounds (by hand), and planted changes moving the rows the
expected way on a small synthetic rollout (less KV memory, more preemptions)."""

import numpy as np
import pytest

from samspec_bench.bench.simulation.fitted_step_model import FEATURES, StepTimeModel
from samspec_bench.suites.rollout.config import RolloutConfig, arm_settings
from samspec_bench.suites.rollout.replay_arm import Replay
from samspec_bench.suites.rollout.sensitivity import NoMemory, capacity_at, read, run_sensitivity, table_lines


def _ph(total, tail, steps, tail_steps, start_step, start_s):
    return {"total_s": total, "tail_s": tail, "steps": steps, "tail_steps": tail_steps,
            "tail_start_step": start_step, "tail_start_s": start_s}


OFF = [_ph(100.0, 20.0, 50, 20, 30, 80.0), _ph(80.0, 10.0, 40, 10, 30, 70.0)]   # two instances
ARM = [_ph(90.0, 10.0, 45, 15, 30, 80.0), _ph(75.0, 5.0, 38, 8, 30, 70.0)]


def test_read_a_draw_by_hand():
    r = read([(OFF, ARM)])                       # pooled: (20 + 10) / (100 + 80); walls 100 / 90
    assert r["tail_share_pct"] == pytest.approx(100 * 30 / 180) and r["gain_pct"] == pytest.approx(100 * (100 / 90 - 1))
    assert r["speedup_tail"] == pytest.approx(30 / 15)
    s = read([(OFF, ARM)], reading="slowest")    # the slowest instances: 20 / 100 off, 10 on
    assert (s["tail_share_pct"], s["speedup_tail"]) == pytest.approx((20.0, 2.0))
    f = read([(OFF, ARM)], reading="first")      # from the first tail start (70 s) to the end: 30 of 100 off, 20 on
    assert (f["tail_share_pct"], f["speedup_tail"]) == pytest.approx((30.0, 1.5))
    h = read([(OFF, ARM)], host_s=1.0)           # every step 1 s longer: off 150 + 120, tails 40 + 20; on 135, 113
    assert h["tail_share_pct"] == pytest.approx(100 * 60 / 270) and h["gain_pct"] == pytest.approx(100 * (150 / 135 - 1))
    assert h["speedup_tail"] == pytest.approx(60 / 38)
    two = read([(OFF, ARM), (OFF, ARM)])         # two identical rounds: the same shares and gain
    assert (two["tail_share_pct"], two["gain_pct"]) == pytest.approx((r["tail_share_pct"], r["gain_pct"]))


def test_capacity_at_a_memory_share_and_no_memory():
    class Mem:
        kv_bytes_per_token = 1000

        def memory(self):   # 100 kB device at 0.9: 90 kB usable, 10 kB of weights
            return {"memory_bytes": 90_000.0, "utilization": 0.9, "weight_bytes": 10_000.0}

    assert capacity_at(Mem(), 0.9) == 80 and capacity_at(Mem(), 0.6) == 50
    assert capacity_at(NoMemory(Mem()), 0.6) is None and capacity_at(StepTimeModel.constant(1.0), 0.6) is None


def _synthetic(kv_tokens):
    """16 requests (2 prompts x 8) of an 8-token prompt, lengths lognormal(50, 0.5) up to 100,
    drafting 3 and accepting 1 everywhere; 8 running at once in a KV cache of `kv_tokens`."""
    cfg = RolloutConfig(prompts=2, group_size=8, max_num_seqs=8, max_num_batched_tokens=512, max_response_len=100,
                        length_dist="lognormal:50:0.5", kv_capacity_tokens=kv_tokens, block_size=8, thresholds=[2],
                        ks=[3], arms=["off", "threshold"], sensitivity=True, draws=3)
    settings = arm_settings(cfg)
    pairs = [(list(range(8)), list(range(100))) for _ in range(4)]
    prof = [(np.full(100, 3, dtype=np.int16), np.ones(100, dtype=np.int16)) for _ in pairs]
    rep = Replay(pairs=pairs, idx=[i % 4 for i in range(16)], n_prompts=2, group_size=8,
                 profiles={s["profile"]: prof for s in settings if s["profile"] is not None}, profile_s=0.0)
    model = StepTimeModel(0.001, {f: 0.0 for f in FEATURES})
    model.coef.update(decode_tokens=1e-3, draft_tokens=5e-4, prefill_tokens=1e-4)   # cost grows with the batch
    return cfg, rep, settings, model


def test_planted_changes_move_the_rows_the_expected_way():
    cfg, rep, settings, model = _synthetic(600)
    block = run_sensitivity(cfg, rep, settings, "threshold<=2 k=3", model, "test model")
    rows = {(r["assumption"], r["value"].split(":")[0]): r for r in block["rows"]}
    pre = {k: r["preemptions_off"]["median"] for k, r in rows.items()}
    given = pre[("(the prediction)", "as modelled")]
    less = pre[("KV capacity", "x0.6 of the given capacity")]
    assert pre[("KV capacity", "unlimited")] == 0 and less > given and less > 0   # less KV memory: more preempted
    # host overhead added to every step: the cheap tail steps weigh more, the tail share grows with it
    share = {k: r["tail_share_pct"]["median"] for k, r in rows.items()}
    assert share[("(the prediction)", "as modelled")] < share[("host overhead per step", "+25 ms")] \
        < share[("host overhead per step", "+50 ms")]
    assert block["seeds"] == [0, 1, 2] and all(r["draws"] == 3 for r in block["rows"])
    assert block["rests_on"]["tail_share"] in {r["assumption"] for r in block["rows"]}
    text = "\n".join(table_lines(block))
    assert "the modelled tail share rests most on: " in text and "x0.6 of the given capacity" in text
    # no step model: the table is in decode steps and has no host-overhead rows
    steps = run_sensitivity(cfg, rep, settings, "threshold<=2 k=3", model, None)
    assert steps["units"] == "steps" and not [r for r in steps["rows"] if r["assumption"].startswith("host")]
    assert "DECODE STEPS, not time" in table_lines(steps)[0]


def test_lengths_in_the_recorded_order_move_the_tail_where_long_responses_draft_worse():
    """Planted: the longer a recorded response, the worse it drafts (the shortest accepts 3 of 3,
    the longest nothing). Drawn in the recorded order, the last requests are the ones that draft
    worst, so the arm's tail gains less than with lengths drawn apart from the response."""
    cfg = RolloutConfig(prompts=4, group_size=8, max_num_seqs=8, max_num_batched_tokens=512, max_response_len=400,
                        length_dist="lognormal:100:0.6", thresholds=[4], ks=[3], arms=["off", "always"],
                        sensitivity=True, draws=3)
    settings = arm_settings(cfg)
    rec = [20 + 10 * j for j in range(8)]   # recorded lengths 20..90; response j accepts 3 - j * 3 // 7
    pairs = [(list(range(8)), list(range(n))) for n in rec]
    prof = [(np.full(n, 3, dtype=np.int16), np.full(n, 3 - (j * 3) // 7, dtype=np.int16)) for j, n in enumerate(rec)]
    rep = Replay(pairs=pairs, idx=[q % 8 for q in range(32)], n_prompts=4, group_size=8,
                 profiles={s["profile"]: prof for s in settings if s["profile"] is not None}, profile_s=0.0)
    model = StepTimeModel(0.001, {f: 0.0 for f in FEATURES})
    model.coef.update(decode_tokens=1e-4, draft_tokens=5e-5)
    block = run_sensitivity(cfg, rep, settings, "always k=3", model, "test model")
    (ordered,) = [r for r in block["rows"] if r["assumption"] == "response lengths: which run long"]
    assert ordered["value"].startswith("1 (in the recorded order)") and ordered["how"] == "--length-rank-share 1"
    base = block["rows"][0]
    assert ordered["speedup_tail"]["median"] < base["speedup_tail"]["median"]


def test_a_roofline_that_switches_attention_kernels_is_tried_with_one_kernel():
    from samspec_bench.bench.simulation.step_model_spec import load_step_model
    cfg, rep, settings, _ = _synthetic(600)
    label = "threshold<=2 k=3"
    block = run_sensitivity(cfg, rep, settings, label, load_step_model("roofline:hardware=H100,model=Qwen3-8B"),
                            "roofline H100")
    rows = {(r["assumption"], r["value"]): r for r in block["rows"]}
    pred = rows[("(the prediction)", "as modelled")]
    # 8 requests of q <= 4 are 64 work blocks, below the switch: every step already runs the
    # split-KV kernel's 64-row tiles, so that row repeats the prediction; 128-row tiles cost more
    same, tall = rows[("attention kernel", "one kernel, 64-row tiles")], rows[("attention kernel", "one kernel, 128-row tiles")]
    assert same["gain_pct"] == pred["gain_pct"] and same["tail_share_pct"] == pred["tail_share_pct"]
    assert tall["gain_pct"]["median"] != pytest.approx(pred["gain_pct"]["median"], rel=1e-6)
    ascend = run_sensitivity(cfg, rep, settings, label, load_step_model("roofline:hardware=910C,model=Qwen3-8B"), "910C")
    assert not any(r["assumption"] == "attention kernel" for r in ascend["rows"])   # one kernel there already
