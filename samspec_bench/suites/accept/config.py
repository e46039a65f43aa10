"""The accept suite's configuration: what one run computes (`AcceptConfig`), the command's
options turned into it (`build_config`), the sweep of drafter configurations, and the
verify-cost ratio of the speedup estimate."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from samspec_bench.bench.draft_config import MAX_K, SOURCE_NAMES, DraftConfig, strategy_config
from samspec_bench.bench.engines.engine_device import engine_device
from samspec_bench.bench.engines.factory import engine_capabilities, engine_names, require_engine
from samspec_bench.bench.engines.vllm.engine_args import parse_engine_args
from samspec_bench.bench.engines.vllm.platform import vllm_available
from samspec_bench.data import BENCHMARKS, check_data_dir, find_traces, resolve_data_dir
from samspec_bench.errors import UserError, comma_list, int_at_least, nearest, no_repeats, options_set
from samspec_bench.metrics import DEFAULT_BINS, Bins
from samspec_bench.models.checkpoints import BUILTIN_MODEL, model_id, resolve_model, resolve_tokenizer
from samspec_bench.sam.drafters import DRAFTERS
from samspec_bench.sam.strategies import parse_strategy
from samspec_bench.trace_formats import FORMATS, TOOL_OUTPUT, expand

SUITE = "accept"
ENGINES = engine_names()  # replay, reference, vllm (needs vLLM installed: samspec_bench.bench.engines.vllm)
DEFAULT_VERIFY_COST_RATIO = 1.0
MAX_DRAFT_TOKEN_COST = 0.95  # the evidence policy takes a cost in [0, 1): at 1 a draft never pays
VERIFY_COST_ASSUMPTION = ("assumed: a (k+1)-token verify step costs as much as a 1-token decode step "
                          "(memory-bound decode at small batch); an upper bound on the speedup. Pass "
                          "--verify-cost-ratio or --engine-profile with a measured value")
SENSITIVITY_RATIOS = (1.0, 1.1, 1.25, 1.5, 2.0)
MAX_WORKERS = 1024   # --workers: processes; more than any machine's cores is a typo

# Fields that define what a run computes: --resume refuses to continue with other values.
IDENTITY_FIELDS = ("engine", "traces", "tokenizer", "chat_template", "drafters", "num_spec_tokens", "sources",
                   "group_order", "corpus", "on_error", "limit_groups", "ngram_min", "ngram_max",
                   "sam_min_match", "model", "any_model", "trace_format", "benchmark", "max_tokens",
                   "history_window", "history_budget_mb", "strategies", "tool_output", "history_includes_validation")
DEFAULT_BENCHMARK_PROMPTS = 16   # model engines on the built-in prompts, without --limit-groups
# How a run is shown, not what it computes: left out of result.json's "config".
NOT_RECORDED = ("progress",)


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
    model: str | None = None                                     # the model: generates (reference/vllm) or
                                                                 # names the traces' model and tokenizer (replay)
    engine_args: dict[str, Any] = field(default_factory=dict)    # --engine vllm: vLLM engine arguments
    progress: bool = True                                        # show a progress bar (not recorded)
    any_model: bool = False                                      # replay traces of other models too
    trace_format: str = "auto"
    benchmark: str = "gsm8k"                                     # model engines without traces: built-in prompts
    max_tokens: int = 256                                        # ... and their token limit
    history_window: int = 16                                     # history source: responses kept per prompt
    history_budget_mb: float = 512.0                             # history source: stored tokens, MiB
    strategies: list[str] = field(default_factory=list)          # named strategies (sam/strategies), NAME[@SOURCES]
    tool_output: str = "prefill"                                 # tool output in responses: prefilled or decoded
    history_includes_validation: bool = False                    # verl validation dumps join the RL steps
    dev_split: float | None = None                               # share of trace groups that choose (suites/accept/heldout)
    split_seed: int = 0                                          # ... drawn by this seed; neither changes a record
    engine_choice: str | None = None                             # why this engine (no --engine given)
    device: str = "cpu"                                          # where the model runs (resolved --device);
                                                                 # not in IDENTITY_FIELDS: placement, not what is computed

    def recorded(self) -> dict[str, Any]:
        """The configuration as result.json records it."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in NOT_RECORDED}

    def identity(self) -> dict[str, Any]:
        """What --resume compares with the run it continues."""
        d = dataclasses.asdict(self)
        return {k: d[k] for k in IDENTITY_FIELDS}


