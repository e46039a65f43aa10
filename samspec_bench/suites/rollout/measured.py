"""The measured arms of `samspec-bench rollout` (engines reference and vllm): the arms run on
a real engine, repeated and interleaved; each is also predicted by the simulation of the same
workload priced by the engine's own profile (`--step-model`, or a short `rollout profile`
measured on the same engine before the arms), with the prediction's error (`sim_error`:
simulated / measured - 1 of total and tail time), the features the profile could not price and
where the arms reach beyond its measured range. A second, diagnostic prediction prices each arm
with a model fitted on the OTHER arms of the run (`sim_error_arms_fit`: out of sample, but from
the run itself)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.engine_device import engine_options as device_options
from samspec_bench.bench.engines.factory import engine_capabilities, make_engine
from samspec_bench.bench.simulation.profiles import profiles_for
from samspec_bench.bench.simulation.reprice import reprice
from samspec_bench.bench.simulation.scheduler import simulate
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel, extrapolation, fit_from_steps, step_features
from samspec_bench.sam import SamDrafter
from samspec_bench.sam.draft_length import DEFAULT_LENGTH
from samspec_bench.suites.rollout.config import (MEASURED_GROUP_SIZE, MEASURED_PROMPTS, REFERENCE_LENGTHS,
                                                 RolloutConfig, arm_policy, arm_settings, draw_lengths, kv_options,
                                                 tail_threshold_for, validate)
from samspec_bench.suites.rollout.phases import (POSITION_EDGES, add_speedups, arm_metrics, tail_acceptance_rows,
                                                 tail_mask)
from samspec_bench.suites.rollout.replay_arm import sim_requests
from samspec_bench.workload import PROMPTS, question_ids


def steps_from_generation(res) -> dict[str, np.ndarray]:
    """An engine generation's per-step records as a step table (the simulation's columns
    except context_tokens, which the engine does not record)."""
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


def median_of_repeats(gens) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, Any]]:
    """One measured table from repeated runs of an arm. When every repeat ran the same schedule
    (same steps, batch sizes and tokens: deterministic sampling with seeds), each step's time is
    its median over the repeats; otherwise the repeat with the median total is kept. Finish
    times: per request, the median. The repeats' totals (the measurement noise) are returned."""
    tabs = [steps_from_generation(g) for g in gens]
    totals = [float(t["time_s"].sum()) for t in tabs]
    same = all(len(t["time_s"]) == len(tabs[0]["time_s"]) and
               all(np.array_equal(t[c], tabs[0][c]) for c in ("num_running", "num_scheduled_tokens", "num_emitted"))
               for t in tabs[1:])
    fin = np.array([[o.finish_time_s if o.finish_time_s is not None else np.nan for o in g.outputs] for g in gens])
    if same:
        out = dict(tabs[0])
        out["time_s"] = np.median(np.stack([t["time_s"] for t in tabs]), axis=0)
        out["clock_s"] = np.cumsum(out["time_s"])
    else:
        out = tabs[int(np.argsort(totals)[len(totals) // 2])]
    info = {"n": len(tabs), "same_schedule": bool(same), "total_s_each": totals,
            "spread": (max(totals) / min(totals) - 1) if min(totals) > 0 else None}
    return out, np.nanmedian(fin, axis=0) if len(gens) > 1 else fin[0], info


# ---------- step models and their prediction ----------

def arm_step_models(measured: dict[str, dict]):
    """Leave-one-arm-out step-time models: per arm, a fit on every OTHER measured arm (the
    predicted arm's own times are never used); '__all__': the fit on every arm (in sample)."""
    labels = list(measured)
    models, fitted_on = {}, {}
    for lbl in labels:
        others = [o for o in labels if o != lbl]
        models[lbl] = fit_from_steps([measured[o] for o in others], source=f"arms {others} of this run")
        fitted_on[lbl] = f"leave-one-arm-out: arms {others} of this run (out of sample for {lbl!r})"
    models["__all__"] = fit_from_steps([measured[o] for o in labels], source=f"arms {labels} of this run")
    fitted_on["__all__"] = f"every arm of this run ({', '.join(labels)}; in sample)"
    return models, fitted_on


def unidentified_used(model: StepTimeModel, steps) -> list[str]:
    """Features the model could not price (dropped) although this arm's steps have them."""
    f = step_features(steps)
    reason = getattr(model, "fit", {}).get("dropped_reason", {})   # an analytic (roofline) model drops nothing
    return [n for n in getattr(model, "dropped", []) if reason.get(n) != "negative coefficient" and n in f
            and np.any(f[n] != 0)]


def prediction_error(measured: dict[str, Any], simulated: dict[str, Any]) -> dict[str, float | None]:
    """simulated / measured - 1 of an arm's total and tail time and accepted tokens (None
    where the measured value is zero)."""
    m, sm = measured, simulated
    return {"total": sm["total_s"] / m["total_s"] - 1 if m["total_s"] > 0 else None,
            "tail": sm["tail_s"] / m["tail_s"] - 1 if m["tail_s"] > 0 else None,
            "accepted": sm["accepted"] / m["accepted"] - 1 if m["accepted"] else None}


def error_summary(metrics: dict[str, dict], goal: float = 0.10) -> dict[str, Any]:
    """The simulation's prediction error over the measured arms: per arm total and tail
    (simulated / measured - 1), the largest absolute ones, and whether both are within `goal`."""
    per = {lbl: {"total": (m.get("sim_error") or {}).get("total"), "tail": (m.get("sim_error") or {}).get("tail")}
           for lbl, m in metrics.items()}
    worst = {}
    for key in ("total", "tail"):
        vals = [abs(v[key]) for v in per.values() if v[key] is not None]
        worst[key] = max(vals) if vals else None
    return {"per_arm": per, "max_abs_total": worst["total"], "max_abs_tail": worst["tail"], "goal": goal,
            "within_goal": (worst["total"] is not None and worst["total"] <= goal
                            and (worst["tail"] is None or worst["tail"] <= goal)),
            "definition": "simulated / measured - 1; the simulation priced by the engine's own profile"}


def speedup_error(measured: float | None, simulated: float | None) -> float | None:
    return (simulated / measured - 1) if measured and simulated else None


# ---------- the engine and its workload ----------

def arm_drafter(cfg: RolloutConfig, k: int):
    """The drafter an arm's generate() gets: none (off), the drafter's name, or for group
    sources a fresh group-sharing SAM drafter (requests carry their prompt index as group)."""
    if not k:
        return None
    if cfg.sources == "group":
        return SamDrafter(group_sharing=True, length="fixed" if cfg.drafter == "sam-fixed" else DEFAULT_LENGTH)
    return cfg.drafter


def kv_engine_options(cfg: RolloutConfig) -> dict[str, Any]:
    """The same KV cache for the reference engine (num_blocks of block_size tokens)."""
    kv = kv_options(cfg)
    return {"num_blocks": kv["kv_capacity_tokens"] // kv["block_size"], "block_size": kv["block_size"]} if kv else {}


def engine_options(cfg: RolloutConfig) -> dict[str, Any]:
    """make_engine options: the scheduler limits and the simulated KV capacity as options of
    their own, or where the engine takes vLLM engine arguments as those (the capacity as vLLM's
    block count, num_gpu_blocks_override) with the model's own max_model_len. An engine that
    fixes its method when built is one SAM engine with the sweep's largest k for every arm (the
    off arm runs on it with the drafter off: the same scheduling; the threshold arm's switch
    runs in the proposer)."""
    caps = engine_capabilities(cfg.engine)
    limits = {"max_num_seqs": cfg.max_num_seqs, "max_num_batched_tokens": cfg.max_num_batched_tokens}
    kv = kv_engine_options(cfg)
    if not caps.engine_args:
        return {"dtype": cfg.dtype, **limits, **kv, **device_options(cfg.engine, cfg.device)}
    args = {**limits, **({"num_gpu_blocks_override": kv["num_blocks"], "block_size": kv["block_size"]} if kv else {})}
    options: dict[str, Any] = {"dtype": cfg.dtype, "engine_args": args,
                               "max_model_len": (kv["num_blocks"] - 1) * kv["block_size"] if kv else None}
    if caps.engine_seed:
        options["seed"] = cfg.seed
    if caps.method_at_build:
        options.update(speculative="sam", num_spec_tokens=max(cfg.ks))
    return options


def rollout_requests(cfg: RolloutConfig, tok, n_prompts: int, n: int, lengths: np.ndarray) -> list[Request]:
    """`n_prompts` built-in questions x `n` samples each (seed + request index), with the
    drawn target lengths; the prompt index is the request's group."""
    reqs = []
    for i in range(n_prompts):
        p = question_ids(tok, PROMPTS[i % len(PROMPTS)]) if tok is not None else [1 + (i % 50)] * 16
        for j in range(n):
            q = i * n + j
            reqs.append(Request(q, p, SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed + q,
                                                     max_tokens=int(lengths[q]), ignore_eos=cfg.ignore_eos), group=i))
    return reqs


# ---------- the run ----------

def run_measured(cfg: RolloutConfig, step_model: Any = None, priced: dict[str, Any] | None = None,
                 profiler: Callable[[Any], tuple[Any, dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Measured arms on the reference or vLLM engine, plus the simulation's prediction of each,
    priced by `step_model` (described by `priced`), or when it is None by the model that
    `profiler(engine)` measures on the same engine before the arms (returns (model, priced))."""
    validate(cfg)
    if step_model is None and profiler is None:
        raise ValueError("run_measured needs a step model or a profiler")
    import torch  # imports torch: the measured engines run on it

    torch.set_num_threads(cfg.threads)
    engine = make_engine(cfg.engine, cfg.model, **engine_options(cfg))
    n_prompts, n = cfg.prompts or MEASURED_PROMPTS, cfg.group_size or MEASURED_GROUP_SIZE
    # prompt-major like rollout_requests: request q = i * n + j is prompt i's (--length-group-share's groups)
    drawn = draw_lengths(cfg.length_dist or REFERENCE_LENGTHS, n_prompts * n, cfg.seed, 0,
                         cfg.max_response_len, group_size=n, share=float(cfg.length_group_share))
    lengths = np.maximum(drawn, cfg.min_len)   # the shortest target generated; how many were raised is counted
    reqs = rollout_requests(cfg, engine.tokenizer, n_prompts, n, lengths)
    engine.generate(reqs[:2])  # warm-up (allocations, first-call overheads)
    if step_model is None:
        step_model, priced = profiler(engine)
    settings = arm_settings(cfg)
    gens, runs = {}, {}
    for _ in range(cfg.repeats):   # arms interleaved, so slow phases of a busy machine hit every arm
        for s in settings:
            g = engine.generate(reqs, drafter=arm_drafter(cfg, s["k"]),
                                num_spec_tokens=max(s["k"], 1), spec_policy=arm_policy(s), progress=True)
            gens.setdefault(s["label"], g)
            runs.setdefault(s["label"], []).append(g)
    measured, finish, repeat_info = {}, {}, {}
    for lbl, rs in runs.items():
        measured[lbl], finish[lbl], repeat_info[lbl] = median_of_repeats(rs)
    # the simulation of the same workload: same requests and lengths, acceptance from the
    # arm's own outputs, scheduling checked step by step against the measured run
    base, match = {}, {}
    for s in settings:   # step-count schedules (clock = step count), priced below with a step model
        g = gens[s["label"]]
        pairs = [(o.prompt_ids, o.token_ids) for o in g.outputs]
        prof = profiles_for(pairs, [r.group for r in reqs], s["k"], cfg.drafter, cfg.sources) if s["k"] else None
        r = simulate(sim_requests(pairs, [len(o.token_ids) for o in g.outputs], prof), k=s["k"],
                     policy=arm_policy(s), step_model=StepTimeModel.constant(1.0),
                     max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens,
                     tail_threshold=tail_threshold_for(s, cfg), position_edges=POSITION_EDGES, fast_forward=False,
                     **kv_options(cfg))
        base[s["label"]] = r
        ms = measured[s["label"]]
        same = (r.num_steps == len(ms["time_s"]) and np.array_equal(r.steps["num_running"], ms["num_running"])
                and np.array_equal(r.steps["num_scheduled_tokens"], ms["num_scheduled_tokens"]))
        match[s["label"]] = bool(same)
        if same:
            ms["context_tokens"] = r.steps["context_tokens"]
    arm_models, fitted_on = arm_step_models(measured)
    metrics, sims = {}, {}
    off_out = gens["off"].outputs
    for s in settings:
        lbl, T = s["label"], tail_threshold_for(s, cfg)
        m = arm_metrics(measured[lbl], finish[lbl], T)
        m["scheduler_match"] = match[lbl]
        m["repeats"] = repeat_info[lbl]
        m["outputs_identical_to_off"] = float(np.mean([list(a.token_ids) == list(b.token_ids) for a, b in
                                                       zip(gens[lbl].outputs, off_out)]))
        if match[lbl] and s["k"]:
            # measured tail acceptance by position: the per-request decode records placed on the
            # engine's steps by the schedule-matched simulation (checked: same tail totals)
            ta = tail_acceptance_rows(base[lbl].tail_acceptance)
            tail = tail_mask(measured[lbl], T)
            ok = (sum(r["drafted"] for r in ta) == int(measured[lbl]["num_drafted"][tail].sum())
                  and sum(r["accepted"] for r in ta) == int(measured[lbl]["num_accepted"][tail].sum()))
            m["tail_acceptance_by_position"] = ta if ok else None
        sims[lbl] = reprice(base[lbl], step_model)
        sm = arm_metrics(sims[lbl].steps, sims[lbl].finish_time_s, T)
        m["simulated"] = sm
        m["sim_fit"] = {"priced_by": (priced or {}).get("source"), "kind": (priced or {}).get("kind"),
                        "unidentified_but_used": unidentified_used(step_model, measured[lbl]),
                        "extrapolation": extrapolation(step_model, sims[lbl].steps) or None}
        m["sim_error"] = prediction_error(m, sm)
        loao = reprice(base[lbl], arm_models[lbl])
        m["sim_error_arms_fit"] = {**prediction_error(m, arm_metrics(loao.steps, loao.finish_time_s, T)),
                                   "fitted_on": fitted_on[lbl], "identified": arm_models[lbl].fit.get("identified"),
                                   "unidentified_but_used": unidentified_used(arm_models[lbl], measured[lbl])}
        metrics[lbl] = m
    add_speedups(metrics, settings, measured["off"], cfg.thresholds[0])
    off_sim = reprice(base["off"], step_model)
    for s in settings:   # simulated speedups: the simulated baseline over the simulated arm
        lbl = s["label"]
        if lbl == "off":
            continue
        sm = {"off": arm_metrics(off_sim.steps, off_sim.finish_time_s, metrics[lbl]["tail_threshold"]),
              lbl: metrics[lbl]["simulated"]}
        add_speedups(sm, [s], off_sim.steps, cfg.thresholds[0])
        for key in ("speedup_overall", "speedup_tail"):
            metrics[lbl]["sim_error"][key] = speedup_error(metrics[lbl].get(key), sm[lbl].get(key))
    tables = {}
    for s in settings:
        tables[s["label"]] = ("measured", measured[s["label"]])
        tables[s["label"] + " [sim]"] = ("simulated", sims[s["label"]].steps)
    engine.close()
    return {"settings": settings, "metrics": metrics, "tables": tables, "finish": finish,
            "step_model": step_model.describe(), "step_model_fitted_on": (priced or {}).get("source"),
            "priced_by": priced, "step_model_arms_fit": arm_models["__all__"].describe(),
            "prediction_error": error_summary(metrics),
            "workload": {"requests": len(reqs), "prompts": n_prompts, "group_size": n,
                         "lengths": {"min": int(lengths.min()), "median": float(np.median(lengths)),
                                     "max": int(lengths.max()), "dist": cfg.length_dist or REFERENCE_LENGTHS},
                         "length_group_share": float(cfg.length_group_share),
                         "requests_raised_to_min_len": int(np.sum(drawn < cfg.min_len)), "min_len": cfg.min_len}}
