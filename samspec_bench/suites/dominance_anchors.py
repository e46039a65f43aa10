"""`samspec-bench dominance --anchors`: this project's default policy against each named anchor
strategy (sam/strategies: seed, histospec, das, seer, arctic) at the same spending. Trace replay
counts, not time:

    samspec-bench dominance --anchors [--traces F ...] [-k 3,8] [--limit-groups N] [--resume DIR]

Per trace, k and anchor (a cell), on the anchor's own sources: the anchor replayed, then on the
same responses and sources the default policy (`evidence`, the sam drafter's default) as it is,
and the default with a draft budget (`evidence:budget=B`, sam/draft_budget.py; B is known before
the default runs, nothing is read off the default's results). Budget scope `step`: one budget
per RL step at the anchor's drafted tokens per step in that step. Scope `run`: one budget over every RL step
at the anchor's pooled rate, in a pool of its own, so the default's pooled drafted tokens per
step are at most the anchor's by construction; it spends evenly over the steps, where an anchor
with history spends most in the step that has history, and loses tokens there. Per-step budgets
bound each step's rate, not the pooled one: two policies weigh the steps differently (Simpson's
paradox), so each cell also says whether the default dominates in every RL step on its own.
Scope `step+run` (the default): the per-step budgets pace the price without a bucket of their
own (`bucket=0`: a step may draft above its budget where an earlier stretch drafted below it),
under one run-wide cap at the anchor's pooled rate that keeps what earlier steps left unspent
(`evidence:...,pool=NAME,ceiling=R,bucket=0`), so the pooled bound holds by construction;
`--budget-options bucket=1` gives each step its own bucket back (both bounds, fewer pooled
cells on the dev split). Chosen on the dev cells (the first 25 qwen25math groups, the first 264
tora70b responses): step+run and step 20 of 20, run 16 of 20; step+run's pooled bound broke the
tie. With `--frontier`, also the default at one fixed cost that spends at most the anchor's
pooled rate (suites/dominance_frontier.py: the policy's drafts at equal spending, apart from
how its online budget paces them). A
policy dominates where its tokens per step are at least the anchor's and its drafted tokens per
step at most the anchor's.

Accept's replay (bench/engines/replay.py through suites/accept: inputs as accept reads them,
model turns of tool-using responses, single-step traces split into an earlier and a current
step for the history source, one task per RL step: the acceptance record shared through the
step, and a scope-run budget through them all, replayed in this process), one job per arm;
every arm of a cell replays every response, with the history window of the anchor (das: 4).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from samspec_bench.bench.draft_config import DraftConfig, strategy_config
from samspec_bench.bench.engines.replay import ReplayEngine, item_step, items_by_step
from samspec_bench.metrics import total_counts
from samspec_bench.sam.strategies import parse_strategy
from samspec_bench.suites.accept.config import AcceptConfig
from samspec_bench.suites.accept.inputs import limit_line, load_inputs
from samspec_bench.suites.dominance_frontier import frontier_point
from samspec_bench.trace_formats import merged_steps_line, skipped_line

ANCHORS = ("seed", "histospec", "das", "seer", "arctic")
DEFAULT_POLICY = "evidence"
SCOPE_MEANS = {   # --budget-scope: what the budgeted default is held to
    "run": "one budget over every RL step at the anchor's pooled drafted tokens per step",
    "step": "one budget per RL step at the anchor's drafted tokens per step there",
    "step+run": "one budget per RL step at the anchor's drafted tokens per step there, pacing the price, under one "
                "cap over every RL step at its pooled rate",
}
BUDGET_SCOPES = tuple(SCOPE_MEANS)
DEFAULT_SCOPE = "step+run"   # chosen on the dev cells (docs/drafting.md): ties step, and holds both bounds
# step+run's per-step budgets only pace: chosen on the dev cells (docs/drafting.md, "A budget that paces")
PACE_ONLY = "bucket=0"
_POOLS = itertools.count()   # a fresh pool name per budgeted arm: no budget carries from one cell to the next


def read_trace(path: Path, tokenizer: str, limit: int | None, history: bool) -> tuple[list, dict[str, Any]]:
    """The one reading of a trace for both dominance paths: its requests as accept replays them
    (suites/accept/inputs.py: verl validation generations left out, tool-using responses split
    into model turns, bad lines counted, one RL step of several folders counted), and what was
    left out or split (`input_counts`). `limit`: accept's --limit-groups (data.limit_groups: the
    first groups of each trace file; a verl folder: the same prompts at every RL step, said by
    input_lines); `history`: RL steps emulated on a single-step trace (--anchors' history
    sources; the Arctic comparison keeps each group whole)."""
    # trace_format None: dominance has no --trace-format, so no message may send users to it
    cfg = AcceptConfig(traces=[str(path)], tokenizer=tokenizer, limit_groups=limit, any_model=True, progress=False,
                       trace_format=None)
    inputs = load_inputs(cfg, need_corpus=False, need_history=history, say=lambda line: None)   # input_lines says it
    return inputs.items, input_counts(inputs)


def load_items(path: Path, tokenizer: str, limit: int | None) -> list:
    """A trace's requests as accept replays them with a history source in the run (read_trace)."""
    return read_trace(path, tokenizer, limit, history=True)[0]