def choose_engine(model: str | None) -> tuple[str, str | None]:
    """The engine when --engine is not given: replay without --model; with it the model runs:
    vLLM where it imports, else the reference engine. (engine, why)"""
    if model is None:
        return "replay", None
    if importlib.util.find_spec("vllm") is not None and vllm_available() is None:
        return "vllm", "--model without --engine: the model runs on vLLM (it imports here)"
    return "reference", "--model without --engine: the model runs on the reference engine (vLLM does not import here)"


def build_config(*, engine, model, any_model, device, engine_arg, traces, trace_format, data_dir, tokenizer, chat_template,
                 drafters, ks, sources, group_order, corpus, bins, position, verify_cost_ratio, engine_profile,
                 on_error, limit_groups, benchmark, max_tokens, history_window, history_budget_mb, workers,
                 ngram_min, ngram_max, sam_min_match, progress, strategy, tool_output,
                 history_includes_validation, dev_split, split_seed) -> AcceptConfig:
    """The `accept` command's options (by their Python names, as click converts them) as a
    validated AcceptConfig. No --engine: replay, or the model's engine with --model. The
    model engines take the model's tokenizer and the traces' prompts (--traces, --data-dir),
    else the built-in benchmark prompts; replay takes the traces of --traces or the data
    directory, and the tokenizer of --model, else the data directory's."""
    choice = None
    check_data_dir(data_dir)   # even where traces and tokenizer are given
    model = model_id(model) if model else model   # a short name (Qwen3-8B) -> its Hugging Face id
    if engine is None:
        engine, choice = choose_engine(model)
    device = engine_device(engine, device)   # a device that is not there stops here, before the model loads
    if engine_capabilities(engine).needs_model:
        require_engine(engine)             # why the engine cannot run here, before the model is looked for
        model = model or BUILTIN_MODEL
        check_trace_paths(traces or ())    # a typo in a path before a model is looked for (or downloaded)
        model_dir = resolve_model(model)   # now: an uncached model offline stops here, before anything runs
        if tokenizer is None:
            tokenizer = str(model_dir)
        if not traces and data_dir is not None:
            traces = [str(p) for p in find_traces(resolve_data_dir(data_dir))]
    else:
        if tokenizer is None and model is not None:
            tokenizer = str(resolve_tokenizer(model))
        if not traces or tokenizer is None:
            if data_dir is None and not traces:
                try:
                    ddir = resolve_data_dir(None)
                except UserError:
                    raise UserError("accept --engine replay needs recorded responses: pass --traces (a verl "
                                    "rollout_data_dir, lm-eval --log_samples files or JSONL) or --data-dir; or "
                                    "--model MODEL to run a model on the built-in prompts") from None
            else:
                ddir = resolve_data_dir(data_dir)
            if not traces:
                traces = [str(p) for p in find_traces(ddir)]
            if tokenizer is None:
                tokenizer = str(Path(ddir) / "tokenizers" / "qwen3")
    if trace_format not in FORMATS:
        raise UserError(f"--trace-format {trace_format!r}: use one of {', '.join(FORMATS)}")
    if benchmark not in BENCHMARKS:
        raise UserError(f"--benchmark {benchmark!r}: use one of {', '.join(BENCHMARKS)}")
    if max_tokens < 1:
        raise UserError(f"--max-tokens {max_tokens}: must be >= 1")
    if history_window < 1:
        raise UserError(f"--history-window {history_window}: must be >= 1 (responses kept per prompt)")
    if not history_budget_mb > 0 or not math.isfinite(history_budget_mb):
        raise UserError(f"--history-budget-mb {history_budget_mb}: must be a positive number of MiB")
    if ngram_min < 1 or ngram_max < ngram_min:
        raise UserError(f"--ngram-min {ngram_min} --ngram-max {ngram_max}: need 1 <= min <= max")
    if sam_min_match < 1:
        raise UserError(f"--sam-min-match {sam_min_match}: must be >= 1")
    int_at_least(workers, "--workers", 0, MAX_WORKERS)   # 0: one per core
    int_at_least(limit_groups, "--limit-groups", 1, optional=True)
    parse_bins(bins)
    if dev_split is not None and not 0 < dev_split < 1:
        raise UserError(f"--dev-split {dev_split:g}: the share of trace groups that choose must be in (0, 1), "
                        "e.g. 0.5")
    cfg = AcceptConfig(
        traces=[str(t) for t in traces], tokenizer=str(tokenizer), engine=engine,
        drafters=parse_list(drafters, "--drafter"), num_spec_tokens=parse_ks(ks),
        sources=parse_list(sources, "--sources"), group_order=group_order, corpus=[str(c) for c in corpus],
        chat_template=chat_template, bins=bins, position=position, verify_cost_ratio=verify_cost_ratio,
        engine_profile=engine_profile, on_error=on_error, limit_groups=limit_groups, workers=workers,
        ngram_min=ngram_min, ngram_max=ngram_max, sam_min_match=sam_min_match, model=model,
        engine_args=parse_engine_args(engine_arg), progress=progress, any_model=bool(any_model),
        trace_format=trace_format, benchmark=benchmark, max_tokens=max_tokens, history_window=history_window,
        history_budget_mb=float(history_budget_mb), engine_choice=choice, device=device,
        strategies=parse_list(strategy, "--strategy") if strategy else [], tool_output=tool_output,
        history_includes_validation=bool(history_includes_validation), dev_split=dev_split,
        split_seed=int(split_seed))
    if tool_output not in TOOL_OUTPUT:
        raise UserError(f"--tool-output {tool_output!r}: use one of {', '.join(TOOL_OUTPUT)}")
    for spec in cfg.strategies:
        check_strategy(spec, cfg.engine)
    source_sets = [parse_source(s) for s in cfg.sources]
    for i, key in enumerate(source_sets):   # the same source spelled twice ('group', 'own+group')
        if key in source_sets[:i]:
            raise UserError(f"--sources {','.join(cfg.sources)!r}: {cfg.sources[i]} is "
                            f"{cfg.sources[source_sets.index(key)]} again (own is always included); give each "
                            "source once (e.g. own,group)")
    check_drafters(cfg.drafters)
    # options that would be ignored: said, not dropped
    if cfg.corpus and not any(parse_source(s)[2] for s in cfg.sources):
        raise UserError(f"--corpus is read only for a source with 'corpus' (--sources {','.join(cfg.sources)}): add "
                        "corpus to --sources (e.g. own,corpus), or drop --corpus")
    if cfg.verify_cost_ratio is not None and cfg.engine_profile:
        raise UserError("--verify-cost-ratio and --engine-profile both set the verify cost: give one of them")
    refuse_ignored(cfg)
    check_trace_paths(cfg.traces)   # last: the options' own checks need no file; not when the run reads them
    check_trace_paths(cfg.corpus or (), "--corpus")
    return cfg


