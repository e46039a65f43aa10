"""Running the accept suite: the sweep of drafter configurations on one engine (trace replay,
or a model engine through `ModelAcceptanceEngine`), per-response records appended as they come
(so --resume continues an interrupted run), metrics pooled overall, by position bin and by
trace file, and the run folder. `execute` is everything the command does after parsing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from samspec_bench.bench.engines.acceptance import ModelAcceptanceEngine
from samspec_bench.bench.engines.base import AcceptanceEngine
from samspec_bench.bench.engines.engine_device import device_record
from samspec_bench.bench.engines.factory import engine_capabilities
from samspec_bench.bench.engines.replay import ReplayEngine, group_units, response_key
from samspec_bench.data import LIMIT_GROUPS_PER
from samspec_bench.errors import UserError
from samspec_bench.metrics import (METRIC_DEFINITIONS, POSITION_BASES, AcceptanceCounts, Bins, ResponseSteps,
                                   binned_counts, speedup_estimate, total_counts)
from samspec_bench.models.checkpoints import BUILTIN_MODEL, progress_bars
from samspec_bench.results import (INPUT_FILES, RunDir, check_resume, check_same_files, drop_torn_tail, emit_json,
                                   file_sha256)
from samspec_bench.suites.accept.config import (ENGINES, IDENTITY_FIELDS, SENSITIVITY_RATIOS, SUITE, AcceptConfig,
                                                build_configs, expand_trace_paths, parse_bins,
                                                priced_draft_length, resolve_verify_cost)
from samspec_bench.suites.accept.heldout import SIDES, split_block, split_sides
from samspec_bench.suites.accept.inputs import Inputs, check_limit_meaning, load_inputs
from samspec_bench.suites.accept.output import print_table, write_figure, write_pareto_figure
from samspec_bench.trace_formats import merged_steps_line

RESPONSES_FILE = "responses.jsonl"
CONFIG_FILE = "config.json"


def execute(config: AcceptConfig, *, output: str | Path, resume: str | Path | None = None,
            json_path: str | None = None) -> int:
    """Run, print the table, write the run folder and the JSON (`json_path`, '-' for stdout);
    returns the exit code."""
    result, path = run(config, output=output, resume=resume)
    to_stdout = json_path == "-"
    out_console = Console(stderr=to_stdout)
    if not out_console.is_terminal:  # a log file or a pipe: no need to squeeze the table into 80 columns
        out_console = Console(stderr=to_stdout, width=160)
    print_table(result, out_console)
    out_console.print(f"results: {path}", highlight=False)
    emit_json(result, json_path)
    return 0


SIDE_BY_SIDE = ("own", "own+group", "own+history", "own+group+history")


def sources_side_by_side(configs: list, metrics: dict) -> list[dict]:
    """One row per drafter / k / group order: tokens_per_step and acceptance_length of each
    of own, group, history and group+history that ran (None where it did not)."""
    rows: dict[tuple, dict] = {}
    for dc in configs:
        if dc.corpus or dc.sources not in SIDE_BY_SIDE:
            continue
        key = (dc.drafter, dc.k, dc.order if dc.group else None)
        row = rows.setdefault((dc.drafter, dc.k), {"drafter": dc.drafter, "k": dc.k, "group_order": None,
                                                   **{s: None for s in SIDE_BY_SIDE}})
        if key[2] is not None:
            row["group_order"] = key[2]
        m = metrics[dc.label]
        row[dc.sources] = {"tokens_per_step": m["tokens_per_step"], "acceptance_length": m["acceptance_length"],
                           "label": dc.label}
    return [r for r in rows.values() if sum(r[s] is not None for s in SIDE_BY_SIDE) >= 2]


def _load_done(run_dir, labels: set[str]) -> dict[str, dict[str, dict]]:
    """Records already written, by configuration label then response key (the last one wins)."""
    done: dict[str, dict[str, dict]] = {}
    for rec in run_dir.samples(RESPONSES_FILE):
        if rec.get("config") in labels and "key" in rec:
            done.setdefault(rec["config"], {})[rec["key"]] = rec
    return done


def run(cfg: AcceptConfig, output: str | Path = "results", resume: str | Path | None = None,
        progress: bool | None = None) -> tuple[dict, Path]:
    """Run the suite; returns (result dict, run directory). progress: show a progress bar
    (None: as the config says)."""
    progress = cfg.progress if progress is None else progress
    err = Console(stderr=True)
    if not err.is_terminal:
        err = Console(stderr=True, width=160)
    if cfg.engine not in ENGINES:
        raise UserError(f"--engine {cfg.engine!r}: not available; use one of {', '.join(ENGINES)}")
    bins = parse_bins(cfg.bins)   # a config made in code is checked as the options are
    if cfg.position not in POSITION_BASES:
        raise UserError(f"--position {cfg.position!r}: use one of {', '.join(POSITION_BASES)}")
    configs = build_configs(cfg)
    costs = resolve_verify_cost(cfg, sorted({c.k for c in configs}))
    configs = priced_draft_length(configs, costs)
    for k, spec in sorted({(dc.k, dict(dc.options)["length"]) for dc in configs
                           if dc.drafter == "sam" and "length" in dict(dc.options)}):
        err.print(f"draft length: sam k={k} drafts by {spec} (a draft token's verify cost in decode steps, "
                  f"from {costs[k]['source']})", highlight=False)
    need_corpus = any(c.corpus for c in configs)

    if resume is not None:   # the folder is an accept run with whole, matching settings (else a UserError)
        check_limit_meaning(check_resume(resume, SUITE, cfg.identity(), IDENTITY_FIELDS, CONFIG_FILE), resume)

    if cfg.engine_choice:
        err.print(f"engine: {cfg.engine} ({cfg.engine_choice}); model {cfg.model}", highlight=False)
    if cfg.traces:
        n_files = len(expand_trace_paths(cfg.traces, fmt=cfg.trace_format))
        err.print(f"reading and tokenizing {n_files} trace file(s) with the tokenizer {cfg.tokenizer}", highlight=False)
    else:
        err.print(f"prompts: the built-in {cfg.benchmark} set (no --traces / --data-dir), up to {cfg.max_tokens} "
                  "tokens each", highlight=False)
    need_history = any(c.history for c in configs)
    inputs = load_inputs(cfg, need_corpus, need_history)
    for s in inputs.skipped:
        err.print(f"[yellow]skipped[/] {s['file']}:{s['line']}: {s['reason']}", markup=True, highlight=False)
    if inputs.merged_steps:
        err.print(f"note: {merged_steps_line(inputs.merged_steps)}", markup=False, highlight=False, soft_wrap=True)
    if inputs.steps and need_history:
        err.print(f"history: {inputs.steps}", highlight=False)
    engine = acceptance_engine(cfg, inputs)
    try:
        with progress_bars(progress):   # --no-progress: the lazily loaded model prints no "Loading weights" bar
            return _sweep(cfg, inputs, engine, configs, costs, bins, output, resume, progress, err)
    finally:
        engine.close()


def acceptance_engine(cfg: AcceptConfig, inputs: Inputs) -> AcceptanceEngine:
    """The sweep's engine: trace replay where the engine replays recorded responses, else the
    acceptance contract over the model engine."""
    if engine_capabilities(cfg.engine).needs_traces:
        return ReplayEngine(workers=cfg.workers, corpus=inputs.corpus, corpus_description=inputs.corpus_info,
                            history_window=cfg.history_window,
                            history_budget_bytes=int(cfg.history_budget_mb * (1 << 20)), steps_description=inputs.steps)
    return ModelAcceptanceEngine(cfg.engine, cfg.model or BUILTIN_MODEL, engine_args=cfg.engine_args, device=cfg.device)


class _Tally:
    """Pooled counts per configuration (index j of the runnable ones): by position bin, by
    trace file and by RL step, plus responses (first turns: a multi-turn response is one
    request per model turn), requests and their generated tokens."""

    def __init__(self, n: int, bins: Bins, position: str, step_of: dict[str, Any], later_turns: set[str],
                 side_of: dict[str, str] | None = None):
        self.bins, self.position, self.step_of, self.later_turns = bins, position, step_of, later_turns
        self.side_of = side_of or {}   # --dev-split: response key -> 'dev' / 'heldout'
        self.per_side: list[dict[str, AcceptanceCounts]] = [{} for _ in range(n)]
        self.side_responses: dict[str, int] = {}   # first turns per side (configuration 0's)
        self.acc = [[AcceptanceCounts() for _ in range(bins.count)] for _ in range(n)]
        self.n_resp = [0] * n
        self.n_req = [0] * n
        self.resp_tokens = [0] * n
        self.per_file: list[dict[str, AcceptanceCounts]] = [{} for _ in range(n)]
        self.per_step: list[dict[Any, AcceptanceCounts]] = [{} for _ in range(n)]
        self.step_sizes: list[dict[Any, list[int]]] = [{} for _ in range(n)]   # step -> [responses, tokens]

    def account(self, j: int, files: list[str], steps: list) -> None:
        for b, c in enumerate(binned_counts(steps, self.bins, self.position)):
            if c.steps:
                self.acc[j][b] = self.acc[j][b] + c
        self.n_req[j] += len(steps)
        self.n_resp[j] += sum(s.key not in self.later_turns for s in steps)
        self.resp_tokens[j] += sum(s.response_len for s in steps)
        for s in steps:
            size = self.step_sizes[j].setdefault(self.step_of.get(s.key), [0, 0])
            size[0] += s.key not in self.later_turns
            size[1] += s.response_len
        by_file: dict[str, list] = {}
        for f, s in zip(files, steps):
            by_file.setdefault(f, []).append(s)
        for f, group in by_file.items():
            self.per_file[j][f] = self.per_file[j].get(f, AcceptanceCounts()) + total_counts(group)
        by_step: dict[Any, list] = {}
        for s in steps:
            by_step.setdefault(self.step_of.get(s.key), []).append(s)
        for st, group in by_step.items():
            self.per_step[j][st] = self.per_step[j].get(st, AcceptanceCounts()) + total_counts(group)
        if self.side_of:
            by_side: dict[str, list] = {}
            for s in steps:
                by_side.setdefault(self.side_of[s.key], []).append(s)
            for side, group in by_side.items():
                self.per_side[j][side] = self.per_side[j].get(side, AcceptanceCounts()) + total_counts(group)
                if j == 0:
                    self.side_responses[side] = self.side_responses.get(side, 0) + \
                        sum(s.key not in self.later_turns for s in group)


def _runnable(engine: AcceptanceEngine, configs: list, err: Console) -> tuple[list, dict[str, str]]:
    """The configurations the engine runs, and why it does not run the others."""
    runnable, unsupported = [], {}
    for dc in configs:
        reason = engine.unsupported(dc)
        if reason:
            unsupported[dc.label] = reason
            err.print(f"[yellow]not run[/] {dc.label}: {reason}", markup=True, highlight=False)
        else:
            runnable.append(dc)
    if not runnable:
        first = next(iter(unsupported.items()))
        raise UserError(f"--drafter/--sources: nothing can run here ({first[0]}: {first[1]})")
    return runnable, unsupported


def _plan_jobs(items: list, keys: list[str], runnable: list, done: dict) -> tuple[list, list[list[dict]]]:
    """Per configuration: the responses to run (unfinished groups run again whole) and the
    records already written (--resume) that are kept."""
    jobs, reused = [], []
    for dc in runnable:
        have = done.get(dc.label, {})
        todo: list[int] = []
        kept: list[dict] = []
        units = group_units(items, range(len(items))) if dc.group else [[i] for i in range(len(items))]
        for unit in units:
            if all(keys[i] in have for i in unit):
                kept.extend(have[keys[i]] for i in unit)
            else:
                todo.extend(unit)
        jobs.append((dc, todo))
        reused.append(kept)
    return jobs, reused


def _run_jobs(engine: AcceptanceEngine, items: list, jobs: list, tally: _Tally, resp_path: Path, label: str,
              progress: bool, err: Console) -> None:
    """Run the jobs, appending every response's record as its chunk arrives."""
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("responses"), TimeElapsedColumn())
    drop_torn_tail(resp_path)   # a torn last line (interrupted write) is cut off: its response is redone
    with open(resp_path, "a", encoding="utf-8") as out, \
            Progress(*columns, console=err, disable=not progress) as bar:
        task = bar.add_task(label, total=sum(len(todo) for _, todo in jobs))
        for j, chunk in engine.run(items, jobs):
            dc = jobs[j][0]
            lines = []
            for i, steps in chunk:
                it = items[i]
                rec = {"config": dc.label, "drafter": dc.drafter, "k": dc.k, "sources": dc.sources,
                       "group_order": dc.order if dc.group else None, "file": str(it.source), "line": it.line,
                       "id": it.id, "group": it.group, "step": getattr(it, "step", None),
                       "prompt_format": it.prompt_format, **steps.to_record()}
                if hasattr(it, "turn"):   # one model turn of a multi-turn response
                    rec["turn"] = it.turn
                lines.append(json.dumps(rec, sort_keys=True))
            out.write("\n".join(lines) + "\n")
            out.flush()
            tally.account(j, [str(items[i].source) for i, _ in chunk], [s for _, s in chunk])
            bar.advance(task, len(chunk))