def input_counts(inputs: Any) -> dict[str, Any]:
    """What a trace's reading left out, split, merged or limited (result.json keeps it per trace,
    the run folder once per reading; each cell row only its counts: cell_counts)."""
    val, tool, merged = inputs.validation, inputs.tool_output or {}, inputs.merged_steps or {}
    if val:   # accept's handling names an option of its own; dominance has none
        val = {**val, "handling": VALIDATION_LEFT_OUT if val["excluded"] else VALIDATION_ONLY}
    return {"responses": sum(getattr(it, "turn", 0) == 0 for it in inputs.items), "requests": len(inputs.items),
            "validation_left_out": val["excluded"] if val else 0, "validation": val,
            "tool_output_responses": tool.get("responses", 0), "later_turns": tool.get("later_turns", 0),
            "tool_output": inputs.tool_output, "skipped_lines": len(inputs.skipped), "skipped": inputs.skipped,
            "merged_steps": merged.get("merged_steps", 0), "merged_step_folders": merged.get("merged", []),
            "steps": inputs.steps, "limit": inputs.limit}


# what each cell row keeps of its trace's reading: counts only (the lists, such as every skipped
# line, are kept once per trace: a trace with many bad lines would repeat them in every cell)
CELL_COUNTS = ("responses", "requests", "validation_left_out", "tool_output_responses", "later_turns",
               "skipped_lines", "merged_steps")


def cell_counts(counts: dict[str, Any]) -> dict[str, Any]:
    return {key: counts[key] for key in CELL_COUNTS if key in counts}


VALIDATION_LEFT_OUT = "left out: validation rounds are not RL steps"
VALIDATION_ONLY = "validation generations only: replayed without RL steps (a validation round is not a step)"


def input_lines(name: str, c: dict[str, Any]) -> list[str]:
    """The reading's counts on the terminal: one line always (zeros too), then one per kind found
    (a cell row's counts alone, kept from a run folder without the trace's reading: the one line)."""
    lines = [f"{name}: {c['responses']:,} response(s) replayed as {c['requests']:,} request(s); "
             f"{c['validation_left_out']:,} validation generation(s) left out, {c['later_turns']:,} later model "
             f"turn(s) of {c['tool_output_responses']:,} tool-using response(s), {c['skipped_lines']:,} line(s) "
             f"skipped, {c['merged_steps']:,} RL step(s) merged from several folders"]
    val, tool, limit = c.get("validation"), c.get("tool_output"), c.get("limit")
    if val:
        lines.append(f"  validation generations: {val['responses']:,} response(s) in {len(val['files'])} file(s) "
                     f"({'; '.join(sorted(set(val['files'].values())))}); {val['handling']}")
    if tool:
        lines.append(f"  tool output: {tool['tool_tokens']:,} of {tool['response_tokens']:,} response tokens; "
                     f"{tool['handling']}")
    skipped = skipped_line([(s["file"], s["line"], s["reason"]) for s in c.get("skipped") or []])
    merged = merged_steps_line({"merged_steps": c["merged_steps"], "merged": c["merged_step_folders"]}
                               if c["merged_steps"] and "merged_step_folders" in c else None)
    lines += [f"  {line}" for line in (skipped, merged, limit and limit_line(limit)) if line]
    return lines


