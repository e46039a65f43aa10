"""The `samspec-bench rollout` command group: the run (`execute` of a `build_config` config:
the arms simulated or measured, the run folder written, a line per arm printed) and
`rollout profile`. Options, help and defaults live here only."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import click

from samspec_bench.bench.engines.engine_device import DEVICE_HELP, device_record, engine_device, engine_dtype
from samspec_bench.bench.engines.factory import engine_capabilities
from samspec_bench.bench.engines.vllm.engine_args import parse_engine_args
from samspec_bench.devices import resolve_device
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.bench.simulation.step_model_spec import (ROOFLINE_HELP, is_roofline_spec, load_step_model,
                                                            parse_roofline)
from samspec_bench.errors import UserError, int_list
from samspec_bench.models.checkpoints import BUILTIN_MODEL, resolve_dtype
from samspec_bench.results import RunDir, emit_json, load_result
from samspec_bench.sam.strategies import parse_strategy
from samspec_bench.suites.rollout.config import (ENGINES, MEASURED_ENGINES, MEASURED_GROUP_SIZE, MEASURED_PROMPTS,
                                                 SUITE, RolloutConfig, build_config, kv_options, validate)
from samspec_bench.suites.rollout.lines import summary_lines
from samspec_bench.suites.rollout.heldout import run_heldout
from samspec_bench.suites.rollout.kept_work import DRAWS_FILE, KeptWork, keeping
from samspec_bench.suites.rollout.length_share import share_used, traces_share
from samspec_bench.suites.rollout.measured import run_measured
from samspec_bench.suites.rollout.outputs import make_figures, write_steps
from samspec_bench.suites.rollout.phases import best_setting
from samspec_bench.suites.rollout.presets import PRESETS, always_on_notes, comparison, get_preset
from samspec_bench.suites.rollout.profile import (AUTO_PROFILE, auto_batch_sizes, check_covers, parse_prompt_pads,
                                                  profile, profile_document, profile_engine, profile_lines,
                                                  read_profile, write_profile)
from samspec_bench.suites.rollout.replay_arm import prepare, run_replay
from samspec_bench.suites.rollout.sensitivity import run_sensitivity
from samspec_bench.suites.rollout.torch_profile import PROFILER as TORCH_PROFILER, torch_profile
from samspec_bench.trace_formats import TOOL_OUTPUT
from samspec_bench.suites.rollout.strategy_table import basis as table_basis, strategy_lines, strategy_rows
from samspec_bench.suites.rollout.unread_options import refuse_other_profiler
from samspec_bench.suites.rollout.units import STEP_RATIO, priced_by, priced_label, time_basis, to_step_units

DEFINITIONS = {"tail": "steps with no request waiting and running <= the arm's threshold",
               "speedup_*": "baseline (off) time / arm time, same phase definition (seconds: measured or "
                            "modelled, see time_basis)",
               "step_ratio_*": "baseline (off) decode steps / arm decode steps: a " + STEP_RATIO + " (no step model)",
               "tokens_per_step": "(decode steps of requests + accepted drafts) / decode steps of requests (one "
                                  "request's target forward = one step; 1.0 without speculation)",
               "tokens_per_step_head/_tail": "tokens_per_step over the head's / the tail's steps only (--dp: all "
                                             "instances' steps pooled): what drafting does for the requests that "
                                             "finish last",
               "running_per_step_tail / emitted_tail": "requests decoding per tail step on average / tokens the "
                                                        "tail emitted (with the off arm's: how thin the tail "
                                                        "runs and how much work it holds)",
               "drafted_per_step": "draft tokens verified / decode steps of requests (what the drafter proposed)",
               "verify_tokens_per_token": "tokens the target computed for decoding requests (1 + drafted each) / "
                                            "tokens they kept (1 + accepted each); 1.0 without speculation",
               "sim_error": "simulated / measured - 1 (measured engines only): time total and tail, speedups, "
                            "accepted tokens; the simulation priced by the engine's own profile",
               "sim_error_arms_fit": "the same, the simulation priced by a model fitted on the run's OTHER arms",
               "extrapolation": "features of the priced steps beyond the range the step model was measured on",
               "dp": "--dp N: total = the slowest instance's time (the rollout ends with it), head / tail its phases; "
                     "speedup_tail pooled over instances; speedup_mean_instance = mean instance time off / on"}


def load_priced(cfg: RolloutConfig) -> tuple[Any, dict[str, Any] | None]:
    """The --step-model and what it is ("priced_by"): a roofline spec (`load_step_model`), or a
    profile JSON (format 3 with its engine and date; older formats read too), refused when it
    never measured the verify steps of a k the run asks for; (None, None) without one."""
    if not cfg.step_model:
        return None, None
    if is_roofline_spec(cfg.step_model):
        model = load_step_model(cfg.step_model)
        return model, priced_by(model, cfg.step_model)
    model, meta = read_profile(cfg.step_model)
    # -k is the always / threshold arms' (strategies name their own k; beyond the profile
    # their steps are flagged as extrapolated, not refused)
    drafting = {"always", "threshold"} & set(cfg.arms)
    check_covers(model, [k for k in cfg.ks if k] if drafting else [], cfg.step_model)
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
                                         pad_max_batch=AUTO_PROFILE["pad_max_batch"], kv=kv_options(cfg),
                                         log=lambda t: click.echo(t, err=True))
        for line in profile_lines(m, meta):
            click.echo(line, err=True)
        note = "measured by `samspec-bench rollout` on its own engine before its arms"
        meta = {**meta, "device": device_record(cfg.engine, cfg.device)}
        measure.document = profile_document(m, tables, meta, note)
        return m, priced_by(m, f"{PROFILE_FILE} (this run's folder): profile of the {cfg.engine} engine, batch sizes "
                               f"{bs}, {AUTO_PROFILE['tokens']} tokens, k={cfg.ks}", {**meta, "note": note})
    measure.document = None
    return measure


def replay(cfg: RolloutConfig, model, priced: dict[str, Any] | None,
           kept: KeptWork | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The simulated arms (steps priced by `model`, or counted when it is None), the sensitivity
    table and the preset's comparison: (run_replay's output, extra summary keys). `kept`: where
    each finished draw is kept (and, resumed, read back from)."""
    extra: dict[str, Any] = {}
    rep = prepare(cfg)
    if kept is not None:   # a file read now must be the one the kept draws were simulated from
        kept.check_files(list(rep.files) + step_model_file(cfg))
    # the traces' share, measured once on every group the run replays (a --dev-split draws on its halves with it)
    measured_share = traces_share(rep)
    cfg = replace(cfg, length_group_share=share_used(cfg, rep))
    priced_model = model if model is not None else StepTimeModel.constant(1.0)
    if cfg.dev_split is not None:   # parameters chosen on the dev prompts, figures of the held-out ones
        out, rep = run_heldout(cfg, rep, priced_model)
    else:
        out = run_replay(cfg, priced_model, rep)
    out["workload"].update(length_group_share=cfg.length_group_share if cfg.length_dist is not None else None,
                           length_group_share_traces=(measured_share or {}).get("share"),
                           length_group_share_traces_basis={k: v for k, v in (measured_share or {}).items()
                                                            if k != "share"} or None)
    out["step_model"] = model.describe() if model is not None else None
    out["step_model_fitted_on"] = cfg.step_model or None
    out["priced_by"] = priced
    best = chosen_best(out)
    if cfg.sensitivity and best is not None:
        pl = priced_label(priced) if priced else None
        out["sensitivity"] = extra["sensitivity"] = run_sensitivity(cfg, rep, out["settings"], best, model or
                                                                    StepTimeModel.constant(1.0), pl,
                                                                    draws=out.get("draws"))
    if cfg.preset:
        pre = get_preset(cfg.preset)
        arm = pre_arm(out["metrics"], best)
        sources = (", ".join(f"{x}: {parse_strategy(x).sources}" for x in cfg.strategies) if cfg.strategies
                   else cfg.sources)
        extra["preset"] = {**pre.describe(), "overridden": pre.overridden(cfg), "published": pre.published,
                           "inputs": {"length_dist": cfg.length_dist, "length_evidence": pre.length_evidence
                                      if cfg.length_dist == pre.length_dist else
                                      "given with --length-dist", "traces": cfg.traces, "sources": sources,
                                      "dp_shard": cfg.dp_shard, "step_model": cfg.step_model,
                                      "priced_by_kind": (priced or {}).get("kind"),
                                      "kv_capacity_tokens": cfg.kv_capacity_tokens or "the step model's device "
                                      "memory, else unlimited (each arm's kv says which)"},
                           "comparison": comparison(pre, out["metrics"][arm], arm) if arm else None}
    return out, extra


