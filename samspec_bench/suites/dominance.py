"""`samspec-bench dominance`: does SAM Pareto-dominate Arctic's suffix decoding on every shared
trace, k and draft source? Trace replay counts, not time (bench/draft_dominance.py replays):

    samspec-bench dominance [--traces F ...] [-k 3,8] [--sam-length evidence] [--limit-groups N]
        [--no-share-stats] [--dev-share F] [--figure pareto.png [--costs 0.15,...]]
    samspec-bench dominance --anchors [--traces F ...] [-k 3,8] [--limit-groups N] [--frontier]

`--anchors`: the default policy against each named anchor strategy instead, unbudgeted and with
a draft budget equal to the anchor's drafted tokens per step (suites/dominance_anchors.py);
one row per (trace, k, anchor) cell, the same folder, resume and gate (on the budgeted
default). `--frontier` adds the default at one fixed cost that spends at most the anchor's
pooled rate (suites/dominance_frontier.py). Both paths read a trace through one function
(dominance_anchors.read_trace: accept's reading, so verl validation generations are left out and a
tool-using response is one request per model turn) and say and record what it left out, split or
merged (each trace's reading once: inputs.jsonl in the run folder and result.json's `inputs` per
trace; each cell row's `inputs` its counts only; totals in the metrics).
Each cell's margins (SAM minus suffix) carry a 95 % interval, a paired bootstrap over prompt groups
(bench/dominance_spread.py); `--dev-share F` also reports each cell on the prompt groups after the
first F of its trace (the dev side, where parameters were chosen), and the gate then reads those.
`--limit-groups N`, with or without `--anchors`, as accept reads it (data.limit_groups): the first N
groups (prompts) of each trace file; a verl folder (several RL steps): the same prompts at every
step, chosen by a stable hash, N groups per step file on average, each step's count said and kept
(`inputs`' `limit`). config.json says what it counts in (`limit_groups_per`); a run saved with
another meaning is not resumed (its cells kept other prompts).

Output (one run directory): config.json, cells.jsonl (one row per (trace, k, source) cell,
appended as it finishes: `--resume DIR` replays only the missing cells), inputs.jsonl (each
trace's reading, appended as it is read), result.json (metrics:
cells and how many SAM dominates; tables: one flat row per cell; rows: the full rows), and
pareto.png with --figure (also copied to the path given). Exit 1 when SAM does not dominate in
every cell (the gate), as the old `python -m samspec_bench.bench.draft_dominance` did.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from samspec_bench.bench import draft_dominance
from samspec_bench.bench.draft_dominance import CURVE_COSTS, SOURCES, cell_key, fmt_row, write_figure
from samspec_bench.data import LIMIT_GROUPS_PER, resolve_data_dir
from samspec_bench.errors import EXIT_GATE, UserError, int_at_least, int_list
from samspec_bench.results import RunDir, check_resume, emit_json, load_result
from samspec_bench.sam.draft_length import parse_length
from samspec_bench.sam.drafters import SamDrafter, arctic_available
from samspec_bench.suites import dominance_anchors as anchors_mod
from samspec_bench.suites.accept import inputs as accept_inputs

SUITE = "dominance"
CONFIG_FILE = "config.json"
CELLS_FILE = "cells.jsonl"
FIGURE = "pareto.png"
INPUTS_FILE = "inputs.jsonl"   # each trace's reading ({"path", "trace", "inputs"}), once per reading
# --limit-groups N: what it counts in is data.LIMIT_GROUPS_PER; runs made before f21f51a kept N
# prompts of the whole folder without saying so in their config, later ones N of each step file
# the reading's counts summed over the traces in result.json's metrics (per trace: its `inputs`)
INPUT_COUNTS = ("validation_left_out", "later_turns", "skipped_lines", "merged_steps")


@dataclass(frozen=True)
class DominanceConfig:
    traces: tuple[str, ...]
    tokenizer: str
    ks: tuple[int, ...]
    sam_length: str
    limit_groups: int | None
    share_stats: bool
    figure: str | None                 # where the Pareto picture is copied (None: no figure, no curves)
    costs: tuple[float, ...] | None    # SAM's curve in the figure (None without --figure)
    anchors: bool = False              # the default policy against the named anchors instead of Arctic
    budget_options: str = ""           # --anchors: more evidence parameters of the budgeted default
    budget_scope: str = anchors_mod.DEFAULT_SCOPE   # --anchors: per RL step (step), over all (run), both (step+run)
    frontier: bool = False             # --anchors: also the default at one fixed cost matched to the anchor's spending
    limit_groups_per: str | None = None   # what --limit-groups counts in (LIMIT_GROUPS_PER); None without it
    dev_share: float | None = None     # --dev-share: the first share of each trace's prompt groups is dev

    def identity(self) -> dict:
        """What a resumed run must share with the run it continues (the figure's path may change, and
        --frontier may be added: cells without the fixed-cost point are then replayed again)."""
        return {k: v for k, v in asdict(self).items() if k not in ("figure", "frontier")}


def _costs(text: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(c) for c in text.split(","))
    except ValueError:
        raise UserError(f"--costs {text}: give comma-separated verify costs in [0, 1), e.g. {CURVE_COSTS}") from None
    if not vals or not all(0 <= c < 1 for c in vals):
        raise UserError(f"--costs {text}: verify costs must be in [0, 1) decode steps")
    return vals


def build_config(*, traces: tuple[str, ...], tokenizer: str | None, k: str, sam_length: str,
                 limit_groups: int | None, share_stats: bool, figure: str | None, costs: str,
                 data_dir: str | None, anchors: bool, budget_options: str, budget_scope: str,
                 frontier: bool, dev_share: float | None) -> DominanceConfig:
    """Every option checked before any replay: the options, then the inputs found, then what is installed."""
    ks = tuple(int_list(k, "-k"))
    if anchors and (figure or sam_length != anchors_mod.DEFAULT_POLICY or not share_stats):
        raise UserError("--anchors compares the default policy as accept replays it: drop --figure, --sam-length "
                        "and --no-share-stats")
    budget_options = (budget_options or "").strip().strip(",")
    if budget_options and not anchors:
        raise UserError("--budget-options sets the budgeted default of --anchors: add --anchors, or drop it")
    if frontier and not anchors:
        raise UserError("--frontier matches the default's cost to each anchor's spending: add --anchors, or drop it")
    if budget_scope != anchors_mod.DEFAULT_SCOPE and not anchors:
        raise UserError(f"--budget-scope {budget_scope} sets the budgeted default of --anchors: add --anchors, or drop it")
    if dev_share is not None and (anchors or not 0 < dev_share < 1):
        raise UserError(f"--dev-share {dev_share}: " + ("the held-out side is reported against Arctic, not with "
                        "--anchors; drop one" if anchors else "give the dev side's share of each trace's prompt "
                        "groups, between 0 and 1 (e.g. 0.25)"))
    if costs != CURVE_COSTS and not figure:
        raise UserError(f"--costs {costs} sets SAM's curve in the --figure picture: add --figure, or drop it")
    if budget_scope not in anchors_mod.BUDGET_SCOPES:
        raise UserError(f"--budget-scope {budget_scope!r}: use {' or '.join(anchors_mod.BUDGET_SCOPES)}")
    if budget_options:
        if {item.partition("=")[0].strip() for item in budget_options.split(",")} & {"pool", "ceiling"}:
            raise UserError("--budget-options: pool= and ceiling= are set by --budget-scope; drop them")
        try:   # checked as step+run hands them on: with a pool and a ceiling after them
            extra = parse_length(f"{anchors_mod.DEFAULT_POLICY}:budget=1,{budget_options},pool=check,ceiling=1")
        except ValueError as e:
            raise UserError(f"--budget-options {budget_options!r}: {e}") from None
        if extra.bucket == 0 and budget_scope != "step+run":
            raise UserError(f"--budget-options bucket=0 paces under the run-wide cap of --budget-scope step+run, "
                            f"which {budget_scope} has not: use step+run, or drop bucket=0")
    curve = _costs(costs) if figure else None
    if figure and not Path(figure).expanduser().resolve().parent.is_dir():
        # checked before the replay: a missing folder would fail only after every cell has run
        raise UserError(f"--figure {figure}: its folder {Path(figure).expanduser().resolve().parent} does not exist; "
                        "create it or give another path")
    try:
        SamDrafter(length=sam_length)
    except ValueError as e:
        raise UserError(f"--sam-length {sam_length!r}: {e}") from None
    limit = int_at_least(limit_groups, "--limit-groups", optional=True)
    paths = [Path(t) for t in traces] if traces else sorted((resolve_data_dir(data_dir) / "traces").glob("*.jsonl"))
    if not paths:
        raise UserError(f"no traces in {resolve_data_dir(data_dir) / 'traces'}: pass --traces FILE")
    for p in paths:
        if not (p.is_file() or p.is_dir()):   # traces are read as accept reads them: a verl folder too
            raise UserError(f"--traces {p}: no such file or folder; pass a trace JSONL file or a folder of verl "
                            "rollout dumps")
    seen: dict[Path, Path] = {}
    for p in paths:   # a trace named twice would be replayed twice: its cells counted twice in the gate
        if p.expanduser().resolve() in seen:
            raise UserError(f"--traces {p}: this trace is given twice (first as {seen[p.expanduser().resolve()]}); "
                            "pass each trace once")
        seen[p.expanduser().resolve()] = p
    # after the inputs: a wrong --traces is said whether or not arctic-inference is installed
    if not anchors and not arctic_available():
        raise UserError("arctic-inference is not installed: pip install arctic-inference (see README)")
    tok = tokenizer or str(resolve_data_dir(data_dir) / "tokenizers" / "qwen3")
    # absolute: --resume from another folder must find the same traces, not others of that name
    return DominanceConfig(traces=tuple(str(p.expanduser().resolve()) for p in paths), tokenizer=tok, ks=ks,
                           sam_length=sam_length, limit_groups=limit, share_stats=bool(share_stats), figure=figure, costs=curve,
                           anchors=bool(anchors), budget_options=budget_options, budget_scope=budget_scope,
                           frontier=bool(frontier), limit_groups_per=None if limit is None else LIMIT_GROUPS_PER,
                           dev_share=dev_share)


def check_limit_meaning(saved: dict, resume: str) -> None:
    """Refuse to continue a run whose --limit-groups kept other prompts than it keeps now (N of a
    whole folder before its config said what it counts in, N of each step file later): its cells
    would mix with cells of other prompts."""
    accept_inputs.check_limit_meaning(saved, resume, unrecorded="the first {n} prompts of a whole verl folder")


def inputs_by_trace(rows: list[dict], traces: tuple[str, ...],
                    readings: dict[str, dict] | None = None) -> dict[str, dict | None]:
    """Each trace's reading (read_trace): the run folder's (INPUTS_FILE, `readings`), else what
    its cells recorded (whole in runs made before the reading was kept once, counts only when the
    reading was lost); None where neither has it (kept from a run made before they were recorded)."""
    found = {r["path"]: r["inputs"] for r in rows if r.get("inputs") is not None}
    return {t: (readings or {}).get(t) or found.get(t) for t in traces}


def read_back(run_dir: RunDir) -> dict[str, dict]:
    """The traces' readings kept in the run folder (the last of each trace)."""
    return {r["path"]: r["inputs"] for r in run_dir.samples(INPUTS_FILE) if isinstance(r.get("inputs"), dict)}


