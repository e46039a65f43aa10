"""The acceptance suite: how much a drafter accepts on real rollouts, at which lengths, with
which k, against the alternatives, and whether sharing drafts across a GRPO group helps.

    samspec-bench accept --engine replay --traces ../shared/data/traces/qwen25math_math_100x8.jsonl \\
        --drafter sam,ngram --num-spec-tokens 3,8 --sources own,group --output results/

Every combination of drafter x k x draft sources is one configuration. The engine reports
per-step records (position at drafting time, drafted, accepted, emitted) for every response;
the metrics (names and definitions in samspec_bench.metrics and DESIGN.md) are pooled
over all responses and binned by position. A speedup estimate follows from tokens and a
step-cost model (the cost of a verify step relative to a plain decode step), whose ratio
comes from --verify-cost-ratio, an engine profile, or a stated assumption.

Output (one run directory): result.json, responses.jsonl (one line per response and
configuration, with its steps), config.json (for --resume), acceptance_vs_position.png/.svg.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import click

from samspec_bench.errors import UserError
from samspec_bench.models import BUILTIN_MODEL

SUITE = "accept"
RESPONSES_FILE = "responses.jsonl"
CONFIG_FILE = "config.json"
FIGURE_STEM = "acceptance_vs_position"
ENGINES = ("replay", "reference", "vllm")  # vllm: samspec_bench.bench.engines.vllm.adapter (needs vLLM installed)
DEFAULT_VERIFY_COST_RATIO = 1.0
VERIFY_COST_ASSUMPTION = ("assumed: a (k+1)-token verify step costs as much as a 1-token decode step "
                          "(memory-bound decode at small batch); an upper bound on the speedup. Pass "
                          "--verify-cost-ratio or --engine-profile with a measured value")
SENSITIVITY_RATIOS = (1.0, 1.1, 1.25, 1.5, 2.0)
MIN_PLOT_STEPS = 20  # bins with fewer steps are not drawn (their numbers are in result.json)

# Fields that define what a run computes: --resume refuses to continue with other values.
_IDENTITY_FIELDS = ("engine", "traces", "tokenizer", "chat_template", "drafters", "num_spec_tokens", "sources",
                    "group_order", "corpus", "on_error", "limit_groups", "ngram_min", "ngram_max",
                    "sam_min_match", "model")


@dataclass
class AcceptConfig:
    traces: list[str]
    tokenizer: str
    engine: str = "replay"
    drafters: list[str] = field(default_factory=lambda: ["sam"])
    num_spec_tokens: list[int] = field(default_factory=lambda: [3])
    sources: list[str] = field(default_factory=lambda: ["own"])
    group_order: str = "concurrent"
    corpus: list[str] = field(default_factory=list)
    chat_template: str = "auto"
    bins: str = "log2:64:32768"
    position: str = "sequence"
    verify_cost_ratio: float | None = None
    engine_profile: str | None = None
    on_error: str = "stop"
    limit_groups: int | None = None
    workers: int = 0
    ngram_min: int = 2
    ngram_max: int = 5
    sam_min_match: int = 1
    model: str | None = None                                     # --engine vllm: the model
    engine_args: dict[str, Any] = field(default_factory=dict)    # --engine vllm: vLLM engine arguments


# ---------- parsing and validation ----------

def parse_list(value: str, option: str) -> list[str]:
    items = [x.strip() for x in str(value).split(",") if x.strip()]
    if not items:
        raise UserError(f"{option} {value!r}: give at least one value (a comma list)")
    return list(dict.fromkeys(items))


def parse_ks(value: str | Sequence[int]) -> list[int]:
    from samspec_bench.bench.engines.replay import MAX_K

    raw = parse_list(value, "--num-spec-tokens") if isinstance(value, str) else [str(v) for v in value]
    ks = []
    for x in raw:
        try:
            k = int(x)
        except ValueError:
            raise UserError(f"--num-spec-tokens {x!r}: not an integer; give draft lengths like 1,3,5,8") from None
        if not 1 <= k <= MAX_K:
            raise UserError(f"--num-spec-tokens {k}: the number of draft tokens must be in 1..{MAX_K}")
        ks.append(k)
    return list(dict.fromkeys(ks))


def parse_source(spec: str) -> tuple[bool, bool]:
    """'own', 'group', 'corpus', 'group+corpus' (own is always included) -> (group, corpus)."""
    from samspec_bench.bench.engines.replay import SOURCE_NAMES

    parts = [p.strip() for p in spec.split("+") if p.strip()]
    bad = [p for p in parts if p not in SOURCE_NAMES]
    if bad or not parts:
        raise UserError(f"--sources {spec!r}: use own, group, corpus or combinations joined by '+' "
                        "(e.g. own,group,group+corpus)")
    return "group" in parts, "corpus" in parts


def check_drafters(names: Sequence[str]) -> None:
    from samspec_bench.sam.drafters import DRAFTERS

    for n in names:
        if n not in DRAFTERS:
            raise UserError(f"--drafter {n!r}: unknown drafter; choose from {', '.join(DRAFTERS)}")


def build_configs(cfg: AcceptConfig):
    """The sweep: every drafter x k x source, as DraftConfigs (drafter options attached)."""
    from samspec_bench.bench.engines.replay import DraftConfig

    check_drafters(cfg.drafters)
    ks = parse_ks(cfg.num_spec_tokens)
    out, seen = [], set()
    for name in cfg.drafters:
        opts: dict[str, Any] = {}
        if name == "ngram":
            opts = {"min_n": cfg.ngram_min, "max_n": cfg.ngram_max}
        elif name == "sam" and cfg.sam_min_match != 1:
            opts = {"l_threshold": cfg.sam_min_match}
        for k in ks:
            for src in cfg.sources:
                group, corpus = parse_source(src)
                try:
                    dc = DraftConfig(drafter=name, k=k, group=group, corpus=corpus, order=cfg.group_order,
                                     options=tuple(sorted(opts.items())))
                except ValueError as e:
                    raise UserError(f"--drafter/--num-spec-tokens/--sources: {e}") from None
                if dc.label not in seen:
                    seen.add(dc.label)
                    out.append(dc)
    return out


def expand_trace_paths(paths: Sequence[str | Path], option: str = "--traces") -> list[Path]:
    files: list[Path] = []
    for p in paths:
        p = Path(p).expanduser()
        if p.is_dir():
            found = sorted(p.glob("*.jsonl"))
            if not found:
                raise UserError(f"{option} {p}: the directory holds no *.jsonl trace files")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"{option} {p}: no such file or directory; pass trace JSONL files or a directory")
    return list(dict.fromkeys(files))


def resolve_verify_cost(cfg: AcceptConfig, ks: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The verify-cost ratio per k and where it came from."""
    if cfg.verify_cost_ratio is not None:
        if not cfg.verify_cost_ratio > 0 or not math.isfinite(cfg.verify_cost_ratio):
            raise UserError(f"--verify-cost-ratio {cfg.verify_cost_ratio}: must be a positive number")
        return {k: {"ratio": float(cfg.verify_cost_ratio), "source": "--verify-cost-ratio"} for k in ks}
    if cfg.engine_profile:
        path = Path(cfg.engine_profile)
        try:
            prof = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"--engine-profile {path}: cannot read it as JSON ({e}); pass a profile JSON "
                            "with 'verify_cost_ratio'") from None
        val = prof.get("verify_cost_ratio") if isinstance(prof, dict) else None
        out = {}
        for k in ks:
            r = val.get(str(k)) if isinstance(val, dict) else val
            if not isinstance(r, (int, float)) or isinstance(r, bool) or not r > 0:
                raise UserError(f"--engine-profile {path}: no positive 'verify_cost_ratio' for k={k} (give a number "
                                "or a mapping from k to a number), or pass --verify-cost-ratio")
            out[k] = {"ratio": float(r), "source": f"engine profile {path}"}
        return out
    return {k: {"ratio": DEFAULT_VERIFY_COST_RATIO, "source": "assumption", "assumption": VERIFY_COST_ASSUMPTION}
            for k in ks}


