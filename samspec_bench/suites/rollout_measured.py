"""The measured side of `samspec-bench rollout`: the arms run on a real engine (reference or
vLLM), repeated and interleaved, each predicted by the simulation with a step-time model
fitted on the other arms (or a `rollout profile` model), and `rollout profile` itself."""

from __future__ import annotations

from typing import Any

import numpy as np

from samspec_bench.errors import UserError
from samspec_bench.suites.rollout import (POSITION_EDGES, REFERENCE_LENGTHS, RolloutConfig, _kv_options, _policy,
                                          _profiles, _sim_requests, _tail_acceptance_rows, _tail_T, add_speedups,
                                          arm_metrics, arm_settings, draw_lengths, steps_from_generation)


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


def arm_step_models(measured: dict[str, dict], path: str | None):
    """Step-time model per arm for predicting it: the profile's model when given, otherwise a
    leave-one-arm-out fit (every other measured arm; the predicted arm's own times are never
    used). '__all__': the fit on every arm (in sample; saved with the result for reuse)."""
    from samspec_bench.bench.simulation.step_model import StepTimeModel, fit_from_steps
    labels = list(measured)
    if path:
        m = StepTimeModel.load(path)
        return {lbl: m for lbl in labels + ["__all__"]}, {lbl: path for lbl in labels + ["__all__"]}
    models, fitted_on = {}, {}
    for lbl in labels:
        others = [o for o in labels if o != lbl]
        models[lbl] = fit_from_steps([measured[o] for o in others], source=f"arms {others} of this run")
        fitted_on[lbl] = f"leave-one-arm-out: arms {others} of this run (out of sample for {lbl!r})"
    models["__all__"] = fit_from_steps([measured[o] for o in labels], source=f"arms {labels} of this run")
    fitted_on["__all__"] = f"every arm of this run ({', '.join(labels)}; in sample)"
    return models, fitted_on


def _unidentified_used(model, steps) -> list[str]:
    """Features the model could not price (dropped) although this arm's steps have them."""
    from samspec_bench.bench.simulation.step_model import step_features
    f = step_features(steps)
    reason = model.fit.get("dropped_reason", {})
    return [n for n in model.dropped if reason.get(n) != "negative coefficient" and n in f and np.any(f[n] != 0)]


def _arm_drafter(cfg, k: int):
    """The drafter an arm's generate() gets: none (off), the drafter's name, or for group
    sources a fresh group-sharing SAM drafter (requests carry their prompt index as group)."""
    if not k:
        return None
    if cfg.sources == "group":
        from samspec_bench.sam import SamDrafter
        return SamDrafter(group_sharing=True)
    return cfg.drafter