def slim_rows(rows: list[dict]) -> list[dict]:
    """Cell rows with their trace's counts only (a row kept from an older run carries the whole reading)."""
    return [{**r, "inputs": anchors_mod.cell_counts(r["inputs"])} if r.get("inputs") else r for r in rows]


def input_totals(rows: list[dict], traces: tuple[str, ...]) -> dict:
    """The reading's counts summed over the traces (metrics), and the traces without them."""
    per = inputs_by_trace(rows, traces)
    known = [c for c in per.values() if c is not None]
    return {**{key: sum(c[key] for c in known) for key in INPUT_COUNTS},
            "inputs_not_recorded": [t for t, c in per.items() if c is None]}


def say_kept_inputs(kept, say, readings: dict[str, dict] | None = None) -> None:
    """The readings of the traces kept cells came from (the run folder's `readings`, else the
    cells' counts; the replay says them for the traces it reads)."""
    seen = {}
    for r in kept:
        seen.setdefault(r["path"], (r["trace"], (readings or {}).get(r["path"]) or r.get("inputs")))
    for name, counts in seen.values():
        for line in (anchors_mod.input_lines(name, counts) if counts else
                     [f"{name}: what its reading left out was not recorded by the run that made its kept cells"]):
            say(line + ("  (the kept cells' reading)" if not line.startswith(" ") else ""))


