"""The `samspec-bench rollout` command group: the run (`execute` of a `build_config` config:
the arms simulated or measured, the run folder written, a line per arm printed) and
`rollout profile`. Options, help and defaults live here only."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from samspec_bench.bench.simulation.step_model import StepTimeModel
from samspec_bench.bench.simulation.step_models import load_step_model
from samspec_bench.errors import UserError, int_list
from samspec_bench.models import BUILTIN_MODEL
from samspec_bench.results import RunDir, emit_json
from samspec_bench.suites.rollout.config import SUITE, RolloutConfig, build_config, validate
from samspec_bench.suites.rollout.measured import run_measured
from samspec_bench.suites.rollout.outputs import make_figures, write_steps
from samspec_bench.suites.rollout.phases import best_setting
from samspec_bench.suites.rollout.presets import LENGTH_EVIDENCE, PRESETS, comparison, comparison_lines, get_preset
from samspec_bench.suites.rollout.profile import parse_prompt_pads, profile
from samspec_bench.suites.rollout.replay_arm import prepare, run_replay
from samspec_bench.suites.rollout.sensitivity import run_sensitivity, table_lines


DEFINITIONS = {"tail": "steps with no request waiting and running <= the arm's threshold",
               "speedup_*": "baseline (off) time / arm time, same phase definition",
               "sim_error": "simulated / measured - 1 (measured engines only): time total and tail, speedups, "
                            "accepted tokens",
               "dp": "--dp N: total = the slowest instance's time (the rollout ends with it), head / tail its phases; "
                     "speedup_tail pooled over instances; speedup_mean_instance = mean instance time off / on"}


def step_model_from(spec: str | None):
    """The --step-model value as a step-time model (None: constant 1 s per step)."""
    if not spec:
        return StepTimeModel.constant(1.0)
    return load_step_model(spec)


def run(cfg: RolloutConfig, output: str = "results") -> tuple[Path, dict[str, Any]]:
    """Every arm of `cfg`, the run folder under `output` (result.json, step tables, figures).
    Returns the folder and the result's metrics."""
    validate(cfg)
    extra: dict[str, Any] = {}
    if cfg.engine == "replay":
        model = step_model_from(cfg.step_model)
        rep = prepare(cfg)
        out = run_replay(cfg, model, rep)
        out["step_model"] = model.describe()
        out["step_model_fitted_on"] = cfg.step_model or "none: constant 1 s per step (times are step counts)"
        best = best_setting(out["metrics"])
        if cfg.sensitivity and best is not None:
            out["sensitivity"] = extra["sensitivity"] = run_sensitivity(cfg, rep, out["settings"], best, model)
        if cfg.preset:
            pre = get_preset(cfg.preset)
            arm = pre_arm(out["metrics"], best)
            extra["preset"] = {**pre.describe(), "published": pre.published,
                               "inputs": {"length_dist": cfg.length_dist, "length_evidence": LENGTH_EVIDENCE
                                          if cfg.length_dist == pre.config_values()["length_dist"] else
                                          "given with --length-dist", "traces": cfg.traces, "sources": cfg.sources,
                                          "dp_shard": cfg.dp_shard, "step_model": cfg.step_model,
                                          "kv_capacity_tokens": cfg.kv_capacity_tokens or "unlimited (assumption)"},
                               "comparison": comparison(pre, out["metrics"][arm], arm) if arm else None}
    else:   # MEASURED_ENGINES (validate refused any other)
        out = run_measured(cfg, cfg.step_model)
        best = best_setting(out["metrics"])
    runp = RunDir(output, SUITE)
    step_tables = write_steps(runp, out["tables"])
    figs = make_figures(runp, out, best)
    summary = {"best_setting": best, "arms": out["metrics"], "workload": out["workload"], "step_tables": step_tables,
               "step_model": out["step_model"], "step_model_fitted_on": out["step_model_fitted_on"],
               "definitions": DEFINITIONS, **extra}
    runp.write_result(asdict(cfg), summary, figures=figs)
    return runp.path, summary


def pre_arm(metrics: dict[str, dict], best: str | None) -> str | None:
    """The arm a preset's prediction is read from: its threshold arm (the seed's switch), else the best."""
    thr = [lbl for lbl in metrics if lbl.startswith("threshold")]
    return thr[0] if thr else best