def refuse_ignored(cfg: AcceptConfig) -> None:
    """Options that nothing would read in this run, refused in one line (set to their defaults
    they are harmless): each names the option and what would read it."""
    caps = engine_capabilities(cfg.engine)
    strategies = [parse_strategy(s) for s in cfg.strategies]
    sources = [parse_source(s) for s in cfg.sources]
    engine = f"--engine {cfg.engine}"
    if options_set(cfg, ("ngram_min", "ngram_max")):
        if "ngram" not in cfg.drafters:
            raise UserError(f"--ngram-min/--ngram-max set the ngram drafter, which --drafter {','.join(cfg.drafters)} "
                            "does not run: add ngram to --drafter, or drop them")
        if not caps.in_process_drafters:
            raise UserError(f"--ngram-min/--ngram-max set this project's ngram drafter, and {engine} runs its own ngram "
                            "method (prompt_lookup_min 2, max 5): give them as --engine-arg speculative_config="
                            "'{\"method\":\"ngram\",\"prompt_lookup_min\":N,\"prompt_lookup_max\":M}', or drop them")
    # SAM's l_threshold: the sam / sam-fixed drafters of --drafter (strategies keep their own
    # options); an engine that runs drafters by name passes it to 'sam' only
    readers = ("sam", "sam-fixed") if caps.in_process_drafters else ("sam",)
    if options_set(cfg, ("sam_min_match",)) and not any(d in readers for d in cfg.drafters):
        what = ("the sam / sam-fixed drafters" if caps.in_process_drafters else
                f"the sam drafter ({engine} runs sam-fixed with its own)")
        raise UserError(f"--sam-min-match sets {what} of --drafter, and --drafter {','.join(cfg.drafters)} runs "
                        "none (strategies keep their own options): add sam to --drafter, or drop it")
    if options_set(cfg, ("history_window", "history_budget_mb")) and not (
            any(h for _, h, _ in sources) or any("history" in st.sources for st in strategies)):
        raise UserError(f"--history-window / --history-budget-mb size the history source, and no configuration "
                        f"drafts from history (--sources {','.join(cfg.sources)}): add history to --sources or a "
                        "history strategy, or drop them")
    if options_set(cfg, ("group_order",)) and not (any(g for g, _, _ in sources) or any("group" in st.sources
                                                                            for st in strategies)):
        raise UserError(f"--group-order {cfg.group_order} orders a group source, and no configuration drafts from the "
                        f"group (--sources {','.join(cfg.sources)}): add group to --sources or a group strategy, or "
                        "drop --group-order")
    if options_set(cfg, ("benchmark", "max_tokens")) and cfg.traces:
        why = ("replays the traces' recorded responses" if caps.needs_traces else
               "generates from the traces' prompts, each to its recorded length")
        raise UserError(f"--benchmark/--max-tokens choose the built-in prompts a model engine generates without "
                        f"traces, and {engine} {why} (--traces / --data-dir): drop them, or run a model engine "
                        "(--model M) without --traces / --data-dir")
    if cfg.engine_args and not caps.engine_args:
        raise UserError(f"--engine-arg: the {cfg.engine} engine takes no vLLM engine arguments; use --engine vllm, "
                        "or drop them")
    if options_set(cfg, ("split_seed",)) and cfg.dev_split is None:
        raise UserError(f"--split-seed {cfg.split_seed} seeds the --dev-split split, and no --dev-split is given: add "
                        "--dev-split F (e.g. 0.5), or drop --split-seed")
    if cfg.any_model and not caps.needs_traces:
        raise UserError(f"--any-model lets replayed traces of other models in, and {engine} generates its own "
                        "responses (from the traces' prompts or the built-in ones; no trace's model is checked): drop "
                        "--any-model")