def cell_table(rows: list[dict]) -> list[dict]:
    """One flat row per cell: tokens per step and drafted tokens per step of each drafter (counts),
    the margins' interval and, with --dev-share, the held-out side's figures."""
    out = []
    for r in rows:
        flat = {"trace": r["trace"], "k": r["k"], "source": r["source"]}
        for name in ("sam", "sam_fixed", "suffix"):
            flat[f"{name}_tokens_per_step"] = r[name]["tokens_per_step"]
            flat[f"{name}_drafted_per_step"] = r[name]["drafted_per_step"]
        flat["dominates"] = r["dominates"]
        flat.update(interval_columns(r.get("interval"), ""))
        h = r.get("heldout")
        if h:
            flat.update({"heldout_groups": h["heldout_groups"],
                         **{f"heldout_{n}_{f}": h[n][f] for n in ("sam", "suffix")
                            for f in ("tokens_per_step", "drafted_per_step")},
                         "heldout_dominates": h["dominates"], **interval_columns(h.get("interval"), "heldout_")})
        out.append(flat)
    return out


def interval_columns(iv: dict | None, prefix: str) -> dict:
    """A cell's margin interval as flat columns (None where the cell has none)."""
    iv = iv or {}
    t, d = iv.get("tokens_per_step_diff") or [None, None], iv.get("drafted_per_step_diff") or [None, None]
    return {f"{prefix}tokens_margin_lo": t[0], f"{prefix}tokens_margin_hi": t[1],
            f"{prefix}drafted_margin_lo": d[0], f"{prefix}drafted_margin_hi": d[1],
            f"{prefix}interval_holds": iv.get("holds")}


