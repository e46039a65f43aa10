"""A dev / held-out split of accept's responses (`accept --dev-split F [--split-seed S]`), so a
configuration picked from the table is picked on other responses than the ones it is reported
on. The trace groups (every response to one prompt, in every RL step and file: the group key
verl's and samspec's readers give) are split by a seeded permutation; all configurations
replay every response as without a split (a drafter's online record learns from both sides,
as one serving proposer would), and the records are then counted per side. In each family
(a named strategy with its sources, or a drafter with its sources) the dev side chooses the
configuration with the highest estimated speed-up (its k, its length parameters), and the
best family's choice is the best configuration; the held-out side's figures are the ones to
report, beside the pooled ones.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from samspec_bench.bench.engines.replay import response_key
from samspec_bench.dev_split import dev_keys
from samspec_bench.errors import UserError
from samspec_bench.metrics import AcceptanceCounts, speedup_estimate

SIDES = ("dev", "heldout")
CHOSEN_BY = "the highest estimated speed-up (speedup_estimate)"
FIGURES = ("tokens_per_step", "drafted_per_step", "verify_tokens_per_token", "acceptance_length", "acceptance_rate")


def group_key(item: Any) -> str:
    """The trace group of a request: its responses' prompt group (every RL step and file). A
    later model turn of a tool-using response is in its turn's group (suites/accept/turns.py):
    it stays with its response's group (`response_group`)."""
    return str(getattr(item, "response_group", None) or getattr(item, "group", None) or getattr(item, "id", None)
               or response_key(item))


def split_sides(items: Sequence[Any], fraction: float, seed: int) -> tuple[dict[str, str], dict[str, int]]:
    """Per response key, 'dev' or 'heldout': the distinct trace groups in a permutation seeded
    by `seed`, the first round(fraction x groups) (at least one, at most all but one) dev; and
    the number of groups on each side."""
    groups = [group_key(it) for it in items]
    distinct = sorted(set(groups))
    if len(distinct) < 2:
        raise UserError(f"--dev-split {fraction:g}: the traces hold {len(distinct)} group(s); a split needs at least 2 "
                        "(give traces with more prompts, or leave --dev-split out)")
    dev = dev_keys(distinct, fraction, seed)
    sides = {response_key(it): ("dev" if g in dev else "heldout") for it, g in zip(items, groups)}
    return sides, {"dev": len(dev), "heldout": len(distinct) - len(dev)}


def family(dc: Any) -> str:
    """The family whose parameters are chosen together: 'histospec@history', 'sam@own'."""
    if dc.strategy:
        return f"{dc.strategy.split('@')[0].split('/')[0].split(':')[0]}@{dc.sources}"
    return f"{dc.drafter}@{dc.sources}"


def side_figures(counts: AcceptanceCounts, ratio: float) -> dict[str, Any]:
    m = counts.metrics()
    return {**{k: m.get(k) for k in FIGURES}, "steps": counts.steps, "tokens": counts.tokens,
            "speedup_estimate": speedup_estimate(counts, ratio)}


def _score(figures: dict[str, Any]) -> float:
    s = figures.get("speedup_estimate")
    return float("-inf") if s is None or not np.isfinite(s) else float(s)


def split_block(runnable: list, per_side: list[dict[str, AcceptanceCounts]], costs: dict, fraction: float,
                seed: int, groups: dict[str, int], responses: dict[str, int]) -> dict[str, Any]:
    """The split's record: both sides' figures per configuration, what the dev side chose per
    family and the best configuration."""
    figures = {side: {dc.label: side_figures(per_side[j].get(side, AcceptanceCounts()), costs[dc.k]["ratio"])
                      for j, dc in enumerate(runnable)} for side in SIDES}
    fams: dict[str, list[str]] = {}
    for dc in runnable:
        fams.setdefault(family(dc), []).append(dc.label)
    chosen = {f: max(labels, key=lambda lbl: _score(figures["dev"][lbl])) for f, labels in fams.items()}
    best = max(chosen.values(), key=lambda lbl: _score(figures["dev"][lbl]))
    return {"fraction": fraction, "seed": seed, "unit": "trace groups (a prompt's responses in every step stay on one "
            "side)", "groups": groups, "responses": responses, "chosen_by": CHOSEN_BY, "chosen": chosen,
            "best": best, "best_heldout": figures["heldout"][best], **figures,
            "figures": "held-out groups (the pooled metrics cover both sides)"}


def split_lines(block: dict[str, Any] | None) -> list[str]:
    """The split for the terminal: what the dev groups chose, and every configuration held out."""
    if not block:
        return []
    g, r = block["groups"], block["responses"]
    out = [f"dev split: {g['dev']} dev / {g['heldout']} held-out trace groups ({r['dev']} / {r['heldout']} responses; "
           f"fraction {block['fraction']:g}, seed {block['seed']}); chosen on the dev groups by {block['chosen_by']}; "
           "HELD-OUT figures:"]
    chosen = set(block["chosen"].values())
    for label, m in block["heldout"].items():
        mark = "best" if label == block["best"] else "chosen" if label in chosen else ""
        tps, dps, sp = m["tokens_per_step"], m["drafted_per_step"], m["speedup_estimate"]
        out.append(f"  {label:<44} tokens/step {_f(tps)}  drafted/step {_f(dps)}  speedup_est {_f(sp, 2)}x  {mark}")
    return out


def _f(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"