def _metrics(runnable: list, tally: _Tally, costs: dict, bins: Bins) -> tuple[dict[str, Any], dict[str, list]]:
    """Per configuration: pooled metrics with the speedup estimate, and the rows per position bin."""
    metrics: dict[str, Any] = {}
    binned: dict[str, list] = {}
    for j, dc in enumerate(runnable):
        overall = AcceptanceCounts()
        for c in tally.acc[j]:
            overall = overall + c
        cost = costs[dc.k]
        metrics[dc.label] = {**dc.describe(), "responses": tally.n_resp[j], "requests": tally.n_req[j],
                             "response_tokens": tally.resp_tokens[j],
                             **overall.metrics(), "verify_cost_ratio": cost["ratio"],
                             "speedup_estimate": speedup_estimate(overall, cost["ratio"]),
                             "speedup_sensitivity": {str(r): speedup_estimate(overall, r) for r in SENSITIVITY_RATIOS}}
        binned[dc.label] = [{"bin": b, "lo": bins.bounds(b)[0], "hi": bins.bounds(b)[1], "label": bins.label(b),
                             **c.metrics()} for b, c in enumerate(tally.acc[j])]
    return metrics, binned


def group_source_block(items: list) -> dict[str, Any]:
    """How many groups (trace file, group, RL step) hold one response: for those the group
    source holds nothing beyond the response's own text, so own+group drafts as own does."""
    units = group_units(items, [i for i, it in enumerate(items) if getattr(it, "turn", 0) == 0])
    ones = sum(len(u) == 1 for u in units)
    note = None
    if ones:
        which = f"all {ones} groups have" if ones == len(units) else f"{ones} of {len(units)} groups have"
        note = (f"group source: {which} one response, and there the group source holds nothing beyond the response's "
                f"own text (own+group drafts as own does for them); group sharing needs several responses per prompt "
                f"(e.g. verl's rollout.n > 1)")
    return {"groups": len(units), "groups_with_one_response": ones, "note": note}


