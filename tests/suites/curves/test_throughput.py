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


def _csv(path, steps: int, throughput_steps: int | None = None):
    """perf/throughput beside perf/total_num_tokens and perf/time_per_step (those two at the first
    `steps` steps; perf/throughput at `throughput_steps`, default the same)."""
    n = max(steps, throughput_steps or steps)
    rows = ["step,critic/score/mean,response_length/mean,perf/throughput,perf/total_num_tokens,perf/time_per_step"]
    rows += [f"{s},{0.5 + s / 1000},{600 + s % 3},{1200 + s % 5},{'' if s > steps else 120000 + s},"
             f"{'' if s > steps else 100 + s % 3}" for s in range(1, n + 1)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _compare(tmp_path, steps: int, throughput_steps: int | None = None, gpus=()):
    a, b = (_csv(tmp_path / f"{x}.csv", steps, throughput_steps) for x in "ab")
    cfg = build_config(runs=[str(a), str(b)], extra_runs=(), labels=None, format="auto", families=",".join(FAMILIES),
                       metrics=(), speed_metrics=(), margins=(), alpha=0.05, min_steps=10, final_fraction=0.25,
                       step_range=None, smooth=0.6, fail_on="never", gpus=gpus)
    return compare_runs(cfg, load_runs(cfg))["comparisons"]["b"]


def test_two_step_runs_that_log_tokens_and_step_time_are_said_too_short_not_told_to_log_them(tmp_path):
    comp = _compare(tmp_path, 2)
    thr = comp["speed"]["throughput"]
    assert thr["ratio"] is None and thr["change"] == "not computed" and thr["basis"] == "total"
    [caveat] = comp["speed_caveats"]
    assert "perf/total_num_tokens and perf/time_per_step are logged" in caveat, caveat
    assert "share only 2 step(s)" in caveat and "3 needed" in caveat
    assert "log perf/total_num_tokens" not in caveat and "--gpus" not in caveat
    assert comp["not_normalised"] == 0
    assert "speed_note" not in comp          # lengths unjudged on 2 steps: no claim that they differ


def test_tokens_logged_at_too_few_steps_for_totals_say_so_beside_the_per_gpu_ratio(tmp_path):
    unknown = _compare(tmp_path, 2, throughput_steps=20)
    [caveat] = unknown["speed_caveats"]
    assert "give --gpus a=N" in caveat and "at more steps both runs share: now 2" in caveat, caveat
    assert "or log perf/total_num_tokens and perf/time_per_step)" not in caveat
    known = _compare(tmp_path, 2, throughput_steps=20, gpus=("a=4,b=4",))["speed"]["throughput"]
    assert known["basis"] == "per GPU x GPUs" and known["ratio"] is not None
    assert "logged at only 2 common step(s)" in known["how"] and "not logged" not in known["how"]
