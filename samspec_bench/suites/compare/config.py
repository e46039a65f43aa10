"""The settings of `samspec-bench compare`: every click option by name, checked before any
engine is built (a bad arm, count, thread choice, dataset or engine argument is one line naming
the option). `vllm bench`'s option names that mean the same are options too (vllm_options.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection

from samspec_bench.bench.engines.vllm.compare_prompts import PromptSpec, check_prompt_spec
from samspec_bench.bench.engines.vllm.engine_args import check_engine_args, user_method
from samspec_bench.bench.engines.vllm.method_comparison import check_methods, engine_method, split_methods
from samspec_bench.errors import UserError, int_at_least
from samspec_bench.suites.compare.vllm_options import check_temperature, engine_arguments

SUITE = "compare"
CONFIG_FILE = "config.json"
RUNS_FILE = "runs.jsonl"   # one record per finished generate call (arm, repeat): what --resume keeps
# settings a resumed run may change: more or fewer repeats, the engines' build order
RESUMABLE_CHANGES = ("repeats", "sequential")
# settings added with vLLM bench's names: a run saved before them ran at these values
ADDED_DEFAULTS = {"dataset_path": None, "input_len": None, "seed": 0, "ignore_eos": False}


@dataclass(frozen=True)
class CompareConfig:
    model: str
    dtype: str
    k: int
    benchmark: str
    num_prompts: int
    max_tokens: int
    data_dir: str | None
    methods: tuple[str, ...]
    engine_args: dict[str, Any]
    repeats: int
    sequential: bool
    cpu_threads: str
    logprobs: bool
    dataset_path: str | None = None
    input_len: int | None = None
    seed: int = 0
    ignore_eos: bool = False

    def identity(self, saved_keys: Collection[str] | None = None) -> dict[str, Any]:
        """What a resumed run must share with the run it continues (`saved_keys`: the keys of
        its saved config; a setting added since is compared only where it is not at the value
        those runs had)."""
        return {k: v for k, v in self.saved().items() if k not in RESUMABLE_CHANGES
                and (saved_keys is None or k in saved_keys or k not in ADDED_DEFAULTS or v != ADDED_DEFAULTS[k])}

    def saved(self) -> dict[str, Any]:
        return {**self.__dict__, "methods": list(self.methods)}

    @property
    def prompts(self) -> PromptSpec:
        return PromptSpec(self.benchmark, self.dataset_path, self.input_len, self.seed)


def build_config(*, model: str, dtype: str, k: int, benchmark: str, dataset_path: str | None, input_len: int | None,
                 num_prompts: int, max_tokens: int, data_dir: str | None, methods: str, engine_arg: tuple[str, ...],
                 speculative_config: str | None, repeats: int, sequential: bool, cpu_threads: str, logprobs: bool,
                 seed: int, temperature: float, ignore_eos: bool, vllm_options: tuple[str, ...]) -> CompareConfig:
    arms = tuple(split_methods(methods))
    twice = next((m for i, m in enumerate(arms) if m in arms[:i]), None)
    if twice is not None:   # one arm measured once: a repeat of it would be dropped without a word
        raise UserError(f"--methods {methods!r}: {twice} is named twice; name each arm once (--repeats N for more "
                        "generate calls per arm)")
    plans = check_methods(arms, int_at_least(repeats, "--repeats"), cpu_threads)
    check_temperature(temperature)
    spec = check_prompt_spec(benchmark, dataset_path, input_len, seed)
    engine_args = engine_arguments(engine_arg, speculative_config, vllm_options)
    check_engine_args(engine_args)
    _check_user_method(engine_args, {engine_method(key) for key, _ in plans.values()})
    return CompareConfig(model=model, dtype=dtype, k=int_at_least(k, "-k", 1), benchmark=spec.dataset,
                         num_prompts=int_at_least(num_prompts, "--num-prompts"),
                         max_tokens=int_at_least(max_tokens, "--max-tokens/--output-len"), data_dir=data_dir,
                         methods=arms, engine_args=engine_args,
                         repeats=repeats, sequential=bool(sequential), cpu_threads=cpu_threads,
                         logprobs=bool(logprobs), dataset_path=spec.path, input_len=spec.input_len, seed=spec.seed,
                         ignore_eos=bool(ignore_eos))


def _check_user_method(engine_args: dict[str, Any], methods: set[str | None]) -> None:
    """A speculative_config given must name the method of an arm that runs (else it is measured nowhere)."""
    spec = engine_args.get("speculative_config")
    if spec is None:
        return
    method = user_method(spec)
    if method not in methods:
        arms = {"sam": "sam", "ngram": "ngram", "suffix": "suffix or suffix-own"}[method]
        raise UserError(f"--speculative-config is a {method} configuration but no arm of --methods runs {method}: "
                        f"add {arms} to --methods")
