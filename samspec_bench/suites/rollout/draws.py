"""A simulated rollout as several draws: the response lengths drawn from --length-dist with seeds
seed, seed + 1, ..., every arm simulated on each draw, and every modelled figure reported as its
median [min, max] over the draws (`spread.py`). The first draw (--seed) is the one whose step
tables, per-instance lines and figures are shown.

Also here: what each arm's KV cache was (capacity, where it came from, a refusal note) and how
many requests it preempted, read off the simulation's own results (`SimResult.kv`), and a
compact per-draw record of each arm's phases per instance (`phase_record`) from which the
sensitivity table re-reads a draw under other host overheads, tail readings and rounds.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from samspec_bench.suites.rollout.config import RolloutConfig, random_lengths
from samspec_bench.suites.rollout.kept_work import kept_draw
from samspec_bench.suites.rollout.phases import idle_end, ratio, tail_mask
from samspec_bench.suites.rollout.spread import spread

DEFAULT_DRAWS = 5
ARM_FIGURES = ("total_s", "head_s", "tail_s", "speedup_overall", "speedup_head", "speedup_tail",
               "speedup_mean_instance", "time_saved_fraction", "tokens_per_step", "drafted_per_step",
               "verify_tokens_per_token", "tokens_per_step_head", "tokens_per_step_tail", "preemptions", "last10_s",
               "speedup_last10", "idle_s")


def draw_seeds(cfg: RolloutConfig) -> list[int]:
    """The seeds of the draws: --draws of them (default DEFAULT_DRAWS) from --seed on when the
    lengths are drawn, else the one seed (every draw would be the same)."""
    n = cfg.draws if getattr(cfg, "draws", None) else DEFAULT_DRAWS
    return [cfg.seed + i for i in range(n)] if random_lengths(cfg) else [cfg.seed]


def step_tables(sim) -> list[dict[str, np.ndarray]]:
    """Per instance, its step table (one instance without --dp)."""
    return [x.steps for x in sim.instances] if hasattr(sim, "instances") else [sim.steps]


def phase_record(steps: dict[str, np.ndarray], T: int) -> dict[str, float]:
    """One instance's phases at tail threshold T: time and steps in all and in the tail, and when
    (step index, seconds) its tail begins (its first tail step; the end when it has none)."""
    t = np.asarray(steps["time_s"], dtype=float)
    tail = tail_mask(steps, T)
    first = int(np.argmax(tail)) if tail.any() else len(t)
    total, start = float(t.sum()), float(t[:first].sum())
    end = idle_end(steps, total)
    if end is not None:   # it waited idle for work (a shared queue): its clock
        clock = np.asarray(steps["clock_s"], dtype=float)
        total, start = end, float(clock[first] - t[first]) if first < len(t) else end
    return {"total_s": total, "tail_s": float(t[tail].sum()), "steps": int(len(t)),
            "tail_steps": int(tail.sum()), "tail_start_step": first, "tail_start_s": start}


def kv_block(sim) -> dict[str, Any]:
    """An arm's KV cache as its simulation saw it: capacity per instance (tokens; None =
    unlimited), its source, a refusal note, and preemptions in all and per instance."""
    kvs = [x.kv for x in sim.instances] if hasattr(sim, "instances") else [sim.kv]
    first = kvs[0] if kvs else {}
    per = [int(k.get("preemptions", 0)) for k in kvs]
    out = {"capacity_tokens": first.get("capacity_tokens"), "source": first.get("source"),
           "preemptions": int(sum(per)), "preemptions_per_instance": per if len(per) > 1 else None}
    if first.get("note"):
        out["note"] = first["note"]
    return out


def arm_figures(m: dict[str, Any]) -> dict[str, Any]:
    """The scalar figures of one arm in one draw (ARM_FIGURES, plus the mean instance time, the
    pooled tail and its share and, against the off baseline split at the arm's threshold, the baseline's
    mean instance time and tail share)."""
    out = {k: m.get(k) for k in ARM_FIGURES}
    d = m.get("dp") or {}
    out["mean_instance_s"] = d.get("mean_instance_makespan_s", m.get("total_s"))
    out["tail_share"] = d.get("tail_share_pooled") if d else ratio(m.get("tail_s"), m.get("total_s"))
    # the tail the tail speed-up divides: every instance's own tail summed (one instance: its tail)
    out["tail_s_pooled"] = d.get("tail_s_pooled") if d else m.get("tail_s")
    base = m.get("baseline_phases")
    if base:
        if "tail_s_pooled" in base:
            out["baseline_tail_share"] = ratio(base["tail_s_pooled"], base["tail_s_pooled"] + base["head_s_pooled"])
        else:
            out["baseline_tail_share"] = ratio(base.get("tail_s"), base.get("total_s"))
        out["baseline_mean_instance_s"] = base.get("mean_instance_makespan_s", base.get("total_s"))
    return out


def draw_record(seed: int, sims: dict[str, Any], metrics: dict[str, dict]) -> dict[str, Any]:
    """What is kept of one draw: per arm its figures and KV block, its phases per instance at its
    own tail threshold, and (speculating arms) the off baseline's phases at that threshold."""
    rec: dict[str, Any] = {"seed": seed, "arms": {}, "phases": {}, "baseline": {}}
    for lbl, m in metrics.items():
        T = m["tail_threshold"]
        rec["arms"][lbl] = {**arm_figures(m), "kv": kv_block(sims[lbl])}
        rec["phases"][lbl] = [phase_record(st, T) for st in step_tables(sims[lbl])]
        if lbl != "off" and "off" in sims:
            rec["baseline"][lbl] = [phase_record(st, T) for st in step_tables(sims["off"])]
    return rec


