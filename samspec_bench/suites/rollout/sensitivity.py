"""What a simulated prediction rests on: the tail share of the off rollout, the per-step gain and
the long-tail speedup of one speculating arm, with ONE modelled assumption changed at a time.
Every cell is a median [min, max] over the same draws of the lengths: the run's first
SENSITIVITY_DRAWS draws (`draws.py`; simulating each changed assumption costs a full rollout
per draw), the prediction's own row included so that rows compare.

The assumptions and the values tried (nothing is fitted to a published figure: values are
tried, the table shows what each does):
- response lengths (the run's lognormal): median x0.5 / x2; sigma x2/3 / x4/3; the share
  truncated at the maximum 0 % / 20 % (`mixture_lengths`: that share at exactly the maximum,
  the rest lognormal redrawn below it, independent of each other); how alike a prompt's
  responses are (--length-group-share): independent (0) and the traces' measured share,
  whichever the run did not draw with; which requests run long (--length-rank-share,
  length_order.py): independent of the recorded response (0) and in the recorded order (1),
  whichever the run did not draw with;
- KV capacity: unlimited; a smaller engine memory share (gpu_memory_utilization 0.8, the seed's
  scripts' value, for a preset; 0.6) where the step model knows the device memory; x0.6 of a
  given --kv-capacity-tokens;
- attention's kernel, where the roofline switches kernels (the H100 / H200 / A100 rows: split-KV on
  64-row tiles below its block count, the standard kernel's 128-row tiles above): one kernel of
  64-row tiles, and one of 128-row tiles, for every step (a serving engine's kernel has its own
  rule);
- DAPO's generation rounds: a training step of 2 rounds (draws taken two at a time, cyclically,
  from the run's draws); for a preset whose train batch is smaller than its generation batch,
  the generation batch made of rounds of train-batch prompts (the seed's scripts set
  GEN_BATCH_SIZE = TRAIN_BATCH_SIZE: one wave per instance per round), simulated;
- host overhead per step: +25 ms, +50 ms on every step (eager launches, sampler, scheduler).
  Schedules do not depend on step times, so each draw's steps are re-read, not re-simulated;
- how the tail is read: pooled over instances (the comparison's reading), the slowest instance's
  tail, or the wall time from the first instance's tail start to the end (a per-step timeline
  split, as a figure of a whole step would be). A reading, not a modelled assumption.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Callable

import click
import numpy as np

from samspec_bench.bench.simulation.hardware import one_attention_kernel
from samspec_bench.suites.rollout.config import RolloutConfig, lognormal_params
from samspec_bench.suites.rollout.draws import draw_record, draw_seeds
from samspec_bench.suites.rollout.kept_work import call_index, kept_draw, scope
from samspec_bench.suites.rollout.length_share import share_used, traces_share
from samspec_bench.suites.rollout.phases import ratio, tail_ratio
from samspec_bench.suites.rollout.presets import get_preset
from samspec_bench.suites.rollout.replay_arm import Replay, draw, simulate_arms
from samspec_bench.suites.rollout.spread import fmt, matched, spread
from samspec_bench.suites.rollout.units import to_step_units

SENSITIVITY_DRAWS = 3
MEDIAN_FACTORS = (0.5, 2.0)
SIGMA_FACTORS = (2 / 3, 4 / 3)
TRUNCATED_SHARES = (0.0, 0.20)
HOST_EXTRA_S = (0.025, 0.050)
KV_UTILIZATIONS = (0.8, 0.6)      # 0.8: the seed's scripts' GPU_MEMORY_UTILIZATION
ROUND_SEED_STRIDE = 1_000_003     # round r of a draw with seed s draws its lengths with seed s + r * stride
READINGS = {"pooled": ("pooled over instances", "each instance's tail time summed, over their times summed (the "
                                                "comparison's reading)"),
            "slowest": ("the slowest instance", "the slowest instance's own tail over its time"),
            "first": ("wall from the first tail start", "the wall time from the first instance's tail start to the "
                                                         "end, over the rollout's wall time")}
DEFINITION = ("tail share = off arm's tail time / its time (read as the row says; default pooled over instances), "
              "%; gain = off / on - 1 of the rollout time (slowest instance; summed over rounds), %; tail speedup = "
              "off tail / on tail; preemptions = off arm's, all instances")


def mixture_lengths(median: float, sigma: float, truncated_share: float, n: int, seed: int, lo: int, hi: int
                    ) -> np.ndarray:
    """n response lengths: round(share * n) at exactly `hi`, the rest lognormal(median, sigma)
    conditioned below `hi` (redrawn), clipped to >= lo."""
    if not 0.0 <= truncated_share <= 1.0:
        raise ValueError(f"truncated share {truncated_share} outside [0, 1]")
    rng = np.random.default_rng(seed)
    x = np.round(np.exp(rng.normal(math.log(median), sigma, n)))
    for _ in range(1000):
        bad = x >= hi
        if not bad.any():
            break
        x[bad] = np.round(np.exp(rng.normal(math.log(median), sigma, int(bad.sum()))))
    x = np.clip(x, lo, hi - 1)
    x[rng.choice(n, int(round(truncated_share * n)), replace=False)] = hi
    return x.astype(np.int64)


class NoMemory:
    """A step model with its device memory hidden: the simulation's KV cache is then unlimited."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        if name in ("memory", "kv_capacity_tokens", "fits"):
            raise AttributeError(name)
        return getattr(self._model, name)


