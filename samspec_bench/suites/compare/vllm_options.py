"""`vllm bench`'s option names on `samspec-bench compare`: those that mean the same here are
options of the command (`--dataset-name`, `--dataset-path`, `--num-prompts`, `--input-len`,
`--output-len`, `--seed`, `--temperature`, `--ignore-eos`, `--speculative-config`, `--model`,
`--dtype`), any other option of vLLM's engine passes through as an engine argument
(`--max-model-len 2048`, `--enforce-eager`: engine_args.cli_engine_args), and those with no
meaning here are a one-line error saying what to use (REFUSED)."""

from __future__ import annotations

from typing import Any, Sequence

from samspec_bench.bench.engines.vllm.engine_args import cli_engine_args, parse_engine_args
from samspec_bench.errors import UserError

GREEDY = "compare measures greedy decoding (greedy identity with the first arm is its check)"
OFFLINE = "compare runs vLLM's offline engine in this process on all prompts at once, as a rollout does"
REFUSED = {
    "--backend": f"{OFFLINE}: drop it",
    "--base-url": f"{OFFLINE}, no server: read a server's spec-decode metrics with `samspec-bench spec-metrics`",
    "--host": f"{OFFLINE}, no server: read a server's metrics with `samspec-bench spec-metrics`",
    "--port": f"{OFFLINE}, no server: read a server's metrics with `samspec-bench spec-metrics`",
    "--endpoint": f"{OFFLINE}, no server: drop it",
    "--request-rate": f"{OFFLINE}: no arrival rate; every prompt is queued at the start",
    "--burstiness": f"{OFFLINE}: no arrival process; drop it",
    "--max-concurrency": "vLLM's batch limit is an engine argument here: --max-num-seqs N",
    "--batch-size": "every prompt runs in one batch: --num-prompts N",
    "--n": "one response per prompt (greedy: more would be copies); drop it",
    "--num-iters": "--repeats N (fresh generate calls per arm)",
    "--num-iters-warmup": "compare warms every engine up itself (a prompt, then one token of each measured prompt)",
    "--num-warmups": "compare warms every engine up itself (a prompt, then one token of each measured prompt)",
    "--output-json": "--json PATH (the run folder's result.json goes under --output)",
    "--save-result": "every run is saved: a run folder under --output",
    "--result-dir": "--output DIR",
    "--result-filename": "--json PATH",
    "--top-p": f"{GREEDY}: drop it",
    "--top-k": f"{GREEDY}: drop it",
    "--min-p": f"{GREEDY}: drop it",
    "--use-beam-search": f"{GREEDY}: drop it",
    "--random-input-len": "--input-len N with --dataset-name random",
    "--random-output-len": "--output-len N",
    "--random-range-ratio": "random prompts here are all --input-len tokens long; drop it",
    "--random-prefix-len": "random prompts here share no prefix; drop it",
    "--profile": "profiling is not run here; drop it",
}


# compare's own long options (the nearest-name hint for a mistyped one; a test keeps it equal to the command's)
OWN_OPTIONS = ("--model", "--dtype", "--benchmark", "--dataset-name", "--dataset-path", "--input-len", "--num-prompts",
               "--max-tokens", "--output-len", "--data-dir", "--methods", "--engine-arg", "--speculative-config",
               "--repeats", "--sequential", "--cpu-threads", "--logprobs", "--seed", "--temperature", "--ignore-eos",
               "--output", "--json", "--resume")


def engine_arguments(engine_arg: Sequence[str], speculative_config: str | None,
                     vllm_options: Sequence[str]) -> dict[str, Any]:
    """--engine-arg pairs, --speculative-config and vLLM's own options left over, as one dict of
    engine arguments; an argument given twice is a one-line error."""
    args = parse_engine_args(engine_arg, speculative_config=speculative_config)
    extra = cli_engine_args(vllm_options, command="compare", refused=REFUSED, own=OWN_OPTIONS)
    twice = sorted(set(args) & set(extra))
    if twice:
        raise UserError(f"engine argument {twice[0]} given twice (--engine-arg or --speculative-config, and "
                        f"--{twice[0].replace('_', '-')}): give it once")
    return {**args, **extra}


def check_temperature(temperature: float) -> None:
    if temperature != 0:
        raise UserError(f"--temperature {temperature}: {GREEDY}; use 0 (or leave it out); sampled acceptance: "
                        "samspec-bench accept --engine vllm")
