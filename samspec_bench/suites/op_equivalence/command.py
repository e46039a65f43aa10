"""The run and the command: both levels in order, the run folder, the printed table, the gate's
exit code; `execute` is everything the click command does after parsing its options."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from samspec_bench.bench.engines.engine_device import DEVICE_HELP
from samspec_bench.bench.engines.factory import ENGINE_NAMES
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import BUILTIN_MODEL
from samspec_bench.results import RunDir, created_mark, discard_unfinished, emit_json
from samspec_bench.suites.op_equivalence.config import (CASES_FILE, FIGURE, GATE_METRICS, GREEDY_FILE, SUITE,
                                                        OpEqConfig, build_config, check_pairs, device_of_run)
from samspec_bench.suites.op_equivalence.figures import draw_histograms
from samspec_bench.suites.op_equivalence.kernel_level import run_kernel_level
from samspec_bench.suites.op_equivalence.model_level import _prompt_texts, run_model_level
from samspec_bench.suites.op_equivalence.diff_stats import apply_gate


def run(cfg: OpEqConfig, output: str, progress: bool | None = None, console=None) -> tuple[dict, Path]:
    """Run the levels, write the run directory (result.json, the figure, per-case JSONL written
    as cases finish) and return (result, run directory). progress: None follows cfg.progress.
    torch's thread count is restored."""
    import torch  # the levels compute in torch

    before = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _run(cfg, output, cfg.progress if progress is None else progress, console)
    finally:
        torch.set_num_threads(before)


def _run(cfg: OpEqConfig, output: str, progress: bool, console) -> tuple[dict, Path]:
    pair_names = check_pairs(cfg.pairs)
    if "model" in cfg.levels and not cfg.model:
        cfg.levels = [lv for lv in cfg.levels if lv != "model"]
    if "model" in cfg.levels:
        _prompt_texts(cfg)   # a bad prompts file fails now, not after the kernel level and the model load
    mark = created_mark()
    run_dir = RunDir(output, SUITE)
    try:
        return _run_in(cfg, run_dir, pair_names, progress, console)
    except BaseException:
        # op-equivalence cannot resume: a run that did not finish (bad model found at the model
        # level, Ctrl-C, a crash) leaves no half-made folder, nor one named for a --resume it lacks
        for name in (CASES_FILE, GREEDY_FILE):
            run_dir.file(name).unlink(missing_ok=True)
        discard_unfinished(mark)
        raise


def _run_in(cfg: OpEqConfig, run_dir: RunDir, pair_names: list[str], progress: bool,
            console) -> tuple[dict, Path]:
    import torch  # the thread count is recorded
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    rows: dict[str, dict] = {}
    tables: dict[str, list] = {}
    extra: dict[str, Any] = {"torch_threads": torch.get_num_threads()}
    t0 = time.perf_counter()
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=not progress, transient=True) as bar:
        if "kernel" in cfg.levels:
            t = time.perf_counter()
            krows, ktable, skipped = run_kernel_level(cfg, bar, pair_names, run_dir)
            rows.update(krows)
            tables["kernel_cases"] = ktable
            extra["skipped_pairs"] = skipped
            extra["kernel_level_s"] = time.perf_counter() - t
        if "model" in cfg.levels:
            tables["greedy"] = []
            extra["model_level"] = {}
            for dt in cfg.dtypes:
                t = time.perf_counter()
                mrows, gtable, info = run_model_level(cfg, dt, bar)
                for r in gtable:
                    run_dir.append_sample(r, GREEDY_FILE)
                rows.update(mrows)
                tables["greedy"].extend(gtable)
                info["seconds"] = time.perf_counter() - t
                extra["model_level"][dt] = info
    extra["wall_time_s"] = time.perf_counter() - t0
    figures = []
    if draw_histograms(rows, run_dir.file(FIGURE)):
        figures.append(FIGURE)
    gate = apply_gate(cfg, rows)
    metrics = {"pairs": rows, "gate": gate}
    run_dir.write_result(cfg.record(), metrics, tables, figures, extra, device=device_of_run(cfg))
    result = json.loads(run_dir.file("result.json").read_text())
    result["run_dir"] = str(run_dir.path)
    return result, run_dir.path


