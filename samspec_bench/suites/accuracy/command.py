"""The `samspec-bench accuracy` command: options, help and defaults live here only; `execute`
runs a `build_config` configuration, prints the report and writes the JSON."""

from __future__ import annotations

import os
import sys

import click
from rich.console import Console

from samspec_bench.bench.engines.engine_device import DEVICE_HELP
from samspec_bench.evals.tasks import resolve_task
from samspec_bench.models.checkpoints import BUILTIN_MODEL
from samspec_bench.results import emit_json
from samspec_bench.suites.accuracy.config import OUTPUT_PARAMS, AccuracyRun, build_config, engine_choices
from samspec_bench.suites.accuracy.lm_options import lm_eval_argv
from samspec_bench.suites.accuracy.report import failed_arms, print_report
from samspec_bench.suites.accuracy.running import run


def execute(job: AccuracyRun, *, output, resume=None, json_path=None) -> int:
    """Run both arms, print the table, write the run directory and `json_path` ('-': stdout,
    the table then goes to stderr). Returns the exit code: 1 when every sample of an arm failed
    (one line on stderr; the errors are in samples.jsonl), else 0 (the comparison has no gate)."""
    cfg = job.config
    if all(resolve_task(t).offline for t in cfg.tasks):
        # local task files only (--data-dir or the built-in sets): lm-eval and datasets must not reach for the hub
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    console = Console(stderr=json_path == "-")
    if not console.is_terminal:
        console = Console(stderr=json_path == "-", width=200)
    for note in job.notes:
        console.print(f"note: {note}", highlight=False)
    result, _ = run(cfg, output, resume=resume, progress=job.progress, console=console,
                    output_path=job.output_path, log_samples=job.log_samples, notes=job.notes)
    print_report(result, console)
    emit_json(result, json_path)
    failed = failed_arms(result)
    if failed:
        click.echo(f"accuracy: every sample of an arm failed ({'; '.join(failed)}); the errors are in "
                   f"{result.get('run_dir')}/samples.jsonl", err=True)
        return 1
    return 0


class LmEvalCommand(click.Command):
    """Takes lm-eval's spellings too: `--model_args` as `--model-args`, `--tasks a b` as `--tasks a,b`."""

    def parse_args(self, ctx, args):
        names = {o for p in self.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
        return super().parse_args(ctx, lm_eval_argv(args, names))


@click.command("accuracy", cls=LmEvalCommand,
               epilog="lm-eval's own options are taken as lm-eval spells them (--model_args or --model-args, "
                      "--tasks a b), e.g. --model hf --model_args pretrained=DIR --tasks gsm8k_cot --gen_kwargs "
                      "temperature=0,max_gen_toks=256 --num_fewshot 8 --limit 0.1 --log_samples --output_path out.")
@click.option("--model", default=BUILTIN_MODEL, show_default=True,
              help="builtin:smollm2-135m, builtin:tiny-qwen3, a checkpoint directory, a Hugging Face id (from the "
                   "local cache) or a short name (Qwen3-8B); or lm-eval's backend name hf / vllm with "
                   "--model_args pretrained=MODEL.")
@click.option("--model-args", "model_args", default=None,
              help="lm-eval's --model_args: pretrained=MODEL,dtype=...,device=...,max_num_seqs=N (with vllm: other "
                   "keys are vLLM engine arguments), or a JSON object.")
@click.option("--engine", type=click.Choice(engine_choices()), default="reference", show_default=True)
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option("--tasks", default="gsm8k", show_default=True,
              help="Comma list: gsm8k, aime24, aime25, math500, or any lm-eval generation task over those sets "
                   "(gsm8k_cot, gsm8k_cot_zeroshot, hendrycks_math500, minerva_math500, ...); other lm-eval tasks "
                   "where their data are reachable.")
@click.option("--data-dir", default=None, type=click.Path(),
              help="Read the tasks from DIR/benchmarks/*.jsonl (hub field names); without it, the benchmark "
                   "sets built into the package.")
@click.option("--limit", default=None, type=str,
              help="First N problems of each task, or below 1 that fraction of each task (lm-eval: 0.1).")
@click.option("--num-fewshot", "num_fewshot", default=None, type=int,
              help="Few-shot examples per prompt (lm-eval's --num_fewshot; default: each task's own).")
@click.option("--num-samples", "num_samples", default=1, show_default=True, type=int,
              help="Samples per problem (pass@1 = their mean); 1 for greedy.")
@click.option("--gen-kwargs", "gen_kwargs", default=None,
              help="lm-eval's --gen_kwargs: temperature=0,top_p=1,top_k=0,max_gen_toks=256,do_sample=false,"
                   "until=[...]; a value contradicting one of the options here is refused.")
@click.option("--temperature", default=0.0, show_default=True, type=float)
@click.option("--top-p", default=1.0, show_default=True, type=float)
@click.option("--top-k", default=0, show_default=True, type=int, help="0: off.")
@click.option("--max-gen-toks", default=1024, show_default=True, type=int,
              help="Token limit per response (always set: lm-eval's gsm8k default of 256 truncates reasoning).")
@click.option("--drafter", default="sam", show_default=True, help="Drafter of the 'with SAM' arm.")
@click.option("-k", "--num-spec-tokens", default=3, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--dtype", default="auto", show_default=True,
              help="auto: float32 on the CPU, bfloat16 on a GPU / NPU (vLLM: its own choice there); or float32, bfloat16, float16.")
@click.option("--max-num-seqs", default=64, show_default=True, type=int, help="Reference engine batch size.")
@click.option("--apply-chat-template", is_flag=True, default=False,
              help="Prompt through the model's chat template (lm-eval's apply_chat_template).")
@click.option("--fewshot-as-multiturn/--no-fewshot-as-multiturn", default=None,
              help="With --apply-chat-template only: few-shot examples as chat turns (default: on, as lm-eval's).")
@click.option("--alpha", default=0.05, show_default=True, type=float, help="Test level.")
@click.option("--threads", default=1, show_default=True, type=int,
              help="torch threads; 0 = torch's default. 1 because small GEMMs stall with several threads "
                   "on a machine shared with other jobs.")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--output-path", "output_path", default=None, type=click.Path(),
              help="lm-eval's --output_path: also write lm-eval's results_<date>.json there, per arm "
                   "(sam_off/<model>/, sam_on/<model>/); the run folder always holds them under lm_eval/.")
@click.option("--log-samples", "log_samples", is_flag=True, default=False,
              help="lm-eval's --log_samples: with --output_path, its samples_<task>_<date>.jsonl too (what "
                   "`samspec-bench accept --traces` reads); the run folder always holds them (a note says so "
                   "without --output_path).")
@click.option("--resume", default=None, type=click.Path(), help="Continue this run directory (finished samples are kept).")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.option("--progress/--no-progress", default=True, show_default=True)
def command(model, model_args, engine, device, tasks, data_dir, limit, num_fewshot, num_samples, gen_kwargs,
            temperature, top_p, top_k, max_gen_toks, drafter, num_spec_tokens, seed, dtype, max_num_seqs,
            apply_chat_template, fewshot_as_multiturn, alpha, threads, output, output_path, log_samples, resume,
            json_path, progress):
    """Accuracy with SAM off vs on through lm-eval, paired by problem (difference with a
    bootstrap interval, McNemar / sign-flip test, minimum detectable difference)."""
    params = {name: v for name, v in click.get_current_context().params.items() if name not in OUTPUT_PARAMS}
    code = execute(build_config(**params), output=output, resume=resume, json_path=json_path)
    if code:
        sys.exit(code)