def step_model_file(cfg: RolloutConfig) -> list[str]:
    """The files the --step-model reads: a profile JSON, or a roofline spec's calibration= file
    and a model= config.json path (the rest of a spec is settings)."""
    if not cfg.step_model:
        return []
    if not is_roofline_spec(cfg.step_model):
        return [cfg.step_model]
    spec = parse_roofline(cfg.step_model)
    files = [str(Path(spec["calibration"]).expanduser())] if "calibration" in spec else []
    model = Path(spec["model"]).expanduser()
    if model.is_dir() and (model / "config.json").is_file():
        files.append(str(model / "config.json"))
    elif model.is_file():
        files.append(spec["model"])
    return files


def run(cfg: RolloutConfig, output: str = "results", resume: str | None = None) -> tuple[Path, dict[str, Any]]:
    """Every arm of `cfg`, the run folder under `output` (result.json, step tables, figures).
    Returns the folder and the result's metrics. Units: seconds when a step model prices the
    steps (or an engine measured them), decode steps otherwise (`units.to_step_units`). A
    simulated run keeps each draw as it finishes (kept_work.py); `resume` continues one."""
    validate(cfg)
    model, priced = load_priced(cfg)
    measured = engine_capabilities(cfg.engine).generates   # arms on a model, else simulated from traces
    if resume is not None and measured:
        raise UserError(f"--resume {resume}: --engine {cfg.engine} measures its arms interleaved in one session, so "
                        "that their times compare; run it again (simulated runs, --engine replay, resume)")
    if cfg.drafter != "sam-fixed":
        print(f"drafter {cfg.drafter}: its draft lengths follow each request's observed acceptance; the simulation "
              "approximates them from a per-position profile (its schedule is not reproduced step by step)",
              file=sys.stderr)
    profiler = None
    extra: dict[str, Any] = {}
    kept = None
    if not measured:
        kept = KeptWork.start(asdict(cfg), output, resume, SUITE)
        if resume is not None and kept.run_dir.file("result.json").is_file():   # nothing left to simulate
            done = load_result(kept.run_dir.path)
            click.echo(f"rollout --resume {resume}: the run is complete (result.json written {done.get('created', '?')}); "
                       "nothing is simulated, its result follows", err=True)
            return kept.run_dir.path, done["metrics"]
        if kept.ignored:
            click.echo(f"rollout --resume: {kept.ignored} line(s) of {kept.run_dir.file(DRAWS_FILE)} are not a whole "
                       "draw of this run (damaged, a draw given twice, or unlike its family's others): those draws "
                       "are simulated again", err=True)
        with keeping(kept):
            out, extra = replay(cfg, model, priced, kept)
        if kept.reused:
            click.echo(f"rollout --resume: {kept.reused} draw(s) kept from the interrupted run, {kept.computed} "
                       "simulated now (the shown draw is simulated again for its step tables)", err=True)
        extra["kept_draws"] = kept.describe()
    else:   # MEASURED_ENGINES (validate refused any other)
        n_req = (cfg.prompts or MEASURED_PROMPTS) * (cfg.group_size or MEASURED_GROUP_SIZE)
        profiler = engine_profiler(cfg, n_req)
        out = run_measured(cfg, model, priced, profiler=profiler)
    units = "s" if (measured or model is not None) else "steps"
    basis = time_basis(units, measured, out["priced_by"], cfg.engine)
    best = chosen_best(out)
    runp = kept.run_dir if kept is not None else RunDir(output, SUITE)
    if profiler is not None and profiler.document is not None:   # reusable: `rollout --step-model <run>/step_profile.json`
        write_profile(runp.file(PROFILE_FILE), profiler.document)
    step_tables = write_steps(runp, out["tables"], units)
    figs = make_figures(runp, out, best, units, basis)
    extrap = {lbl: (m.get("step_model_extrapolation") or (m.get("sim_fit") or {}).get("extrapolation"))
              for lbl, m in out["metrics"].items()}
    extrap = {lbl: e for lbl, e in extrap.items() if e}
    arms = out["metrics"] if units == "s" else to_step_units(out["metrics"])
    summary = {"units": units, "measured": measured, "time_basis": basis, "priced_by": out["priced_by"],
               "speedup_definition": "time ratio off / arm" if units == "s" else STEP_RATIO,
               "extrapolated": bool(extrap), "extrapolation": extrap or None,
               "best_setting": best, "best_setting_beats_off": beats_off(out["metrics"], best), "best_setting_by": ("chosen on the dev prompts: " + out["split"]["chosen_by"]
                                                          if out.get("split") else "shortest total time" if units == "s"
                                                          else "fewest decode steps"),
               "arms": arms, "workload": out["workload"], "step_tables": step_tables,
               "step_model": out["step_model"], "step_model_fitted_on": out["step_model_fitted_on"],
               "definitions": DEFINITIONS, "notes": always_on_notes(cfg), **extra}
    for key in ("prediction_error", "step_model_arms_fit"):
        if key in out:
            summary[key] = out[key]
    if out.get("split"):
        summary["split"] = out["split"] if units == "s" else to_step_units(out["split"])
    if cfg.strategies:   # one answer per strategy (strategy_table.py), in the JSON and the report
        summary["strategy_table"] = {"basis": table_basis(summary), "rows": strategy_rows(summary)}
    runp.write_result(asdict(cfg), summary, figures=figs, device=device_record(cfg.engine, cfg.device))
    return runp.path, summary