def capacity_at(step_model, utilization: float) -> int | None:
    """KV tokens beside the weights when the engine takes `utilization` of the device memory (the
    step model's own rule, `memory()`); None when it knows no memory."""
    mem = step_model.memory() if callable(getattr(step_model, "memory", None)) else {}
    kvb = getattr(step_model, "kv_bytes_per_token", None)
    if not mem.get("memory_bytes") or not kvb:
        return None
    device = mem["memory_bytes"] / mem["utilization"]
    return max(int((device * utilization - mem["weight_bytes"]) // kvb), 0)


# ---------- reading a draw ----------

def read(rounds: list[tuple[list[dict], list[dict]]], host_s: float = 0.0, reading: str = "pooled"
         ) -> dict[str, float | None]:
    """Tail share (%), gain (%) and tail speedup of a training step made of `rounds`, each (off
    instances' phases, arm instances' phases) as `draws.phase_record` keeps them, with `host_s`
    seconds added to every step, the tail read as READINGS[reading]."""
    tail_o = den_o = tail_a = wall_o = wall_a = 0.0
    for off, arm in rounds:
        tot_o = [p["total_s"] + host_s * p["steps"] for p in off]
        tot_a = [p["total_s"] + host_s * p["steps"] for p in arm]
        wo, wa = max(tot_o), max(tot_a)
        if reading == "pooled":
            tail_o += sum(p["tail_s"] + host_s * p["tail_steps"] for p in off)
            tail_a += sum(p["tail_s"] + host_s * p["tail_steps"] for p in arm)
            den_o += sum(tot_o)
        elif reading == "slowest":
            i, j = int(np.argmax(tot_o)), int(np.argmax(tot_a))
            tail_o += off[i]["tail_s"] + host_s * off[i]["tail_steps"]
            tail_a += arm[j]["tail_s"] + host_s * arm[j]["tail_steps"]
            den_o += wo
        else:
            tail_o += wo - min(p["tail_start_s"] + host_s * p["tail_start_step"] for p in off)
            tail_a += wa - min(p["tail_start_s"] + host_s * p["tail_start_step"] for p in arm)
            den_o += wo
        wall_o, wall_a = wall_o + wo, wall_a + wa
    share = ratio(tail_o, den_o)
    return {"tail_share_pct": None if share is None else 100.0 * share,
            "gain_pct": None if not wall_a else 100.0 * (wall_o / wall_a - 1.0), "speedup_tail": tail_ratio(tail_o, tail_a)}


def rounds_of(records: list[dict], label: str) -> list[tuple[list[dict], list[dict]]]:
    """The (off at the arm's threshold, arm) phases of each record, one round each."""
    return [(r["baseline"][label], r["phases"][label]) for r in records]


def row(assumption: str, value: str, steps: list[list[dict]], label: str, how: str, modelled: bool = False,
        host_s: float = 0.0, reading: str = "pooled") -> dict[str, Any]:
    """One table row: `steps` holds, per draw, the records of that draw's rounds."""
    figs = [read(rounds_of(recs, label), host_s, reading) for recs in steps]
    click.echo(f"rollout: sensitivity: {assumption} = {value}", err=True)   # rows take a draw's time each
    pre = [sum(r["arms"]["off"]["preemptions"] or 0 for r in recs) for recs in steps]
    return {"assumption": assumption, "value": value, "modelled": modelled, "how": how, "draws": len(steps),
            "tail_share_pct": spread(f["tail_share_pct"] for f in figs), "gain_pct": spread(f["gain_pct"] for f in figs),
            "speedup_tail": spread(f["speedup_tail"] for f in figs), "preemptions_off": spread(pre)}


# ---------- the assumptions ----------

def simulated(cfg: RolloutConfig, rep: Replay, pick, model, seeds, lengths_for: Callable[[int], np.ndarray] | None,
              rounds: int = 1) -> list[list[dict]]:
    """Per seed, the records of its `rounds` simulated rounds (lengths from `lengths_for(seed)`,
    else drawn as the run draws them, round r with seed + r * ROUND_SEED_STRIDE)."""
    def rounds_of_seed(seed: int) -> list[dict]:
        recs = []
        for r in range(rounds):
            s = seed + r * ROUND_SEED_STRIDE
            lengths, stretch = (lengths_for(s), True) if lengths_for else draw(replace(cfg, seed=s), rep)
            sims, metrics = simulate_arms(cfg, rep, pick, lengths, stretch, model)
            recs.append(draw_record(s, sims, metrics))
            del sims
        return recs

    call = call_index()   # each seed's rounds kept as they finish (kept_work.py: --resume)
    return [kept_draw(f"call={call}/seed={seed}", lambda seed=seed: rounds_of_seed(seed)) for seed in seeds]


def length_rows(cfg, rep, pick, model, seeds, label) -> list[dict]:
    med, sigma = lognormal_params(cfg.length_dist, "--sensitivity")
    n, lo, hi = len(rep.idx), cfg.min_len, cfg.max_response_len

    def lognormal(m, s):
        spec = f"lognormal:{m:g}:{s:g}"
        return lambda seed: draw(replace(cfg, seed=seed, length_dist=spec), rep)[0]

    rows = []
    for f in MEDIAN_FACTORS:
        rows.append(row("response lengths: median", f"x{f:g} ({med * f:.0f} tokens)",
                        simulated(cfg, rep, pick, model, seeds, lognormal(med * f, sigma)), label,
                        f"lognormal:{med * f:g}:{sigma:g}"))
    for f in SIGMA_FACTORS:
        rows.append(row("response lengths: sigma (spread)", f"{sigma * f:.2g} (x{f:.2g})",
                        simulated(cfg, rep, pick, model, seeds, lognormal(med, sigma * f)), label,
                        f"lognormal:{med:g}:{sigma * f:.3g}"))
    for share in TRUNCATED_SHARES:
        rows.append(row("response lengths: share at the maximum", f"{100 * share:.0f} %",
                        simulated(cfg, rep, pick, model, seeds,
                                  lambda seed, share=share: mixture_lengths(med, sigma, share, n, seed, lo, hi)),
                        label, "that share at exactly the maximum, the rest lognormal redrawn below it"))
    return rows + group_share_rows(cfg, rep, pick, model, seeds, label) + rank_share_rows(cfg, rep, pick, model,
                                                                                           seeds, label)


def group_share_rows(cfg, rep, pick, model, seeds, label) -> list[dict]:
    """Lengths with a prompt's responses independent, and alike by the traces' measured share:
    each where the run drew with another share."""
    used, got = share_used(cfg, rep), traces_share(rep)
    tries = {0.0: "independent"}
    if got is not None:
        tries.setdefault(round(got["share"], 2), f"the traces', {got['groups']} groups")
    return [redrawn_row(cfg, rep, pick, model, seeds, label, "response lengths: alike in a group",
                        f"{share:.2f} ({what})", f"--length-group-share {share:.2f}", length_group_share=share)
            for share, what in tries.items() if abs(share - used) >= 0.005]


def rank_share_rows(cfg, rep, pick, model, seeds, label) -> list[dict]:
    """Lengths drawn apart from the replayed responses, and in their recorded order: each where
    the run drew otherwise."""
    tries = ((0.0, "independent of the recorded response"), (1.0, "in the recorded order"))
    return [redrawn_row(cfg, rep, pick, model, seeds, label, "response lengths: which run long",
                        f"{share:g} ({what})", f"--length-rank-share {share:g}", length_rank_share=share)
            for share, what in tries if abs(share - cfg.length_rank_share) >= 1e-9]


def redrawn_row(cfg, rep, pick, model, seeds, label, assumption: str, value: str, how: str, **changed) -> dict:
    """One row whose lengths are drawn as the run draws them with the config `changed`."""
    return row(assumption, value, simulated(cfg, rep, pick, model, seeds,
                                            lambda seed: draw(replace(cfg, seed=seed, **changed), rep)[0]),
               label, how)


def kv_rows(cfg, rep, pick, model, seeds, label) -> list[dict]:
    rows = [row("KV capacity", "unlimited", simulated(cfg, rep, pick, NoMemory(model), seeds, None), label,
                "no KV limit: nothing preempted, admissions by max_num_seqs and the token budget only")]
    if cfg.kv_capacity_tokens:
        caps = [("x0.6 of the given capacity", int(cfg.kv_capacity_tokens * 0.6))]
    else:
        utils = KV_UTILIZATIONS if cfg.preset else KV_UTILIZATIONS[1:]
        caps = [(f"utilisation {u:g}" + (" (seed scripts)" if u == 0.8 and cfg.preset else ""),
                 capacity_at(model, u)) for u in utils]
    for value, cap in caps:
        if cap is None or cap < cfg.block_size:
            continue
        rows.append(row("KV capacity", f"{value}: {cap:,} tok",
                        simulated(replace(cfg, kv_capacity_tokens=cap), rep, pick, model, seeds, None), label,
                        "KV cache of that many tokens per instance; preemption as the engine does"))
    return rows


def kernel_rows(cfg, rep, pick, model, seeds, label) -> list[dict]:
    """Where the roofline switches attention kernels (flash attention's split-KV below its block
    count, the standard kernel above), the same run with one kernel for every step: a serving
    engine's kernel chooses by its own rule, which the calibration did not measure."""
    eff = getattr(model, "eff", None) or {}
    if eff.get("attention_split_below", 0) <= 0 or not hasattr(model, "with_hardware"):
        return []
    return [row("attention kernel", f"one kernel, {rows}-row tiles",
                simulated(cfg, rep, pick, model.with_hardware(one_attention_kernel(
                    model.hw, rows, f"sensitivity: one attention kernel of {rows}-row tiles")), seeds, None), label,
                f"every step on one attention kernel of {rows}-row query tiles, no split-KV switch at "
                f"{eff['attention_split_below']:g} blocks; the calibrated efficiencies kept") for rows in (64, 128)]


def round_rows(cfg, rep, pick, model, seeds, label, records) -> list[dict]:
    n = len(records)
    rows = [row("DAPO generation rounds per step", "2 rounds of the generation batch",
                [[records[i], records[(i + 1) % n]] for i in range(n)], label,
                "two draws per step (the run's draws, cyclically): times summed, each round ending at its slowest "
                "instance")] if n >= 2 else []
    tb = get_preset(cfg.preset).train_batch if cfg.preset else None
    if tb and rep.n_prompts > tb and rep.n_prompts % tb == 0 and tb >= cfg.dp:
        k = rep.n_prompts // tb
        sub = replace(rep, idx=rep.idx[: tb * rep.group_size], n_prompts=tb)
        rows.append(row("DAPO generation rounds per step", f"{k} rounds of {tb} prompts (gen = train batch)",
                        simulated(cfg, sub, pick, model, seeds, None, rounds=k), label,
                        f"the seed's scripts set GEN_BATCH_SIZE = TRAIN_BATCH_SIZE = {tb}: {k} rounds of {tb} prompts "
                        f"x {rep.group_size} instead of one of {rep.n_prompts}, simulated"))
    return rows


def run_sensitivity(cfg: RolloutConfig, rep: Replay, settings, label: str, step_model, priced: str | None = None,
                    draws: dict[str, Any] | None = None) -> dict[str, Any]:
    """The table for the arm `label` of `settings` against the off baseline. `draws`: the run's
    draws (`draws.run_draws`; simulated here when not given). `priced`: what priced the steps (a
    label); None: no step model, the table is in decode steps and has no host-overhead rows."""
    with scope("sensitivity"):   # its draws kept apart from the run's (kept_work.py)
        return _sensitivity(cfg, rep, settings, label, step_model, priced, draws)


def _sensitivity(cfg, rep, settings, label, step_model, priced, draws) -> dict[str, Any]:
    t0 = time.perf_counter()
    pick = [s for s in settings if s["label"] in ("off", label)]
    if draws is None:
        draws = {"records": [x[0] for x in simulated(cfg, rep, pick, step_model, draw_seeds(cfg), None)]}
    records = draws["records"][:SENSITIVITY_DRAWS]   # every row over the same draws, comparable
    seeds = [r["seed"] for r in records]
    steps = priced is None
    rows = [row("(the prediction)", "as modelled", [[r] for r in records], label,
                "the run's own draws and assumptions", modelled=True)]
    rows += length_rows(cfg, rep, pick, step_model, seeds, label)
    rows += kv_rows(cfg, rep, pick, step_model, seeds, label)
    rows += kernel_rows(cfg, rep, pick, step_model, seeds, label)
    rows += round_rows(cfg, rep, pick, step_model, seeds, label, records)
    if not steps:
        rows += [row("host overhead per step", f"+{1e3 * x:g} ms", [[r] for r in records], label,
                     "the same schedules, every step longer by that much", host_s=x) for x in HOST_EXTRA_S]
    rows += [row("tail read as", READINGS[k][0], [[r] for r in records], label, READINGS[k][1], reading=k)
             for k in ("slowest", "first")]
    published = published_figures(cfg)
    block = {"arm": label, "length_dist": cfg.length_dist, "draws": len(seeds), "seeds": seeds,
             "definition": DEFINITION, "rows": rows, "published_tail_share_pct": published.get("tail_share_pct"),
             "published_gain_pct": published.get("gain_pct"), "rests_on": rests_on(rows, published),
             "seconds": time.perf_counter() - t0}
    if steps:   # no step model: counts, and every key says so
        return {**block, "units": "steps", "rows": to_step_units(rows),
                "provenance": "decode steps of the simulation (no step model: step counts, not time)"}
    return {**block, "units": "s", "provenance": f"modelled: the simulation {priced}"}


def published_figures(cfg: RolloutConfig) -> dict[str, float]:
    """The preset's published tail share of the off rollout and per-step gain (%), where given."""
    pub = get_preset(cfg.preset).published if cfg.preset else {}
    out = {}
    fig = pub.get("tail_phase_from_figure_s")
    if fig:
        out["tail_share_pct"] = 100.0 * fig["off"]["tail"] / (fig["off"]["tail"] + fig["off"]["head"])
    if "per_step_inference" in pub:
        out["gain_pct"] = pub["per_step_inference"]["gain_pct"]
    elif "rollout_speedup_up_to" in pub:   # a best case ("up to"), as a gain
        out["gain_pct"] = 100.0 * (pub["rollout_speedup_up_to"] - 1.0)
    return out


def rests_on(rows: list[dict], published: dict[str, float]) -> dict[str, Any]:
    """Which assumption moves the tail share and the gain most (the widest swing of the row
    medians, the prediction's row included), and per published figure the row whose median is
    closest to it and every row whose range holds it."""
    base = rows[0]
    groups: dict[str, list[dict]] = {}
    for r in rows[1:]:
        groups.setdefault(r["assumption"], []).append(r)

    def swing(rs, key):
        meds = [x[key]["median"] for x in [base, *rs] if x[key]["median"] is not None]
        return (max(meds) - min(meds)) if meds else 0.0

    modelled = [g for g in groups if g != "tail read as"]
    by_share = sorted(modelled, key=lambda g: -swing(groups[g], "tail_share_pct"))
    by_gain = sorted(modelled, key=lambda g: -swing(groups[g], "gain_pct"))
    out: dict[str, Any] = {"swings_pp": {g: {"tail_share": swing(rs, "tail_share_pct"), "gain": swing(rs, "gain_pct")}
                                          for g, rs in groups.items()},
                           "tail_share": by_share[0] if by_share else None, "gain": by_gain[0] if by_gain else None,
                           "closest_to_published": {}}
    for key, pub in published.items():
        cands = [r for r in rows if r[key]["median"] is not None]
        if not cands:
            continue
        near = min(cands, key=lambda r: abs(r[key]["median"] - pub))
        ok, gap = matched(pub, near[key])
        out["closest_to_published"][key] = {
            "published": pub, "assumption": near["assumption"], "value": near["value"], "modelled": near[key],
            "matched": ok, "gap_pp": gap,
            "matching_rows": [f"{r['assumption']}: {r['value']}" for r in cands if matched(pub, r[key])[0]]}
    return out


# ---------- terminal lines ----------

def table_lines(block: dict[str, Any]) -> list[str]:
    """The table as terminal lines, then what the prediction rests on."""
    steps = block.get("units") == "steps"
    what = "DECODE STEPS, not time" if steps else "MODELLED"
    tail_key = "step_ratio_tail" if steps else "speedup_tail"
    seeds = block.get("seeds") or []
    out = [f"what the prediction rests on ({what}; arm {block['arm']}; every row median [min, max] over the same "
           f"{block['draws']} draws" + (f", seeds {seeds[0]}..{seeds[-1]}" if len(seeds) > 1 else "")
           + "; one assumption changed at a time):",
           f"  {'assumption':38s} {'value':46s} {'tail share %':>18s} {'gain %':>22s} {'tail x':>18s} "
           f"{'preempt. off':>16s}"]
    last = None
    for r in block["rows"]:
        name = "" if r["assumption"] == last else r["assumption"]
        last = r["assumption"]
        out.append(f"  {name:38s} {r['value'][:46]:46s} {fmt(r['tail_share_pct'], '.1f'):>18s} "
                   f"{fmt(r['gain_pct'], '+.2f'):>22s} {fmt(r.get(tail_key), '.2f'):>18s} "
                   f"{fmt(r['preemptions_off'], '.0f'):>16s}")
    out.append(f"  ({block['definition']}; {block.get('provenance', 'modelled')})")
    return out + rests_on_lines(block)


def rests_on_lines(block: dict[str, Any]) -> list[str]:
    ro = block.get("rests_on") or {}
    sw = ro.get("swings_pp") or {}
    if not ro.get("tail_share"):
        return []
    out = [f"  the modelled tail share rests most on: {ro['tail_share']} (swing {sw[ro['tail_share']]['tail_share']:.1f} "
           f"pp over its values); the per-step gain on: {ro['gain']} (swing {sw[ro['gain']]['gain']:.2f} pp)"]
    names = {"tail_share_pct": "tail share", "gain_pct": "per-step gain"}
    for key, near in (ro.get("closest_to_published") or {}).items():
        verdict = ("matched (inside its range)" if near["matched"]
                   else f"not matched: {near['gap_pp']:+.1f} pp from the range's nearest end")
        out.append(f"  closest to the published {names[key]} {near['published']:.2f} %: {near['assumption']} = "
                   f"{near['value']}: {fmt(near['modelled'], '.2f')} % ({verdict}); rows whose range holds it: "
                   f"{'; '.join(near['matching_rows']) or 'none'}")
    return out