def input_files(inputs: Inputs) -> dict[str, str]:
    """The sha256 of every trace and corpus file read: what --resume checks has not changed
    (records are keyed by file and line, so an edited file would be read as the old one)."""
    corpus = (inputs.corpus_info or {}).get("files") or []
    return {str(f): file_sha256(f) for f in [*inputs.files, *corpus]}


def _inputs_record(cfg: AcceptConfig, inputs: Inputs, files: dict[str, str]) -> dict[str, Any]:
    items = inputs.items
    return {"traces": [{"file": str(f), "sha256": files[str(f)]} for f in inputs.files],
            "tokenizer": str(cfg.tokenizer), "responses": sum(getattr(it, "turn", 0) == 0 for it in items),
            "requests": len(items), "tool_output": inputs.tool_output, "validation": inputs.validation,
            "response_tokens": int(sum(it.response_ids.size for it in items)),
            "prompt_tokens": int(sum(it.prompt_ids.size for it in items)),
            "prompt_formats": inputs.prompt_formats, "skipped_lines": len(inputs.skipped), "skipped": inputs.skipped,
            "merged_steps": (inputs.merged_steps or {}).get("merged_steps", 0),
            "merged_step_folders": (inputs.merged_steps or {}).get("merged", []),
            # validation folders among them: included as history by --history-includes-validation
            "merged_validation_folders": (inputs.merged_steps or {}).get("validation_folders", []),
            "on_error": cfg.on_error, "corpus": inputs.corpus_info or None, "trace_formats": inputs.trace_formats,
            "models": inputs.models or None, "steps": inputs.steps, "builtin_prompts": inputs.prompts,
            "limit": inputs.limit}