def margin_counts(rows: list[dict]) -> dict:
    """How many cells' margin intervals lie wholly on SAM's side (metrics), pooled and held out."""
    held = [r["heldout"] for r in rows if r.get("heldout")]
    return {"cells": len(rows), "interval_level": (rows[0].get("interval") or {}).get("level") if rows else None,
            "interval_unit": (rows[0].get("interval") or {}).get("unit") if rows else None,
            "intervals_holding": sum(bool((r.get("interval") or {}).get("holds")) for r in rows),
            "intervals_missing": sum((r.get("interval") or {}).get("holds") is None for r in rows),
            "heldout_dominated_cells": sum(bool(h["dominates"]) for h in held) if held else None,
            "heldout_intervals_holding": sum(bool((h.get("interval") or {}).get("holds")) for h in held)
            if held else None,
            # a trace of one prompt group has no held-out side: the gate counts the cell as not dominated
            "heldout_cells_without_groups": sum(not h["heldout_groups"] for h in held) if held else None,
            "heldout_intervals_missing": sum((h.get("interval") or {}).get("holds") is None for h in held)
            if held else None}


def margin_lines(sure: dict, dev_share: float | None) -> list[str]:
    """The terminal's summary of the intervals (and the held-out side)."""
    level, n = sure["interval_level"], sure["cells"]
    if level is None:
        return []
    lines = [f"margin intervals ({level:.0%}, paired bootstrap over prompt groups) wholly on SAM's side in "
             f"{sure['intervals_holding']} of {n} cells" + (f"; {sure['intervals_missing']} cell(s) without an interval "
                                                     "(one prompt group)" if sure["intervals_missing"] else "")]
    if dev_share is not None:
        # the share as given (0.0001 is no "0%"): the dev side is round(share x groups), at least one
        # group and at most all but one (each row says its counts)
        none, missing = sure["heldout_cells_without_groups"] or 0, sure["heldout_intervals_missing"] or 0
        lines.append(f"held out (each trace's prompt groups after its first {dev_share:g} share, the dev side "
                     f"at least one group and at most all but one, replayed in the same pass): SAM dominates in "
                     f"{sure['heldout_dominated_cells']} of {n} cells, its interval holds in "
                     f"{sure['heldout_intervals_holding']}" + (f"; {missing} cell(s) without a held-out interval "
                                                              "(fewer than two held-out groups)" if missing else "")
                     + (f"; {none} cell(s) without a held-out side (one prompt group) count as not dominated"
                        if none else "") + "; the gate reads the held-out side")
    return lines