def _kv_engine_options(cfg) -> dict[str, Any]:
    """The same KV cache for the reference engine (num_blocks of block_size tokens)."""
    kv = _kv_options(cfg)
    return {"num_blocks": kv["kv_capacity_tokens"] // kv["block_size"], "block_size": kv["block_size"]} if kv else {}


def run_measured(cfg: RolloutConfig, step_model_path: str | None) -> dict[str, Any]:
    """Measured arms on the reference or vLLM engine, plus the simulation's prediction of each."""
    if cfg.repeats < 1:
        raise UserError(f"--repeats {cfg.repeats}: give the number of runs per arm, an integer >= 1")
    if cfg.sources != "own" and (cfg.engine != "reference" or cfg.drafter != "sam"):
        raise UserError(f"--sources {cfg.sources} with --engine {cfg.engine}: measured group drafting needs the "
                        "reference engine and the sam drafter (or simulate it with --engine replay)")
    import torch

    from samspec_bench.bench.engines.base import Request, SamplingParams
    from samspec_bench.bench.engines.factory import make_engine
    from samspec_bench.bench.simulation.scheduler import reprice, simulate
    from samspec_bench.bench.simulation.step_model import StepTimeModel
    from samspec_bench.workload import PROMPTS, question_ids
    torch.set_num_threads(cfg.threads)
    engine = make_engine(cfg.engine, cfg.model, **_engine_options(cfg))
    tok = engine.tokenizer
    n_prompts, n = cfg.prompts or 8, cfg.group_size or 4
    lengths = draw_lengths(cfg.length_dist or REFERENCE_LENGTHS, n_prompts * n, cfg.seed, cfg.min_len,
                           cfg.max_response_len)
    reqs = []
    for i in range(n_prompts):
        p = question_ids(tok, PROMPTS[i % len(PROMPTS)]) if tok is not None else [1 + (i % 50)] * 16
        for j in range(n):
            q = i * n + j
            reqs.append(Request(q, p, SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed + q,
                                                     max_tokens=int(lengths[q]), ignore_eos=cfg.ignore_eos), group=i))
    engine.generate(reqs[:2])  # warm-up (allocations, first-call overheads)
    settings = arm_settings(cfg)
    gens, runs = {}, {}
    for _ in range(cfg.repeats):   # arms interleaved, so slow phases of a busy machine hit every arm
        for s in settings:
            pol = _policy(s)
            g = engine.generate(reqs, drafter=_arm_drafter(cfg, s["k"]),
                                num_spec_tokens=max(s["k"], 1), spec_policy=pol, progress=True)
            gens.setdefault(s["label"], g)
            runs.setdefault(s["label"], []).append(g)
    measured, finish, repeat_info = {}, {}, {}
    for lbl, rs in runs.items():
        measured[lbl], finish[lbl], repeat_info[lbl] = median_of_repeats(rs)
    # the simulation of the same workload: same requests and lengths, acceptance from the
    # arm's own outputs, scheduling checked step by step against the measured run
    sim_reqs = {}
    for s in settings:
        g = gens[s["label"]]
        pairs = [(o.prompt_ids, o.token_ids) for o in g.outputs]
        prof = _profiles(pairs, s["k"], cfg.drafter, cfg.sources, [r.group for r in reqs]) if s["k"] else None
        sim_reqs[s["label"]] = _sim_requests(pairs, [len(o.token_ids) for o in g.outputs], prof)
    base, match = {}, {}
    for s in settings:   # step-count schedules (clock = step count), priced below with a step model
        T = _tail_T(s, cfg)
        r = simulate(sim_reqs[s["label"]], k=s["k"], policy=_policy(s), step_model=StepTimeModel.constant(1.0),
                     max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens,
                     tail_threshold=T, position_edges=POSITION_EDGES, fast_forward=False, **_kv_options(cfg))
        base[s["label"]] = r
        ms = measured[s["label"]]
        same = (r.num_steps == len(ms["time_s"]) and np.array_equal(r.steps["num_running"], ms["num_running"])
                and np.array_equal(r.steps["num_scheduled_tokens"], ms["num_scheduled_tokens"]))
        match[s["label"]] = bool(same)
        if same:
            ms["context_tokens"] = r.steps["context_tokens"]
    models, fitted_on = arm_step_models(measured, step_model_path)
    metrics, sims = {}, {}
    off_out = gens["off"].outputs
    for s in settings:
        lbl, T = s["label"], _tail_T(s, cfg)
        m = arm_metrics(measured[lbl], finish[lbl], T)
        m["scheduler_match"] = match[lbl]
        m["repeats"] = repeat_info[lbl]
        m["outputs_identical_to_off"] = float(np.mean([list(a.token_ids) == list(b.token_ids) for a, b in
                                                       zip(gens[lbl].outputs, off_out)]))
        if match[lbl] and s["k"]:
            # measured tail acceptance by position: the per-request decode records placed on the
            # engine's steps by the schedule-matched simulation (checked: same tail totals)
            ta = _tail_acceptance_rows(base[lbl].tail_acceptance)
            tail = (measured[lbl]["num_waiting"] == 0) & (measured[lbl]["num_running"] <= T)
            ok = (sum(r["drafted"] for r in ta) == int(measured[lbl]["num_drafted"][tail].sum())
                  and sum(r["accepted"] for r in ta) == int(measured[lbl]["num_accepted"][tail].sum()))
            m["tail_acceptance_by_position"] = ta if ok else None
        sims[lbl] = reprice(base[lbl], models[lbl])
        sm = arm_metrics(sims[lbl].steps, sims[lbl].finish_time_s, T)
        m["simulated"] = sm
        m["sim_fit"] = {"fitted_on": fitted_on[lbl], "identified": models[lbl].fit.get("identified"),
                        "unidentified_but_used": _unidentified_used(models[lbl], measured[lbl])}
        m["sim_error"] = {"total": sm["total_s"] / m["total_s"] - 1 if m["total_s"] > 0 else None,
                          "tail": sm["tail_s"] / m["tail_s"] - 1 if m["tail_s"] > 0 else None,
                          "accepted": sm["accepted"] / m["accepted"] - 1 if m["accepted"] else None}
        metrics[lbl] = m
    add_speedups(metrics, settings, measured["off"], cfg.thresholds[0])
    for s in settings:   # simulated speedups: the baseline priced with the arm's own model
        lbl = s["label"]
        if lbl == "off":
            continue
        off_sim = reprice(base["off"], models[lbl])
        sm = {"off": arm_metrics(off_sim.steps, off_sim.finish_time_s, metrics[lbl]["tail_threshold"]),
              lbl: metrics[lbl]["simulated"]}
        add_speedups(sm, [s], off_sim.steps, cfg.thresholds[0])
        for key in ("speedup_overall", "speedup_tail"):
            mv, sv = metrics[lbl].get(key), sm[lbl].get(key)
            metrics[lbl]["sim_error"][key] = (sv / mv - 1) if mv and sv else None
    model = models["__all__"]
    tables = {}
    for s in settings:
        tables[s["label"]] = ("measured", measured[s["label"]])
        tables[s["label"] + " [sim]"] = ("simulated", sims[s["label"]].steps)
    engine.close()
    return {"settings": settings, "metrics": metrics, "tables": tables, "finish": finish,
            "step_model": model.describe(), "step_model_fitted_on": fitted_on["__all__"],
            "workload": {"requests": len(reqs), "prompts": n_prompts, "group_size": n,
                         "lengths": {"min": int(lengths.min()), "median": float(np.median(lengths)),
                                     "max": int(lengths.max()), "dist": cfg.length_dist or REFERENCE_LENGTHS}}}