def execute(config: RolloutConfig, *, output: str, resume: str | None = None, json_path: str | None = None) -> int:
    """The rollout command after its options: run, print a line per arm and the best setting,
    emit the result JSON to `json_path` ('-': stdout, the lines then go to stderr). Rollout
    runs are not resumable: a `resume` is refused."""
    if resume is not None:
        raise UserError(f"--resume {resume}: rollout runs cannot be resumed; run it again")
    path, summary = run(config, output)
    say = (lambda text: click.echo(text, err=True)) if json_path == "-" else click.echo  # stdout: the JSON only
    for lbl, m in summary["arms"].items():
        say(f"{lbl:24s} total {m['total_s']:.3f}s head {m['head_s']:.3f}s tail {m['tail_s']:.3f}s"
            + (f"  speedup overall {m['speedup_overall']:.3f} tail {m['speedup_tail'] or float('nan'):.3f}"
               if lbl != "off" else ""))
    say(f"best setting: {summary['best_setting']}")
    for line in dp_lines(summary) + preset_lines(summary):
        say(line)
    say(f"results: {path}")
    emit_json(json.loads((path / "result.json").read_text()), json_path)
    return 0


def dp_lines(summary: dict[str, Any]) -> list[str]:
    """Per-instance lines of a sharded run (--dp N)."""
    dp = summary["workload"].get("dp")
    if not dp:
        return []
    out = [f"data-parallel: {dp['instances']} instances, rule {dp['rule']} ({dp['rule_text']})"]
    for lbl, m in summary["arms"].items():
        d = m["dp"]
        out.append(f"  {lbl}: rollout {m['total_s']:.3f}s (slowest instance {d['slowest_instance']}), mean instance "
                   f"{d['mean_instance_makespan_s']:.3f}s, idle share {100 * (d['idle_share'] or 0):.1f} %, tail share "
                   f"{100 * (d['tail_share_pooled'] or 0):.1f} % pooled"
                   + (f"; speedup overall {m['speedup_overall']:.3f} mean-instance {m['speedup_mean_instance']:.3f} "
                      f"tail {m['speedup_tail'] or float('nan'):.3f}" if lbl != "off" else ""))
        for r in m["instances"]:
            out.append(f"    instance {r['instance']}: {r['requests']} requests, total {r['total_s']:.3f}s, tail "
                       f"{r['tail_s']:.3f}s ({100 * (r['tail_share'] or 0):.1f} %)"
                       + (f", speedup {r['speedup_overall']:.3f} (gain {100 * (r['speedup_overall'] - 1):+.2f} %) "
                          f"tail {r['speedup_tail'] or float('nan'):.3f}" if r.get("speedup_overall") else ""))
    return out


def preset_lines(summary: dict[str, Any]) -> list[str]:
    """The preset's inputs, its prediction beside the published figures, and the sensitivity table."""
    out = []
    pre = summary.get("preset")
    if pre:
        inp = pre["inputs"]
        out += [f"preset {pre['name']}: {pre['model']} on {pre['hardware']} ({pre['mode']}), TP {pre['tp']} x DP "
                f"{pre['dp']} = {pre['dies']} dies; {pre['prompts']} prompts x {pre['group_size']}, max_num_seqs "
                f"{pre['max_num_seqs']}, threshold {pre['threshold']}, k {pre['k']}, max response "
                f"{pre['max_response_len']}",
                f"  inputs: lengths {inp['length_dist']} ({inp['length_evidence']})",
                f"          acceptance from {inp['traces']} (sources {inp['sources']}); sharding {inp['dp_shard']}; "
                f"KV cache {inp['kv_capacity_tokens']}",
                f"          step model {inp['step_model']} (MODELLED times)"]
        if pre["comparison"]:
            out += comparison_lines(pre["comparison"])
    if summary.get("sensitivity"):
        out += table_lines(summary["sensitivity"])
    return out


@click.group(SUITE, invoke_without_command=True)
@click.option("--engine", type=click.Choice(["replay", "reference", "vllm"]), default="replay", show_default=True,
              help="replay: simulate from traces; reference: measure on the PyTorch engine; vllm: measure inside "
                   "vLLM (SAM as its proposer, the threshold switch in the proposer).")
@click.option("--model", default=None, help=f"Model for the reference engine (default {BUILTIN_MODEL}; a preset "
              "names its own).")
