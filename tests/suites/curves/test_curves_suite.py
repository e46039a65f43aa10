"""`samspec-bench curves`: the suite contract, metric families and aliases, the command on
synthetic runs in mixed formats (verdicts, speed ratios, figures, exit codes), bad input as one
line and exit 2, the report's curves headlines, `run`'s curves step, and the shared real pairs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs import load_run
from samspec_bench.reports.collect import collect
from samspec_bench.reports.headlines import summarize
from samspec_bench.suites import curves
from samspec_bench.suites.curves import build_config, compare_runs, load_runs
from samspec_bench.suites.curves.metric_families import resolve
from samspec_bench.suites.run import plan as run_plan
from samspec_bench.suites.run.config_file import check_sections
from samspec_bench.suites.run.config_options import suite_params

REPO = Path(__file__).resolve().parents[3]


def params(**over) -> dict:
    """Every parameter of the click command at its default (the click options are the defaults)."""
    ctx = curves.command.make_context("curves", [], resilient_parsing=True)
    p = {k: v for k, v in ctx.params.items() if k not in ("output", "json_path")}
    p.update(over)
    return p


def curve(n: int, rng, *, level=0.9, shift=0.0, late=0.0, noise=0.01, speed=1.0) -> dict[str, np.ndarray]:
    t = np.arange(1, n + 1)
    e = np.zeros(n)
    for i in range(1, n):
        e[i] = 0.5 * e[i - 1] + rng.normal(0, noise)
    reward = level - 0.4 * np.exp(-t / 15) + e + shift + np.where(t > 0.75 * n, late, 0.0)
    return {"critic/score/mean": reward,
            "response_length/mean": 300 + 50 * np.exp(-t / 30) + rng.normal(0, 3, n),
            "actor/entropy": 0.3 * np.exp(-t / 40) + 0.05 + rng.normal(0, 0.002, n),
            "timing_s/gen": speed * (30 + rng.normal(0, 1, n)),
            "timing_s/step": 100 + speed * 30 + rng.normal(0, 2, n)}


def write_csv(path: Path, data: dict[str, np.ndarray]) -> Path:
    keys = list(data)
    n = len(data[keys[0]])
    rows = ["_step," + ",".join(keys)] + [f"{i + 1}," + ",".join(f"{data[k][i]:.6g}" for k in keys) for i in range(n)]
    path.write_text("\n".join(rows) + "\n")
    return path


def write_console(path: Path, data: dict[str, np.ndarray], old: bool = False) -> Path:
    """verl's console lines; old=True: Ray prefix, colours and timing/* keys."""
    n = len(next(iter(data.values())))
    lines = []
    for i in range(n):
        fields = [f"step:{i + 1}"]
        for k, v in data.items():
            key = k.replace("timing_s/", "timing/") if old else k
            fields.append(f"{key}:{v[i]:.6g}" if old else f"{key}:np.float64({float(v[i])!r})")
        line = " - ".join(fields)
        lines.append(f"\x1b[36m(main_task pid=77)\x1b[0m {line}" if old else line)
    path.write_text("\n".join(lines) + "\n")
    return path


# --- the contract (SUITE, build_config, execute: tests/test_suite_contract.py) ----------------

@pytest.mark.parametrize("over, match", [
    ({"runs": ("a",)}, "at least two"), ({"runs": ()}, "at least two"),
    ({"runs": ("a", "b"), "labels": "x"}, "1 name"), ({"runs": ("a", "b"), "labels": "x,x"}, "x is given twice"),
    ({"runs": ("a", "b"), "margins": ("reward",)}, "NAME=VALUE"), ({"runs": ("a", "b"), "margins": ("reward=-1",)}, "> 0"),
    ({"runs": ("a", "b"), "families": "reward,nope"}, "--families"), ({"runs": ("a", "b"), "step_range": "9:3"}, "END"),
    ({"runs": ("a", "b"), "alpha": 0.7}, "--alpha"),
])
def test_build_config_rejects_bad_input(over, match):
    with pytest.raises(UserError, match=match):
        build_config(**params(**over))


def test_build_config_combines_positional_and_option_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in "abc":   # the runs must exist (checked with the options)
        (tmp_path / name).write_text("step,reward\n1,0.5\n")
    cfg = build_config(**params(runs=("a",), extra_runs=("b", "c"), margins=("reward=0.02", "entropy=5%"),
                                step_range="10:"))
    assert cfg.runs == ["a", "b", "c"] and cfg.step_range == (10, None)
    assert cfg.margin_objects()["entropy"].relative and cfg.margin_objects()["reward"].value == 0.02


