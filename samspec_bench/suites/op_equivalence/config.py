"""op-equivalence's settings: the config object, its constants and `build_config`, which turns
the click command's parameters into it (validating them; the click options hold the defaults)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from samspec_bench.bench.engines.engine_device import device_record, engine_device, placed_device
from samspec_bench.bench.engines.factory import engine_capabilities
from samspec_bench.data import BUILTIN_BENCHMARKS
from samspec_bench.devices import device_info, resolve_device
from samspec_bench.errors import UserError, comma_list, int_at_least, int_list, nearest, number_in, options_set
from samspec_bench.models.checkpoints import BUILTIN_MODEL, check_model, model_id
from samspec_bench.sam.drafters import DRAFTERS

# --data-dir when none is given: the package directory, whose benchmarks/ holds the built-in sets
BUILTIN_DATA_DIR = str(BUILTIN_BENCHMARKS.parent)

SUITE = "op-equivalence"
FIGURE = "logprob_diff_hist.png"
CASES_FILE = "kernel_cases.jsonl"
GREEDY_FILE = "greedy.jsonl"
LEVELS = ("kernel", "model")
DTYPE_NAMES = ("float32", "bfloat16", "float16")
GATE_METRICS = ("logprob_diff_max", "logprob_diff_p99", "logprob_diff_mean", "kl_max", "kl_mean",
                "argmax_flip_rate", "output_diff_max", "rollout_probs_diff_max")
# --threads' largest: far more threads than any machine's cores; tens of thousands crash OpenMP
# (a segmentation fault, or libgomp's exit 1) when torch starts them
MAX_THREADS = 1024
# How the run is shown, not what it computes: left out of result.json's "config".
DISPLAY_FIELDS = ("progress",)


@dataclass
class OpEqConfig:
    model: str | None = None
    engine: str = "reference"    # model level: reference (PyTorch) or vllm (samspec_bench.bench.engines.vllm.adapter)
    levels: list[str] = field(default_factory=lambda: list(LEVELS))
    pairs: list[str] | None = None                 # None: every registered pair that runs here
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    k: int = 3
    device: str = "cpu"          # resolved --device: the kernel level and the reference engine run on it
    seed: int = 0
    # kernel level
    num_seqs: int = 8
    min_seq_len: int = 16
    max_seq_len: int = 1024
    block_sizes: list[int] = field(default_factory=lambda: [16])
    num_heads: int = 8
    gqa: list[int] = field(default_factory=lambda: [1, 4])
    head_dims: list[int] = field(default_factory=lambda: [64])
    trials: int = 2
    # model level
    benchmark: str = "gsm8k"
    prompts_file: str | None = None
    data_dir: str | None = None
    num_prompts: int = 8
    max_tokens: int = 128
    chat_template: str = "auto"
    drafter: str = "sam"
    control: bool = True
    # gate
    tolerance: float | None = None
    tolerance_metric: str = "logprob_diff_max"
    threads: int = 1
    # display
    progress: bool = True

    def record(self) -> dict[str, Any]:
        """The settings as result.json records them (display options left out)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in DISPLAY_FIELDS}


def seq_range(value: str) -> tuple[int, int]:
    """--seq-len: "MIN:MAX", or "MAX" for 1:MAX."""
    try:
        lo, hi = (int(x) for x in value.split(":")) if ":" in value else (1, int(value))
    except ValueError:
        raise UserError(f"--seq-len {value!r}: expected MIN:MAX (e.g. 16:1024) or MAX") from None
    if lo < 1 or hi < lo:
        raise UserError(f"--seq-len {value!r}: need 1 <= MIN <= MAX")
    return lo, hi


def check_pairs(names: list[str] | None) -> list[str]:
    """The kernel pairs to run (None: every registered one); a UserError for an unknown name."""
    from samspec_bench.bench.engines.kernels import PAIRS  # imports torch

    chosen = list(PAIRS) if names is None else names
    for p in chosen:
        if p not in PAIRS:
            raise UserError(f"--pairs {p!r}: unknown kernel pair; choose from {', '.join(PAIRS)}")
    return chosen