def chosen_best(out: dict[str, Any]) -> str | None:
    """The best setting: the one the dev prompts chose (a --dev-split run), else the shortest total."""
    return (out.get("split") or {}).get("best_setting") or best_setting(out["metrics"])


def beats_off(metrics: dict[str, dict], best: str | None) -> bool | None:
    """Whether the best setting takes less total time than off (None without both): a tie or a
    loss is said, not named a recommendation."""
    if best is None or "off" not in metrics or best not in metrics:
        return None
    return bool(metrics[best]["total_s"] < metrics["off"]["total_s"])


def pre_arm(metrics: dict[str, dict], best: str | None) -> str | None:
    """The arm a preset's prediction is read from: its threshold arm (the seed's switch), else the best."""
    thr = [lbl for lbl in metrics if lbl.startswith("threshold")]
    return thr[0] if thr else best


def execute(config: RolloutConfig, *, output: str, resume: str | None = None, json_path: str | None = None) -> int:
    """The rollout command after its options: run, print a line per arm and the best setting,
    emit the result JSON to `json_path` ('-': stdout, the lines then go to stderr). `resume`:
    a simulated run's folder to continue (its finished draws kept)."""
    path, summary = run(config, output, resume)
    say = (lambda text: click.echo(text, err=True)) if json_path == "-" else click.echo  # stdout: the JSON only
    for line in summary_lines(summary) + strategy_lines(summary):
        say(line)
    say(f"results: {path}")
    emit_json(json.loads((path / "result.json").read_text()), json_path)
    return 0


