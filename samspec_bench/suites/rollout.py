"""`samspec-bench rollout`: RL-shaped rollouts with SAM speculation off, always on, or on when
the running batch is at or below a threshold (the seed's adaptive switch); the long-tail phase
and the whole rollout timed per arm.

    samspec-bench rollout --engine reference --prompts 8 --group-size 4 --length-dist lognormal:32:0.8 \\
        --spec-threshold 4 -k 3
    samspec-bench rollout profile --output step_model.json            # measure a step-time model
    samspec-bench rollout --engine replay --traces shared/data/traces/qwen25math_math_100x8.jsonl \\
        --step-model step_model.json --spec-threshold 4,8,16 -k 3,5

Engines: `reference` measures real runs (and the simulation's prediction of the same workload,
with its error); `replay` simulates from traces (`scheduler_sim.simulate`, a fitted step-time
model). Phases: the tail is the steps with nobody waiting and at most T requests in the batch
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

from samspec_bench.errors import UserError

SUITE = "rollout"
POSITION_EDGES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def _int_list(text: str, name: str) -> list[int]:
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{name} {text!r}: give comma-separated integers, e.g. 4,8,16") from None
    if not vals or min(vals) < 1:
        raise UserError(f"{name} {text!r}: give integers >= 1")
    return vals


@dataclass
class RolloutConfig:
    engine: str = "replay"
    model: str = "builtin:smollm2-135m"
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
    length_dist: str = "lognormal:32:0.8"
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
            "num_finished": col("num_finished")}


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
    from samspec_bench.bench.scheduler_sim import make_policy
    return make_policy(s["arm"], s["threshold"])


def _tail_T(s, cfg) -> int:
    if s["threshold"] is not None:
        return s["threshold"]
    return cfg.tail_threshold if cfg.tail_threshold is not None else cfg.thresholds[0]


def _profiles(pairs, k: int, drafter: str):
    """Acceptance profiles (drafted, accepted) for (prompt_ids, response_ids) pairs."""
    from samspec_bench.bench.scheduler_sim import acceptance_profile
    from samspec_bench.sam import make_drafter
    d = make_drafter(drafter)
    return [acceptance_profile(d, p, r, k, req_id=i) for i, (p, r) in enumerate(pairs)]


def _sim_requests(pairs, lengths, profiles):
    from samspec_bench.bench.scheduler_sim import SimRequest
    out = []
    for i, ((p, r), n) in enumerate(zip(pairs, lengths)):
        dr, ac = (profiles[i] if profiles is not None else (None, None))
        out.append(SimRequest(len(p), int(n), dr, ac))
    return out


def run_replay(cfg: RolloutConfig, step_model) -> dict[str, Any]:
    """Simulated arms on traces. Requests: `prompts` groups x `group_size` responses taken from
    the traces (groups and members cycled when more are asked for than the traces hold)."""
    from samspec_bench.bench.scheduler_sim import SimRequest, simulate
    from samspec_bench.data import load_tokenizer, read_traces, tokenize_traces
    items = tokenize_traces(read_traces(cfg.traces), load_tokenizer(cfg.tokenizer))
    groups: dict[str, list] = {}
    for it in items:
        groups.setdefault(str(it.group), []).append(it)
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
    idx = [uniq[id(it)] for it in chosen]
    settings = arm_settings(cfg)
    profs = {k: _profiles(pairs, k, cfg.drafter) for k in cfg.ks}
    sims, metrics = {}, {}
    for s in settings:
        T = _tail_T(s, cfg)
        pr = profs[s["k"]] if s["k"] else None
        reqs = [SimRequest(len(pairs[j][0]), len(pairs[j][1]), pr[j][0] if pr else None, pr[j][1] if pr else None)
                for j in idx]
        t0 = time.perf_counter()
        r = simulate(reqs, k=s["k"], policy=_policy(s), step_model=step_model, max_num_seqs=cfg.max_num_seqs,
                     max_num_batched_tokens=cfg.max_num_batched_tokens, tail_threshold=T, position_edges=POSITION_EDGES)
        sims[s["label"]] = r
        m = arm_metrics(r.steps, r.finish_time_s, T)
        m["sim_seconds"] = time.perf_counter() - t0
        if r.tail_acceptance is not None:
            ta = r.tail_acceptance
            m["tail_acceptance_by_position"] = [
                {"bin": _bin_label(i), "drafted": int(ta["drafted"][i]), "accepted": int(ta["accepted"][i]),
                 "acceptance_rate": _ratio(int(ta["accepted"][i]), int(ta["drafted"][i]))}
                for i in range(len(ta["drafted"])) if ta["drafted"][i]]
        metrics[s["label"]] = m
    add_speedups(metrics, settings, sims["off"].steps, cfg.thresholds[0])
    return {"settings": settings, "metrics": metrics,
            "tables": {s["label"]: ("simulated", sims[s["label"]].steps) for s in settings},
            "finish": {s["label"]: sims[s["label"]].finish_time_s for s in settings},
            "workload": {"requests": len(chosen), "prompts": n_prompts, "group_size": n,
                         "distinct_responses": len(base), "response_tokens": int(sum(len(pairs[j][1]) for j in idx)),
                         "response_len_max": int(max(len(pairs[j][1]) for j in idx))}}


def _bin_label(i: int) -> str:
    e = POSITION_EDGES
    lo = 0 if i == 0 else e[i - 1]
    return f"[{lo},{e[i]})" if i < len(e) else f"[{lo},inf)"


def run_reference(cfg: RolloutConfig, step_model_path: str | None) -> dict[str, Any]:
    """Measured arms on the reference engine, plus the simulation's prediction of each."""
    import torch

    from samspec_bench.bench.engine import Request, SamplingParams, make_engine
    from samspec_bench.bench.scheduler_sim import simulate
    from samspec_bench.bench.step_model import StepTimeModel, fit_from_steps
    from samspec_bench.suites.builtin_prompts import PROMPTS, _chat_ids
    torch.set_num_threads(cfg.threads)
    engine = make_engine(cfg.engine, cfg.model, dtype=cfg.dtype, max_num_seqs=cfg.max_num_seqs,
                         max_num_batched_tokens=cfg.max_num_batched_tokens)
    tok = engine.tokenizer
    n_prompts, n = cfg.prompts or 8, cfg.group_size or 4
    lengths = draw_lengths(cfg.length_dist, n_prompts * n, cfg.seed, cfg.min_len, cfg.max_response_len)
    reqs = []
    for i in range(n_prompts):
        p = _chat_ids(tok, PROMPTS[i % len(PROMPTS)]) if tok is not None else [1 + (i % 50)] * 16
        for j in range(n):
            q = i * n + j
            reqs.append(Request(q, p, SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed + q,
                                                     max_tokens=int(lengths[q]), ignore_eos=cfg.ignore_eos), group=i))
    engine.generate(reqs[:2])  # warm-up (allocations, first-call overheads)
    settings = arm_settings(cfg)
    gens = {}
    for s in settings:
        pol = _policy(s)
        gens[s["label"]] = engine.generate(reqs, drafter=cfg.drafter if s["k"] else None,
                                           num_spec_tokens=max(s["k"], 1), spec_policy=pol, progress=True)
    measured = {lbl: steps_from_generation(g) for lbl, g in gens.items()}
    finish = {lbl: np.array([o.finish_time_s if o.finish_time_s is not None else np.nan for o in g.outputs])
              for lbl, g in gens.items()}
    # the simulation of the same workload: same requests and lengths, acceptance from the
    # arm's own outputs, scheduling checked step by step against the measured run
    sim_reqs = {}
    for s in settings:
        g = gens[s["label"]]
        pairs = [(o.prompt_ids, o.token_ids) for o in g.outputs]
        prof = _profiles(pairs, s["k"], cfg.drafter) if s["k"] else None
        sim_reqs[s["label"]] = _sim_requests(pairs, [len(o.token_ids) for o in g.outputs], prof)
    match = {}
    for s in settings:
        r = simulate(sim_reqs[s["label"]], k=s["k"], policy=_policy(s), step_model=StepTimeModel.constant(1.0),
                     max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens,
                     fast_forward=False)
        ms = measured[s["label"]]
        same = (r.num_steps == len(ms["time_s"]) and np.array_equal(r.steps["num_running"], ms["num_running"])
                and np.array_equal(r.steps["num_scheduled_tokens"], ms["num_scheduled_tokens"]))
        match[s["label"]] = bool(same)
        if same:
            ms["context_tokens"] = r.steps["context_tokens"]
    if step_model_path:
        model = StepTimeModel.load(step_model_path)
        fitted_on = step_model_path
    else:
        model = fit_from_steps([measured["off"]], source="measured baseline arm of this run")
        fitted_on = "baseline (off) arm of this run; spec arms are out of sample"
    metrics, sims = {}, {}
    for s in settings:
        T = _tail_T(s, cfg)
        m = arm_metrics(measured[s["label"]], finish[s["label"]], T)
        m["scheduler_match"] = match[s["label"]]
        off_out = gens["off"].outputs
        m["outputs_identical_to_off"] = float(np.mean([list(a.token_ids) == list(b.token_ids) for a, b in
                                                       zip(gens[s["label"]].outputs, off_out)]))
        metrics[s["label"]] = m
        r = simulate(sim_reqs[s["label"]], k=s["k"], policy=_policy(s), step_model=model,
                     max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens, tail_threshold=T)
        sims[s["label"]] = r
        sm = arm_metrics(r.steps, r.finish_time_s, T)
        m["simulated"] = sm
        m["sim_error"] = {"total": sm["total_s"] / m["total_s"] - 1 if m["total_s"] > 0 else None,
                          "tail": sm["tail_s"] / m["tail_s"] - 1 if m["tail_s"] > 0 else None}
    add_speedups(metrics, settings, measured["off"], cfg.thresholds[0])
    sim_metrics = {lbl: metrics[lbl]["simulated"] for lbl in metrics}
    add_speedups(sim_metrics, settings, sims["off"].steps, cfg.thresholds[0])
    for lbl in metrics:
        if lbl != "off":
            for key in ("speedup_overall", "speedup_tail"):
                mv, sv = metrics[lbl].get(key), sim_metrics[lbl].get(key)
                metrics[lbl].setdefault("sim_error", {})[key] = (sv / mv - 1) if mv and sv else None
    tables = {}
    for s in settings:
        tables[s["label"]] = ("measured", measured[s["label"]])
        tables[s["label"] + " [sim]"] = ("simulated", sims[s["label"]].steps)
    engine.close()
    return {"settings": settings, "metrics": metrics, "tables": tables, "finish": finish,
            "step_model": model.describe(), "step_model_fitted_on": fitted_on,
            "workload": {"requests": len(reqs), "prompts": n_prompts, "group_size": n,
                         "lengths": {"min": int(lengths.min()), "median": float(np.median(lengths)),
                                     "max": int(lengths.max()), "dist": cfg.length_dist}}}