def trace_reader(tokenizer: str, limit: int | None, history: bool, progress: Callable[[str], None],
                 on_read: Callable[[Path, dict], None] | None = None) -> Callable[[Path], tuple[list, dict[str, Any]]]:
    """read_trace for one run, its counts said as each trace is read and handed whole to
    `on_read`; the reader returns only the counts (cell_counts) that go into each cell row."""
    def read(path: Path) -> tuple[list, dict[str, Any]]:
        progress(f"{path.name}: reading and tokenizing")
        items, counts = read_trace(path, tokenizer, limit, history)
        for line in input_lines(path.name, counts):
            progress(line)
        if on_read is not None:
            on_read(path, counts)
        return items, cell_counts(counts)
    return read


def replay_arm(items: list, jobs: list[tuple[DraftConfig, int | None]], window: int, workers: int = 0) -> dict:
    """Jobs [(config, RL step or None: every step)] in one replay pass, pooled: tokens and
    drafted tokens per step (counts), and the same per RL step (`by_step`, keyed by the step as
    text, as the cells file keeps it)."""
    # one task per RL step: the acceptance record and the default's draft budget live as long as
    # one serving proposer's through a step (40k-token tasks restarted the budget's multiplier)
    engine = ReplayEngine(workers=workers, history_window=window, task_tokens=None)
    by_step = items_by_step(items)
    every = list(range(len(items)))
    todo = [(dc, every if step is None else by_step[step]) for dc, step in jobs]
    try:
        recs = [(i, s) for _, chunk in engine.run(items, todo) for i, s in chunk]
    finally:
        engine.close()
    return counts_of([s for _, s in recs]) | {"by_step": {
        str(step): counts_of([s for i, s in recs if item_step(items[i]) == step]) for step in sorted(by_step)}}


def counts_of(recs: list) -> dict:
    c = total_counts(recs)
    return {"tokens_per_step": c.tokens_per_step, "drafted_per_step": c.drafted_per_step,
            "acceptance_rate": c.acceptance_rate, "steps": c.steps}


def versus(anchor: dict, other: dict | None) -> dict:
    """Whether `other` dominates the anchor (tokens per step >= and drafted per step <=) and by how much."""
    if other is None:
        return {"dominates": False, "tokens_per_step": None, "drafted_per_step": None}
    dt = other["tokens_per_step"] - anchor["tokens_per_step"]
    dd = other["drafted_per_step"] - anchor["drafted_per_step"]
    return {"dominates": dt >= 0 and dd <= 0, "tokens_per_step": dt, "drafted_per_step": dd}


def default_config(k: int, sources: str, budget: float | None = None, options: str = "") -> DraftConfig:
    """The default policy at k on `sources`; with `budget`, the draft budget (exact: repr of the
    float) and `options`, more evidence parameters (`windup=0.5`)."""
    dc = strategy_config(f"{DEFAULT_POLICY}:k={k}@{sources}")
    if budget is None:
        return dc
    return DraftConfig(drafter="sam", k=k, group=dc.group, history=dc.history, order=dc.order,
                       options=(("length", f"evidence:budget={budget!r}" + (f",{options}" if options else "")),))


NO_DRAFTS = 1e-12   # the budget of a step where the anchor drafted nothing: the bucket never holds a token


def step_budgets(measured: dict) -> dict[int, float]:
    """The anchor's drafted tokens per step in each RL step, the default's budget there: the
    budget is kept per replay task, which never spans two steps, and an anchor spends very
    differently in a step with history and one without (a single-step trace's first half)."""
    return {int(step): max(m["drafted_per_step"] or 0.0, NO_DRAFTS) for step, m in measured["by_step"].items()
            if m["steps"]}


def _new_pool() -> str:
    return f"pool=dominance-{os.getpid()}-{next(_POOLS)}"