# --- families and aliases -----------------------------------------------------------------------

def test_families_resolve_old_names_and_validation_per_source(tmp_path):
    rng = np.random.default_rng(0)
    a = curve(30, rng)
    b = curve(30, rng)
    b["actor/entropy_loss"] = b.pop("actor/entropy")        # an older verl's name
    for d, core, n in ((a, "val-core/gsm8k/acc/mean@16", 16), (b, "val-aux/gsm8k/acc/mean@32", 32)):
        d[core] = np.full(30, 0.5)
        d[f"val-aux/gsm8k/score/mean@{n}"] = np.full(30, 0.4)
    runs = [load_run(write_csv(tmp_path / "a.csv", a)), load_run(write_console(tmp_path / "b.log", b, old=True))]
    res = {m.name: m for m in resolve(runs, list(curves.FAMILIES), {}, [], [])}
    assert res["entropy"].tags == {"a": "actor/entropy", "b": "actor/entropy_loss"}
    assert res["gen_time"].tags == {"a": "timing_s/gen", "b": "timing/gen"}
    assert res["val/gsm8k"].tags == {"a": "val-core/gsm8k/acc/mean@16", "b": "val-aux/gsm8k/acc/mean@32"}
    assert "val/gsm8k/score" not in res                      # one variable per data source
    assert "kl" not in res                                   # neither run logs a KL


# --- the command ----------------------------------------------------------------------------------

def test_command_equivalent_runs_with_faster_generation(tmp_path, capsys):
    rng = np.random.default_rng(1)
    a = write_csv(tmp_path / "sam_off.csv", curve(120, rng))
    b = write_console(tmp_path / "sam_on.log", curve(120, rng, speed=0.7))
    out = tmp_path / "results"
    cfg = build_config(**params(runs=(str(a), str(b))))
    assert curves.execute(cfg, output=str(out), json_path=str(tmp_path / "r.json")) == 0
    printed = capsys.readouterr().out
    # verl's tags first, the family's name second, values with their units
    for text in ("critic/score/mean (reward)", "timing_s/gen (gen_time)", "response_length/mean (length)",
                 "actor/entropy (entropy)"):
        assert text in printed
    assert re.search(r"\b3\d\.?\d* s\b", printed) and " tokens" in printed
    result = json.loads((tmp_path / "r.json").read_text())
    comp = result["metrics"]["comparisons"]["sam_on"]
    assert comp["learning"]["reward"]["verdict"] == "EQUIVALENT"
    assert comp["learning"]["reward"]["whole"]["steps"] == 120
    assert comp["speed"]["gen_time"]["change"] == "faster"
    lo, hi = comp["speed"]["gen_time"]["ci"]
    assert lo < 0.7 < hi and comp["speed"]["gen_time"]["source"].startswith("measured")
    run_dir = Path(result["run_dir"])
    for name in result["figures"]:
        assert (run_dir / name).stat().st_size > 10_000
    assert set(result["figures"]) == {curves.FIGURE_LEARNING, curves.FIGURE_SPEED, curves.FIGURE_VERDICTS}
    rows = {r["metric"]: r for r in result["tables"]["verdicts"]}
    assert {t: rows[t]["name"] for t in ("critic/score/mean", "response_length/mean", "actor/entropy")} == {
        "critic/score/mean": "reward", "response_length/mean": "length", "actor/entropy": "entropy"}
    assert rows["response_length/mean"]["unit"] == "tokens"
    speed = {r["metric"]: r for r in result["tables"]["speed"]}
    assert speed["timing_s/gen"]["unit"] == "s" and comp["speed"]["gen_time"]["metric"] == "timing_s/gen"