# ---------- parsing and validation ----------

LIST_EXAMPLES = {"--drafter": "sam,ngram", "--sources": "own,group", "--strategy": "seed,arctic",
                 "--num-spec-tokens": "3,8"}


def parse_list(value: str, option: str) -> list[str]:
    """A comma-list option's items; an empty item or one given twice is refused (errors.comma_list)."""
    return comma_list(value, option, LIST_EXAMPLES.get(option, "a,b"))


def check_trace_paths(paths: Sequence[str | Path], option: str = "--traces") -> None:
    """Every trace path given is there (a file or a folder; which files a folder stands for is
    read with the traces): a typo is one line naming it before anything loads."""
    for p in paths:
        if not Path(p).expanduser().exists():
            raise UserError(f"{option} {p}: no such file or directory; pass an existing trace file or folder (a verl "
                            "rollout_data_dir, lm-eval --log_samples output, or JSONL)")


def parse_bins(spec: str) -> Bins:
    """--bins as position bins (metrics.Bins: log2:LO:HI with powers of two, or ascending
    positive integer edges); a UserError naming the value and a good one."""
    try:
        return Bins.parse(spec)
    except ValueError as e:
        why = str(e).removeprefix(f"bins {spec!r}: ")
        example = "" if "e.g." in why else f", e.g. {DEFAULT_BINS} or 64,512,4096"
        raise UserError(f"--bins {spec!r}: {why}{example}") from None


def parse_ks(value: str | Sequence[int]) -> list[int]:
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
    shown = value if isinstance(value, str) else ",".join(raw)
    return no_repeats(ks, "--num-spec-tokens", shown, LIST_EXAMPLES["--num-spec-tokens"])   # '3,03' repeats 3


def parse_source(spec: str) -> tuple[bool, bool, bool]:
    """'own', 'group', 'history', 'corpus' or '+' combinations ('group+history'; own is
    always included) -> (group, history, corpus)."""
    parts = [p.strip() for p in spec.split("+") if p.strip()]
    bad = [p for p in parts if p not in SOURCE_NAMES]
    if bad or not parts:
        raise UserError(f"--sources {spec!r}{nearest(bad[0], SOURCE_NAMES) if bad else ''}: use own, group, history, "
                        "corpus or combinations joined by '+' (e.g. own,group,history,group+history)")
    return "group" in parts, "history" in parts, "corpus" in parts


