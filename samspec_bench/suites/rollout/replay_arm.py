"""The simulated arms of `samspec-bench rollout --engine replay`: requests taken from traces,
acceptance from each response's profile (`bench.simulation.profiles`), every arm scheduled by
`bench.simulation.scheduler.simulate` and timed by a step-time model."""

from __future__ import annotations

import time
from typing import Any, Hashable, Sequence

import numpy as np

from samspec_bench.bench.simulation.profiles import RESAMPLE_METHOD, profiles_for
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.bench.simulation.step_model import StepTimeModel, extrapolation
from samspec_bench.data import load_tokenizer, read_traces, tokenize_traces
from samspec_bench.errors import UserError
from samspec_bench.suites.rollout.config import (RolloutConfig, arm_policy, arm_settings, draw_lengths, kv_options,
                                                 tail_threshold_for)
from samspec_bench.suites.rollout.phases import (POSITION_EDGES, add_speedups, arm_metrics,
                                                 tail_acceptance_rows)


def sim_requests(pairs: Sequence[tuple[Any, Any]], lengths, profiles) -> list[SimRequest]:
    """One SimRequest per (prompt_ids, response_ids) pair with its length and, unless
    `profiles` is None (no drafting), its (drafted, accepted) profile."""
    out = []
    for i, ((p, r), n) in enumerate(zip(pairs, lengths)):
        dr, ac = (profiles[i] if profiles is not None else (None, None))
        out.append(SimRequest(len(p), int(n), dr, ac))
    return out


def trace_requests(items, prompts: int | None, group_size: int | None, traces: str):
    """`prompts` groups x `group_size` members taken from the traces' groups (groups and
    members cycled when more are asked for than the traces hold). Returns (chosen items, the
    distinct ones, each chosen item's index among them, prompts, group size)."""
    groups: dict[tuple[str, str], list] = {}
    for it in items:
        if len(it.response_ids):
            groups.setdefault((str(it.source), str(it.group)), []).append(it)
    if not groups:
        raise UserError(f"--traces {traces}: no response with tokens; give traces with responses")
    glist = list(groups.values())
    n_prompts = prompts or len(glist)
    n = group_size or max(len(g) for g in glist)
    chosen = [glist[i % len(glist)][j % len(glist[i % len(glist)])] for i in range(n_prompts) for j in range(n)]
    uniq: dict[int, int] = {}
    base = []
    for it in chosen:
        if id(it) not in uniq:
            uniq[id(it)] = len(base)
            base.append(it)
    return chosen, base, [uniq[id(it)] for it in chosen], n_prompts, n


def run_replay(cfg: RolloutConfig, step_model: StepTimeModel) -> dict[str, Any]:
    """Simulated arms on traces (`trace_requests`; group sources draft from the trace group's
    distinct responses). Lengths: the responses' own, or drawn from `length_dist` with each
    response's acceptance profile stretched to its length
    (`bench.simulation.profiles.stretch_positions`)."""
    items = tokenize_traces(read_traces(cfg.traces), load_tokenizer(cfg.tokenizer))
    chosen, base, idx, n_prompts, n = trace_requests(items, cfg.prompts, cfg.group_size, cfg.traces)
    pairs = [(it.prompt_ids, it.response_ids[: cfg.max_response_len]) for it in base]
    base_groups: list[Hashable] = [(str(it.source), str(it.group)) for it in base]
    stretch = cfg.length_dist is not None
    if stretch:
        lengths = draw_lengths(cfg.length_dist, len(idx), cfg.seed, cfg.min_len, cfg.max_response_len,
                               trace_lengths=np.array([len(p[1]) for p in pairs]))
    else:
        lengths = np.array([len(pairs[j][1]) for j in idx], dtype=np.int64)
    settings = arm_settings(cfg)
    t0 = time.perf_counter()
    profs = {k: profiles_for(pairs, base_groups, k, cfg.drafter, cfg.sources) for k in cfg.ks}
    profile_s = time.perf_counter() - t0
    sims, metrics = {}, {}
    for s in settings:
        T = tail_threshold_for(s, cfg)
        pr = profs[s["k"]] if s["k"] else None
        reqs = [SimRequest(len(pairs[j][0]), int(lengths[q]), pr[j][0] if pr else None, pr[j][1] if pr else None,
                           stretch=stretch) for q, j in enumerate(idx)]
        t0 = time.perf_counter()
        r = simulate(reqs, k=s["k"], policy=arm_policy(s), step_model=step_model, max_num_seqs=cfg.max_num_seqs,
                     max_num_batched_tokens=cfg.max_num_batched_tokens, tail_threshold=T,
                     position_edges=POSITION_EDGES, **kv_options(cfg))
        sims[s["label"]] = r
        m = arm_metrics(r.steps, r.finish_time_s, T)
        m["sim_seconds"] = time.perf_counter() - t0
        m["step_model_extrapolation"] = extrapolation(step_model, r.steps) or None
        if r.tail_acceptance is not None:
            m["tail_acceptance_by_position"] = tail_acceptance_rows(r.tail_acceptance)
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
