"""The settings of `samspec-bench compare`: every click option by name, checked before any
engine is built (a bad arm, count or thread choice is one line naming the option)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from samspec_bench.bench.engines.vllm.engine_args import parse_engine_args
from samspec_bench.bench.engines.vllm.method_comparison import check_methods, split_methods
from samspec_bench.errors import int_at_least

SUITE = "compare"
CONFIG_FILE = "config.json"
RUNS_FILE = "runs.jsonl"   # one record per finished generate call (arm, repeat): what --resume keeps
# settings a resumed run may change: more or fewer repeats, the engines' build order
RESUMABLE_CHANGES = ("repeats", "sequential")


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

    def identity(self) -> dict[str, Any]:
        """What a resumed run must share with the run it continues."""
        return {k: v for k, v in self.saved().items() if k not in RESUMABLE_CHANGES}

    def saved(self) -> dict[str, Any]:
        return {**self.__dict__, "methods": list(self.methods)}


def build_config(*, model: str, dtype: str, k: int, benchmark: str, num_prompts: int, max_tokens: int,
                 data_dir: str | None, methods: str, engine_arg: tuple[str, ...], repeats: int, sequential: bool,
                 cpu_threads: str, logprobs: bool) -> CompareConfig:
    arms = tuple(split_methods(methods))
    check_methods(arms, int_at_least(repeats, "--repeats"), cpu_threads)
    return CompareConfig(model=model, dtype=dtype, k=int_at_least(k, "-k", 1), benchmark=benchmark,
                         num_prompts=int_at_least(num_prompts, "--num-prompts"),
                         max_tokens=int_at_least(max_tokens, "--max-tokens"), data_dir=data_dir,
                         methods=tuple(dict.fromkeys(arms)), engine_args=parse_engine_args(engine_arg),
                         repeats=repeats, sequential=bool(sequential), cpu_threads=cpu_threads,
                         logprobs=bool(logprobs))