def check_strategy(spec: str, engine: str = "replay") -> DraftConfig:
    """A strategy spec as accept runs it on `engine` (its step switch belongs to `rollout`:
    refused here, but `/cutoff:W:T` is a per-request rule the replay runs; draft trees where the
    engine verifies them)."""
    switch = spec.partition("/")[2]
    if "/" in spec and not switch.startswith("cutoff:"):   # cutoff:W:T is per request, the replay runs it
        raise UserError(f"--strategy {spec!r}: a step switch needs a batch; accept replays acceptance only (drop "
                        "'/...', or run it in `rollout --strategy`)")
    try:
        if parse_strategy(spec).divided:
            raise ValueError("divided=D moves a rollout's requests between engine instances, and accept replays "
                             "acceptance without instances: drop ':divided=...', or model it in `rollout --strategy`")
        if parse_strategy(spec).schedule != "fcfs":
            raise ValueError("sched=S sets the order a rollout engine admits waiting requests in, and accept "
                             "replays acceptance without an admission queue: drop ':sched=...', or model it in "
                             "`rollout --strategy`")
        if parse_strategy(spec).paths and not engine_capabilities(engine).draft_trees:
            raise ValueError(f"multi-path drafts (paths=W): the {engine} engine verifies one path a step; run them "
                             "with --engine reference --model M (a model verifies the trees), or modelled in "
                             "`rollout --strategy` (or drop ':paths=W')")
        return strategy_config(spec)
    except ValueError as e:   # parse_strategy names the spec itself: said once
        raise UserError(f"--strategy {spec!r}: {str(e).removeprefix(f'strategy {spec!r}: ')}") from None


def check_drafters(names: Sequence[str]) -> None:
    for n in names:
        if n not in DRAFTERS:
            raise UserError(f"--drafter {n!r}: unknown drafter{nearest(n, DRAFTERS)}; choose from {', '.join(DRAFTERS)}")


def build_configs(cfg: AcceptConfig) -> list[DraftConfig]:
    """The sweep: every drafter x k x source, as DraftConfigs (drafter options attached)."""
    check_drafters(cfg.drafters)
    ks = parse_ks(cfg.num_spec_tokens)
    out, seen = [], set()
    for name in cfg.drafters:
        opts: dict[str, Any] = {}
        if name == "ngram":
            opts = {"min_n": cfg.ngram_min, "max_n": cfg.ngram_max}
        elif name in ("sam", "sam-fixed") and cfg.sam_min_match != 1:
            opts = {"l_threshold": cfg.sam_min_match}
        for k in ks:
            for src in cfg.sources:
                group, history, corpus = parse_source(src)
                try:
                    dc = DraftConfig(drafter=name, k=k, group=group, corpus=corpus, order=cfg.group_order,
                                     options=tuple(sorted(opts.items())), history=history)
                except ValueError as e:
                    raise UserError(f"--drafter/--num-spec-tokens/--sources: {e}") from None
                if dc.label not in seen:
                    seen.add(dc.label)
                    out.append(dc)
    for spec in cfg.strategies:
        out.append(replace(check_strategy(spec, cfg.engine), order=cfg.group_order))
    return out


def priced_draft_length(configs: list[DraftConfig], costs: dict[int, dict[str, Any]]) -> list[DraftConfig]:
    """The 'sam' drafter's evidence policy priced by a measured verify cost: with a ratio r_k
    (a verify step of k drafts costs r_k decode steps, from --verify-cost-ratio or
    --engine-profile), one more draft token costs about (r_k - 1) / k decode steps, and the
    policy drafts token i only while P(tokens 1..i accepted) is at least that. Without a
    measured ratio (the assumption r = 1 would make drafting free) the policy keeps its default."""
    out = []
    for dc in configs:
        cost = costs.get(dc.k, {})
        if dc.drafter != "sam" or cost.get("source", "assumption") == "assumption" or "length" in dict(dc.options):
            out.append(dc)
            continue
        marginal = min(max((cost["ratio"] - 1.0) / dc.k, 0.0), MAX_DRAFT_TOKEN_COST)
        opts = dict(dc.options, length=f"evidence:cost={marginal:.4g}")
        out.append(replace(dc, options=tuple(sorted(opts.items()))))
    return out


def expand_trace_paths(paths: Sequence[str | Path], option: str = "--traces", fmt: str | None = "auto") -> list[Path]:
    """The trace files `paths` stand for (trace_formats.expand: verl step files in step order,
    lm-eval samples files, *.jsonl)."""
    check_trace_paths(paths, option)
    files: list[Path] = []
    for p in paths:
        files.extend(f for f, _ in expand(p, fmt))
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