# Options only one level reads (config field -> option): set away from their defaults while that
# level does not run, they would change nothing, so they are refused. Both levels read -k,
# --dtype, --device, --tolerance(-metric) and --threads.
MODEL_LEVEL_OPTIONS = {"model": "--model", "engine": "--engine", "benchmark": "--benchmark",
                       "prompts_file": "--prompts", "data_dir": "--data-dir", "num_prompts": "--num-prompts",
                       "max_tokens": "--max-tokens", "chat_template": "--chat-template", "drafter": "--drafter",
                       "control": "--no-control"}
KERNEL_LEVEL_OPTIONS = {"pairs": "--pairs", "num_seqs": "--num-seqs", "min_seq_len": "--seq-len",
                        "max_seq_len": "--seq-len", "block_sizes": "--block-size", "num_heads": "--num-heads",
                        "gqa": "--gqa", "head_dims": "--head-dim", "trials": "--trials", "seed": "--seed"}


KERNEL_ONLY_METRICS = ("output_diff_max",)   # the attention outputs; the model level compares logprobs


def refuse_unused_level_options(cfg: OpEqConfig) -> None:
    """A UserError naming the options of a level that does not run (nothing silent): model-level
    options without the model level (--level kernel, or no --model), kernel-level ones with
    --level model."""
    model_runs = "model" in cfg.levels and bool(cfg.model)
    unused = options_set(cfg, MODEL_LEVEL_OPTIONS) if not model_runs else []
    if unused:
        why = "--level " + ",".join(cfg.levels) if "model" not in cfg.levels else "no --model"
        fix = (f"add model to --level{'' if cfg.model else ' (with --model)'}" if "model" not in cfg.levels
               else f"add --model (e.g. {BUILTIN_MODEL})")
        raise UserError(f"{', '.join(unused)}: model-level option{'s' if len(unused) > 1 else ''}, and the model "
                        f"level does not run ({why}); {fix}, or drop {'them' if len(unused) > 1 else 'it'}")
    unused = options_set(cfg, KERNEL_LEVEL_OPTIONS) if "kernel" not in cfg.levels else []
    if unused:
        raise UserError(f"{', '.join(unused)}: kernel-level option{'s' if len(unused) > 1 else ''}, and the kernel "
                        f"level does not run (--level {','.join(cfg.levels)}); add kernel to --level, or drop "
                        f"{'them' if len(unused) > 1 else 'it'}")