def spreads(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arm, every figure of the records as a spread over the draws."""
    out: dict[str, dict[str, Any]] = {}
    for lbl, first in records[0]["arms"].items():
        keys = [k for k in first if k != "kv"]
        out[lbl] = {k: spread(r["arms"][lbl].get(k) for r in records) for k in keys}
    return out


def run_draws(cfg: RolloutConfig, sims: dict[str, Any], metrics: dict[str, dict],
              simulate_seed: Callable[[int], tuple[dict[str, Any], dict[str, dict]]]) -> dict[str, Any]:
    """The run's draws: the shown one (`sims`, `metrics`, seed --seed) and the others simulated
    by `simulate_seed(seed)` (kept as records only). Adds to every arm's metrics `spread` (figure
    -> median / min / max / values over the draws) and `kv` (the shown draw's KV block, with the
    preemptions' spread). Returns the draws' block: seeds, what varies, the records."""
    seeds = draw_seeds(cfg)
    records = [kept_draw(f"seed={seeds[0]}", lambda: draw_record(seeds[0], sims, metrics))]

    def other(seed: int) -> dict[str, Any]:
        s, m = simulate_seed(seed)
        return draw_record(seed, s, m)   # step tables of RL-scale draws are large: one at a time

    for i, seed in enumerate(seeds[1:], 2):   # each kept as it finishes (kept_work.py: --resume)
        records.append(kept_draw(f"seed={seed}", lambda seed=seed: other(seed),
                                 label=f"draw {i}/{len(seeds)} (seed {seed})"))
    for lbl, sp in spreads(records).items():
        metrics[lbl]["spread"] = sp
        metrics[lbl]["kv"] = {**records[0]["arms"][lbl]["kv"], "preemptions_spread": sp["preemptions"]}
    if len(seeds) > 1:
        varies = f"response lengths drawn from {cfg.length_dist} with seeds {seeds[0]}..{seeds[-1]}"
    elif random_lengths(cfg):   # drawn, but once: no spread to show
        varies = f"nothing: one draw of the lengths from {cfg.length_dist} (seed {seeds[0]}; --draws N for a spread)"
    else:
        varies = "nothing: the lengths are not drawn (" + (cfg.length_dist or "the traces' own") + "), one draw"
    return {"n": len(seeds), "seeds": seeds, "varies": varies, "shown_seed": seeds[0],
            "statistic": "median [min, max] over the draws", "records": records}