def _keepers(run_dir: RunDir, readings: dict[str, dict]):
    """(on_read, on_row) for the replay: a trace's whole reading kept once, in `readings` and in the
    run folder just before its first cell (a folder without cells holds no work: discarded on a
    failure, as before), and each cell row appended."""
    unwritten: dict[str, dict] = {}

    def on_read(path: Path, counts: dict) -> None:
        readings[str(path)] = unwritten[str(path)] = counts

    def on_row(row: dict) -> None:
        if row["path"] in unwritten:
            run_dir.append_sample({"path": row["path"], "trace": row["trace"], "inputs": unwritten.pop(row["path"])},
                                  INPUTS_FILE)
        run_dir.append_sample(row, CELLS_FILE)
    return on_read, on_row


def execute(config: DominanceConfig, *, output: str, resume: str | None = None, json_path: str | None = None) -> int:
    """Replay the cells (those a resumed folder holds are kept), print, write result.json;
    1 when SAM does not dominate in every cell."""
    if resume is not None:
        check_limit_meaning(check_resume(resume, SUITE, {}, config_name=CONFIG_FILE), resume)
        check_resume(resume, SUITE, config.identity(), config_name=CONFIG_FILE)
    run_dir = RunDir(output, SUITE, resume=resume)
    run_dir.write_json(CONFIG_FILE, asdict(config))
    stream = sys.stderr if json_path == "-" else sys.stdout
    say = lambda s: print(s, file=stream, flush=True)  # noqa: E731
    if config.anchors:
        return _execute_anchors(config, run_dir, say, json_path)
    kept = {cell_key(r): r for r in run_dir.samples(CELLS_FILE)}
    # a cell without `inputs` was replayed before this path read traces as --anchors does (validation
    # generations and whole tool-using responses included): replayed again, not mixed in
    # (and one without `interval` before the margins' bootstrap)
    done = {key: r for key, r in kept.items() if "inputs" in r and "interval" in r}
    say("tokens per step / drafted tokens per step (counts from trace replay, not time); SAM's acceptance "
        "statistics: " + ("drafter-wide, shared by the replay units of a cell in file order (--share-stats)"
                          if config.share_stats else "a fresh record per replay unit (--no-share-stats)"))
    if len(done) < len(kept):
        say(f"{len(kept) - len(done)} kept cell(s) replayed again: made before dominance read traces as --anchors "
            "does (validation generations left out, tool-using responses split into model turns) or bootstrapped "
            "its margins")
    for r in done.values():   # the mark on the cell's own line, before a held-out line
        first, nl, rest = fmt_row(r).partition("\n")
        say(first + "  (kept)" + nl + rest)
    readings = read_back(run_dir)
    say_kept_inputs(done.values(), say, readings)
    on_read, on_row = _keepers(run_dir, readings)
    read = anchors_mod.trace_reader(config.tokenizer, config.limit_groups, False, say, on_read)
    new = draft_dominance.run([Path(t) for t in config.traces], read, list(config.ks), config.sam_length,
                              progress=say, costs=list(config.costs) if config.costs else None,
                              share_stats=config.share_stats, skip=done,
                              on_row=on_row, dev_share=config.dev_share)
    order = {(t, k, s): i for i, (t, k, s) in enumerate((t, k, s) for t in config.traces for k in config.ks
                                                         for s in SOURCES)}
    rows = sorted([*done.values(), *new], key=lambda r: order.get(cell_key(r), len(order)))
    passed = sum(r["dominates"] for r in rows)
    say(f"SAM ({config.sam_length}) Pareto-dominates suffix in {passed} of {len(rows)} (trace, k, source) cells")
    sure = margin_counts(rows)
    for line in margin_lines(sure, config.dev_share):
        say(line)
    figures = []
    if config.figure:
        write_figure(rows, run_dir.file(FIGURE), config.sam_length)
        figures.append(FIGURE)
        if Path(config.figure).resolve() != run_dir.file(FIGURE).resolve():
            shutil.copyfile(run_dir.file(FIGURE), config.figure)
        say(f"figure: {config.figure}")
    policy = parse_length(config.sam_length)
    metrics = {"cells": len(rows), "dominated_cells": passed, "all_dominate": passed == len(rows),
               "sam_length": config.sam_length, "sam_policy": policy.describe(), "share_stats": config.share_stats,
               "unit": "trace replay counts, not time", **sure, **input_totals(rows, config.traces)}
    path = run_dir.write_result(asdict(config), metrics, {"cells": cell_table(rows)}, figures,
                                extra={"rows": slim_rows(rows),
                                       "inputs": inputs_by_trace(rows, config.traces, readings)})
    say(f"results: {run_dir.path}")
    emit_json(load_result(path.parent), json_path)
    gated = sure["heldout_dominated_cells"] if config.dev_share is not None else passed
    return 0 if gated == len(rows) else EXIT_GATE


