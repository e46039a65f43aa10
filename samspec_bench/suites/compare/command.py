"""`samspec-bench compare`: the run folder (config.json, runs.jsonl appended as each generate
call finishes, result.json), the printed lines and the JSON; `execute` is everything the click
command does after parsing its options."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from samspec_bench.bench.engines.vllm.compare_prompts import DATASETS
from samspec_bench.bench.engines.vllm.engine_args import SPECULATIVE_CONFIG_HELP
from samspec_bench.bench.engines.vllm.method_comparison import DEFAULT_METHODS, compare_methods
from samspec_bench.bench.engines.vllm.platform import CPU_THREADS_CHOICES
from samspec_bench.metrics import VLLM_NAMES
from samspec_bench.models.checkpoints import BUILTIN_MODEL
from samspec_bench.results import RunDir, check_resume, read_json
from samspec_bench.suites.compare.config import CONFIG_FILE, RUNS_FILE, SUITE, CompareConfig, build_config
from samspec_bench.suites.compare.lines import arm_table, lines
from samspec_bench.suites.run_output import print_and_emit

RESULT_KEYS = ("model", "dtype", "k", "benchmark", "num_prompts", "max_tokens", "repeats", "greedy", "prefill",
               "engines", "versions", "cpu_threads", "logprobs", "dataset", "seed", "ignore_eos")


def execute(config: CompareConfig, *, output: str, resume: str | None = None, json_path: str | None = None) -> int:
    """Run the arms (skipping the calls a resumed folder holds), print, write result.json."""
    if resume is not None:
        check_resume(resume, SUITE, _identity(config, resume), config_name=CONFIG_FILE)
    run_dir = RunDir(output, SUITE, resume=resume)
    run_dir.write_json(CONFIG_FILE, config.saved())
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))
    kept = _kept_calls(run_dir, log)
    # a resume with fewer --repeats: the figures are over the repeats asked for (as result.json
    # says); the later repeats' calls stay in runs.jsonl for a resume that asks for them again
    done = [r for r in kept if r["repeat"] < config.repeats]
    if kept:
        beyond = len(kept) - len(done)
        log(f"compare: resuming {run_dir.path}: {len(done)} generate call(s) kept"
            + (f"; {beyond} call(s) of repeats beyond --repeats {config.repeats} left out of the figures "
               f"(kept in {RUNS_FILE})" if beyond else ""))
    out = compare_methods(config.model, dtype=config.dtype, k=config.k, benchmark=config.benchmark,
                          num_prompts=config.num_prompts, max_tokens=config.max_tokens, data_dir=config.data_dir,
                          engine_args=config.engine_args, methods=config.methods, repeats=config.repeats,
                          sequential=config.sequential, cpu_threads=config.cpu_threads, logprobs=config.logprobs,
                          log=log, done=done, on_record=lambda rec: run_dir.append_sample(rec, RUNS_FILE),
                          prompts=config.prompts, seed=config.seed, ignore_eos=config.ignore_eos)
    metrics = {"arms": out["arms"], "goal": out["goal"], "reference_arm": out["reference_arm"],
               "vllm_names": VLLM_NAMES}
    path = run_dir.write_result(config.saved(), metrics, {"arms": arm_table(out["arms"])},
                                extra={k: out[k] for k in RESULT_KEYS})
    print_and_emit(_short_of_prompts(config, out) + lines(out), path, json_path)
    return 0


def _short_of_prompts(config: CompareConfig, out: dict) -> list[str]:
    """The line that says a dataset held fewer prompts than --num-prompts (its count measured)."""
    if out["num_prompts"] >= config.num_prompts:
        return []
    return [f"prompts: {out['num_prompts']} of the --num-prompts {config.num_prompts} asked for: the "
            f"{config.benchmark} prompts hold no more (result.json: num_prompts {out['num_prompts']})"]


def _kept_calls(run_dir: RunDir, log) -> list[dict]:
    """The generate calls runs.jsonl holds: records naming their arm and repeat (as run_record
    writes them). Another object (an edit, a damaged record) is counted with the damaged lines
    (said, and kept in result.json): its call runs again."""
    kept = list(run_dir.samples(RUNS_FILE))
    calls = {(r["arm"], r["repeat"]): r for r in reversed(kept) if isinstance(r.get("arm"), str)
             and isinstance(r.get("repeat"), int) and not isinstance(r["repeat"], bool) and r["repeat"] >= 0}
    if len(calls) < len(kept):   # a call recorded twice counts once (its first record)
        bad = len(kept) - len(calls)
        run_dir.damaged_lines[RUNS_FILE] = run_dir.damaged_lines.get(RUNS_FILE, 0) + bad
        log(f"note: {run_dir.path / RUNS_FILE}: {bad} record(s) name no arm and repeat, or a call recorded before "
            "(damaged): skipped; a call without a record runs again")
    return list(reversed(calls.values()))


PATH_KEYS = ("data_dir", "dataset_path")   # settings naming a folder or a file


def _identity(config: CompareConfig, resume: str) -> dict:
    """What the resumed run must share with this call (CompareConfig.identity, given the keys it
    saved); a data directory or dataset file it names by another spelling (`data/`, a relative
    path) is the same setting."""
    saved = _saved_config(resume)
    ident = config.identity(list(saved) if saved is not None else None)
    for key in PATH_KEYS:
        mine, theirs = ident.get(key), (saved or {}).get(key)
        if isinstance(mine, str) and isinstance(theirs, str) and mine != theirs \
                and Path(mine).expanduser().resolve() == Path(theirs).expanduser().resolve():
            ident[key] = theirs
    return ident


def _saved_config(resume: str) -> dict | None:
    """A resumed run's saved settings (None: none readable; check_resume says why)."""
    path = Path(resume) / CONFIG_FILE
    if not path.is_file():
        return None
    saved = read_json(path, "the run's settings are damaged: start a new run")
    return saved if isinstance(saved, dict) else None


