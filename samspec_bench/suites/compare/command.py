"""`samspec-bench compare`: the run folder (config.json, runs.jsonl appended as each generate
call finishes, result.json), the printed lines and the JSON; `execute` is everything the click
command does after parsing its options."""

from __future__ import annotations

import sys

import click

from samspec_bench.bench.engines.vllm.method_comparison import DEFAULT_METHODS, compare_methods
from samspec_bench.bench.engines.vllm.platform import CPU_THREADS_CHOICES
from samspec_bench.models.checkpoints import BUILTIN_MODEL
from samspec_bench.results import RunDir, check_resume, emit_json, load_result
from samspec_bench.suites.compare.config import CONFIG_FILE, RUNS_FILE, SUITE, CompareConfig, build_config
from samspec_bench.suites.compare.lines import arm_table, lines

RESULT_KEYS = ("model", "dtype", "k", "benchmark", "num_prompts", "max_tokens", "repeats", "greedy", "prefill",
               "engines", "versions", "cpu_threads", "logprobs")


def execute(config: CompareConfig, *, output: str, resume: str | None = None, json_path: str | None = None) -> int:
    """Run the arms (skipping the calls a resumed folder holds), print, write result.json."""
    if resume is not None:
        check_resume(resume, SUITE, config.identity(), config_name=CONFIG_FILE)
    run_dir = RunDir(output, SUITE, resume=resume)
    run_dir.write_json(CONFIG_FILE, config.saved())
    done = list(run_dir.samples(RUNS_FILE))
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))
    if done:
        log(f"compare: resuming {run_dir.path}: {len(done)} generate call(s) kept")
    out = compare_methods(config.model, dtype=config.dtype, k=config.k, benchmark=config.benchmark,
                          num_prompts=config.num_prompts, max_tokens=config.max_tokens, data_dir=config.data_dir,
                          engine_args=config.engine_args, methods=config.methods, repeats=config.repeats,
                          sequential=config.sequential, cpu_threads=config.cpu_threads, logprobs=config.logprobs,
                          log=log, done=done, on_record=lambda rec: run_dir.append_sample(rec, RUNS_FILE))
    metrics = {"arms": out["arms"], "goal": out["goal"], "reference_arm": out["reference_arm"]}
    path = run_dir.write_result(config.saved(), metrics, {"arms": arm_table(out["arms"])},
                                extra={k: out[k] for k in RESULT_KEYS})
    stream = sys.stderr if json_path == "-" else sys.stdout
    for line in lines(out):
        print(line, file=stream)
    print(f"results: {run_dir.path}", file=stream)
    emit_json(load_result(path.parent), json_path)
    return 0


@click.command("compare")
@click.option("--model", default=BUILTIN_MODEL, show_default=True, help="The model every arm runs.")
@click.option("--dtype", default="float32", show_default=True)
@click.option("-k", "k", type=int, default=3, show_default=True, help="Draft tokens per step (every method).")
@click.option("--benchmark", default="math500", show_default=True, help="Prompts from this benchmark of the shared data.")
@click.option("--num-prompts", type=int, default=8, show_default=True)
@click.option("--max-tokens", type=int, default=256, show_default=True, help="Greedy tokens per response.")
@click.option("--data-dir", default=None, type=click.Path(), help="Shared data directory (holding benchmarks/).")
@click.option("--methods", default=DEFAULT_METHODS, show_default=True,
              help="Arms, comma-separated: none-plain, none, sam, sam[fixed], sam[evidence:cost=0.2], "
                   "sam[evidence:cost=auto], sam-mN, sam+tail, sam+batch, ngram, suffix, suffix-own.")
@click.option("--engine-arg", "engine_arg", multiple=True, help="A vLLM engine argument key=value (repeatable).")
@click.option("--repeats", type=int, default=2, show_default=True, help="Fresh generate calls per arm (tok/s spread).")
@click.option("--sequential", is_flag=True, default=False, help="One engine at a time (less memory).")
@click.option("--cpu-threads", type=click.Choice(CPU_THREADS_CHOICES), default="all", show_default=True,
              help="On a CPU: all = the model's threads on every core and Intel OpenMP preloaded, as vLLM's CPU "
                   "guide asks; vllm = vLLM's own setup (on x86 it keeps one core for its scheduler). A binding "
                   "or preload in the environment wins.")
@click.option("--logprobs", is_flag=True, default=False,
              help="Ask for each emitted token's logprob, as an RL rollout that keeps rollout logprobs does "
                   "(off: vLLM's default, no logprobs computed).")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.option("--resume", default=None, type=click.Path(),
              help="Continue this run directory: its finished generate calls are kept (--repeats may change).")
def command(output, json_path, resume, **params):
    """none / ngram / suffix / sam inside vLLM on the same prompts (greedy): tok/s over repeats,
    acceptance and its cost, the proposer's own time, greedy identity. Needs vLLM."""
    code = execute(build_config(**params), output=output, resume=resume, json_path=json_path)
    if code:
        sys.exit(code)
