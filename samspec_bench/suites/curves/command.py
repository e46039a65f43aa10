"""The run and the command: read the runs, compare, write the run folder (result.json and the
figures), print the verdicts; `execute` is everything the click command does after parsing."""

from __future__ import annotations

import json
from pathlib import Path

import click

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs import FORMATS, replaced_text
from samspec_bench.results import RunDir, emit_json
from samspec_bench.suites.curves.verdicts import compare_runs, load_runs
from samspec_bench.suites.curves.config import (FAIL_ON, FIGURE_LEARNING, FIGURE_SPEED, FIGURE_VERDICTS, SUITE,
                                                CurvesConfig, build_config)
from samspec_bench.suites.curves.figures import draw_learning, draw_speed, draw_verdicts
from samspec_bench.suites.curves.metric_families import FAMILIES
from samspec_bench.suites.curves.rollout_tail import share_text


def run(cfg: CurvesConfig, output: str) -> tuple[dict, Path]:
    """Compare the runs and write the run directory; returns (result, run directory)."""
    runs = load_runs(cfg)   # every UserError (format, missing file) before a folder is made
    outcome = compare_runs(cfg, runs)
    run_dir = RunDir(output, SUITE)
    partial = {**outcome, "alpha": cfg.alpha}
    figures = []
    for name, draw in ((FIGURE_VERDICTS, lambda p: draw_verdicts(partial, p)),
                       (FIGURE_LEARNING, lambda p: draw_learning(partial, runs, p, cfg.smooth)),
                       (FIGURE_SPEED, lambda p: draw_speed(partial, runs, p, cfg.smooth))):
        if draw(run_dir.file(name)):
            figures.append(name)
    metrics = {"verdict": outcome["verdict"], "baseline": outcome["baseline"], "comparisons": outcome["comparisons"],
               "metrics": outcome["metrics"]}
    extra = {"runs": outcome["runs"], "alpha": cfg.alpha, "ignored_files": list(cfg.ignored),
             "interval_method": "HAC (Bartlett kernel, bandwidth n/2) with fixed-b critical values simulated for n"}
    run_dir.write_result(cfg.record(), metrics, outcome["tables"], figures, extra)
    result = json.loads(run_dir.file("result.json").read_text(encoding="utf-8"))
    result["run_dir"] = str(run_dir.path)
    return result, run_dir.path


def _f(v, spec="{:.3g}") -> str:
    return "" if v is None else spec.format(v)


def metric_text(row: dict) -> str:
    """verl's tag as the logs name it, the metric name after it where it differs."""
    name = row.get("name")
    return row["metric"] + (f" ({name})" if name and name != row["metric"] else "")


def steps_text(r: dict) -> str:
    """'40 (1-40)', or '0' where the runs share no step of the metric."""
    return f"{r['steps']} ({r['first_step']}-{r['last_step']})" if r.get("first_step") is not None else str(r["steps"] or 0)


def _run_line(r: dict) -> str:
    span = f"steps {r['first_step']}-{r['last_step']}" if r.get("first_step") is not None else "no steps"
    skipped = ", ".join(f"{k} {v}" for k, v in (r.get("skipped") or {}).items())
    setup = r.get("setup") or {}
    gpus = f", {setup['gpus']} GPUs ({setup['gpus_source']})" if setup.get("gpus") else ", GPUs unknown"
    replaced = replaced_text(r.get("replaced") or {})
    return (f"[bold]{r['label']}[/] ({r['format']}, {r['tags']} tags, {span}{gpus}{share_text(r.get('slowest_sample_share'))}): "
            f"{r['path']}" + (f"  skipped: {skipped}" if skipped else "")
            + (f"  replaced: {replaced}" if replaced else ""))