def print_report(result: dict, console) -> None:
    from rich.table import Table

    rows = result["metrics"]["pairs"]

    def f(v, spec="{:.3g}"):
        if v is None:
            return ""
        return spec.format(v) if isinstance(v, (int, float)) else str(v)

    dev = (result.get("environment") or {}).get("device") or {}
    on = f" on {dev.get('device')}" + (f" ({dev['name']})" if dev.get("name") else "") if dev.get("device") else ""
    t = Table(title=f"op-equivalence{on}: decode path (a) vs verify path (b), measured")
    for col in ("level/pair/dtype", "positions", "logprob diff max", "mean", "p99", "exact 0",
                "argmax flips", "KL mean", "KL max", "probs diff max", "pearson", "output diff max"):
        t.add_column(col, justify="right" if col != "level/pair/dtype" else "left")
    for key, r in rows.items():
        t.add_row(key, f(r.get("positions"), "{}"), f(r.get("logprob_diff_max")), f(r.get("logprob_diff_mean")),
                  f(r.get("logprob_diff_p99")), f(r.get("exact_zero_fraction"), "{:.1%}"),
                  f(r.get("argmax_flip_rate"), "{:.2%}"), f(r.get("kl_mean")), f(r.get("kl_max")),
                  f(r.get("rollout_probs_diff_max")), f(r.get("rollout_actor_probs_pearson_corr"), "{:.9f}"),
                  f(r.get("output_diff_max")))
    console.print(t)
    for key, r in rows.items():
        if r.get("logprob_diff_non_finite"):   # nothing silent: NaN / inf make the row's figures non-finite
            console.print(f"{key}: {r['logprob_diff_non_finite']} of {r['positions']} position(s) have a non-finite "
                          "logprob difference (a path scored NaN or -inf): logprob diff max / mean / p99 are not "
                          "finite (null in result.json)", soft_wrap=True)
    for key, r in rows.items():
        g = r.get("greedy")
        if g:
            div = ", ".join(f"pos {p} (margin {m:.3g})" if m is not None else f"pos {p}"
                            for p, m in zip(g["first_divergence"], g["margin_at_divergence"]))
            console.print(f"{key}: greedy with/without {g['drafter']} (k={g['k']}): {g['identical']}/{g['prompts']} "
                          f"identical" + (f"; first divergence at {div}" if div else "")
                          + f"; tokens/step with {g['drafter']}: {f(g['spec_metrics']['tokens_per_step'])}")
    for dt, info in (result.get("model_level") or {}).items():
        note = (info.get("prompts") or {}).get("note")
        if note:   # the prompts are not the ones asked for (--data-dir without benchmarks/): said here too
            console.print(f"model level ({dt}) prompts: {note}", soft_wrap=True)
    for name, why in (result.get("skipped_pairs") or {}).items():
        console.print(f"skipped pair {name}: {why}")
    gate = result["metrics"].get("gate")
    if gate:
        unmeasured = gate.get("not_measured") or []
        console.print(f"gate: {gate['metric']} <= {gate['tolerance']}: {'PASSED' if gate['passed'] else 'FAILED'} "
                      f"({gate.get('measured', len(rows))} row(s) measured"
                      + (f"; not measured on {', '.join(unmeasured)}" if unmeasured else "") + ")")
    console.print(f"run directory: {result.get('run_dir')}")


def execute(config: OpEqConfig, *, output: str, resume: str | None = None, json_path: str | None = None) -> int:
    """Run, print the report, emit the JSON; 1 when the --tolerance gate failed (with one line
    on stderr), else 0. op-equivalence cannot resume a run."""
    from rich.console import Console

    if resume is not None:
        raise UserError(f"op-equivalence has no --resume (got {resume}): start a new run")
    console = Console(stderr=json_path == "-")
    if not console.is_terminal:
        console = Console(stderr=json_path == "-", width=200)
    result, _ = run(config, output, console=console)
    print_report(result, console)
    emit_json(result, json_path)
    gate = result["metrics"].get("gate")
    if gate and not gate["passed"] and not gate["failed"]:
        click.echo(f"op-equivalence: the --tolerance gate measured {gate['metric']} on no row (every kernel pair "
                   "skipped, see above); run a pair that works here (--pairs) or drop --tolerance", err=True)
        return 1
    if gate and not gate["passed"]:
        worst = max(gate["failed"], key=lambda r: r["value"])
        click.echo(f"op-equivalence: {len(gate['failed'])} row(s) exceed {gate['metric']} <= {gate['tolerance']} "
                   f"(worst: {worst['row']} = {worst['value']:.3g})", err=True)
        return 1
    return 0