def run_budget(k: int, sources: str, budget: float, replay: Callable[[list, int], dict], window: int,
               budget_options: str = "") -> dict:
    """The default with one draft budget over the whole replay, every RL step: `budget` drafted
    tokens per step, a pool of its own (sam/draft_budget.py), so its drafted tokens over the
    cell are at most budget x its steps, the pooled figure the comparison reads."""
    opts = ",".join(filter(None, (budget_options, _new_pool())))
    return replay([(default_config(k, sources, budget, opts), None)], window)


def anchor_cell(items: list, anchor: str, k: int, replay: Callable[[list, int], dict], defaults: dict,
                budget_options: str = "", budget_scope: str = DEFAULT_SCOPE, frontier: bool = False) -> dict:
    """One cell: the anchor, the default (from `defaults` when its k, sources and window ran
    already) and the default budgeted at the anchor's spending: with scope run one budget over
    every RL step at the anchor's pooled drafted tokens per step (run_budget); with scope step
    one per RL step at the anchor's rate in that step; with scope step+run those under one cap
    over every step at the anchor's pooled rate. With `frontier`, also the default at one fixed cost
    that spends at most the anchor's pooled rate (suites/dominance_frontier.py)."""
    st = parse_strategy(f"{anchor}:k={k}")
    window = st.history_window
    measured = replay([(strategy_config(st.name), None)], window)
    key = (k, st.sources, window)
    if key not in defaults:
        defaults[key] = replay([(default_config(k, st.sources), None)], window)
    default = defaults[key]
    budget = measured["drafted_per_step"]
    per_step = step_budgets(measured)
    if not (budget and budget > 0):
        budgeted = None
    elif budget_scope == "run":
        budgeted = run_budget(k, st.sources, budget, replay, window, budget_options)
    else:
        # step+run: the per-step budgets only pace (no bucket of their own), the run-wide cap is
        # the bound; budget_options after the default, so bucket=1 there brings the buckets back
        opts = budget_options if budget_scope == "step" else \
            ",".join(filter(None, (PACE_ONLY, budget_options, _new_pool(), f"ceiling={budget!r}")))
        budgeted = replay([(default_config(k, st.sources, b, opts), step) for step, b in per_step.items()], window)
    extra = {}
    if frontier:   # an anchor that drafted nothing leaves no spending to match
        fixed = frontier_point(k, st.sources, budget, replay, window) if budget and budget > 0 else \
            {"cost": None, "metrics": None, "tried": []}
        extra = {"frontier": fixed["metrics"], "frontier_cost": fixed["cost"], "frontier_tried": fixed["tried"],
                 "frontier_vs_anchor": versus(measured, fixed["metrics"])}
    return {"k": k, "anchor": anchor, "sources": st.sources, "history_window": window if "history" in st.sources
            else None, "budget": budget, "budget_scope": budget_scope, **extra,
            "budget_by_step": {str(s): b for s, b in per_step.items()} if budget_scope != "run" else None,
            "anchor_metrics": measured, "default": default, "budgeted": budgeted,
            "default_vs_anchor": versus(measured, default), "budgeted_vs_anchor": versus(measured, budgeted),
            "default_every_step": every_step(measured, default), "budgeted_every_step": every_step(measured, budgeted)}


def every_step(anchor: dict, other: dict | None) -> bool | None:
    """Whether `other` dominates the anchor in each RL step on its own (None where either has no
    per-step figures): the pooled verdict weighs the steps by each policy's own step counts, so
    it can differ (Simpson's paradox)."""
    if other is None or "by_step" not in anchor or "by_step" not in other:
        return None
    steps = [s for s, m in anchor["by_step"].items() if m["steps"]]
    return all(s in other["by_step"] and versus(anchor["by_step"][s], other["by_step"][s])["dominates"]
               for s in steps)


def cell_key(row: dict) -> tuple[str, int, str]:
    return (row["path"], int(row["k"]), row["anchor"])


