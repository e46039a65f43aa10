"""perf/throughput across runs (throughput.py): a run whose every perf/throughput value was NaN or
inf (no perf/total_num_tokens to fall back on) is a diverged speed metric, not an internal error."""

from __future__ import annotations

from samspec_bench.suites.curves import build_config, compare_runs, load_runs
from samspec_bench.suites.curves.metric_families import FAMILIES


def _console(path, throughput: str):
    path.write_text("".join(f"step:{s} - critic/score/mean:np.float64({0.5 + s / 1000}) - timing_s/step:"
                            f"np.float64({100 + s % 3}) - perf/throughput:{throughput.format(1200 + s % 5)}\n"
                            for s in range(1, 21)))
    return path


def test_throughput_non_finite_at_every_step_is_diverged(tmp_path):
    off = _console(tmp_path / "sam_off.log", "np.float64({})")
    on = _console(tmp_path / "sam_on.log", "np.float64(nan)")
    cfg = build_config(runs=[str(off), str(on)], extra_runs=(), labels=None, format="auto", families=",".join(FAMILIES),
                       metrics=(), speed_metrics=(), margins=(), alpha=0.05, min_steps=10, final_fraction=0.25,
                       step_range=None, smooth=0.6, fail_on="never", gpus=())
    speed = compare_runs(cfg, load_runs(cfg))["comparisons"]["sam_on"]["speed"]["throughput"]
    assert speed["change"] == "non-finite" and speed["diverged"]
    assert "run sam_on diverged: 20 of 20 steps non-finite" in speed["reason"]