def _execute_anchors(config: DominanceConfig, run_dir: RunDir, say, json_path: str | None) -> int:
    """--anchors: one row per (trace, k, anchor) cell; 1 when the budgeted default does not
    dominate every anchor (the gate)."""
    # a kept cell without the fixed-cost point is replayed again when this run asks for it
    done = {anchors_mod.cell_key(r): r for r in run_dir.samples(CELLS_FILE) if "frontier" in r or not config.frontier}
    say("tokens per step / drafted tokens per step (counts from trace replay, not time): each anchor on its own "
        "sources, the default policy (evidence) as is and budgeted at the anchor's drafted tokens per step; "
        "differences are default minus anchor")
    for r in done.values():
        say(anchors_mod.fmt_row(r) + "  (kept)")
    readings = read_back(run_dir)
    say_kept_inputs(done.values(), say, readings)
    on_read, on_row = _keepers(run_dir, readings)
    new = anchors_mod.run([Path(t) for t in config.traces], config.tokenizer, list(config.ks), config.limit_groups,
                          progress=say, skip=done, on_row=on_row,
                          budget_options=config.budget_options, budget_scope=config.budget_scope,
                          frontier=config.frontier, on_read=on_read)
    order = {(t, k, a): i for i, (t, k, a) in enumerate((t, k, a) for t in config.traces for k in config.ks
                                                         for a in anchors_mod.ANCHORS)}
    rows = sorted([*done.values(), *new], key=lambda r: order.get(anchors_mod.cell_key(r), len(order)))
    plain = sum(r["default_vs_anchor"]["dominates"] for r in rows)
    budgeted = sum(r["budgeted_vs_anchor"]["dominates"] for r in rows)
    scope = anchors_mod.SCOPE_MEANS[config.budget_scope]
    each = sum(bool(r.get("budgeted_every_step")) for r in rows)
    say(f"the default policy dominates the anchor in {plain} of {len(rows)} cells as it is, in {budgeted} of "
        f"{len(rows)} budgeted ({scope}); budgeted, in every RL step on its own: {each} of {len(rows)}")
    fixed = sum(r["frontier_vs_anchor"]["dominates"] for r in rows if "frontier" in r)
    if config.frontier:
        say(f"at one fixed cost matched to the anchor's pooled drafted tokens per step (bisection on the drafted "
            f"tokens only, offline): {fixed} of {len(rows)}")
    metrics = {"cells": len(rows), "default_dominated_cells": plain, "budgeted_dominated_cells": budgeted,
               "budgeted_dominated_every_step_cells": each,
               "frontier_dominated_cells": fixed if config.frontier else None,
               "budget_scope": config.budget_scope, "budget_scope_means": scope,
               "all_dominate": budgeted == len(rows), "anchors": list(anchors_mod.ANCHORS),
               "default_policy": parse_length(anchors_mod.DEFAULT_POLICY).describe(),
               "unit": "trace replay counts, not time", **input_totals(rows, config.traces)}
    path = run_dir.write_result(asdict(config), metrics, {"cells": anchors_mod.cell_table(rows)}, [],
                                extra={"rows": slim_rows(rows),
                                       "inputs": inputs_by_trace(rows, config.traces, readings)})
    say(f"results: {run_dir.path}")
    emit_json(load_result(path.parent), json_path)
    return 0 if budgeted == len(rows) else EXIT_GATE