# ---------- inputs ----------

@dataclass
class Inputs:
    items: list
    skipped: list[dict[str, Any]]
    files: list[Path]
    prompt_formats: dict[str, dict[str, int]]
    corpus: Any = None
    corpus_info: dict[str, Any] = field(default_factory=dict)


def _limit_groups(items: list, n: int | None) -> list:
    if n is None:
        return items
    if n < 1:
        raise UserError(f"--limit-groups {n}: must be >= 1")
    kept, seen = [], {}
    for it in items:
        groups = seen.setdefault(str(it.source), set())
        if it.group not in groups:
            if len(groups) >= n:
                continue
            groups.add(it.group)
        kept.append(it)
    return kept


@functools.lru_cache(maxsize=2)
def _load_tokenizer(path: str):
    """Tokenizers are loaded once per process (tests and sweeps call the suite repeatedly)."""
    from samspec_bench.data import load_tokenizer

    return load_tokenizer(path)


def load_inputs(cfg: AcceptConfig, need_corpus: bool) -> Inputs:
    from samspec_bench.data import read_traces, tokenize_traces

    files = expand_trace_paths(cfg.traces)
    tokenizer = _load_tokenizer(str(Path(cfg.tokenizer).expanduser().resolve()))
    traces = read_traces(files, on_error=cfg.on_error)
    items = tokenize_traces(traces, tokenizer, chat_template=cfg.chat_template)
    skipped = [{"file": str(f), "line": ln, "reason": why} for f, ln, why in traces.skipped]
    items = _limit_groups(items, cfg.limit_groups)
    if not items:
        raise UserError(f"--traces {', '.join(map(str, files))}: no usable responses ({len(skipped)} lines skipped)")
    formats: dict[str, Counter] = {}
    for it in items:
        formats.setdefault(str(it.source), Counter())[it.prompt_format] += 1
    inputs = Inputs(items=items, skipped=skipped, files=files,
                    prompt_formats={f: dict(c) for f, c in formats.items()})
    if need_corpus:
        if not cfg.corpus:
            raise UserError("--sources with 'corpus' needs --corpus: pass trace files (e.g. an earlier RL step) "
                            "to build the static corpus from")
        cfiles = expand_trace_paths(cfg.corpus, "--corpus")
        overlap = {f.resolve() for f in cfiles} & {f.resolve() for f in files}
        if overlap:
            raise UserError(f"--corpus {sorted(map(str, overlap))[0]} is also a replayed trace: the corpus must be "
                            "other traces, or every response would draft from itself")
        ctraces = read_traces(cfiles, on_error=cfg.on_error)
        citems = tokenize_traces(ctraces, tokenizer, chat_template=cfg.chat_template)
        inputs.skipped += [{"file": str(f), "line": ln, "reason": why, "corpus": True}
                           for f, ln, why in ctraces.skipped]
        from samspec_bench.bench.engines.replay import build_corpus

        inputs.corpus = build_corpus(citems)
        inputs.corpus_info = {"files": [str(f) for f in cfiles], "documents": len(citems),
                              "tokens": int(sum(i.prompt_ids.size + i.response_ids.size for i in citems)),
                              "document": "prompt followed by response"}
    return inputs