def _tables(runnable: list, tally: _Tally, metrics: dict, binned: dict) -> dict[str, Any]:
    by_file = {dc.label: {f: c.metrics() for f, c in sorted(tally.per_file[j].items())}
               for j, dc in enumerate(runnable)}
    tables = {"binned": binned, "by_file": by_file, "sources": sources_side_by_side(runnable, metrics)}
    if any(k is not None for ps in tally.per_step for k in ps):
        tables["by_step"] = {dc.label: _step_rows(tally, j) for j, dc in enumerate(runnable)}
    return tables


def _step_rows(tally: _Tally, j: int) -> list[dict[str, Any]]:
    """Configuration j per RL step: responses, their generated tokens and the metrics."""
    rows = []
    for st, c in sorted(tally.per_step[j].items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        responses, tokens = tally.step_sizes[j].get(st, [0, 0])
        rows.append({"step": st, "responses": responses, "response_tokens": tokens, **c.metrics()})
    return rows


def _sweep(cfg: AcceptConfig, inputs: Inputs, engine: AcceptanceEngine, configs: list, costs: dict, bins: Bins,
           output, resume, progress: bool, err: Console) -> tuple[dict, Path]:
    """The sweep on an engine, its records, metrics and run folder."""
    items = inputs.items
    runnable, unsupported = _runnable(engine, configs, err)
    files = input_files(inputs)
    run_dir = RunDir(output, SUITE, resume)
    if resume is None:
        # what --limit-groups keeps (data.limit_groups): a resume checks it before continuing
        run_dir.write_json(CONFIG_FILE, {**cfg.identity(), INPUT_FILES: files,
                                         "limit_groups_per": LIMIT_GROUPS_PER if cfg.limit_groups else None})
    else:
        check_same_files(run_dir.saved_config(CONFIG_FILE) or {}, files, resume)

    # Resume: responses already recorded are read back; unfinished groups run again whole.
    keys = [response_key(it) for it in items]
    done = _load_done(run_dir, {dc.label for dc in runnable}) if resume is not None else {}
    jobs, reused = _plan_jobs(items, keys, runnable, done)
    sides, groups = split_sides(items, cfg.dev_split, cfg.split_seed) if cfg.dev_split else (None, None)
    tally = _Tally(len(runnable), bins, cfg.position, {keys[i]: getattr(it, "step", None) for i, it in enumerate(items)},
                   {keys[i] for i, it in enumerate(items) if getattr(it, "turn", 0) > 0}, sides)
    for j, kept in enumerate(reused):
        if kept:
            tally.account(j, [r["file"] for r in kept], [ResponseSteps.from_record(r) for r in kept])
    resumed = sum(len(k) for k in reused)
    if resumed:
        err.print(f"resuming {run_dir.path}: {resumed} responses already recorded")
    _run_jobs(engine, items, jobs, tally, run_dir.file(RESPONSES_FILE), f"accept ({cfg.engine})", progress, err)

    metrics, binned = _metrics(runnable, tally, costs, bins)
    figures = []
    try:
        figures = write_figure(run_dir.path, runnable, binned, bins, cfg)
        figures += write_pareto_figure(run_dir.path, runnable, metrics, cfg)
    except Exception as e:  # noqa: BLE001 - a figure must not lose the numbers
        err.print(f"[yellow]figure not written[/]: {type(e).__name__}: {e}", markup=True, highlight=False)
    extra = {
        "engine": engine.describe(), "inputs": _inputs_record(cfg, inputs, files), "position_basis": cfg.position,
        "bins": {"spec": cfg.bins, "edges": list(bins.edges)},
        "cost_model": {"formula": "speedup = tokens / ((steps - drafts) * 1 + drafts * verify_cost_ratio); "
                                  "a step with an empty draft is a plain decode step; drafting is not charged",
                       "verify_cost_ratio": {str(k): v for k, v in costs.items()}},
        "metric_definitions": METRIC_DEFINITIONS,
        "configurations": [dc.label for dc in runnable],  # sweep order (metrics are keyed by label)
        "unsupported": unsupported, "responses_file": RESPONSES_FILE, "resumed_responses": resumed,
    }
    if any(dc.group for dc in runnable):
        extra["group_source"] = group_source_block(items)
    if sides:
        extra["split"] = split_block(runnable, tally.per_side, costs, cfg.dev_split, cfg.split_seed, groups,
                                     {side: tally.side_responses.get(side, 0) for side in SIDES})
    run_dir.write_result(cfg.recorded(), metrics, _tables(runnable, tally, metrics, binned), figures, extra,
                         device=device_record(cfg.engine, cfg.device))
    result = json.loads(run_dir.file("result.json").read_text(encoding="utf-8"))
    return result, run_dir.path