def test_command_divergent_run_fails_the_gate(tmp_path):
    rng = np.random.default_rng(2)
    a = write_csv(tmp_path / "a.csv", curve(120, rng))
    b = write_csv(tmp_path / "b.csv", curve(120, rng, late=0.2))        # learning departs in the last quarter
    c = write_csv(tmp_path / "c.csv", curve(80, rng))                    # a shorter run
    cfg = build_config(**params(runs=(str(a), str(b), str(c)), fail_on="different", families="reward,speed"))
    result, _ = curves.run(cfg, str(tmp_path / "out"))
    comps = result["metrics"]["comparisons"]
    assert comps["b"]["learning"]["reward"]["final"]["verdict"] == "DIFFERENT" and comps["b"]["verdict"] == "DIFFERENT"
    # c is drawn from a's process (noise sd ~0.01 against a 0.05 margin): equivalent over its 80 steps
    assert comps["c"]["learning"]["reward"]["whole"]["steps"] == 80 and comps["c"]["verdict"] == "EQUIVALENT"
    assert result["metrics"]["verdict"] == "DIFFERENT" and curves.exit_code(cfg, result) == 1
    heads, gates = summarize(result)
    assert [g["passed"] for g in gates] == [False, True]
    names = [h["name"] for h in heads]
    # named by verl's tags, the project's family beside them
    assert "b vs a: learning" in names and "b: critic/score/mean (reward)" in names
    assert "b: timing_s/gen (gen_time) ratio B/A" in names


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "samspec_bench.cli", "curves", *args], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_bad_input_is_one_line_exit_2(tmp_path):
    rng = np.random.default_rng(3)
    good = write_csv(tmp_path / "good.csv", curve(20, rng))
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)))
    other = write_csv(tmp_path / "other.csv", {"my/metric": np.arange(20.0)})
    for args, needle in (((str(good),), "at least two"), ((str(good), str(junk)), "not a known training log format"),
                         ((str(good), str(other)), "none of the requested metrics"),
                         ((str(good), str(tmp_path / "missing.log")), "no such file")):
        proc = _cli(*args, "--output", str(tmp_path / "out"))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and needle in proc.stderr
    assert not (tmp_path / "out").exists()                                # nothing written on bad input
    proc = _cli(str(good), str(other), "--metric", "my/metric", "--families", "reward",
                "--output", str(tmp_path / "out2"))
    assert proc.returncode == 2 and "shares no requested metric" in proc.stderr   # good.csv lacks my/metric


def test_report_renders_curves_runs_with_figures(tmp_path):
    rng = np.random.default_rng(4)
    a = write_csv(tmp_path / "a.csv", curve(60, rng))
    b = write_csv(tmp_path / "b.csv", curve(60, rng, shift=0.1))     # reward planted 0.1 up; margin 0.05
    result, run_dir = curves.run(build_config(**params(runs=(str(a), str(b)))), str(tmp_path / "out"))
    report = collect([run_dir])
    run = report.groups[0].runs[0]
    assert report.groups[0].suite == "curves"
    assert {f.name for f in run.figures} == set(result["figures"]) and all(f.data for f in run.figures)
    values = {h["name"]: h["value"] for h in run.headlines}
    assert {k: values.get(k) for k in ("b vs a: learning", "b: critic/score/mean (reward)",
                                       "b: response_length/mean (length)", "b: actor/entropy (entropy)")} == {
        "b vs a: learning": "DIFFERENT", "b: critic/score/mean (reward)": "DIFFERENT",
        "b: response_length/mean (length)": "EQUIVALENT", "b: actor/entropy (entropy)": "EQUIVALENT"}
    ratios = [h for h in run.headlines if h["name"].endswith("ratio B/A")]
    assert ratios and all(h["ci"][0] < 1 < h["ci"][1] for h in ratios)   # same speed in both runs


def test_run_step_takes_curves_runs_from_the_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("a.csv", "b.csv"):   # the runs must exist (checked with the options)
        (tmp_path / name).write_text("step,reward\n1,0.5\n")
    step = next(s for s in run_plan.STEPS if s.name == "curves")
    ctx = run_plan.Ctx(out=tmp_path, model="m", engine=None, data_dir=None, sections={}, state={"steps": {}})
    assert step.plan(ctx).skip and "curves:" in step.plan(ctx).skip
    ctx.sections = {"curves": {"runs": ["a.csv", "b.csv"], "margin": ["reward=0.02"]}}
    assert step.plan(ctx).skip is None
    check_sections(ctx.sections)
    p = suite_params(curves.command, "curves", ctx.sections["curves"])
    cfg = build_config(**p)
    assert cfg.runs == ["a.csv", "b.csv"] and cfg.margins == {"reward": "0.02"}


# --- the shared real pairs ------------------------------------------------------------------------

def _real(shared_data, *names, **over):
    tb = shared_data / "training_logs" / "verl_pr2854_tensorboard"
    paths = [str(next(tb.glob(f"{n}.*"))) for n in names]
    cfg = build_config(**params(runs=tuple(paths), **over))
    return compare_runs(cfg, load_runs(cfg))