def print_report(result: dict, console) -> None:
    from rich.table import Table

    m = result["metrics"]
    for r in result.get("runs") or []:
        console.print(_run_line(r), highlight=False)
    for entry in result.get("ignored_files") or []:     # files a folder of runs held that were not read
        console.print(f"ignored {entry}", highlight=False, markup=False)
    t = Table(title=f"curves: learning metrics against {m['baseline']} (mean difference B - A, "
                    f"{int(round((1 - 2 * result.get('alpha', 0.05)) * 100))}% interval, TOST)")
    for col in ("run", "metric (verl tag)", "steps", "mean A", "mean B", "diff [interval]", "margin", "final window",
                "n_eff", "verdict"):
        t.add_column(col, justify="left" if col in ("run", "metric", "verdict") else "right")
    style = {"EQUIVALENT": "green", "DIFFERENT": "red", "INCONCLUSIVE": "yellow"}
    for r in result["tables"]["verdicts"]:
        unit = f" {r['unit']}" if r["unit"] else ""
        fin = f"{_f(r['final_diff'])} [{_f(r['final_ci_lo'])}, {_f(r['final_ci_hi'])}]" \
            if r.get("final_diff") is not None else "-"
        t.add_row(r["run"], metric_text(r), steps_text(r), _f(r["mean_a"]) + unit,
                  _f(r["mean_b"]) + unit, f"{_f(r['diff'])} [{_f(r['ci_lo'])}, {_f(r['ci_hi'])}]{unit}",
                  f"±{_f(r['margin'])}", fin, _f(r["n_eff"], "{:.1f}"),
                  f"[{style.get(r['verdict'], 'white')}]{r['verdict']}[/]")
    console.print(t)
    if result["tables"]["speed"]:
        s = Table(title=f"curves: speed against {m['baseline']} (ratio B/A of per-step means; throughput: of totals, "
                        f"{int(round((1 - result.get('alpha', 0.05)) * 100))}% interval)")
        for col in ("run", "metric (verl tag)", "steps", "mean A", "mean B", "ratio B/A [interval]", "change", "source"):
            s.add_column(col)
        for r in result["tables"]["speed"]:
            unit = f" {r['unit']}" if r["unit"] else ""
            s.add_row(r["run"], metric_text(r), str(r["steps"]), _f(r["mean_a"]) + unit, _f(r["mean_b"]) + unit,
                      f"{_f(r['ratio_b_over_a'])} [{_f(r['ci_lo'])}, {_f(r['ci_hi'])}]", r["change"] or "",
                      r["source"] or "")
        console.print(s)
    order = [r["label"] for r in result.get("runs") or []]
    for lab, c in sorted(m["comparisons"].items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 0):
        reasons = "; ".join(f"{x['metric']}: {x['reason']}" for x in c["learning"].values() if x["verdict"] != "EQUIVALENT")
        console.print(f"{lab} vs {c['baseline']}: learning [bold]{c['verdict']}[/]"
                      + (f" ({reasons})" if reasons else "")
                      + (f"; not compared: {', '.join(c['absent'])}" if c["absent"] else ""), highlight=False)
        for x in c["speed"].values():
            if x.get("diverged"):
                console.print(f"{lab}: speed metric {x['metric']}: {x['reason']}", highlight=False)
            elif x.get("per_gpu_ratio") is not None and x.get("normalised"):
                console.print(f"{lab}: {x['metric']} as total tokens/s ({x['how']}): {_f(x.get('ratio'))}x; per GPU "
                              f"{_f(x['per_gpu_ratio'])}x ({x['gpus_a']} GPUs in {c['baseline']}, {x['gpus_b']} in "
                              f"{lab})", highlight=False)
        for caveat in c.get("speed_caveats") or []:
            console.print(f"{lab}: [yellow]{caveat}[/]", highlight=False)
        if c.get("diverged_elsewhere"):
            console.print(f"{lab}: non-finite values outside the compared metrics (compare them with --metric): "
                          + "; ".join(c["diverged_elsewhere"][:5])
                          + (f"; and {len(c['diverged_elsewhere']) - 5} more" if len(c["diverged_elsewhere"]) > 5 else ""),
                          highlight=False)
        for key in ("speed_note", "note"):
            if c.get(key):
                console.print(f"{lab}: {c[key]}", highlight=False)
    for r in result.get("runs") or []:
        for note in r.get("notes") or []:
            console.print(f"{r['label']}: {note}", highlight=False)
    console.print(f"run directory: {result.get('run_dir')}", highlight=False)


def exit_code(cfg: CurvesConfig, result: dict) -> int:
    verdict = result["metrics"]["verdict"]
    if cfg.fail_on == "different" and verdict == "DIFFERENT":
        return 1
    if cfg.fail_on == "not-equivalent" and verdict != "EQUIVALENT":
        return 1
    return 0