@click.group(SUITE, invoke_without_command=True)
@click.option("--engine", type=click.Choice(ENGINES), default="replay", show_default=True,
              help="replay: simulate from traces; reference: measure on the PyTorch engine; vllm: measure inside "
                   "vLLM (SAM as its proposer, the threshold switch in the proposer).")
@click.option("--model", default=None, help=f"Model of the measured engine (default {BUILTIN_MODEL}; a preset "
              "names its own); with --engine replay its tokenizer reads the traces (unless --tokenizer).")
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
@click.option("--length-group-share", default=None,
              help="Drawn lengths: the share of the log-length variance a prompt's responses have in common, 0..1 "
                   "(Gaussian copula: each length keeps --length-dist's distribution; default 0: independent), or "
                   "traces: the share measured on the replay's --traces (qwen25math_math_100x8: 0.79).")
@click.option("--length-rank-share", type=float, default=None,
              help="Drawn lengths on a replay: the share, 0..1, of each length's normal score taken from the recorded "
                   "length of the response it replays (1: the drawn lengths in the recorded order, so the longest "
                   "requests draft as the longest recorded responses; default 0: independent of it).")
@click.option("--drafter", type=click.Choice(["sam-fixed", "sam"]), default="sam-fixed", show_default=True,
              help="SAM's draft length: sam-fixed (SAM-Decoding's min_endpos, up to k tokens: the seed's SAM, whose "
                   "schedule the simulation reproduces step by step) or sam (the evidence policy: its lengths follow "
                   "each request's observed acceptance, which the per-position profile approximates).")
