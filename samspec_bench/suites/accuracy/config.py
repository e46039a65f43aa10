"""accuracy's settings: the config object, `build_config` (the click command's parameters,
checked; the click options hold the defaults) and the engine it runs on."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from samspec_bench.bench.engines.engine_device import engine_device, engine_options
from samspec_bench.bench.engines.factory import engine_capabilities, engine_names, make_engine
from samspec_bench.errors import UserError, int_at_least, number_in
from samspec_bench.evals.tasks import parse_tasks
from samspec_bench.models.checkpoints import BUILTIN_MODEL, model_id

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
    tasks: list[str] = field(default_factory=lambda: ["gsm8k"])
    data_dir: str | None = None
    limit: int | None = None
    num_samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_gen_toks: int = 1024
    drafter: str = "sam"
    num_spec_tokens: int = 3
    seed: int = 0
    dtype: str = "float32"
    max_num_seqs: int = 64
    threads: int = 1
    alpha: float = 0.05
    bootstrap_iters: int = 10000      # the paired bootstrap
    lm_eval_bootstrap_iters: int = 1000  # lm-eval's own stderr bootstrap (exact_match's stderr is analytic)
    apply_chat_template: bool = False
    fewshot_as_multiturn: bool = True    # with apply_chat_template (lm-eval's default)
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
        if self.limit is not None and self.limit < 1:
            raise UserError(f"--limit {self.limit}: must be >= 1")
        if self.num_spec_tokens < 1:
            raise UserError(f"--num-spec-tokens {self.num_spec_tokens}: must be >= 1")
        int_at_least(self.max_num_seqs, "--max-num-seqs", 1)
        int_at_least(self.threads, "--threads", 0)
        number_in(self.top_p, "--top-p", 0, 1, lo_open=True)
        number_in(self.alpha, "--alpha", 0, 1, lo_open=True, hi_open=True)


def build_engine(cfg: AccuracyConfig):
    """The engine of both arms. An engine that fixes its speculative method when built gets the
    drafter and k now (and the seed, where it takes one); one sized by its options gets the
    batch size."""
    caps = engine_capabilities(cfg.engine)
    if caps.method_at_build:
        options = {"speculative": cfg.drafter, "num_spec_tokens": cfg.num_spec_tokens}
        if caps.engine_seed:
            options["seed"] = cfg.seed
        return make_engine(cfg.engine, cfg.model, dtype=cfg.dtype, **options)
    return make_engine(cfg.engine, cfg.model, dtype=cfg.dtype, max_num_seqs=cfg.max_num_seqs,
                       **engine_options(cfg.engine, cfg.device))


OUTPUT_PARAMS = ("output", "resume", "json_path")   # where results go: execute's keywords, not settings


@dataclass(frozen=True)
class AccuracyRun:
    """What build_config returns: the measured settings (config.json and result.json record
    exactly these) and the display option that is not one of them."""
    config: AccuracyConfig
    progress: bool


def build_config(*, model, engine, device, tasks, data_dir, limit, num_samples, temperature, top_p, max_gen_toks,
                 drafter, num_spec_tokens, seed, dtype, max_num_seqs, apply_chat_template, fewshot_as_multiturn, alpha,
                 threads, progress) -> AccuracyRun:
    """The command's options (click's values; the click options hold the defaults), checked; a
    device that is not there stops here, before the run folder."""
    cfg = AccuracyConfig(model=model_id(model), engine=engine, device=engine_device(engine, device),
                         tasks=parse_tasks(tasks), data_dir=str(Path(data_dir).resolve()) if data_dir else None, limit=limit,
                         num_samples=num_samples, temperature=temperature, top_p=top_p, max_gen_toks=max_gen_toks,
                         drafter=drafter, num_spec_tokens=num_spec_tokens, seed=seed, dtype=dtype,
                         max_num_seqs=max_num_seqs, threads=threads, alpha=alpha,
                         apply_chat_template=apply_chat_template, fewshot_as_multiturn=fewshot_as_multiturn)
    cfg.check()
    return AccuracyRun(cfg, progress)