def build_config(*, engine, model, levels, pairs, dtypes, k, device, seed, num_seqs, seq_len, block_size, num_heads,
                 gqa, head_dim, trials, benchmark, prompts_file, data_dir, num_prompts, max_tokens, chat_template,
                 drafter, control, tolerance, tolerance_metric, threads, progress) -> OpEqConfig:
    """The command's parameters (by their Python names, as click converts them; the choices
    already checked by click's types) as a checked OpEqConfig. Raises UserError naming the bad
    option, or an option of a level that does not run."""
    lv = comma_list(levels, "--level", "kernel,model")
    if any(x not in LEVELS for x in lv):
        raise UserError(f"--level {levels!r}: use kernel, model or both (comma list)")
    dts = comma_list(dtypes, "--dtype", "float32,bfloat16")
    if any(x not in DTYPE_NAMES for x in dts):
        raise UserError(f"--dtype {dtypes!r}: use float32, bfloat16 and/or float16 (comma list)")
    if k < 1 or k > 32:
        raise UserError(f"-k {k}: draft length must be in 1..32")
    if lv == ["model"] and not model:
        raise UserError(f"--level model needs --model (e.g. --model {BUILTIN_MODEL})")
    if num_prompts < 1 or max_tokens < 1 or trials < 1 or num_seqs < 1:
        raise UserError("--num-prompts, --max-tokens, --trials and --num-seqs must be >= 1")
    int_at_least(num_heads, "--num-heads", 1)
    int_at_least(threads, "--threads", 0, MAX_THREADS)   # beyond: OpenMP fails to start them (segfault)
    tolerance = number_in(tolerance, "--tolerance", 0, optional=True)
    if tolerance is None and tolerance_metric != OpEqConfig.tolerance_metric:
        raise UserError(f"--tolerance-metric {tolerance_metric} without --tolerance: no gate runs; add --tolerance "
                        "X, or drop --tolerance-metric")
    if tolerance_metric in KERNEL_ONLY_METRICS and "kernel" not in lv:
        raise UserError(f"--tolerance-metric {tolerance_metric}: measured at the kernel level only, and it does not "
                        f"run (--level {','.join(lv)}); pick another metric or add kernel to --level")
    bad_gqa = [g for g in int_list(gqa, "--gqa") if num_heads % g]
    if bad_gqa:
        raise UserError(f"--gqa {bad_gqa[0]}: --num-heads {num_heads} is not a multiple of it")
    lo, hi = seq_range(seq_len)
    if hi < k + 1:   # each request holds its k+1 verified tokens
        raise UserError(f"--seq-len {seq_len!r}: MAX must be at least k+1 = {k + 1} (the tokens the verify path "
                        "scores per request); raise it or lower -k")
    pair_list = comma_list(pairs, "--pairs", "reference,reference-fixed-order") if pairs else None   # none: all
    cfg = OpEqConfig(model=model, engine=engine, levels=lv, pairs=pair_list,
                     dtypes=dts, k=k, device=device, seed=seed, num_seqs=num_seqs, min_seq_len=lo, max_seq_len=hi,
                     block_sizes=int_list(block_size, "--block-size"), num_heads=num_heads, gqa=int_list(gqa, "--gqa"),
                     head_dims=int_list(head_dim, "--head-dim"), trials=trials, benchmark=benchmark,
                     prompts_file=prompts_file, data_dir=data_dir, num_prompts=num_prompts, max_tokens=max_tokens,
                     chat_template=chat_template, drafter=drafter, control=control, tolerance=tolerance,
                     tolerance_metric=tolerance_metric, threads=threads, progress=progress)
    refuse_unused_level_options(cfg)   # before any device, engine or model lookup
    if drafter not in DRAFTERS:   # else an internal error after the kernel level and the model load
        raise UserError(f"--drafter {drafter!r}: unknown drafter{nearest(drafter, DRAFTERS)}; choose from "
                        f"{', '.join(DRAFTERS)}")
    if data_dir is not None and not Path(data_dir).expanduser().is_dir():   # not the built-in prompts instead
        raise UserError(f"--data-dir {data_dir}: no such directory; pass the shared data directory (the one holding "
                        "benchmarks/), or leave it out for the built-in benchmark sets")
    # a device that is not there stops here, before any work; an engine that places itself (vLLM)
    # refuses a device that is not its platform's
    cfg.device = resolve_device(device)
    if "model" in lv and model:
        engine_device(engine, cfg.device)
    # a short name (Qwen3-8B) -> its Hugging Face id; the checkpoint looked for before any work
    cfg.model = check_model(model) if "model" in lv else (model_id(model) if model else model)
    if data_dir is None and prompts_file is None:
        cfg.data_dir = BUILTIN_DATA_DIR   # model level: the --benchmark prompts of the built-in sets
    check_pairs(cfg.pairs)   # checked whatever the levels, as the command always did
    return cfg


def device_of_run(cfg: OpEqConfig) -> dict[str, Any]:
    """What result.json records about the device: the kernel level's and the reference engine's
    (cfg.device); where the model level ran on an engine that places itself, that one's too."""
    record = {**device_info(cfg.device), "used": True}
    if "model" in cfg.levels and cfg.model and not engine_capabilities(cfg.engine).torch_in_process:
        record["model_level"] = device_record(cfg.engine, placed_device(cfg.engine) or "auto")
    return record