def test_real_fsdp_vs_megatron_learning_is_not_different(shared_data):
    out = _real(shared_data, "q3b_fsdp_base", "q3b_mcore_base")
    learning = out["comparisons"]["q3b_mcore_base"]["learning"]
    assert learning["reward"]["verdict"] == "EQUIVALENT"
    assert learning["val/openai/gsm8k"]["verdict"] == "EQUIVALENT"
    assert all(v["verdict"] != "DIFFERENT" for v in learning.values())


def test_real_pipelined_run_learns_alike_in_shorter_steps(shared_data):
    out = _real(shared_data, "q3b_fsdp_base", "q3b_fsdp_off_ppl")
    comp = out["comparisons"]["q3b_fsdp_off_ppl"]
    assert comp["verdict"] != "DIFFERENT"
    assert comp["learning"]["reward"]["verdict"] == "EQUIVALENT"
    assert comp["speed"]["step_time"]["change"] == "faster"
    assert comp["speed"]["gen_time"]["change"] == "no detectable change"


def _console_steps(path: Path, tag: str) -> set[int]:
    """The steps of verl console lines that log `tag`, by a plain regex."""
    return {int(m.group(1)) for line in path.read_text(errors="replace").splitlines()
            if (m := re.match(r"step:(\d+) - ", line)) and f" - {tag}:" in line}


def test_real_console_pair_with_different_kl_is_not_equivalent(shared_data):
    logs = sorted((shared_data / "training_logs" / "open_agentrl_console").glob("*.output.log"))
    cfg = build_config(**params(runs=tuple(str(p) for p in logs)))
    runs = load_runs(cfg)
    out = compare_runs(cfg, runs)
    comp = out["comparisons"][runs[1].label]
    assert comp["verdict"] == "DIFFERENT" and comp["learning"]["entropy"]["verdict"] == "DIFFERENT"
    whole = comp["learning"]["reward"]["whole"]
    common = set.intersection(*(_console_steps(p, "critic/score/mean") for p in logs))   # read apart from the loader
    assert (whole["steps"], whole["first_step"], whole["last_step"]) == (len(common), min(common), max(common))
    assert comp["learning"]["val/aime_2024"]["tag_a"] != comp["learning"]["val/aime_2024"]["tag_b"]


# --- perf/throughput is per GPU: compared as total throughput ------------------------------------
# Hand-worked: both runs process 1.6 M tokens a step. A runs on 8 GPUs at 100 s a step; B on 4
# GPUs at 80 s a step on average, alternating 40 s and 120 s. B's total throughput is
# (1.6 M / 80 s) / (1.6 M / 100 s) = 1.25x A's, as its step time (0.8x) says. verl logs per GPU:
# A 1.6e6 / (100 x 8) = 2000; B 1.6e6 / (40 x 4) = 10000 and 1.6e6 / (120 x 4) = 3333, mean 6667:
# the raw per-GPU ratio of means claims 3.33x, and even scaled by GPUs (x 4/8) a mean of per-step
# rates claims 1.67x. Only total tokens over total time gives 1.25x.
N_STEPS, TOKENS = 40, 1.6e6


