"""Metric families (metric_families.py): a family's tag is found under verl's name, an older alias,
or with its `/` written `_` (TensorBoard's CSV download names critic/score/mean critic_score_mean)."""

from __future__ import annotations

import numpy as np

from samspec_bench.evals.training_logs import load_run
from samspec_bench.suites.curves import build_config, compare_runs, load_runs
from samspec_bench.suites.curves.metric_families import FAMILIES, resolve


def _download(path, seed: int):
    rng = np.random.default_rng(seed)
    path.write_text("Wall time,Step,Value\n" + "".join(f"{1.7e9 + s},{s},{0.6 + rng.normal(0, 0.01)}\n"
                                                       for s in range(1, 41)))
    return path


def test_tensorboard_downloads_of_one_tag_compare_as_the_reward(tmp_path):
    off = _download(tmp_path / "run-sam_off-tag-critic_score_mean.csv", 1)
    on = _download(tmp_path / "run-sam_on-tag-critic_score_mean.csv", 2)
    runs = [load_run(off), load_run(on)]
    reward = next(m for m in resolve(runs, list(FAMILIES), {}, [], []) if m.name == "reward")
    assert reward.tags == {"sam_off": "critic_score_mean", "sam_on": "critic_score_mean"}
    cfg = build_config(runs=[str(off), str(on)], extra_runs=(), labels=None, format="auto", families=",".join(FAMILIES),
                       metrics=(), speed_metrics=(), margins=(), alpha=0.05, min_steps=10, final_fraction=0.25,
                       step_range=None, smooth=0.6, fail_on="never", gpus=())
    out = compare_runs(cfg, load_runs(cfg))
    assert out["comparisons"]["sam_on"]["learning"]["reward"]["verdict"] == "EQUIVALENT"


def test_verl_name_wins_over_the_flattened_one(tmp_path):
    p = tmp_path / "both.csv"
    p.write_text("step,critic/score/mean,critic_score_mean\n1,0.5,9\n2,0.6,9\n3,0.7,9\n")
    reward = next(m for m in resolve([load_run(p)], ["reward"], {}, [], []) if m.name == "reward")
    assert reward.tags == {"both": "critic/score/mean"}


def test_validation_source_of_one_run_only_is_listed_absent(tmp_path):
    # SAM off run without validation, SAM on run validating on gsm8k every 5 steps: the source is
    # named as absent in the baseline, not passed over in silence
    off, on = tmp_path / "sam_off.csv", tmp_path / "sam_on.csv"
    off.write_text("step,critic/score/mean\n" + "".join(f"{s},{0.5 + s / 100}\n" for s in range(1, 21)))
    on.write_text("step,critic/score/mean,val-core/openai/gsm8k/acc/mean@1\n"
                  + "".join(f"{s},{0.5 + s / 100},{0.4 + s / 100 if s % 5 == 0 else ''}\n" for s in range(1, 21)))
    cfg = build_config(runs=[str(off), str(on)], extra_runs=(), labels=None, format="auto", families=",".join(FAMILIES),
                       metrics=(), speed_metrics=(), margins=(), alpha=0.05, min_steps=10, final_fraction=0.25,
                       step_range=None, smooth=0.6, fail_on="never", gpus=())
    out = compare_runs(cfg, load_runs(cfg))
    absent = out["comparisons"]["sam_on"]["absent"]
    assert "val-core/openai/gsm8k/acc/mean@1 (val/openai/gsm8k; absent in sam_off)" in absent