# ---------- outputs ----------

def write_steps_csv(path: Path, tables: dict[str, tuple[str, dict]]) -> None:
    import pandas as pd
    frames = []
    for label, (source, st) in tables.items():
        df = pd.DataFrame({k: np.asarray(v) for k, v in st.items()})
        df.insert(0, "source", source)
        df.insert(0, "arm", label)
        frames.append(df)
    pd.concat(frames, ignore_index=True).to_csv(path, index=False)


def make_figures(run, out: dict[str, Any], best: str | None, cfg: RolloutConfig) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figs = []
    tables = out["tables"]
    thr = [lbl for lbl, m in out["metrics"].items() if lbl.startswith("threshold")]
    best_thr = min(thr, key=lambda lbl: out["metrics"][lbl]["total_s"]) if thr else None
    show = list(dict.fromkeys(lbl for lbl in ("off", best_thr, best) if lbl))  # the seed's figure: off vs threshold
    fig, ax = plt.subplots(figsize=(8, 4))
    for lbl in show:
        src, st = tables[lbl]
        T = out["metrics"][lbl]["tail_threshold"]
        x = np.concatenate([[0.0], st["clock_s"]])
        y = np.concatenate([st["num_running"][:1], st["num_running"]])
        line, = ax.step(x, y, where="pre", label=f"{lbl} ({src})")
        tail = (st["num_waiting"] == 0) & (st["num_running"] <= T)
        if tail.any():
            first = int(np.argmax(tail))
            start = float(st["clock_s"][first - 1]) if first > 0 else 0.0
            ax.axvspan(start, float(st["clock_s"][-1]), color=line.get_color(), alpha=0.12)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("running requests")
    ax.set_title("Running requests vs time (shaded: long tail, running <= threshold)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(run.file("running_vs_time.png"), dpi=110)
    plt.close(fig)
    figs.append("running_vs_time.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for lbl in show:
        src, st = tables[lbl]
        ax.scatter(st["num_running"], st["time_s"] * 1e3, s=6, alpha=0.4, label=f"{lbl} ({src})")
        if lbl + " [sim]" in tables:   # the step-time model's prediction of the same steps
            sst = tables[lbl + " [sim]"][1]
            ax.scatter(sst["num_running"], sst["time_s"] * 1e3, s=10, marker="x", alpha=0.5,
                       label=f"{lbl} (step model)")
    ax.set_yscale("log")   # prefill steps are orders of magnitude longer than decode steps
    ax.set_xlabel("batch size (requests in the step)")
    ax.set_ylabel("step time (ms)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(run.file("step_time_vs_batch.png"), dpi=110)
    plt.close(fig)
    figs.append("step_time_vs_batch.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for lbl in show:
        f = np.sort(np.asarray(out["finish"][lbl], dtype=float))
        f = f[np.isfinite(f)]
        if f.size:
            ax.step(f, 1 - np.arange(1, f.size + 1) / f.size, where="post", label=lbl)
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_xlabel("completion time (s)")
    ax.set_ylabel("P(completion > t)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(run.file("ccdf.png"), dpi=110)
    plt.close(fig)
    figs.append("ccdf.png")
    return figs


def run(cfg: RolloutConfig, output: str = "results") -> tuple[Path, dict[str, Any]]:
    from samspec_bench.bench.step_model import StepTimeModel
    from samspec_bench.reports.results import RunDir
    if cfg.engine == "replay":
        if cfg.step_model:
            model = StepTimeModel.load(cfg.step_model)
        else:
            model = StepTimeModel.constant(1.0)
        out = run_replay(cfg, model)
        out["step_model"] = model.describe()
        out["step_model_fitted_on"] = cfg.step_model or "none: constant 1 s per step (times are step counts)"
    elif cfg.engine == "reference":
        out = run_reference(cfg, cfg.step_model)
    else:
        raise UserError(f"--engine {cfg.engine!r}: use reference or replay")
    best = best_setting(out["metrics"])
    runp = RunDir(output, SUITE)
    write_steps_csv(runp.file("steps.csv"), out["tables"])
    figs = make_figures(runp, out, best, cfg)
    summary = {"best_setting": best, "arms": out["metrics"], "workload": out["workload"],
               "step_model": out["step_model"], "step_model_fitted_on": out["step_model_fitted_on"],
               "definitions": {"tail": "steps with no request waiting and running <= the arm's threshold",
                               "speedup_*": "baseline (off) time / arm time, same phase definition",
                               "sim_error": "simulated / measured - 1 (reference engine only)"}}
    runp.write_result(asdict(cfg), summary, figures=figs)
    return runp.path, summary


# ---------- profile ----------

def profile(model: str, batch_sizes: list[int], tokens: int, k: int, threads: int, dtype: str,
            drafter: str = "sam", seed: int = 0):
    """Measure step times at several batch sizes, with and without speculation, and fit."""
    import torch

    from samspec_bench.bench.engine import Request, SamplingParams, make_engine
    from samspec_bench.bench.scheduler_sim import make_policy, simulate
    from samspec_bench.bench.step_model import StepTimeModel, fit_from_steps
    from samspec_bench.suites.builtin_prompts import PROMPTS, _chat_ids
    torch.set_num_threads(threads)
    mx = max(batch_sizes)
    engine = make_engine("reference", model, dtype=dtype, max_num_seqs=mx, max_num_batched_tokens=max(2048, mx * (k + 1)))
    tok = engine.tokenizer
    engine.generate([Request("w", _chat_ids(tok, PROMPTS[0]), SamplingParams(max_tokens=4))])
    tables = []
    for b in batch_sizes:
        reqs = [Request(i, _chat_ids(tok, PROMPTS[i % len(PROMPTS)]),
                        SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True, seed=seed + i))
                for i in range(b)]
        for kk in (0, k):
            g = engine.generate(reqs, drafter=drafter if kk else None, num_spec_tokens=max(kk, 1))
            st = steps_from_generation(g)
            prof = _profiles([(o.prompt_ids, o.token_ids) for o in g.outputs], kk, drafter) if kk else None
            sreq = _sim_requests([(o.prompt_ids, o.token_ids) for o in g.outputs], [len(o.token_ids) for o in g.outputs], prof)
            r = simulate(sreq, k=kk, policy=make_policy("always" if kk else "off"),
                         step_model=StepTimeModel.constant(1.0), max_num_seqs=mx,
                         max_num_batched_tokens=engine.max_num_batched_tokens, fast_forward=False)
            if r.num_steps == len(st["time_s"]) and np.array_equal(r.steps["num_scheduled_tokens"], st["num_scheduled_tokens"]):
                st["context_tokens"] = r.steps["context_tokens"]
            else:
                st["context_tokens"] = np.full(len(st["time_s"]), np.nan)
            tables.append(st)
    engine.close()
    ok = [t for t in tables if np.isfinite(t["context_tokens"]).all()]
    use = ok if len(ok) == len(tables) else [{kk: v for kk, v in t.items() if kk != "context_tokens"} for t in tables]
    return fit_from_steps(use, source=f"rollout profile: {model}, batch sizes {batch_sizes}, {tokens} tokens, k={k}"), tables


# ---------- CLI ----------

@click.group(SUITE, invoke_without_command=True)
@click.option("--engine", type=click.Choice(["replay", "reference"]), default="replay", show_default=True,
              help="replay: simulate from traces; reference: measure on the PyTorch engine (vLLM: not wired yet).")
@click.option("--model", default="builtin:smollm2-135m", show_default=True, help="Model for the reference engine.")
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
@click.option("--length-dist", default="lognormal:32:0.8", show_default=True,
              help="Reference engine target lengths: lognormal:MEDIAN:SIGMA, pareto:MIN:ALPHA, fixed:N.")
@click.option("--spec-threshold", default="4", show_default=True, help="Comma-separated thresholds to sweep.")
@click.option("-k", "--num-spec-tokens", "ks", default="3", show_default=True, help="Comma-separated k to sweep.")
@click.option("--arms", default="off,always,threshold", show_default=True)
@click.option("--tail-threshold", type=int, default=None, help="Tail definition for the always-on arm (default: first threshold).")
@click.option("--step-model", default=None, help="Step-time model JSON from `rollout profile`.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads (1 avoids stalls on busy machines).")
@click.option("--output", default="results", show_default=True)
@click.option("--json", "json_out", is_flag=True, help="Print the metrics as JSON.")
@click.pass_context
def command(ctx, engine, model, traces, tokenizer, data_dir, prompts, group_size, temperature, top_p,
            max_response_len, max_num_seqs, max_num_batched_tokens, ignore_eos, length_dist, spec_threshold, ks,
            arms, tail_threshold, step_model, seed, threads, output, json_out):
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
                        length_dist=length_dist, thresholds=_int_list(spec_threshold, "--spec-threshold"),
                        ks=_int_list(ks, "-k"), arms=arm_list, tail_threshold=tail_threshold,
                        step_model=step_model, seed=seed, threads=threads)
    if engine == "replay":
        from samspec_bench.data import resolve_data_dir
        if cfg.traces is None or cfg.tokenizer is None:
            ddir = resolve_data_dir(data_dir)
            cfg.traces = cfg.traces or str(ddir / "traces" / "qwen25math_math_100x8.jsonl")
            cfg.tokenizer = cfg.tokenizer or str(ddir / "tokenizers" / "qwen3")
    path, summary = run(cfg, output)
    best = summary["best_setting"]
    if json_out:
        click.echo(json.dumps(summary, default=float, indent=1))
    else:
        for lbl, m in summary["arms"].items():
            click.echo(f"{lbl:24s} total {m['total_s']:.3f}s head {m['head_s']:.3f}s tail {m['tail_s']:.3f}s"
                       + (f"  speedup overall {m['speedup_overall']:.3f} tail {m['speedup_tail'] or float('nan'):.3f}"
                          if lbl != "off" else ""))
        click.echo(f"best setting: {best}")
    click.echo(f"results: {path}")


@command.command("profile")
@click.option("--model", default="builtin:smollm2-135m", show_default=True)
@click.option("--batch-sizes", default="1,2,4,8,16", show_default=True)
@click.option("--tokens", type=int, default=24, show_default=True, help="Tokens generated per request.")
@click.option("-k", "k", type=int, default=3, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True)
@click.option("--dtype", default="float32", show_default=True)
@click.option("--output", default="step_model.json", show_default=True, help="Where to write the model JSON.")
def profile_command(model, batch_sizes, tokens, k, threads, dtype, output):
    """Measure the reference engine's step time vs batch size / tokens and fit a step-time model."""
    m, _ = profile(model, _int_list(batch_sizes, "--batch-sizes"), tokens, k, threads, dtype)
    m.save(output)
    click.echo(json.dumps(m.describe(), indent=1))
    click.echo(f"step model: {output}")
