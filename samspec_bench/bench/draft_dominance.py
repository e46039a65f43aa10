"""Does SAM Pareto-dominate Arctic's suffix decoding? Trace replay, side by side in one run.
The command is `samspec-bench dominance` (suites/dominance: run folder, --json, --resume per
cell); `python -m samspec_bench.bench.draft_dominance` runs it with the same flags:

    samspec-bench dominance [--traces F ...] [--tokenizer DIR] [-k 3,8] [--sam-length evidence]
        [--limit-groups N] [--no-share-stats] [--json out.json] [--figure pareto.png [--costs ...]]

For every trace (its requests as accept replays them, read by the suite: verl validation
generations left out, a tool-using response one request per model turn, said and counted), k
and source (own: the request's prompt and prefix; group: + its GRPO siblings so far, members
advancing one batched step at a time; a later model turn's siblings are the group's same
turns), it replays 'sam' (with --sam-length), 'sam-fixed' (the min_endpos baseline) and
Arctic's 'suffix' on the same tokens and prints tokens per step and drafted tokens per step
(counts, not time) and PASS where SAM's tokens per step >= suffix's and its drafted tokens per
step <= suffix's. Every replay unit (a request for own, a GRPO group for group) gets a fresh SAM drafter: draft
content never crosses units. The units of a cell share one drafter-wide acceptance record
(the evidence policy's tokens= / pairs= / shape= corrections: statistics of which drafted
tokens were accepted, no draft content), as one proposer serving every request of an engine
does (and the replay engine within a task); units replay in file order, so a unit learns only
from earlier ones. `--no-share-stats`: a fresh record per unit (a cold start every response).
`--figure`: the Pareto picture per cell (one subplot each): SAM's policy over several verify
costs, sam-fixed over k' = 1..k, Arctic's point, SAM's configured point marked.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Callable, Iterable

from samspec_bench.bench.engines.replay import replay_group, replay_response
from samspec_bench.bench.dominance_spread import (cluster_sums, dev_groups, fmt_interval, margin_interval,
                                                  side_summary, summary)
from samspec_bench.metrics import AcceptanceCounts, total_counts
from samspec_bench.sam.draft_length import EvidenceLength, parse_length
from samspec_bench.sam.drafters import ArcticSuffixDrafter, SamDrafter

SOURCES = ("own", "group")
CURVE_COSTS = "0.15,0.2,0.25,0.3,0.35,0.4"   # --costs: the policy's curve for the figure


def sibling_key(item, i: int) -> tuple:
    """A response's GRPO group: (trace file, group field, RL step), as the replay engine keys it.
    A verl folder's group field is the prompt, which comes back in later steps: responses of
    other steps are no siblings (a concurrent group would draft from a later step's text)."""
    if item.group is None:
        return ("solo", i)
    return (str(item.source), item.group, getattr(item, "step", None))


def _by_unit(items, group: bool, limit: int | None) -> "OrderedDict[object, tuple[object, list]]":
    """Replay units in file order, each with its prompt group (the bootstrap's and the dev split's
    unit: a verl folder's prompt across RL steps; a later model turn stays with its response's)."""
    gkey = [it.group if it.group is not None else ("solo", i) for i, it in enumerate(items)]
    keep = set(list(OrderedDict.fromkeys(gkey))[:limit]) if limit is not None else None
    by: "OrderedDict[object, tuple[object, list]]" = OrderedDict()
    for i, it in enumerate(items):
        if keep is None or gkey[i] in keep:
            prompt = getattr(it, "response_group", None) or gkey[i]
            by.setdefault(sibling_key(it, i) if group else i, (prompt, []))[1].append(
                (str(i), it.prompt_ids, it.response_ids))
    return by


def units(items, group: bool, limit: int | None) -> list[list[tuple[str, object, object]]]:
    """Replay units: one per response (own), or one per GRPO group in file order (group:
    `sibling_key`); `limit`: only the responses of the first `limit` groups (the group field),
    for both sources."""
    return [u for _, u in _by_unit(items, group, limit).values()]


def unit_groups(items, group: bool, limit: int | None) -> list:
    """The prompt group of each of `units`' units, in the same order."""
    return [g for g, _ in _by_unit(items, group, limit).values()]


def replay_units(make, units_, k: int, group: bool) -> list[AcceptanceCounts]:
    """Each unit's counts, the units replayed in order with a fresh drafter from `make` each."""
    out = []
    for u in units_:
        d = make()
        recs = replay_group(d, u, k) if group else [replay_response(d, u[0][1], u[0][2], k, key=u[0][0])]
        out.append(total_counts(recs))
    return out


def replay(make, units_, k: int, group: bool) -> dict:
    return summary(sum(replay_units(make, units_, k, group), AcceptanceCounts()))


def sam_maker(group: bool, length, share_stats: bool):
    """A factory of fresh SAM drafters, one per replay unit (draft content never crosses
    units); with `share_stats` they share the first one's drafter-wide record (acceptance
    statistics only: an AcceptanceStats, or a TokenAcceptance where the policy runs in
    Python), as one proposer serving every request of an engine would."""
    shared = []

    def make():
        d = SamDrafter(group_sharing=group, length=length, token_stats=shared[0] if shared else None)
        if share_stats and not shared:
            shared.append(d.token_stats)
        return d
    return make


def curves(us, k: int, group: bool, sam_length: str, costs: list[float], share_stats: bool = True) -> dict:
    """The points the figure draws besides the table's: SAM's policy at each verify cost (an
    evidence spec), sam-fixed at every k' <= k."""
    policy = parse_length(sam_length)
    out: dict = {"sam": [], "sam_fixed": []}
    if isinstance(policy, EvidenceLength):
        for c in costs:
            pol = dataclasses.replace(policy, cost=c)
            out["sam"].append({"cost": c, **replay(sam_maker(group, pol, share_stats), us, k, group)})
    for kk in range(1, k + 1):
        out["sam_fixed"].append({"k": kk, **replay(lambda: SamDrafter(group_sharing=group, length="fixed"), us, kk, group)})
    return out


def cell_key(row: dict) -> tuple[str, int, str]:
    """A cell's identity: (trace path, k, source)."""
    return (row["path"], int(row["k"]), row["source"])


def run(traces: list[Path], read: Callable[[Path], tuple[list, dict]], ks: list[int], sam_length: str,
        progress=print, costs: list[float] | None = None, share_stats: bool = True,
        skip: Iterable[tuple[str, int, str]] = (), on_row: Callable[[dict], None] | None = None,
        dev_share: float | None = None) -> list[dict]:
    """One row per (trace, k, source) cell, in that order; cells in `skip` (cell_key) are not
    replayed (a resumed run has them); `on_row` gets each new row as it finishes. `read`: a
    trace's requests and what its reading left out or split (the counts go into each row as
    `inputs`); suites/dominance hands the reading --anchors uses too (accept's, with --limit-groups).
    `dev_share`: each row also reports the held-out prompt groups (replay_cell)."""
    skip = set(skip)
    rows = []
    for path in traces:
        todo = [(k, s) for k in ks for s in SOURCES if (str(path), k, s) not in skip]
        if not todo:
            continue
        items, counts = read(path)
        sizes = Counter(sibling_key(it, i) for i, it in enumerate(items) if it.group is not None)
        grouped = any(n > 1 for n in sizes.values())
        if not grouped:
            progress(f"{path.name}: no GRPO groups (one response per prompt and RL step): the group source is the "
                     "own source")
        for k, source in todo:
            if source == "group" and not grouped:
                continue
            row = {"trace": path.name, "path": str(path), "inputs": counts,
                   **replay_cell(items, k, source, sam_length, None, costs, share_stats, dev_share)}
            rows.append(row)
            if on_row is not None:
                on_row(row)
            progress(fmt_row(row))
    return rows


def _dominates(sam: dict, anchor: dict) -> bool:
    return sam["tokens_per_step"] >= anchor["tokens_per_step"] and sam["drafted_per_step"] <= anchor["drafted_per_step"]


def replay_cell(items, k: int, source: str, sam_length: str, limit: int | None, costs: list[float] | None,
                share_stats: bool, dev_share: float | None = None) -> dict:
    """sam, sam-fixed and Arctic's suffix replayed on one cell's units; `dominates`: SAM's tokens
    per step >= suffix's and its drafted tokens per step <= suffix's; `interval`: the margins'
    bootstrap over prompt groups (bench/dominance_spread.py). With `dev_share`, `heldout` holds
    the same figures over the prompt groups after the dev side, replayed in the same pass."""
    group = source == "group"
    us, groups = units(items, group, limit), unit_groups(items, group, limit)
    per = {"sam": replay_units(sam_maker(group, sam_length, share_stats), us, k, group),
           "sam_fixed": replay_units(lambda: SamDrafter(group_sharing=group, length="fixed"), us, k, group),
           "suffix": replay_units(lambda: ArcticSuffixDrafter(share_finished=group), us, k, group)}
    row = {"k": k, "source": source, **{name: summary(sum(c, AcceptanceCounts())) for name, c in per.items()}}
    row["dominates"] = _dominates(row["sam"], row["suffix"])
    row["interval"] = margin_interval(cluster_sums(per["sam"], groups), cluster_sums(per["suffix"], groups))
    if dev_share is not None:
        dev = dev_groups(groups, dev_share)
        held = set(groups) - dev if dev else set()   # one prompt group: no held-out side
        side = {name: side_summary(c, groups, held) for name, c in per.items()}
        row["heldout"] = {"dev_share": dev_share, "dev_groups": len(dev), "heldout_groups": len(held), **side,
                          "dominates": bool(held) and _dominates(side["sam"], side["suffix"]),
                          "interval": margin_interval(cluster_sums(per["sam"], groups, held),
                                                      cluster_sums(per["suffix"], groups, held))}
    if costs:
        row["curves"] = curves(us, k, group, sam_length, costs, share_stats)
    return row


def fmt_row(r: dict) -> str:
    f = lambda m: f"{m['tokens_per_step']:.3f} / {m['drafted_per_step']:.3f}"  # noqa: E731
    line = (f"{r['trace']:<32} k={r['k']:<2} {r['source']:<5}  sam {f(r['sam'])}   sam-fixed {f(r['sam_fixed'])}"
            f"   suffix {f(r['suffix'])}   {'PASS' if r['dominates'] else 'FAIL'}{fmt_interval(r.get('interval'))}")
    h = r.get("heldout")
    if h and not h["heldout_groups"]:
        line += f"\n{'':<32}      held out: none (one prompt group; --dev-share needs two)"
    elif h:
        line += (f"\n{'':<32}      held out ({h['heldout_groups']} groups after the first {h['dev_groups']}): "
                 f"sam {f(h['sam'])}   suffix {f(h['suffix'])}   {'PASS' if h['dominates'] else 'FAIL'}"
                 f"{fmt_interval(h.get('interval'))}")
    return line


def write_figure(rows: list[dict], path: Path, sam_length: str) -> None:
    """One subplot per (trace, k, source): tokens per step against drafted tokens per step."""
    import matplotlib  # slow to import: only when a figure is written

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncol = 4
    nrow = math.ceil(len(rows) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.4 * nrow), squeeze=False)
    for ax, r in zip(axes.flat, rows):
        pts = lambda ms: ([m["drafted_per_step"] for m in ms], [m["tokens_per_step"] for m in ms])  # noqa: E731
        cv = r.get("curves", {})
        if cv.get("sam"):
            ax.plot(*pts(cv["sam"]), "o-", ms=3, color="C0", label="sam evidence, cost " +
                    f"{cv['sam'][0]['cost']:g}..{cv['sam'][-1]['cost']:g}")
        if cv.get("sam_fixed"):
            ax.plot(*pts(cv["sam_fixed"]), "s--", ms=3, color="C2", label=f"sam-fixed, k'=1..{r['k']}")
        ax.plot(*pts([r["sam"]]), "*", ms=13, color="C0", mec="k", label=f"sam ({sam_length})")
        ax.plot(*pts([r["suffix"]]), "X", ms=10, color="C3", mec="k", label="Arctic suffix")
        h = r.get("heldout")   # --dev-share: the gate reads the held-out side, so the title says it too
        ax.set_title(f"{Path(r['trace']).stem} k={r['k']} {r['source']} "
                     f"{'PASS' if r['dominates'] else 'FAIL'}"
                     + (f", held out {'PASS' if h['dominates'] else 'FAIL'}" if h else ""), fontsize=8)
        ax.set_xlabel("drafted tokens / step", fontsize=7)
        ax.set_ylabel("tokens / step", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6, loc="lower right")
    fig.suptitle("tokens per decode step vs drafted tokens per step (trace replay counts, not time): "
                 "up and left is better", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def legacy_argv(argv: list[str]) -> list[str]:
    """The old command line's `--traces A B ...` (several files after one flag) as the click
    command's `--traces A --traces B`."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        out.append(argv[i])
        if argv[i] == "--traces":
            i += 1
            first = True
            while i < len(argv) and not argv[i].startswith("-"):
                if not first:
                    out.append("--traces")
                out.append(argv[i])
                first = False
                i += 1
            continue
        i += 1
    return out


if __name__ == "__main__":   # script entry point: runs `samspec-bench dominance` (docs/architecture.md)
    from samspec_bench.cli import main

    main(["dominance", *legacy_argv(sys.argv[1:])])