@click.option("--traces", default=None, help="Trace JSONL for replay (default: shared qwen25math_math_100x8.jsonl).")
@click.option("--tokenizer", default=None, help="Tokenizer directory for the traces (default: shared qwen3).")
@click.option("--data-dir", default=None, help="Shared data directory.")
@click.option("--prompts", type=int, default=None, help="Prompts per step (reference: 8; replay: the traces' groups).")
@click.option("--group-size", type=int, default=None, help="Responses per prompt (GRPO n; reference: 4).")
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--top-p", type=float, default=1.0, show_default=True)
@click.option("--max-response-len", type=int, default=None, help="Maximum response tokens (default 34816).")
@click.option("--max-num-seqs", type=int, default=None, help="Running requests per engine instance (default 64).")
@click.option("--max-num-batched-tokens", type=int, default=None, help="Token budget per step (default 2048).")
@click.option("--ignore-eos/--no-ignore-eos", default=True, show_default=True)
@click.option("--length-dist", default=None,
              help="Target lengths: lognormal:MEDIAN:SIGMA, pareto:MIN:ALPHA, fixed:N, trace (reference default "
                   "lognormal:32:0.8; replay default: the traces' own lengths, else profiles are stretched).")
@click.option("--sources", type=click.Choice(["own", "group"]), default=None,
              help="Replay draft sources: the response's own context (default), or its GRPO group's siblings too.")
@click.option("--kv-capacity-tokens", type=int, default=None,
              help="KV cache size in tokens (simulation and reference engine; default: unlimited / engine's).")
@click.option("--block-size", type=int, default=16, show_default=True, help="KV block size in tokens.")
@click.option("--repeats", type=int, default=1, show_default=True,
              help="Measured engines: runs per arm, interleaved; step times are the per-step medians.")
@click.option("--spec-threshold", default=None, help="Comma-separated thresholds to sweep (default 4).")
@click.option("-k", "--num-spec-tokens", "ks", default=None, help="Comma-separated k to sweep (default 3).")
@click.option("--arms", default=None, help="Comma-separated arms (default off,always,threshold).")
@click.option("--tail-threshold", type=int, default=None, help="Tail definition for the always-on arm (default: first threshold).")
@click.option("--step-model", default=None, help="Step-time model JSON from `rollout profile`, or "
              "roofline:hardware=H100,model=Qwen/Qwen3-32B,tp=8[,dtype=bfloat16][,mode=eager|graph] (modelled).")
@click.option("--dp", type=int, default=None,
              help="Replay: data-parallel engine instances the requests are sharded over (default 1); each has its "
                   "own --max-num-seqs and KV cache, the rollout ends at the slowest.")
@click.option("--dp-shard", type=click.Choice(["group", "rebalance"]), default=None,
              help="How requests are sharded: group (verl: a prompt's responses on one instance; default) or "
                   "rebalance (the seed's data_rebalance patch: copy-major rows).")
@click.option("--preset", type=click.Choice(sorted(PRESETS)), default=None,
              help="The seed's configuration (model, batch, max_num_seqs, TP/DP, threshold, k, step model); options "
                   "given explicitly override it. Prints the prediction beside the published figures.")
@click.option("--sensitivity/--no-sensitivity", default=None,
              help="Replay: predicted gain vs median length and truncated share (default: on with --preset).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads (1 avoids stalls on busy machines).")
@click.option("--output", default="results", show_default=True)
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.pass_context
def command(ctx, output, json_path, **params):
    """Rollout time with SAM off / always / on below a batch-size threshold (head vs long tail)."""
    if ctx.invoked_subcommand is not None:
        return
    code = execute(build_config(**params), output=output, json_path=json_path)
    if code:
        ctx.exit(code)


@command.command("profile")
@click.option("--model", default=BUILTIN_MODEL, show_default=True)
@click.option("--batch-sizes", default="1,2,4,8,16", show_default=True)
@click.option("--tokens", type=int, default=24, show_default=True, help="Tokens generated per request.")
@click.option("-k", "k", type=int, default=3, show_default=True)
@click.option("--prompt-pad", default="0,256", show_default=True,
              help="Comma-separated extra prompt tokens per run (varies the context apart from the batch size).")
@click.option("--threads", type=int, default=1, show_default=True)
@click.option("--dtype", default="float32", show_default=True)
@click.option("--output", default="step_model.json", show_default=True, help="Where to write the model JSON.")
def profile_command(model, batch_sizes, tokens, k, prompt_pad, threads, dtype, output):
    """Measure the reference engine's step time vs batch size / tokens and fit a step-time model."""
    pads = parse_prompt_pads(prompt_pad)
    m, _ = profile(model, int_list(batch_sizes, "--batch-sizes"), tokens, k, threads, dtype, prompt_pads=pads)
    m.save(output)
    click.echo(json.dumps(m.describe(), indent=1))
    click.echo(f"step model: {output}")