def _engine_options(cfg: RolloutConfig) -> dict[str, Any]:
    """make_engine options. vLLM: the scheduler limits as engine arguments, one SAM engine with
    the sweep's largest k for every arm (the off arm runs on it with the drafter off: the same
    scheduling), the model's own max_model_len; the threshold arm's switch runs in the proposer."""
    limits = {"max_num_seqs": cfg.max_num_seqs, "max_num_batched_tokens": cfg.max_num_batched_tokens}
    if cfg.engine == "vllm":   # the simulated KV capacity as vLLM's block count (num_gpu_blocks_override)
        kv = _kv_engine_options(cfg)
        args = {**limits, **({"num_gpu_blocks_override": kv["num_blocks"], "block_size": kv["block_size"]} if kv else {})}
        return {"dtype": cfg.dtype, "seed": cfg.seed, "speculative": "sam", "num_spec_tokens": max(cfg.ks),
                "max_model_len": (kv["num_blocks"] - 1) * kv["block_size"] if kv else None, "engine_args": args}
    return {"dtype": cfg.dtype, **limits, **_kv_engine_options(cfg)}


def profile(model: str, batch_sizes: list[int], tokens: int, k: int, threads: int, dtype: str,
            drafter: str = "sam", seed: int = 0, prompt_pads: tuple[int, ...] = (0, 256)):
    """Measure step times at several batch sizes and prompt lengths, with and without
    speculation, and fit. Prompt lengths (the chat prompt plus `prompt_pads` tokens of its own
    text in front) vary the context apart from the batch size, so the fit can tell the cost
    of attending over context from the cost of a decode token; speculative runs price the
    draft (verify) tokens."""
    import torch

    from samspec_bench.bench.engines.base import Request, SamplingParams
    from samspec_bench.bench.engines.factory import make_engine
    from samspec_bench.bench.policies import make_policy
    from samspec_bench.bench.simulation.scheduler import simulate
    from samspec_bench.bench.simulation.step_model import StepTimeModel, fit_from_steps
    from samspec_bench.workload import PROMPTS, question_ids
    torch.set_num_threads(threads)
    mx = max(batch_sizes)
    engine = make_engine("reference", model, dtype=dtype, max_num_seqs=mx, max_num_batched_tokens=max(2048, mx * (k + 1)))
    tok = engine.tokenizer
    engine.generate([Request("w", question_ids(tok, PROMPTS[0]), SamplingParams(max_tokens=4))])
    tables = []
    def padded(ids, pad):
        return (list(ids) * (pad // max(len(ids), 1) + 1))[:pad] + list(ids)

    for b, pad in [(b, pad) for b in batch_sizes for pad in prompt_pads]:
        reqs = [Request(i, padded(question_ids(tok, PROMPTS[i % len(PROMPTS)]), pad),
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
    return fit_from_steps(use, source=f"rollout profile: {model}, batch sizes {batch_sizes}, prompt pads {list(prompt_pads)}, "
                                      f"{tokens} tokens, k={k}"), tables