@click.command(SUITE)
@click.option("--traces", multiple=True, type=click.Path(),
              help="Trace files (repeatable; default: every trace of the data directory).")
@click.option("--tokenizer", default=None, type=click.Path(), help="Tokenizer directory (default: <data dir>/tokenizers/qwen3).")
@click.option("--data-dir", default=None, type=click.Path(), help="Shared data directory (default: SAMSPEC_DATA_DIR, "
              "./shared/data or ../shared/data).")
@click.option("-k", "k", default="3,8", show_default=True, help="Draft lengths, comma list.")
@click.option("--sam-length", default="evidence", show_default=True,
              help="SAM's draft-length spec (fixed, evidence, evidence:cost=...).")
@click.option("--limit-groups", type=int, default=None,
              help="Replay only the first N groups (prompts) of each trace file, as accept does; a folder of verl "
                   "rollout dumps (several RL steps): the same prompts at every step, chosen by a stable hash, N "
                   "groups per step file on average (each step's count is said).")
@click.option("--share-stats/--no-share-stats", default=True, show_default=True,
              help="SAM's drafter-wide acceptance statistics (not draft content) persist across replay units, as in "
                   "one serving proposer; --no-share-stats: a fresh record per unit.")
@click.option("--figure", default=None, type=click.Path(),
              help="Also draw the Pareto picture per cell (png; in the run folder as pareto.png and copied here).")
@click.option("--costs", default=CURVE_COSTS, show_default=True,
              help="Verify costs of SAM's curve in the figure, comma list.")
@click.option("--anchors", is_flag=True, default=False,
              help="The default policy against each named anchor strategy (seed, histospec, das, seer, arctic) on "
                   "its own sources, unbudgeted and budgeted at the anchor's drafted tokens per step.")
@click.option("--budget-options", default="", help="With --anchors: more evidence parameters of the budgeted "
              "default, e.g. windup=0.5 (a dev-split grid over the budget's own parameters).")
@click.option("--budget-scope", type=click.Choice(list(anchors_mod.BUDGET_SCOPES)),
              default=anchors_mod.DEFAULT_SCOPE,
              show_default=True,
              help="With --anchors: run: one budget over every RL step at the anchor's pooled drafted tokens per "
                   "step (the pooled comparison's bound holds by construction); step: one per RL step at the "
                   "anchor's rate in that step; step+run: the per-step budgets pacing the price under one run-wide "
                   "cap at the pooled rate (the run's bound; --budget-options bucket=1: each step's as well).")
@click.option("--frontier", is_flag=True, default=False,
              help="With --anchors: also the default at one fixed cost whose pooled drafted tokens per step are at "
                   "most the anchor's (a bisection over the cost reading only the drafted tokens; about 9 more "
                   "replays a cell): does the policy dominate at equal spending, whatever its online budget does.")
@click.option("--dev-share", type=float, default=None,
              help="The first share of each trace's prompt groups (file order) is the dev side, where parameters "
                   "were chosen; each cell also reports the held-out rest, and the gate reads it.")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.option("--resume", default=None, type=click.Path(), help="Continue this run directory (finished cells are kept).")
def command(output, json_path, resume, **params):
    """SAM against Arctic's suffix decoding on every trace, k and draft source (trace replay counts):
    PASS where SAM's tokens per step >= suffix's and its drafted tokens per step <= suffix's."""
    code = execute(build_config(**params), output=output, resume=resume, json_path=json_path)
    if code:
        sys.exit(code)