def execute(config: CurvesConfig, *, output: str, resume: str | None = None, json_path: str | None = None) -> int:
    """Run, print, emit the JSON; 1 when --fail-on's condition holds (one line on stderr), else 0."""
    from rich.console import Console

    if resume is not None:
        raise UserError(f"curves has no --resume (got {resume}): it reads finished logs; start a new run")
    # emoji off: a label like 'A:a' followed by ':' is no emoji code
    console = Console(stderr=json_path == "-", emoji=False)
    if not console.is_terminal:
        console = Console(stderr=json_path == "-", width=200, emoji=False)
    result, _ = run(config, output)
    print_report(result, console)
    emit_json(result, json_path)
    code = exit_code(config, result)
    if code:
        click.echo(f"curves: learning verdict {result['metrics']['verdict']} (--fail-on {config.fail_on})", err=True)
    return code


@click.command("curves")
@click.argument("runs", nargs=-1, type=click.Path())
@click.option("--run", "--runs", "extra_runs", multiple=True, type=click.Path(),
              help="A run, as the positional arguments give them (repeatable; `samspec-bench run` passes its "
                   "config's `curves: {runs: [...]}` this way).")
@click.option("--labels", default=None, help="Names for the runs, comma list in order (default: from the paths).")
@click.option("--format", "format", type=click.Choice(["auto", *FORMATS]), default="auto", show_default=True,
              help="Log format of every run; auto detects each.")
@click.option("--families", default=",".join(FAMILIES), show_default=True,
              help="Metric families to compare (comma list).")
@click.option("--metric", "metrics", multiple=True,
              help="Also compare this tag as a learning metric (repeatable; globs like 'actor/*' allowed).")
@click.option("--speed-metric", "speed_metrics", multiple=True,
              help="Also report this tag as a speed ratio B/A (repeatable; globs allowed).")
@click.option("--margin", "margins", multiple=True,
              help="Equivalence margin NAME=VALUE (repeatable): NAME a learning family, metric or tag (speed ratios "
                   "take none); VALUE in the metric's "
                   "unit (reward=0.02) or a percentage of the baseline's mean (entropy=5%). Defaults: reward ±0.05, "
                   "length ±10%, clip_ratio ±0.02, entropy ±10%, validation ±0.03, kl ±20%, --metric tags ±10%.")
@click.option("--alpha", default=0.05, show_default=True, type=float,
              help="TOST level: equivalence when the 1-2*alpha interval lies inside the margin.")
@click.option("--min-steps", default=10, show_default=True, type=int,
              help="Fewer common steps than this: INCONCLUSIVE.")
@click.option("--final-window", "final_fraction", default=0.25, show_default=True, type=float,
              help="Also judge the last fraction of the common steps (a late divergence); 0 turns it off.")
@click.option("--steps", "step_range", default=None, help="Only steps START:END (either side may be left open).")
@click.option("--gpus", "gpus", multiple=True,
              help="GPU count of a run, RUN=N (its label; repeatable or comma list): perf/throughput is per GPU, "
                   "runs on different counts are compared on total throughput. Default: from the log (its perf "
                   "metrics, .hydra/config.yaml beside it, wandb's config, verl's printed config).")
@click.option("--smooth", default=0.6, show_default=True, type=float,
              help="EMA weight of the smoothed lines in the figures (TensorBoard's smoothing).")
@click.option("--fail-on", type=click.Choice(list(FAIL_ON)), default="never", show_default=True,
              help="Exit 1 when the learning verdict is DIFFERENT, or anything but EQUIVALENT.")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
def command(output, json_path, **params):
    """Did a change (SAM on vs off) alter learning? Training curves of RUN_A (the baseline) and
    RUN_B [RUN ...]: TensorBoard event files or folders, verl console logs, verl file-logger JSONL,
    wandb run folders, CSV exports, or a folder holding several runs. Per learning metric (verl's
    tags: critic/score/mean, response_length/mean, actor/entropy, val-core/..., KL): the mean
    per-step difference with an autocorrelation-aware interval and a TOST verdict, EQUIVALENT /
    DIFFERENT / INCONCLUSIVE; per speed metric (timing_s/gen, timing_s/step, perf/throughput) the
    ratio B/A."""
    code = execute(build_config(**params), output=output, json_path=json_path)
    if code:
        raise SystemExit(code)
