"""accuracy's settings: the config object, `build_config` (the click command's parameters,
checked; the click options hold the defaults) and the engine it runs on."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

from samspec_bench.bench.draft_config import MAX_K
from samspec_bench.bench.engines.engine_device import engine_device, engine_dtype, engine_options
from samspec_bench.bench.engines.factory import engine_capabilities, engine_names, make_engine
from samspec_bench.bench.engines.vllm.engine_args import METHODS
from samspec_bench.errors import UserError, int_at_least, nearest, number_in
from samspec_bench.evals.tasks import parse_tasks, resolve_task
from samspec_bench.models.checkpoints import BUILTIN_MODEL, model_id
from samspec_bench.sam.drafters import DRAFTERS, arctic_available
from samspec_bench.suites.accuracy.lm_options import merge_gen_kwargs, merge_model_args, parse_kv, parse_limit
from samspec_bench.suites.accuracy.tasks import check_builtin_fewshot

SUITE = "accuracy"
ARMS = ("off", "on")
ARM_LABEL = {"off": "without SAM", "on": "with SAM"}


def engine_choices() -> list[str]:
    """The engines that generate (lm-eval needs new tokens)."""
    return list(engine_names(generates=True))


@dataclass
class AccuracyConfig:
    model: str = BUILTIN_MODEL
    engine: str = "reference"
    tasks: list[str] = field(default_factory=lambda: ["gsm8k"])   # ours (math500) or lm-eval's (gsm8k_cot)
    data_dir: str | None = None
    limit: int | float | None = None     # a count, or below 1 the fraction of each task (lm-eval's --limit)
    num_samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0                       # 0: off
    max_gen_toks: int = 1024
    until: list[str] | None = None       # --gen_kwargs until=[...]: replaces the tasks' stop strings
    num_fewshot: int | None = None       # lm-eval's --num_fewshot (None: each task's own)
    engine_args: dict = field(default_factory=dict)   # --model vllm: vLLM engine arguments from --model_args
    model_args: dict = field(default_factory=dict)    # --model_args and --gen_kwargs as given (recorded)
    gen_kwargs: dict = field(default_factory=dict)
    drafter: str = "sam"
    num_spec_tokens: int = 3
    seed: int = 0
    dtype: str = "auto"   # models.checkpoints.resolve_dtype: float32 on the CPU, bfloat16 on a GPU / NPU
    max_num_seqs: int = 64
    threads: int = 1
    alpha: float = 0.05
    bootstrap_iters: int = 10000      # the paired bootstrap
    lm_eval_bootstrap_iters: int = 1000  # lm-eval's own stderr bootstrap (exact_match's stderr is analytic)
    apply_chat_template: bool = False
    fewshot_as_multiturn: bool = True    # read with apply_chat_template only (lm-eval's default there)
    device: str = "cpu"                  # where the model runs (resolved --device; --resume takes this call's)

    def check(self) -> None:
        if self.num_samples < 1:
            raise UserError(f"--num-samples {self.num_samples}: must be >= 1")
        if self.temperature < 0 or not math.isfinite(self.temperature):
            raise UserError(f"--temperature {self.temperature}: must be a finite number >= 0")
        if self.temperature == 0 and self.num_samples > 1:
            raise UserError("--num-samples > 1 with --temperature 0: greedy samples are all the same; "
                            "use --num-samples 1 or a temperature > 0")
        if self.max_gen_toks < 1:
            raise UserError(f"--max-gen-toks {self.max_gen_toks}: must be >= 1")
        if self.limit is not None:
            parse_limit(self.limit)
        int_at_least(self.num_fewshot, "--num_fewshot", 0, optional=True)
        int_at_least(self.top_k, "--top-k", 0)
        self.check_drafting()
        int_at_least(self.max_num_seqs, "--max-num-seqs", 1)
        int_at_least(self.threads, "--threads", 0)
        number_in(self.top_p, "--top-p", 0, 1, lo_open=True)
        number_in(self.alpha, "--alpha", 0, 1, lo_open=True, hi_open=True)
        self.check_greedy()

    def check_greedy(self) -> None:
        """--top-p / --top-k (or --gen_kwargs top_p / top_k) with temperature 0: greedy decoding takes
        the most likely token, which top-p and top-k always keep, so they would change nothing."""
        if self.temperature != 0:
            return
        filters = [f"--gen_kwargs {key}={value}" if key in self.gen_kwargs else f"{opt} {value}"
                   for key, opt in (("top_p", "--top-p"), ("top_k", "--top-k"))
                   if (value := getattr(self, key)) != getattr(AccuracyConfig, key)]
        if filters:
            raise UserError(f"{' and '.join(filters)} with temperature 0: greedy decoding takes the most likely token, "
                            "which top-p and top-k always keep, so nothing would change; drop "
                            f"{'them' if len(filters) > 1 else 'it'}, or sample with --temperature > 0")

    def check_drafting(self) -> None:
        """--drafter and -k, named now: the 'with SAM' arm would otherwise fail every sample
        after the model loaded (an engine built for its method takes vLLM's method names)."""
        at_build = engine_capabilities(self.engine).method_at_build
        valid = METHODS if at_build else tuple(DRAFTERS)
        if self.drafter not in valid:
            raise UserError(f"--drafter {self.drafter!r}: unknown drafter{nearest(self.drafter, valid)}; the "
                            f"{self.engine} engine drafts with {', '.join(valid)}")
        if not at_build and self.drafter == "suffix" and not arctic_available():
            raise UserError("--drafter suffix: needs arctic-inference (pip install arctic-inference), or use "
                            "another drafter (sam, ngram)")
        int_at_least(self.num_spec_tokens, "-k/--num-spec-tokens", 1, MAX_K)


def build_engine(cfg: AccuracyConfig):
    """The engine of both arms. An engine that fixes its speculative method when built gets the
    drafter and k now (and the seed, where it takes one); one sized by its options gets the
    batch size."""
    caps = engine_capabilities(cfg.engine)
    if caps.method_at_build:
        options = {"speculative": cfg.drafter, "num_spec_tokens": cfg.num_spec_tokens}
        if cfg.engine_args:
            options["engine_args"] = dict(cfg.engine_args)
        if caps.engine_seed:
            options["seed"] = cfg.seed
        return make_engine(cfg.engine, cfg.model, dtype=cfg.dtype, **options)
    return make_engine(cfg.engine, cfg.model, dtype=cfg.dtype, max_num_seqs=cfg.max_num_seqs,
                       **engine_options(cfg.engine, cfg.device))


OUTPUT_PARAMS = ("output", "resume", "json_path")   # where results go: execute's keywords, not settings
# the command's defaults as options (the config holds --device resolved; the option's default is auto)
OPTION_DEFAULTS = {**{f.name: f.default for f in fields(AccuracyConfig) if f.default is not MISSING},
                   "device": "auto"}


@dataclass(frozen=True)
class AccuracyRun:
    """What build_config returns: the measured settings (config.json and result.json record
    exactly these) and the output options that are not one of them: lm-eval's --output_path
    (results_*.json, with --log_samples the samples_*.jsonl too; the run folder always has both)."""
    config: AccuracyConfig
    progress: bool
    output_path: str | None = None
    log_samples: bool = False
    notes: tuple[str, ...] = ()   # printed before the run and kept in result.json's "notes"


def _check_output_path(output_path: str | None) -> str | None:
    if not output_path:
        return None
    p = Path(output_path).expanduser()
    if p.suffix == ".json" or p.is_file():
        raise UserError(f"--output_path {output_path}: accuracy writes lm-eval's files of two arms (SAM off, on); "
                        "give a directory (sam_off/ and sam_on/ below it, each laid out as lm-eval's --output_path)")
    return str(p.resolve())


def _check_fewshot(names: list[str], num_fewshot: int | None, builtin: bool) -> None:
    """--num_fewshot on a task with no few-shot source (lm-eval fails mid-run) is named now."""
    if importlib.util.find_spec("lm_eval") is None:   # the run names the missing lm-eval
        return
    if builtin:
        check_builtin_fewshot(names, num_fewshot)
    if not num_fewshot:
        return
    for name in names:
        task = resolve_task(name)
        fc = task.config.get("fewshot_config") or {}
        inline = fc.get("samples") if isinstance(fc, dict) else None
        if isinstance(inline, list) and num_fewshot > len(inline):   # lm-eval asserts mid-run (exit 3)
            raise UserError(f"--num_fewshot {num_fewshot}: {name} has {len(inline)} few-shot examples (in its YAML); "
                            f"use --num_fewshot {len(inline)} or less")
        if task.config.get("num_fewshot") != 0 and task.fewshot_pool_split() is None and \
                not (isinstance(fc, dict) and fc.get("samples") is not None):
            raise UserError(f"--num_fewshot {num_fewshot}: {name} has no few-shot examples (no train split, none "
                            "in its YAML); use --num_fewshot 0 or leave it out")


def build_config(*, model, engine, device, tasks, data_dir, limit, num_samples, temperature, top_p, max_gen_toks,
                 drafter, num_spec_tokens, seed, dtype, max_num_seqs, apply_chat_template, fewshot_as_multiturn, alpha,
                 threads, progress, top_k, model_args, gen_kwargs, num_fewshot, log_samples,
                 output_path) -> AccuracyRun:
    """The command's options (click's values; the click options hold the defaults), checked; a
    device that is not there stops here, before the run folder. lm-eval's --model_args and
    --gen_kwargs are merged into the settings (a contradiction with our own options is refused)."""
    if fewshot_as_multiturn is not None and not apply_chat_template:
        # lm-eval reads it only through a chat template (api/task.py); its CLI refuses it set without one
        given = "--fewshot-as-multiturn" if fewshot_as_multiturn else "--no-fewshot-as-multiturn"
        raise UserError(f"{given} without --apply-chat-template: few-shot examples become chat turns only in a chat "
                        f"template; add --apply-chat-template, or drop {given}")
    margs, gargs = parse_kv(model_args, "--model_args"), parse_kv(gen_kwargs, "--gen_kwargs")
    opts = merge_model_args(margs, {"model": model, "engine": engine, "dtype": dtype, "device": device,
                                    "max_num_seqs": max_num_seqs}, OPTION_DEFAULTS)
    gen = merge_gen_kwargs(gargs, {"temperature": temperature, "top_p": top_p, "top_k": top_k,
                                   "max_gen_toks": max_gen_toks}, OPTION_DEFAULTS)
    engine = opts.get("engine", engine)
    if engine not in engine_choices():
        raise UserError(f"--model {model}: the {engine} engine is not installed here; use --model hf (the reference "
                        "engine) or install vLLM")
    names = parse_tasks(tasks)
    num_fewshot = int_at_least(num_fewshot, "--num_fewshot", 0, optional=True)
    _check_fewshot(names, num_fewshot, builtin=data_dir is None)
    cfg = AccuracyConfig(model=model_id(opts.get("model", model)), engine=engine,
                         device=engine_device(engine, opts.get("device", device)), tasks=names,
                         data_dir=str(Path(data_dir).resolve()) if data_dir else None, limit=parse_limit(limit),
                         num_samples=num_samples, temperature=gen.get("temperature", temperature),
                         top_p=gen.get("top_p", top_p), top_k=gen.get("top_k", top_k),
                         max_gen_toks=gen.get("max_gen_toks", max_gen_toks), until=gen.get("until"),
                         num_fewshot=num_fewshot, drafter=drafter, num_spec_tokens=num_spec_tokens, seed=seed,
                         dtype=opts.get("dtype", dtype), max_num_seqs=opts.get("max_num_seqs", max_num_seqs),
                         threads=threads, alpha=alpha, engine_args=opts.get("engine_args", {}), model_args=margs,
                         gen_kwargs=gargs, apply_chat_template=apply_chat_template,
                         fewshot_as_multiturn=True if fewshot_as_multiturn is None else fewshot_as_multiturn)
    cfg = replace(cfg, dtype=engine_dtype(engine, cfg.dtype, cfg.device))   # auto resolved for the record
    cfg.check()
    notes = ()
    if log_samples and not output_path:
        # not refused: the samples are written either way (lm-eval itself refuses it without --output_path)
        notes = ("--log-samples without --output-path changes nothing: lm-eval's samples files are always written "
                 "to the run folder (lm_eval/sam_off, lm_eval/sam_on); --log-samples copies them to --output-path",)
    return AccuracyRun(cfg, progress, output_path=_check_output_path(output_path), log_samples=bool(log_samples),
                       notes=notes)
