"""A dev / held-out split of a simulated rollout, so that the arena does not tune on its test
data (`rollout --dev-split F`): the run's prompts are split by trace group (a seeded
permutation; prompts that replay the same trace group stay on one side, so no response is in
both), every arm is simulated on the dev prompts, and in each family of arms (a strategy with
its sources, or a source's always / threshold arms) the parameters (k, threshold, switch) are
chosen there: the arm with the shortest median total over the draws. The same choice names
the best setting and the best strategy (the chosen arm with the shortest dev total). Every arm
is then simulated on the held-out prompts, and those are the figures reported; the tables say
so and mark the chosen arms.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any


from samspec_bench.dev_split import dev_keys
from samspec_bench.errors import UserError
from samspec_bench.sam.strategies import parse_strategy
from samspec_bench.suites.rollout.config import RolloutConfig
from samspec_bench.suites.rollout.kept_work import scope
from samspec_bench.suites.rollout.replay_arm import Replay, run_replay
from samspec_bench.suites.rollout.spread import of

DEV_FIGURES = ("total_s", "speedup_overall", "speedup_tail", "tokens_per_step", "drafted_per_step")
CHOSEN_BY = "the shortest median total over the draws"


def prompt_keys(rep: Replay) -> list[int]:
    """Per prompt of the run, the trace group it replays (the smallest index of its responses):
    prompts cycled over the same trace group share a key."""
    g = rep.group_size
    return [min(rep.idx[p * g:(p + 1) * g]) for p in range(rep.n_prompts)]


def split_prompts(rep: Replay, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(dev prompts, held-out prompts): the distinct trace groups in a permutation seeded by
    `seed`, the first round(fraction x groups) (at least one, at most all but one) dev."""
    keys = prompt_keys(rep)
    distinct = sorted(set(keys))
    if len(distinct) < 2:
        raise UserError(f"--dev-split {fraction:g}: the run replays {len(distinct)} trace group(s); a split needs at "
                        "least 2 (give traces with more groups, or leave --dev-split out)")
    dev = dev_keys(distinct, fraction, seed)
    return [p for p, k in enumerate(keys) if k in dev], [p for p, k in enumerate(keys) if k not in dev]


def subset(rep: Replay, prompts: list[int]) -> Replay:
    """The run's replay restricted to these prompts (all their responses, in prompt order)."""
    g = rep.group_size
    return replace(rep, idx=[rep.idx[p * g + j] for p in prompts for j in range(g)], n_prompts=len(prompts))


def family(setting: dict[str, Any]) -> str:
    """The family whose parameters are chosen together: a strategy's name and sources
    ('histospec@history'), or a source arm's source ('source own')."""
    if setting["arm"] == "strategy":
        spec = setting["strategy"]
        return f"{spec.split('@')[0].split('/')[0].split(':')[0]}@{parse_strategy(spec).sources}"
    return f"source {setting['source']}"


def total(m: dict[str, Any]) -> float:
    sp = of(m, "total_s")
    return float("inf") if sp is None or sp.get("median") is None else sp["median"]


def choose(settings, metrics: dict[str, dict]) -> dict[str, Any]:
    """On the dev figures: per family the arm with the shortest median total, the best setting
    (the chosen arm with the shortest one), the best strategy (likewise among strategies) and
    the best one-path strategy (the shortest among every strategy arm without trees)."""
    fams: dict[str, list[str]] = {}
    strategies = set()
    for s in settings:
        if s["arm"] == "off":
            continue
        fams.setdefault(family(s), []).append(s["label"])
        if s["arm"] == "strategy":
            strategies.add(s["label"])
    chosen = {f: min(labels, key=lambda lbl: total(metrics[lbl])) for f, labels in fams.items()}
    best = min(chosen.values(), key=lambda lbl: total(metrics[lbl]), default=None)
    best_st = min((lbl for lbl in chosen.values() if lbl in strategies), key=lambda lbl: total(metrics[lbl]),
                  default=None)
    # what an engine verifying one path per request runs today: every strategy arm without trees
    one_path = [s["label"] for s in settings if s["arm"] == "strategy" and not parse_strategy(s["strategy"]).paths]
    best_one = min(one_path, key=lambda lbl: total(metrics[lbl]), default=None)
    return {"chosen": chosen, "best_setting": best, "best_strategy": best_st, "best_one_path": best_one}


def run_heldout(cfg: RolloutConfig, rep: Replay, step_model) -> tuple[dict[str, Any], Replay]:
    """Every arm on the dev prompts (the choice), then on the held-out prompts (the figures).
    Returns run_replay's output of the held-out prompts with the split's block (`split`) and the
    held-out replay."""
    dev_p, held_p = split_prompts(rep, cfg.dev_split, cfg.seed)
    if cfg.dp > min(len(dev_p), len(held_p)) and cfg.dp_shard == "group":
        raise UserError(f"--dev-split {cfg.dev_split:g} with --dp {cfg.dp}: a side has {min(len(dev_p), len(held_p))} "
                        "prompts, fewer than the instances; lower --dp or raise --prompts")
    dev_rep, held_rep = subset(rep, dev_p), subset(rep, held_p)
    with scope("dev"):   # the halves draw the same seeds: their kept draws apart (kept_work.py)
        dev = run_replay(cfg, step_model, dev_rep)
    pick = choose(dev["settings"], dev["metrics"])
    with scope("heldout"):
        out = run_replay(cfg, step_model, held_rep)
    out["split"] = {"dev_prompts": len(dev_p), "heldout_prompts": len(held_p), "fraction": cfg.dev_split,
                    "seed": cfg.seed, "unit": "trace groups (prompts replaying the same group stay on one side)",
                    "chosen_by": CHOSEN_BY, **pick,
                    "dev": {lbl: {k: of(m, k) for k in DEV_FIGURES} for lbl, m in dev["metrics"].items()},
                    "figures": "held-out prompts"}
    return out, held_rep


def split_lines(split: dict[str, Any] | None) -> list[str]:
    """What the split was and what the dev prompts chose (terminal)."""
    if not split:
        return []
    out = [f"split: every figure above is the HELD-OUT prompts' ({split['heldout_prompts']}); parameters chosen on "
           f"the DEV prompts ({split['dev_prompts']}, fraction {split['fraction']:g} of the trace groups, seed "
           f"{split['seed']}) by {split['chosen_by']}:"]
    for fam, lbl in split["chosen"].items():
        dev = split["dev"].get(lbl) or {}
        sp = dev.get("total_s") or dev.get("total_steps") or {}
        med = sp.get("median")
        out.append(f"  {fam}: {lbl}" + (f" (dev median total {med:.4g})" if med is not None else ""))
    out.append(f"  best setting (dev): {split['best_setting']}; best strategy (dev): {split['best_strategy'] or '-'}")
    return out
