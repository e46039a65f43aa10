"""The `samspec-bench rollout` command group: the run (`execute` of a `build_config` config:
the arms simulated or measured, the run folder written, a line per arm printed) and
`rollout profile`. Options, help and defaults live here only."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from samspec_bench.bench.engines.vllm.adapter import parse_engine_args
from samspec_bench.bench.simulation.step_model import StepTimeModel
from samspec_bench.errors import UserError, int_list
from samspec_bench.models import BUILTIN_MODEL
from samspec_bench.results import RunDir, emit_json
from samspec_bench.suites.rollout.config import (MEASURED_GROUP_SIZE, MEASURED_PROMPTS, SUITE, RolloutConfig,
                                                 build_config, kv_options, validate)
from samspec_bench.suites.rollout.measured import run_measured
from samspec_bench.suites.rollout.outputs import (STEP_RATIO, make_figures, priced_by, summary_lines, time_basis,
                                                  to_step_units, write_steps)
from samspec_bench.suites.rollout.phases import best_setting
from samspec_bench.suites.rollout.profile import (AUTO_PROFILE, auto_batch_sizes, check_covers, parse_prompt_pads, profile, profile_document,
                                                  profile_engine, profile_lines, read_profile, write_profile)
from samspec_bench.suites.rollout.replay_arm import run_replay

DEFINITIONS = {"tail": "steps with no request waiting and running <= the arm's threshold",
               "speedup_*": "baseline (off) time / arm time, same phase definition (seconds: measured or "
                            "modelled, see time_basis)",
               "step_ratio_*": "baseline (off) decode steps / arm decode steps: a " + STEP_RATIO + " (no step model)",
               "sim_error": "simulated / measured - 1 (measured engines only): time total and tail, speedups, "
                            "accepted tokens; the simulation priced by the engine's own profile",
               "sim_error_arms_fit": "the same, the simulation priced by a model fitted on the run's OTHER arms",
               "extrapolation": "features of the priced steps beyond the range the step model was measured on"}

def load_priced(cfg: RolloutConfig) -> tuple[StepTimeModel | None, dict[str, Any] | None]:
    """The --step-model and what it is ("priced_by"), refused when it never measured the
    verify steps of a k the run asks for; (None, None) without one."""
    if not cfg.step_model:
        return None, None
    model, meta = read_profile(cfg.step_model)
    check_covers(model, [k for k in cfg.ks if k], cfg.step_model)
    return model, priced_by(model, cfg.step_model, meta)


PROFILE_FILE = "step_profile.json"   # a measured rollout's own profile, in its run folder


def engine_profiler(cfg: RolloutConfig, n_requests: int):
    """A profiler for `run_measured`: the AUTO_PROFILE grid on the rollout's own engine, batch
    sizes up to the rollout's largest batch and every one up to the largest tail threshold (the
    tail's steps, where small-batch kernels differ most). The profile document is kept on the
    function (`measure.document`) for the run folder."""
    def measure(engine):
        tail = range(1, min(max(cfg.thresholds + [cfg.tail_threshold or 0]), 8) + 1)
        bs = sorted(set(auto_batch_sizes(min(cfg.max_num_seqs, n_requests))) | set(tail))
        click.echo(f"rollout: measuring the {cfg.engine} engine's step-time profile (batch sizes {bs}, k={cfg.ks})",
                   err=True)
        m, tables, meta = profile_engine(engine, cfg.engine, cfg.model, bs, AUTO_PROFILE["tokens"], cfg.ks,
                                         threads=cfg.threads, dtype=cfg.dtype, max_num_seqs=cfg.max_num_seqs,
                                         max_num_batched_tokens=cfg.max_num_batched_tokens, seed=cfg.seed,
                                         prompt_pads=AUTO_PROFILE["prompt_pads"],
                                         pad_max_batch=AUTO_PROFILE["pad_max_batch"], kv=kv_options(cfg))
        for line in profile_lines(m, meta):
            click.echo(line, err=True)
        note = "measured by `samspec-bench rollout` on its own engine before its arms"
        measure.document = profile_document(m, tables, meta, note)
        return m, priced_by(m, f"{PROFILE_FILE} (this run's folder): profile of the {cfg.engine} engine, batch sizes "
                               f"{bs}, {AUTO_PROFILE['tokens']} tokens, k={cfg.ks}", {**meta, "note": note})
    measure.document = None
    return measure


def run(cfg: RolloutConfig, output: str = "results") -> tuple[Path, dict[str, Any]]:
    """Every arm of `cfg`, the run folder under `output` (result.json, step tables, figures).
    Returns the folder and the result's metrics. Units: seconds when a step model prices the
    steps (or an engine measured them), decode steps otherwise (`outputs.to_step_units`)."""
    validate(cfg)
    model, priced = load_priced(cfg)
    measured = cfg.engine != "replay"
    profiler = None
    if not measured:
        out = run_replay(cfg, model if model is not None else StepTimeModel.constant(1.0))
        out["step_model"] = model.describe() if model is not None else None
        out["step_model_fitted_on"] = cfg.step_model
        out["priced_by"] = priced
    else:   # MEASURED_ENGINES (validate refused any other)
        n_req = (cfg.prompts or MEASURED_PROMPTS) * (cfg.group_size or MEASURED_GROUP_SIZE)
        profiler = engine_profiler(cfg, n_req)
        out = run_measured(cfg, model, priced, profiler=profiler)
    units = "s" if (measured or model is not None) else "steps"
    basis = time_basis(units, measured, out["priced_by"], cfg.engine)
    best = best_setting(out["metrics"])
    runp = RunDir(output, SUITE)
    if profiler is not None and profiler.document is not None:   # reusable: `rollout --step-model <run>/step_profile.json`
        write_profile(runp.file(PROFILE_FILE), profiler.document)
    step_tables = write_steps(runp, out["tables"], units)
    figs = make_figures(runp, out, best, units, basis)
    extra = {lbl: (m.get("step_model_extrapolation") or (m.get("sim_fit") or {}).get("extrapolation"))
             for lbl, m in out["metrics"].items()}
    extra = {lbl: e for lbl, e in extra.items() if e}
    arms = out["metrics"] if units == "s" else to_step_units(out["metrics"])
    summary = {"units": units, "measured": measured, "time_basis": basis, "priced_by": out["priced_by"],
               "speedup_definition": "time ratio off / arm" if units == "s" else STEP_RATIO,
               "extrapolated": bool(extra), "extrapolation": extra or None,
               "best_setting": best, "best_setting_by": "shortest total time" if units == "s" else "fewest decode steps",
               "arms": arms, "workload": out["workload"], "step_tables": step_tables,
               "step_model": out["step_model"], "step_model_fitted_on": out["step_model_fitted_on"],
               "definitions": DEFINITIONS}
    for key in ("prediction_error", "step_model_arms_fit"):
        if key in out:
            summary[key] = out[key]
    runp.write_result(asdict(cfg), summary, figures=figs)
    return runp.path, summary


def execute(config: RolloutConfig, *, output: str, resume: str | None = None, json_path: str | None = None) -> int:
    """The rollout command after its options: run, print a line per arm and the best setting,
    emit the result JSON to `json_path` ('-': stdout, the lines then go to stderr). Rollout
    runs are not resumable: a `resume` is refused."""
    if resume is not None:
        raise UserError(f"--resume {resume}: rollout runs cannot be resumed; run it again")
    path, summary = run(config, output)
    say = (lambda text: click.echo(text, err=True)) if json_path == "-" else click.echo  # stdout: the JSON only
    for line in summary_lines(summary):
        say(line)
    say(f"results: {path}")
    emit_json(json.loads((path / "result.json").read_text()), json_path)
    return 0


@click.group(SUITE, invoke_without_command=True)
@click.option("--engine", type=click.Choice(["replay", "reference", "vllm"]), default="replay", show_default=True,
              help="replay: simulate from traces; reference: measure on the PyTorch engine; vllm: measure inside "
                   "vLLM (SAM as its proposer, the threshold switch in the proposer).")
@click.option("--model", default=BUILTIN_MODEL, show_default=True, help="Model for the reference engine.")
@click.option("--traces", default=None, help="Trace JSONL for replay (default: shared qwen25math_math_100x8.jsonl).")
@click.option("--tokenizer", default=None, help="Tokenizer directory for the traces (default: shared qwen3).")
@click.option("--data-dir", default=None, help="Shared data directory.")
@click.option("--prompts", type=int, default=None, help="Prompts per step (reference: 8; replay: the traces' groups).")
@click.option("--group-size", type=int, default=None, help="Responses per prompt (GRPO n; reference: 4).")
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--top-p", type=float, default=1.0, show_default=True)
@click.option("--max-response-len", type=int, default=34816, show_default=True)
@click.option("--max-num-seqs", type=int, default=64, show_default=True)
@click.option("--max-num-batched-tokens", type=int, default=2048, show_default=True)
@click.option("--ignore-eos/--no-ignore-eos", default=True, show_default=True)
@click.option("--length-dist", default=None,
              help="Target lengths: lognormal:MEDIAN:SIGMA, pareto:MIN:ALPHA, fixed:N, trace (reference default "
                   "lognormal:32:0.8; replay default: the traces' own lengths, else profiles are stretched).")
@click.option("--sources", type=click.Choice(["own", "group"]), default="own", show_default=True,
              help="Replay draft sources: the response's own context, or its GRPO group's siblings too.")
@click.option("--kv-capacity-tokens", type=int, default=None,
              help="KV cache size in tokens (simulation and reference engine; default: unlimited / engine's).")
@click.option("--block-size", type=int, default=16, show_default=True, help="KV block size in tokens.")
@click.option("--repeats", type=int, default=1, show_default=True,
              help="Measured engines: runs per arm, interleaved; step times are the per-step medians.")
@click.option("--spec-threshold", default="4", show_default=True, help="Comma-separated thresholds to sweep.")
@click.option("-k", "--num-spec-tokens", "ks", default="3", show_default=True, help="Comma-separated k to sweep.")
@click.option("--arms", default="off,always,threshold", show_default=True)
@click.option("--tail-threshold", type=int, default=None, help="Tail definition for the always-on arm (default: first threshold).")
@click.option("--step-model", default=None,
              help="Step-time profile JSON from `rollout profile`: prices the replay's steps in seconds (without it a "
                   "replay reports decode steps, not time; a measured engine profiles itself first).")
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
@click.option("--engine", "engine_name", type=click.Choice(["reference", "vllm"]), default="reference",
              show_default=True, help="The engine to measure: the reference PyTorch engine, or vLLM (SAM's proposer "
                                      "drafting an oracle continuation, so every verify step has k + 1 tokens).")
@click.option("--model", default=BUILTIN_MODEL, show_default=True)
@click.option("--batch-sizes", default="1,2,4,8,16", show_default=True, help="Running batches to measure.")
@click.option("--tokens", type=int, default=24, show_default=True, help="Tokens generated per request.")
@click.option("-k", "ks", default="3", show_default=True,
              help="Comma-separated draft lengths: verify steps of k + 1 tokens per request are measured for each.")
@click.option("--prompt-pad", default="0,256", show_default=True,
              help="Comma-separated extra prompt tokens per run (varies the context apart from the batch size).")
@click.option("--pad-max-batch", type=int, default=None,
              help="Run the prompt pads after the first only at batch sizes up to this (default: every batch size; "
                   "long prompts at large batches cost most of a profile's time).")
@click.option("--threads", type=int, default=1, show_default=True)
@click.option("--dtype", default="float32", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--engine-arg", "engine_arg", multiple=True,
              help="vLLM engine argument key=value (repeatable; e.g. tensor_parallel_size=2).")
@click.option("--output", default="step_profile.json", show_default=True, help="Where to write the profile JSON.")
def profile_command(engine_name, model, batch_sizes, tokens, ks, prompt_pad, pad_max_batch, threads, dtype, seed,
                    engine_arg, output):
    """Measure an engine's step time vs running batch, tokens per request (1 and k + 1) and context; fit a
    step-time model and write the profile JSON (format 3) that `rollout --step-model` prices with."""
    pads = parse_prompt_pads(prompt_pad)
    args = parse_engine_args(engine_arg) if engine_arg else None
    m, tables, meta = profile(model, int_list(batch_sizes, "--batch-sizes"), tokens, int_list(ks, "-k"), threads, dtype,
                              seed=seed, prompt_pads=pads, engine=engine_name, engine_args=args,
                              log=lambda t: click.echo(t, err=True), pad_max_batch=pad_max_batch)
    path = write_profile(output, profile_document(m, tables, meta))
    for line in profile_lines(m, meta):
        click.echo(line)
    click.echo(f"profile: {path}")