def make_engine(cfg: AcceptConfig, inputs: Inputs):
    if cfg.engine == "replay":
        from samspec_bench.bench.engines.replay import ReplayEngine

        return ReplayEngine(workers=cfg.workers, corpus=inputs.corpus, corpus_description=inputs.corpus_info)
    if cfg.engine == "reference":
        from samspec_bench.bench.engines.acceptance import ReferenceAcceptanceEngine

        return ReferenceAcceptanceEngine(cfg.model or BUILTIN_MODEL)
    if cfg.engine == "vllm":
        from samspec_bench.bench.engines.vllm.adapter import VllmAcceptanceEngine

        return VllmAcceptanceEngine(cfg.model or BUILTIN_MODEL, engine_args=cfg.engine_args)
    raise UserError(f"--engine {cfg.engine!r}: not available; use one of {', '.join(ENGINES)}")


# ---------- the run ----------

def _identity(cfg: AcceptConfig) -> dict[str, Any]:
    d = dataclasses.asdict(cfg)
    return {k: d[k] for k in _IDENTITY_FIELDS}


def _load_done(run_dir, labels: set[str]) -> dict[str, dict[str, dict]]:
    """Records already written, by configuration label then response key (the last one wins)."""
    done: dict[str, dict[str, dict]] = {}
    for rec in run_dir.samples(RESPONSES_FILE):
        if rec.get("config") in labels and "key" in rec:
            done.setdefault(rec["config"], {})[rec["key"]] = rec
    return done