@click.command("compare", context_settings={"ignore_unknown_options": True})
@click.option("--model", default=BUILTIN_MODEL, show_default=True, help="The model every arm runs.")
@click.option("--dtype", default="auto", show_default=True,
              help="auto: float32 on the CPU, bfloat16 on a GPU / NPU (vLLM: its own choice there); or float32, bfloat16, float16.")
@click.option("-k", "k", type=int, default=3, show_default=True, help="Draft tokens per step (every method).")
@click.option("--benchmark", "--dataset-name", "benchmark", default="math500", show_default=True,
              help=f"The prompts (vLLM bench's --dataset-name): {', '.join(DATASETS)}; a benchmark of the shared "
                   "data, custom (JSONL of {\"prompt\": ...}) or sharegpt (JSON) from --dataset-path, random: "
                   "--input-len token ids.")
@click.option("--dataset-path", default=None, type=click.Path(), help="The custom or sharegpt dataset file.")
@click.option("--input-len", type=int, default=None, help="Prompt tokens of --dataset-name random (default 1024).")
@click.option("--num-prompts", type=int, default=8, show_default=True)
@click.option("--max-tokens", "--output-len", "max_tokens", type=int, default=256, show_default=True,
              help="Greedy tokens per response (vLLM bench's --output-len).")
@click.option("--data-dir", default=None, type=click.Path(), help="Shared data directory (holding benchmarks/).")
@click.option("--methods", default=DEFAULT_METHODS, show_default=True,
              help="Arms, comma-separated: none-plain, none, sam, sam[fixed], sam[evidence:cost=0.2], "
                   "sam[evidence:cost=auto], sam-mN, sam+tail, sam+batch, ngram, suffix, suffix-own.")
@click.option("--engine-arg", "engine_arg", multiple=True,
              help="A vLLM engine argument key=value (repeatable); vLLM's own options (--max-model-len 2048, "
                   "--enforce-eager, ...) are taken as engine arguments too.")
@click.option("--speculative-config", default=None, help=SPECULATIVE_CONFIG_HELP + ".")
@click.option("--repeats", type=int, default=2, show_default=True, help="Fresh generate calls per arm (tok/s spread).")
@click.option("--sequential", is_flag=True, default=False, help="One engine at a time (less memory).")
@click.option("--cpu-threads", type=click.Choice(CPU_THREADS_CHOICES), default="all", show_default=True,
              help="On a CPU: all = the model's threads on every core and Intel OpenMP preloaded, as vLLM's CPU "
                   "guide asks; vllm = vLLM's own setup (on x86 it keeps one core for its scheduler). A binding "
                   "or preload in the environment wins.")
@click.option("--logprobs", is_flag=True, default=False,
              help="Ask for each emitted token's logprob, as an RL rollout that keeps rollout logprobs does "
                   "(off: vLLM's default, no logprobs computed).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="vLLM's engine seed; also the random / custom / sharegpt prompt draw (as vLLM bench's --seed).")
@click.option("--temperature", type=float, default=0.0, show_default=True,
              help="0 only: compare measures greedy decoding (vLLM bench's option name).")
@click.option("--ignore-eos", is_flag=True, default=False, help="Every response runs to --max-tokens (vLLM bench's --ignore-eos).")
@click.argument("vllm_options", nargs=-1, type=click.UNPROCESSED)
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.option("--resume", default=None, type=click.Path(),
              help="Continue this run directory: its finished generate calls are kept (--repeats may change).")
def command(output, json_path, resume, **params):
    """none / ngram / suffix / sam inside vLLM on the same prompts (greedy): tok/s over repeats,
    acceptance and its cost, the proposer's own time, greedy identity, and vLLM's own figures
    (output throughput, TPOT, acceptance rate in %, mean acceptance length, per-position
    acceptance). Takes vllm bench's option names. Needs vLLM."""
    code = execute(build_config(**params), output=output, resume=resume, json_path=json_path)
    if code:
        sys.exit(code)