def _perf(secs: np.ndarray, gpus: int, *, totals: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(gpus)
    out = {"critic/score/mean": 0.8 + rng.normal(0, 0.01, secs.size), "timing_s/step": secs,
           "perf/throughput": TOKENS / (secs * gpus)}
    if totals:
        out.update({"perf/total_num_tokens": np.full(secs.size, TOKENS), "perf/time_per_step": secs})
    return out


def _throughput_pair(tmp_path, *, totals: bool, **over):
    a_secs = np.full(N_STEPS, 100.0)
    b_secs = np.where(np.arange(N_STEPS) % 2 == 0, 40.0, 120.0)
    a = write_csv(tmp_path / "a.csv", _perf(a_secs, 8, totals=totals))
    b = write_csv(tmp_path / "b.csv", _perf(b_secs, 4, totals=totals))
    cfg = build_config(**params(runs=(str(a), str(b)), families="reward,speed", **over))
    return compare_runs(cfg, load_runs(cfg))


def test_throughput_on_different_gpu_counts_is_total_tokens_over_total_time(tmp_path):
    out = _throughput_pair(tmp_path, totals=True)
    thr = out["comparisons"]["b"]["speed"]["throughput"]
    assert (thr["gpus_a"], thr["gpus_b"]) == (8, 4) and thr["gpus_source_a"].startswith("derived")
    assert thr["ratio"] == pytest.approx(1.25) and thr["per_gpu_ratio"] == pytest.approx(2.5)
    assert thr["unit"] == "tokens/s (all GPUs)" and thr["change"] == "faster" and thr["ci"][0] > 1.0
    assert thr["mean_a"] == pytest.approx(TOKENS / 100) and thr["mean_b"] == pytest.approx(TOKENS / 80)
    step = out["comparisons"]["b"]["speed"]["step_time"]
    assert 1 / step["ratio"] == pytest.approx(thr["ratio"])          # the same speed-up, told two ways


def test_throughput_scaled_by_gpu_counts_given_or_said_not_normalised(tmp_path):
    given = _throughput_pair(tmp_path, totals=False, gpus=("a=8,b=4",))
    thr = given["comparisons"]["b"]["speed"]["throughput"]
    assert thr["basis"] == "per GPU x GPUs" and thr["gpus_source_b"] == "--gpus"
    assert thr["ratio"] == pytest.approx(1.6e6 / (4 * 60) / (1.6e6 / 800) * 4 / 8)    # 1.67: a mean of rates
    assert "mean of the per-step rates" in thr["how"]
    unknown = _throughput_pair(tmp_path, totals=False)
    comp = unknown["comparisons"]["b"]
    thr = comp["speed"]["throughput"]
    assert thr["change"] == "not normalised" and thr["unit"] == "tokens/s/GPU" and thr["normalised"] is False
    assert comp["not_normalised"] == 1 and "cannot normalise" in comp["speed_caveats"][0]
    assert "give --gpus a=N" in comp["speed_caveats"][0]
    row = next(r for r in unknown["tables"]["speed"] if r["metric"] == "perf/throughput")
    assert row["change"] == "not normalised" and row["unit"] == "tokens/s/GPU"


def test_gpus_option_names_a_run_or_is_one_line_exit_2(tmp_path):
    rng = np.random.default_rng(5)
    a, b = write_csv(tmp_path / "a.csv", curve(20, rng)), write_csv(tmp_path / "b.csv", curve(20, rng))
    for gpus, needle in (("c=8", "no run is named 'c'"), ("a=0", "give RUN=N"), ("a", "give RUN=N")):
        proc = _cli(str(a), str(b), "--gpus", gpus, "--output", str(tmp_path / "out"))
        assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and needle in proc.stderr, proc.stderr


def test_real_pipelined_run_throughput_is_not_the_mean_of_per_gpu_rates(shared_data):
    out = _real(shared_data, "q3b_fsdp_base", "q3b_fsdp_off_ppl", families="speed")
    speed = out["comparisons"]["q3b_fsdp_off_ppl"]["speed"]
    thr, step = speed["throughput"], speed["step_time"]
    tb = shared_data / "training_logs" / "verl_pr2854_tensorboard"
    a, b = (load_run(next(tb.glob(f"{n}.*"))).series["perf/throughput"] for n in ("q3b_fsdp_base", "q3b_fsdp_off_ppl"))
    assert b.values.mean() / a.values.mean() > 1.7                   # what a ratio of per-step means claims
    assert abs(thr["ratio"] * step["ratio"] - 1) < 0.03              # step time and token counts agree
    assert thr["gpus_a"] == thr["gpus_b"] and thr["per_gpu_ratio"] == pytest.approx(thr["ratio"])


# --- a parent folder of runs --------------------------------------------------------------------

def test_parent_folder_expands_into_runs_named_by_sub_folder(tmp_path):
    rng = np.random.default_rng(6)
    parent = tmp_path / "sweep"
    for name, speed in (("1_sam_off", 1.0), ("2_sam_on", 0.7)):
        (parent / name).mkdir(parents=True)
        write_console(parent / name / "train.log", curve(60, rng, speed=speed))
    cfg = build_config(**params(runs=(str(parent),)))
    assert [Path(r).name for r in cfg.runs] == ["1_sam_off", "2_sam_on"]
    result, _ = curves.run(cfg, str(tmp_path / "out"))
    assert result["metrics"]["baseline"] == "1_sam_off" and list(result["metrics"]["comparisons"]) == ["2_sam_on"]
    with pytest.raises(UserError, match="1 name"):
        build_config(**params(runs=(str(parent),), labels="x"))
    (tmp_path / "nothing" / "here").mkdir(parents=True)
    proc = _cli(str(tmp_path / "nothing"), "--output", str(tmp_path / "out2"))
    assert proc.returncode == 2 and "holds no training log" in proc.stderr and proc.stderr.strip().count("\n") == 0