def run(cfg: AcceptConfig, output: str | Path = "results", resume: str | Path | None = None,
        progress: bool = True) -> tuple[dict, Path]:
    """Run the suite; returns (result dict, run directory)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from samspec_bench.metrics import (METRIC_DEFINITIONS, POSITION_BASES, AcceptanceCounts, Bins,
                                             ResponseSteps, binned_counts, speedup_estimate, total_counts)
    from samspec_bench.bench.engines.replay import group_units, response_key
    from samspec_bench.results import RunDir, file_sha256

    err = Console(stderr=True)
    if not err.is_terminal:
        err = Console(stderr=True, width=160)
    if cfg.engine not in ENGINES:
        raise UserError(f"--engine {cfg.engine!r}: not available; use one of {', '.join(ENGINES)}")
    try:
        bins = Bins.parse(cfg.bins)
    except ValueError as e:
        raise UserError(f"--bins: {e}") from None
    if cfg.position not in POSITION_BASES:
        raise UserError(f"--position {cfg.position!r}: use one of {', '.join(POSITION_BASES)}")
    configs = build_configs(cfg)
    costs = resolve_verify_cost(cfg, sorted({c.k for c in configs}))
    need_corpus = any(c.corpus for c in configs)

    if resume is not None:
        saved_path = Path(resume) / CONFIG_FILE
        if not saved_path.is_file():
            raise UserError(f"--resume {resume}: no {CONFIG_FILE} there; pass a directory written by an "
                            f"earlier `samspec-bench {SUITE}` run")
        saved = json.loads(saved_path.read_text(encoding="utf-8"))
        diff = [k for k in _IDENTITY_FIELDS if saved.get(k) != _identity(cfg)[k]]
        if diff:
            raise UserError(f"--resume {resume}: the run used {diff[0]} = {saved.get(diff[0])!r}, this call "
                            f"{_identity(cfg)[diff[0]]!r}; repeat the original options to continue it")

    n_files = len(expand_trace_paths(cfg.traces))
    err.print(f"reading and tokenizing {n_files} trace file(s) with the tokenizer {cfg.tokenizer}", highlight=False)
    inputs = load_inputs(cfg, need_corpus)
    items = inputs.items
    for s in inputs.skipped:
        err.print(f"[yellow]skipped[/] {s['file']}:{s['line']}: {s['reason']}", markup=True, highlight=False)
    engine = make_engine(cfg, inputs)

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

    run_dir = RunDir(output, SUITE, resume)
    if resume is None:
        run_dir.file(CONFIG_FILE).write_text(json.dumps(_identity(cfg), indent=2) + "\n", encoding="utf-8")

    # Resume: responses already recorded are read back; unfinished groups run again whole.
    keys = [response_key(it) for it in items]
    done = _load_done(run_dir, {dc.label for dc in runnable}) if resume is not None else {}
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

    n_bins = bins.count
    acc = [[AcceptanceCounts() for _ in range(n_bins)] for _ in runnable]
    n_resp = [0] * len(runnable)
    resp_tokens = [0] * len(runnable)

    per_file: list[dict[str, AcceptanceCounts]] = [{} for _ in runnable]

    def account(j: int, files: list[str], steps: list) -> None:
        for b, c in enumerate(binned_counts(steps, bins, cfg.position)):
            if c.steps:
                acc[j][b] = acc[j][b] + c
        n_resp[j] += len(steps)
        resp_tokens[j] += sum(s.response_len for s in steps)
        by_file: dict[str, list] = {}
        for f, s in zip(files, steps):
            by_file.setdefault(f, []).append(s)
        for f, group in by_file.items():
            per_file[j][f] = per_file[j].get(f, AcceptanceCounts()) + total_counts(group)

    for j, kept in enumerate(reused):
        if kept:
            account(j, [r["file"] for r in kept], [ResponseSteps.from_record(r) for r in kept])

    total = sum(len(todo) for _, todo in jobs)
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("responses"), TimeElapsedColumn())
    resumed = sum(len(k) for k in reused)
    if resumed:
        err.print(f"resuming {run_dir.path}: {resumed} responses already recorded")
    resp_path = run_dir.file(RESPONSES_FILE)
    if resp_path.exists() and resp_path.stat().st_size:
        with open(resp_path, "rb") as f:  # a torn last line (interrupted write) stays a line of its own
            f.seek(-1, 2)
            torn = f.read(1) != b"\n"
        if torn:
            with open(resp_path, "a", encoding="utf-8") as f:
                f.write("\n")
    with open(resp_path, "a", encoding="utf-8") as out, \
            Progress(*columns, console=err, disable=not progress) as bar:
        task = bar.add_task(f"accept ({cfg.engine})", total=total)
        for j, chunk in engine.run(items, jobs):
            dc = jobs[j][0]
            lines = []
            for i, steps in chunk:
                it = items[i]
                rec = {"config": dc.label, "drafter": dc.drafter, "k": dc.k, "sources": dc.sources,
                       "group_order": dc.order if dc.group else None, "file": str(it.source), "line": it.line,
                       "id": it.id, "group": it.group, "prompt_format": it.prompt_format, **steps.to_record()}
                lines.append(json.dumps(rec, sort_keys=True))
            out.write("\n".join(lines) + "\n")
            out.flush()
            account(j, [str(items[i].source) for i, _ in chunk], [s for _, s in chunk])
            bar.advance(task, len(chunk))

    # ---- metrics ----
    metrics: dict[str, Any] = {}
    binned: dict[str, list] = {}
    for j, dc in enumerate(runnable):
        overall = AcceptanceCounts()
        for c in acc[j]:
            overall = overall + c
        cost = costs[dc.k]
        m = {**dc.describe(), "responses": n_resp[j], "response_tokens": resp_tokens[j], **overall.metrics(),
             "verify_cost_ratio": cost["ratio"], "speedup_estimate": speedup_estimate(overall, cost["ratio"]),
             "speedup_sensitivity": {str(r): speedup_estimate(overall, r) for r in SENSITIVITY_RATIOS}}
        metrics[dc.label] = m
        rows = []
        for b, c in enumerate(acc[j]):
            lo, hi = bins.bounds(b)
            rows.append({"bin": b, "lo": lo, "hi": hi, "label": bins.label(b), **c.metrics()})
        binned[dc.label] = rows

    figures = []
    try:
        figures = write_figure(run_dir.path, runnable, binned, bins, cfg)
    except Exception as e:  # noqa: BLE001 - a figure must not lose the numbers
        err.print(f"[yellow]figure not written[/]: {type(e).__name__}: {e}", markup=True, highlight=False)

    extra = {
        "engine": engine.describe(),
        "inputs": {
            "traces": [{"file": str(f), "sha256": file_sha256(f)} for f in inputs.files],
            "tokenizer": str(cfg.tokenizer),
            "responses": len(items),
            "response_tokens": int(sum(it.response_ids.size for it in items)),
            "prompt_tokens": int(sum(it.prompt_ids.size for it in items)),
            "prompt_formats": inputs.prompt_formats,
            "skipped_lines": len(inputs.skipped),
            "skipped": inputs.skipped,
            "on_error": cfg.on_error,
            "corpus": inputs.corpus_info or None,
        },
        "position_basis": cfg.position,
        "bins": {"spec": cfg.bins, "edges": list(bins.edges)},
        "cost_model": {"formula": "speedup = tokens / ((steps - drafts) * 1 + drafts * verify_cost_ratio); "
                                  "a step with an empty draft is a plain decode step; drafting is not charged",
                       "verify_cost_ratio": {str(k): v for k, v in costs.items()}},
        "metric_definitions": METRIC_DEFINITIONS,
        "configurations": [dc.label for dc in runnable],  # sweep order (metrics are keyed by label)
        "unsupported": unsupported,
        "responses_file": RESPONSES_FILE,
        "resumed_responses": resumed,
    }
    by_file = {dc.label: {f: c.metrics() for f, c in sorted(per_file[j].items())} for j, dc in enumerate(runnable)}
    tables = {"binned": binned, "by_file": by_file}
    run_dir.write_result(cfg, metrics, tables, figures, extra)
    result = json.loads(run_dir.file("result.json").read_text(encoding="utf-8"))
    return result, run_dir.path


# ---------- figure and table ----------

def write_figure(run_path: Path, configs, binned: dict, bins, cfg: AcceptConfig) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for dc in configs:
        rows = [r for r in binned[dc.label] if r["counts"]["steps"] >= MIN_PLOT_STEPS]
        xs = [bins.center(r["bin"]) for r in rows]
        axes[0].plot(xs, [r["tokens_per_step"] for r in rows], marker="o", label=dc.label)
        al = [(x, r["acceptance_length"]) for x, r in zip(xs, rows) if r["acceptance_length"] is not None]
        axes[1].plot([a for a, _ in al], [b for _, b in al], marker="o", label=dc.label)
    basis = "sequence position (prompt + generated)" if cfg.position == "sequence" else "response position"
    from matplotlib.ticker import FuncFormatter

    for ax, name in zip(axes, ("tokens_per_step (all decode steps)", "acceptance_length (vLLM: steps with a draft)")):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}" if v < 1024 else f"{v / 1024:g}k"))
        ax.set_xlabel(f"{basis} at drafting time")
        ax.set_ylabel(name.split(" ")[0])
        ax.set_title(name, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].axhline(1.0, color="grey", lw=0.8, ls="--")
    axes[1].legend(fontsize=8, loc="best")
    fig.suptitle(f"samspec-bench accept ({cfg.engine}); bins with >= {MIN_PLOT_STEPS} steps", fontsize=10)
    fig.tight_layout()
    names = []
    for ext in ("png", "svg"):
        name = f"{FIGURE_STEM}.{ext}"
        fig.savefig(run_path / name, dpi=120)
        names.append(name)
    plt.close(fig)
    return names


def _fmt(x, digits=3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def print_binned(result: dict, labels: list[str], console) -> None:
    """tokens_per_step / acceptance_length per position bin (bins with enough steps)."""
    from rich.table import Table

    binned = result["tables"]["binned"]
    first = binned[labels[0]]
    shown = [b for b in range(len(first))
             if any(binned[lab][b]["counts"]["steps"] >= MIN_PLOT_STEPS for lab in labels)]
    if not shown:
        return
    t = Table(title=f"tokens_per_step / acceptance_length by {result['position_basis']} position at drafting time")
    t.add_column("configuration")
    for b in shown:
        t.add_column(first[b]["label"], justify="right")
    for lab in labels:
        rows = binned[lab]
        t.add_row(lab, *[f"{_fmt(rows[b]['tokens_per_step'], 2)} / {_fmt(rows[b]['acceptance_length'], 2)}"
                         if rows[b]["counts"]["steps"] >= MIN_PLOT_STEPS else "-" for b in shown])
    console.print(t)


def print_table(result: dict, console) -> None:
    from rich.table import Table

    t = Table(title=f"acceptance ({result['config']['engine']}, "
                    f"{result['inputs']['responses']} responses, {result['inputs']['skipped_lines']} lines skipped)")
    for col in ("configuration", "steps", "tokens_per_step", "acceptance_length", "draft_hit_rate",
                "acceptance_rate", "speedup_est"):
        t.add_column(col, justify="left" if col == "configuration" else "right")
    labels = result.get("configurations") or list(result["metrics"])
    for label in labels:
        m = result["metrics"][label]
        t.add_row(label, str(m["counts"]["steps"]), _fmt(m["tokens_per_step"]), _fmt(m["acceptance_length"]),
                  _fmt(m["draft_hit_rate"]), _fmt(m["acceptance_rate"]),
                  f"{_fmt(m['speedup_estimate'], 2)}x @{m['verify_cost_ratio']:g}")
    console.print(t)
    print_binned(result, labels, console)
    sources = {v["source"] for v in result["cost_model"]["verify_cost_ratio"].values()}
    if "assumption" in sources:
        console.print(f"speedup_est: {VERIFY_COST_ASSUMPTION}", highlight=False)
    fmts = Counter()
    for per_file in result["inputs"]["prompt_formats"].values():
        fmts.update(per_file)
    console.print("prompts: " + ", ".join(f"{n} {f}" for f, n in sorted(fmts.items())), highlight=False)


# ---------- the command ----------

def _engine_args(pairs) -> dict[str, Any]:
    if not pairs:
        return {}
    from samspec_bench.bench.engines.vllm.adapter import parse_engine_args
    return parse_engine_args(pairs)


@click.command("accept")
@click.option("--engine", type=click.Choice(ENGINES), default="replay", show_default=True,
              help="replay: exact greedy acceptance from recorded traces, no model; reference / vllm: the model "
                   "generates from the traces' prompts (--model; vllm also --engine-arg).")
@click.option("--model", default=None, help="--engine reference/vllm: model (builtin:smollm2-135m or a checkpoint "
              "directory).")
@click.option("--engine-arg", "engine_arg", multiple=True, help="--engine vllm: a vLLM engine argument key=value "
              "(repeatable), e.g. tensor_parallel_size=2.")
@click.option("--traces", multiple=True, type=click.Path(), help="Trace JSONL file or directory (repeatable). "
              "Default: the traces of the data directory.")
@click.option("--data-dir", type=click.Path(), default=None, help="Shared data directory (default: SAMSPEC_DATA_DIR, "
              "./shared/data or ../shared/data).")
@click.option("--tokenizer", type=click.Path(), default=None,
              help="Tokenizer directory (default: <data dir>/tokenizers/qwen3).")
@click.option("--chat-template", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Prompt format: auto uses the tokenizer's chat template for traces with a system prompt.")
@click.option("--drafter", "drafters", default="sam", show_default=True,
              help="Drafters, comma list: sam, ngram (vLLM's prompt lookup), suffix (Arctic, when installed), "
                   "or a pure-Python SAM (sam-python, sam-public).")
@click.option("--num-spec-tokens", "-k", "ks", default="3", show_default=True, help="Draft lengths k, comma list.")
@click.option("--sources", default="own", show_default=True,
              help="Draft sources, comma list of own, group, corpus or '+' combinations (group+corpus): own = the "
                   "response's prompt and prefix, group = + its GRPO siblings so far, corpus = + a static corpus.")
@click.option("--group-order", type=click.Choice(["concurrent", "sequential"]), default="concurrent", show_default=True,
              help="With group sharing: members advance one batched step at a time, or one after another.")
@click.option("--corpus", multiple=True, type=click.Path(), help="Traces (other than the replayed ones) that build "
              "the static corpus for the 'corpus' source (repeatable).")
@click.option("--bins", default="log2:64:32768", show_default=True,
              help="Position bins: log2:LO:HI or comma-separated edges.")
@click.option("--position", type=click.Choice(["sequence", "response"]), default="sequence", show_default=True,
              help="Bin by sequence position (prompt + generated) or response position at drafting time.")
@click.option("--verify-cost-ratio", type=float, default=None,
              help="Cost of a (k+1)-token verify step / a 1-token decode step, for the speedup estimate.")
@click.option("--engine-profile", type=click.Path(), default=None,
              help="Measured engine profile JSON with 'verify_cost_ratio' (a number or {k: number}).")
@click.option("--on-error", type=click.Choice(["stop", "skip"]), default="stop", show_default=True,
              help="A bad trace line stops the run (naming file and line) or is skipped and counted.")
@click.option("--limit-groups", type=int, default=None, help="Replay only the first N groups of each trace file.")
@click.option("--workers", type=int, default=0, show_default=True, help="Processes (0 = one per core).")
@click.option("--ngram-min", type=int, default=2, show_default=True, help="n-gram drafter: smallest n.")
@click.option("--ngram-max", type=int, default=5, show_default=True, help="n-gram drafter: largest n.")
@click.option("--sam-min-match", type=int, default=1, show_default=True,
              help="SAM drafter: no draft when the match is shorter (l_threshold).")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.option("--resume", default=None, type=click.Path(), help="Continue the run in this directory.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
def command(engine, model, engine_arg, traces, data_dir, tokenizer, chat_template, drafters, ks, sources, group_order, corpus, bins,
            position, verify_cost_ratio, engine_profile, on_error, limit_groups, workers, ngram_min, ngram_max,
            sam_min_match, output, json_path, resume, progress):
    """Acceptance of a drafter on real rollouts: tokens_per_step, acceptance_length and more,
    overall and by position, for every drafter x k x draft source."""
    from rich.console import Console

    from samspec_bench.data import find_traces, resolve_data_dir

    if tokenizer is None and engine in ("reference", "vllm"):   # the model's own tokenizer
        from samspec_bench.models import resolve_model
        tokenizer = str(resolve_model(model or BUILTIN_MODEL))
    if not traces or tokenizer is None:
        ddir = resolve_data_dir(data_dir)
        if not traces:
            traces = [str(p) for p in find_traces(ddir)]
        if tokenizer is None:
            tokenizer = str(Path(ddir) / "tokenizers" / "qwen3")
    if ngram_min < 1 or ngram_max < ngram_min:
        raise UserError(f"--ngram-min {ngram_min} --ngram-max {ngram_max}: need 1 <= min <= max")
    if sam_min_match < 1:
        raise UserError(f"--sam-min-match {sam_min_match}: must be >= 1")
    cfg = AcceptConfig(
        traces=[str(t) for t in traces], tokenizer=str(tokenizer), engine=engine,
        drafters=parse_list(drafters, "--drafter"), num_spec_tokens=parse_ks(ks),
        sources=parse_list(sources, "--sources"), group_order=group_order, corpus=[str(c) for c in corpus],
        chat_template=chat_template, bins=bins, position=position, verify_cost_ratio=verify_cost_ratio,
        engine_profile=engine_profile, on_error=on_error, limit_groups=limit_groups, workers=workers,
        ngram_min=ngram_min, ngram_max=ngram_max, sam_min_match=sam_min_match, model=model,
        engine_args=_engine_args(engine_arg))
    for s in cfg.sources:
        parse_source(s)
    check_drafters(cfg.drafters)
    result, path = run(cfg, output=output, resume=resume, progress=progress)
    to_stdout = json_path == "-"
    out_console = Console(stderr=to_stdout)
    if not out_console.is_terminal:  # a log file or a pipe: no need to squeeze the table into 80 columns
        out_console = Console(stderr=to_stdout, width=160)
    print_table(result, out_console)
    out_console.print(f"results: {path}", highlight=False)
    from samspec_bench.results import emit_json
    emit_json(result, json_path)
