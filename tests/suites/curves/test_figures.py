"""The curves figures (figures.py): a run whose first learning metric never had a finite value
(diverged from its first step) is drawn without a stray matplotlib warning on the terminal."""

from __future__ import annotations

import warnings

from samspec_bench.suites.curves import build_config, compare_runs, load_runs
from samspec_bench.suites.curves.figures import draw_learning


def _log(path, reward: str):
    path.write_text("".join(f"step:{s} - critic/score/mean:{reward or 0.5 + 0.001 * (s % 3)} - "
                            f"actor/entropy:{0.3 + 0.001 * (s % 5)}\n" for s in range(1, 31)))
    return path


def test_learning_figure_with_a_metric_all_nan_in_run_b_draws_without_warning(tmp_path):
    a, b = _log(tmp_path / "a.log", ""), _log(tmp_path / "b.log", "nan")
    cfg = build_config(runs=[str(a), str(b)], extra_runs=(), labels=None, format="auto", families="reward,entropy",
                       metrics=(), speed_metrics=(), margins=(), alpha=0.05, min_steps=10, final_fraction=0.25,
                       step_range=None, smooth=0.6, fail_on="never", gpus=())
    runs = load_runs(cfg)
    out = compare_runs(cfg, runs)
    assert out["comparisons"]["b"]["learning"]["reward"]["verdict"] == "DIFFERENT"     # diverged
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert draw_learning({**out, "alpha": 0.05}, runs, tmp_path / "learning.png", 0.6)
    assert (tmp_path / "learning.png").stat().st_size > 0