@click.option("--sources", default=None,
              help="Replay draft sources, a comma list swept as arms: own (default), group (GRPO siblings), history "
                   "(earlier RL steps' responses to the prompt: verl dumps' earlier steps, or each single-step "
                   "group's first half), group+history.")
@click.option("--strategy", default=None,
              help="Named strategy arms, a comma list of NAME[:k=K][:paths=W][:tree_at=R][:cost=C][:sched=S]"
                   "[:divided=D][@SOURCES][/SWITCH]: seed, evidence, histospec, seer, das, arctic (each its drafter, sources, k, "
                   "length rule and switch; SWITCH: always, threshold:T, schedule:LO-HI=K;..., cost, costk (per-step "
                   "k by the step model), cutoff:WINDOW:THRESHOLD (per request), enginecutoff:WINDOW:THRESHOLD "
                   "(whole engine, for good); sched=context: Seer's admission order; divided=D: Seer's divided rollout, "
                   "the --dp instances pulling from one queue and a request moving on every D tokens; each with "
                   "its scheduling without speculation beside it, e.g. off:sched=context). docs/drafting.md, "
                   "'Strategies'.")
@click.option("--on-error", type=click.Choice(["stop", "skip"]), default="stop", show_default=True,
              help="Replay: a bad trace line (e.g. an empty verl 'output', a response of special tokens only) stops "
                   "the run naming file and line, or is skipped and counted.")
@click.option("--history-includes-validation", is_flag=True, default=False,
              help="Replay: verl validation generations (validation_data_dir, a val*/validation* folder, lines with "
                   "'reward' = 'score', as some reward managers write in every rollout line too) with their steps as "
                   "RL steps. Default: left out beside rollouts (counted and printed); alone, replayed without RL steps.")
@click.option("--history-window", type=int, default=16, show_default=True,
              help="History source: earlier responses kept per prompt.")
@click.option("--history-budget-mb", type=float, default=512.0, show_default=True,
              help="History source: memory budget of the stored tokens, MiB.")
@click.option("--tool-output", type=click.Choice(TOOL_OUTPUT), default="prefill", show_default=True,
              help="Replay: tool output in the responses (verl tool turns, ```output blocks): prefilled between the "
                   "model's turns, as the engine serves a multi-turn rollout, or decoded as generated tokens.")
@click.option("--tool-latency-s", default="0", show_default=True,
              help="Replay: seconds a tool round runs between a multi-turn request's turns (the request is off the "
                   "engine meanwhile), or from:LOG: measured by verl's agent loop in your run's training log "
                   "(timing_s/agent_loop/tool_calls/mean over the rounds num_turns/mean implies).")