def run(traces: list[Path], tokenizer: str, ks: list[int], limit: int | None, progress=print,
        skip: Iterable[tuple[str, int, str]] = (), on_row: Callable[[dict], None] | None = None,
        workers: int = 0, budget_options: str = "", budget_scope: str = DEFAULT_SCOPE,
        frontier: bool = False, on_read: Callable[[Path, dict], None] | None = None) -> list[dict]:
    """One row per (trace, k, anchor) cell in that order; cells in `skip` are not replayed;
    `on_read` gets each trace's whole reading (trace_reader)."""
    skip = set(skip)
    rows = []
    read = trace_reader(tokenizer, limit, True, progress, on_read)
    for path in traces:
        todo = [(k, a) for k in ks for a in ANCHORS if (str(path), k, a) not in skip]
        if not todo:
            continue
        items, counts = read(path)
        defaults: dict = {}
        for k, anchor in todo:
            row = {"trace": path.name, "path": str(path), "inputs": counts,
                   **anchor_cell(items, anchor, k, lambda jobs, w: replay_arm(items, jobs, w, workers), defaults,
                                  budget_options, budget_scope, frontier)}
            rows.append(row)
            if on_row is not None:
                on_row(row)
            progress(fmt_row(row))
    return rows


def fmt_row(r: dict) -> str:
    f = lambda m: "-" if m is None else f"{m['tokens_per_step']:.3f} / {m['drafted_per_step']:.3f}"  # noqa: E731
    d = lambda v: f"{v['tokens_per_step']:+.4f} / {v['drafted_per_step']:+.3f}" if v["tokens_per_step"] is not None \
        else "-"  # noqa: E731
    yes = lambda v: "yes" if v["dominates"] else "no"  # noqa: E731
    return (f"{r['trace']:<28} k={r['k']:<2} {r['anchor']:<9} ({r['sources']})  anchor {f(r['anchor_metrics'])}  "
            f"default {f(r['default'])} {d(r['default_vs_anchor'])} {yes(r['default_vs_anchor'])}  "
            f"budgeted {f(r['budgeted'])} {d(r['budgeted_vs_anchor'])} {yes(r['budgeted_vs_anchor'])}"
            + (f"  fixed cost {r['frontier_cost']:.4f} {f(r['frontier'])} {d(r['frontier_vs_anchor'])} "
               f"{yes(r['frontier_vs_anchor'])}" if r.get("frontier") else
               "  fixed cost: none within the spending" if "frontier" in r else "")
            + step_breakdown(r))


def step_breakdown(r: dict) -> str:
    """Where a budgeted cell loses an RL step: each step's budgeted minus anchor figures (a second
    line; empty when it wins every step or has no per-step figures)."""
    if r.get("budgeted_every_step") is not False:
        return ""
    a, b = r["anchor_metrics"]["by_step"], r["budgeted"]["by_step"]
    parts = []
    for s in sorted((s for s in a if a[s]["steps"]), key=lambda s: (len(s), s)):
        v = versus(a[s], b.get(s))
        parts.append(f"{s} {v['tokens_per_step']:+.4f} / {v['drafted_per_step']:+.3f} "
                     f"{'yes' if v['dominates'] else 'no'}" if v["tokens_per_step"] is not None else f"{s} -")
    return "\n    by RL step, budgeted minus anchor (tokens / drafted tokens per step): " + "; ".join(parts)


def cell_table(rows: list[dict]) -> list[dict[str, Any]]:
    """One flat row per cell (result.json's table)."""
    out = []
    for r in rows:
        flat = {"trace": r["trace"], "k": r["k"], "anchor": r["anchor"], "sources": r["sources"], "budget": r["budget"]}
        names = ("anchor_metrics", "default", "budgeted") + (("frontier",) if "frontier" in r else ())
        for name in names:
            m = r[name] or {}
            tag = "anchor" if name == "anchor_metrics" else name
            flat[f"{tag}_tokens_per_step"] = m.get("tokens_per_step")
            flat[f"{tag}_drafted_per_step"] = m.get("drafted_per_step")
        if "frontier" in r:
            flat["frontier_cost"] = r["frontier_cost"]
        for name in names[1:]:
            v = r[f"{name}_vs_anchor"]
            flat[f"{name}_dominates"] = v["dominates"]
            flat[f"{name}_minus_anchor_tokens_per_step"] = v["tokens_per_step"]
            flat[f"{name}_minus_anchor_drafted_per_step"] = v["drafted_per_step"]
        out.append(flat)
    return out