@click.command("op-equivalence")
@click.option("--engine", type=click.Choice(list(ENGINE_NAMES)), default="reference", show_default=True,
              help="Model level engine: reference (PyTorch) or vllm (decode vs verify inside vLLM).")
@click.option("--model", default=None, help=f"Also run the model level on this model ({BUILTIN_MODEL}, "
              "builtin:tiny-qwen3 or a checkpoint directory). Without it only the kernel level runs.")
@click.option("--level", "levels", default="kernel,model", show_default=True, help="Levels to run (comma list).")
@click.option("--pairs", default=None, help="Kernel pairs (comma list). Default: every registered pair that runs here.")
@click.option("--dtype", "dtypes", default="float32", show_default=True,
              help="Comma list of float32, bfloat16, float16 (both levels).")
@click.option("-k", "--num-spec-tokens", "k", default=3, show_default=True, type=int,
              help="Draft tokens: the verify path scores k+1 query tokens per request.")
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP + " The kernel level runs on it too "
              "(a kernel pair made for another kind of device is skipped, saying so).")
@click.option("--seed", default=0, show_default=True, type=int, help="Kernel level: seed of the random inputs.")
@click.option("--num-seqs", default=8, show_default=True, type=int, help="Kernel level: requests per case.")
@click.option("--seq-len", default="16:1024", show_default=True, help="Kernel level: context lengths MIN:MAX.")
@click.option("--block-size", default="16", show_default=True, help="Kernel level: KV block sizes (comma list).")
@click.option("--num-heads", default=8, show_default=True, type=int, help="Kernel level: query heads.")
@click.option("--gqa", default="1,4", show_default=True, help="Kernel level: query heads per KV head (comma list).")
@click.option("--head-dim", default="64", show_default=True, help="Kernel level: head sizes (comma list).")
@click.option("--trials", default=2, show_default=True, type=int, help="Kernel level: random cases per shape.")
@click.option("--benchmark", default="gsm8k", show_default=True,
              help="Model level: prompts from this benchmark of the shared data (gsm8k, math500, aime24, aime25).")
@click.option("--prompts", "prompts_file", default=None, type=click.Path(),
              help="Model level: prompts file instead (JSONL with prompt/question/problem, or one per line).")
@click.option("--data-dir", default=None, type=click.Path(),
              help="Model level: shared data directory (its benchmarks/).")
@click.option("--num-prompts", default=8, show_default=True, type=int, help="Model level: prompts.")
@click.option("--max-tokens", default=128, show_default=True, type=int, help="Model level: greedy tokens per prompt.")
@click.option("--chat-template", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Model level: prompt through the model's chat template.")
@click.option("--drafter", default="sam", show_default=True,
              help="Model level: drafter of the greedy with/without comparison.")
@click.option("--control/--no-control", default=True, show_default=True,
              help="Model level: also score in batch-invariant mode (shows where differences come from).")
@click.option("--tolerance", default=None, type=float,
              help="Fail (exit 1) when a row's --tolerance-metric exceeds this.")
@click.option("--tolerance-metric", default="logprob_diff_max", show_default=True, type=click.Choice(GATE_METRICS))
@click.option("--threads", default=1, show_default=True, type=int,
              help="torch threads; 0 = torch's default (all cores). 1 is the default because multi-threaded small "
                   "GEMMs stall on a machine shared with other jobs (OpenMP spin-waits): 11 min vs 3 min measured "
                   "for the SmolLM2 run on a busy 2-core machine.")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.option("--progress/--no-progress", default=True, show_default=True)
def command(output, json_path, **params):
    """Are the decode and verify paths numerically equivalent? Kernel pairs on random paged
    inputs, and (with --model) a model scored token by token vs in chunks of k+1. An option of a
    level that does not run (--level, no --model) is refused."""
    code = execute(build_config(**params), output=output, json_path=json_path)
    if code:
        # SystemExit, not click's Exit: with standalone_mode=False click returns Exit's code
        # from main() instead of exiting, and the CLI entry point would exit 0.
        raise SystemExit(code)