@click.option("--kv-capacity-tokens", type=int, default=None,
              help="KV cache size in tokens (simulation and reference engine; default: unlimited / engine's).")
@click.option("--block-size", type=int, default=16, show_default=True, help="KV block size in tokens.")
@click.option("--repeats", type=int, default=1, show_default=True,
              help="Measured engines: runs per arm, interleaved; step times are the per-step medians.")
@click.option("--spec-threshold", default=None, help="Comma-separated thresholds to sweep (default 4).")
@click.option("-k", "--num-spec-tokens", "ks", default=None, help="Comma-separated k to sweep (default 3).")
@click.option("--arms", default=None, help="Comma-separated arms (default off,always,threshold).")
@click.option("--tail-threshold", type=int, default=None, help="Tail definition for the always-on arm (default: first threshold).")
@click.option("--step-model", default=None,
              help="Prices the steps in seconds: a profile JSON from `rollout profile` (measured on your engine), or "
                   f"{ROOFLINE_HELP} (modelled hardware). Without it a replay reports decode steps, not time; a "
                   "measured engine profiles itself first.")
@click.option("--dp", type=int, default=None,
              help="Replay: data-parallel engine instances the requests are sharded over (default 1); each has its "
                   "own --max-num-seqs and KV cache, the rollout ends at the slowest.")
@click.option("--dp-shard", default=None,
              help="How requests are sharded: group (verl's synchronous rollout: a prompt's responses on one "
                   "instance; default), rebalance (the seed's data_rebalance patch: copy-major rows) or "
                   "agent-loop[:WORKERS] (verl's async agent loop, WORKERS its rollout.agent.num_workers, default 8: "
                   "each worker's samples round the instances, a sample's turns on one).")
@click.option("--preset", type=click.Choice(sorted(PRESETS)), default=None,
              help="A published configuration, the seed's or HistoSpec's (model, batch, max_num_seqs, TP/DP, "
                   "threshold / k or strategy, step model); options given explicitly override it. Prints the "
                   "prediction beside the published figures.")
@click.option("--sensitivity/--no-sensitivity", default=None,
              help="Replay: the tail share and gain under other lengths, KV capacity, rounds, host overhead and tail "
                   "readings, one assumption at a time (default: on with --preset).")
@click.option("--draws", type=int, default=None,
              help="Replay with drawn lengths: seeds --seed, --seed + 1, ...; every figure is their median [min, max] "
                   "(default 5).")
@click.option("--dev-split", type=float, default=None,
              help="Replay: choose each family's parameters (k, threshold, switch) on this share of the trace groups "
                   "(the dev prompts) and report every figure on the rest (held-out), e.g. 0.5. docs/drafting.md.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads (1 avoids stalls on busy machines).")
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option("--output", default="results", show_default=True)
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.option("--resume", default=None, type=click.Path(),
              help="Continue an interrupted simulated run in this folder, with the options it started with: its "
                   "finished draws are kept, the rest simulated.")
@click.pass_context
def command(ctx, output, json_path, resume, **params):
    """Rollout time with SAM off / always / on below a batch-size threshold (head vs long tail)."""
    if ctx.invoked_subcommand is not None:
        return
    code = execute(build_config(**params), output=output, resume=resume, json_path=json_path)
    if code:
        ctx.exit(code)


@command.command("profile")
@click.option("--engine", "engine_name", type=click.Choice(MEASURED_ENGINES + (TORCH_PROFILER,)), default="reference",
              show_default=True, help="The engine to measure: the reference PyTorch engine, or vLLM (SAM's proposer "
                                      "drafting an oracle continuation, so every verify step has k + 1 tokens); torch: "
                                      "no engine, one forward step of a random-weight model from --model's config per "
                                      "--grid-* point, timed on --device (also written as --out-jsonl rows).")
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
@click.option("--dtype", default="auto", show_default=True,
              help="auto: float32 on the CPU, bfloat16 on a GPU / NPU (vLLM: its own choice there); or float32, bfloat16, float16.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--engine-arg", "engine_arg", multiple=True,
              help="vLLM engine argument key=value (repeatable; e.g. tensor_parallel_size=2).")
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option("--output", default="step_profile.json", show_default=True, help="Where to write the profile JSON.")
@click.option("--grid-batches", default="1,4,16", show_default=True, help="--engine torch: batch sizes B.")
@click.option("--grid-q", default="1,4", show_default=True, help="--engine torch: query tokens per request q (k + 1).")
@click.option("--grid-contexts", default="256,1024", show_default=True, help="--engine torch: context tokens C each.")
@click.option("--layers", type=int, default=None, help="--engine torch: override num_hidden_layers (keep it small).")
@click.option("--repeats", type=int, default=10, show_default=True, help="--engine torch: timed steps per point.")
@click.option("--attention", default=None,
              help="--engine torch: transformers' attention implementation to time (e.g. sdpa, eager). Default: "
                   "this project's grouped-query SDPA, which reads each KV head once as serving engines do.")
@click.option("--tree-paths", type=int, default=1, show_default=True,
              help="--engine torch: also time each point with q >= 3 as a tree verify of that many paths (the same "
                   "q tokens); the rows get tree_ms and the profile its tree / chain ratio. 1: chains only.")
@click.option("--out-jsonl", default="step_points.jsonl", show_default=True,
              help="--engine torch: where to write the {B, q, C, ms} rows (for `samspec-bench step-model --steps`).")
@click.pass_context
def profile_command(ctx, engine_name, model, batch_sizes, tokens, ks, prompt_pad, pad_max_batch, threads, dtype, seed,
                    engine_arg, device, output, grid_batches, grid_q, grid_contexts, layers, repeats, attention,
                    tree_paths, out_jsonl):
    """Measure an engine's step time vs running batch, tokens per request (1 and k + 1) and context; fit a
    step-time model and write the profile JSON (format 3) that `rollout --step-model` prices with."""
    defaults = ctx.command.make_context(ctx.info_name, [], resilient_parsing=True).params   # click's, converted
    refuse_other_profiler(engine_name, engine_name == TORCH_PROFILER, ctx.params, defaults)
    if engine_name == TORCH_PROFILER:
        grid = (int_list(grid_batches, "--grid-batches"), int_list(grid_q, "--grid-q"),
                int_list(grid_contexts, "--grid-contexts", minimum=0))
        dev = resolve_device(device)
        jsonl, path, tree = torch_profile(model, *grid, device=dev, dtype=resolve_dtype(dtype, dev), layers=layers,
                                       repeats=repeats, seed=seed, threads=threads, out_jsonl=out_jsonl, output=output,
                                       tree_paths=tree_paths, attention=attention,
                                       log=lambda t: click.echo(t, err=True))
        if tree:
            click.echo(f"tree verify / chain verify of as many tokens ({'/'.join(map(str, tree['paths']))} paths, "
                       f"measured on {dev}): median {tree['median']:.3f}x [{tree['min']:.3f}, {tree['max']:.3f}] over "
                       f"{tree['points']} points")
        click.echo(f"points: {jsonl}\nprofile: {path}")
        return
    pads = parse_prompt_pads(prompt_pad)
    args = parse_engine_args(engine_arg) if engine_arg else None
    device = engine_device(engine_name, device)   # a device that is not there stops here, before any file
    dtype = engine_dtype(engine_name, dtype, device)
    m, tables, meta = profile(model, int_list(batch_sizes, "--batch-sizes"), tokens, int_list(ks, "-k"), threads, dtype,
                              seed=seed, prompt_pads=pads, engine=engine_name, engine_args=args,
                              log=lambda t: click.echo(t, err=True), pad_max_batch=pad_max_batch, device=device)
    path = write_profile(output, profile_document(m, tables, meta))
    for line in profile_lines(m, meta):
        click.echo(line)
    click.echo(f"profile: {path}")
