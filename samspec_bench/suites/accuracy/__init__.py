"""`samspec-bench accuracy`: does SAM change downstream accuracy?

Each task runs twice through lm-eval (`lm_eval.simple_evaluate` with
`samspec_bench.evals.lm_adapter.EngineLM` over the engine): SAM off, then SAM on, with
lm-eval's own prompts, filters and metrics. With `--num-samples K` each arm runs K times
(sample k uses the same per-problem seeds in both arms); pass@1 is the mean over the K
samples, its standard error the sd of the per-problem means / sqrt(n) (clustered by problem;
lm-eval's own stderrs, one per run, are kept beside it). `--apply-chat-template` takes
lm-eval's chat-template path (few-shot examples as chat turns unless
`--no-fewshot-as-multiturn`). The arms are then paired by document
(`samspec_bench.evals.paired.compare`): difference with a paired bootstrap 95% interval, McNemar's exact test (K = 1) or the paired
sign-flip test (K > 1), the minimum detectable difference at 80% power and a verdict. Greedy
runs also report the fraction of identical outputs and the first divergence positions.
Responses cut at `--max-gen-toks` before a stop string are counted per arm (`truncated`: scored
unfinished); a run in which every sample of an arm failed exits 1.

Tasks: our names (gsm8k, aime24, aime25, math500) or any lm-eval task name. An lm-eval task
over a set we have locally (gsm8k_cot, gsm8k_cot_zeroshot, hendrycks_math500, minerva_math500,
...) runs offline with lm-eval's own prompt, few-shot examples, filters and metrics
(`samspec_bench.evals.tasks`: task YAMLs that include lm-eval's and read local JSONL files:
those of `--data-dir`, or without it the benchmark sets shipped in the package,
samspec_bench/benchmarks). Another lm-eval task runs through lm-eval's own YAML where its data
are reachable; otherwise it is refused naming the nearest supported task. With the built-in
sets a few-shot pool from gsm8k's train split is its first problems (lm-eval's `first_n`
sampler; the full train split is not shipped), with `--data-dir` lm-eval's random draw.

lm-eval's own options are taken as lm-eval spells them (`lm_options`): --model_args /
--model-args, --gen_kwargs (merged into the sampling settings; a contradiction with our own
options is refused), --num_fewshot, --limit (a count, or below 1 a fraction of each task),
--log_samples, --output_path, --tasks a b.

Run directory: `generations.jsonl` (one line per generated response, appended as each
finishes: what `--resume` reuses), `samples.jsonl` (scored per-sample records, rewritten
after each evaluation), `config.json`, `result.json` (lm-eval's results dicts verbatim under
`lm_eval`), `lm_eval/sam_off/<model>/` and `lm_eval/sam_on/<model>/`: lm-eval's own
results_<date>.json and samples_<task>_<date>.jsonl of each arm, written by lm-eval's writer
(`lm_outputs`; copied to --output_path), which `samspec-bench accept --traces` reads.

The package: `config` (the settings, `build_config`, the engine), `lm_options` (lm-eval's
options), `tasks` (task files over the built-in sets), `running` (both arms through lm-eval, the
pairing, the run folder), `lm_outputs` (lm-eval's files), `report` (the printed table),
`command` (the click command and `execute`).
"""

from samspec_bench.suites.accuracy.command import command, execute
from samspec_bench.suites.accuracy.config import (ARM_LABEL, ARMS, OUTPUT_PARAMS, SUITE, AccuracyConfig, AccuracyRun,
                                                  build_config, build_engine, engine_choices)
from samspec_bench.suites.accuracy.report import print_report
from samspec_bench.suites.accuracy.running import GENERATIONS, SAMPLES, primary_metric, run
from samspec_bench.suites.accuracy.tasks import BUILTIN_DATA, BUILTIN_FILES, BUILTIN_FIRST_N, write_builtin_tasks

__all__ = ["ARMS", "ARM_LABEL", "BUILTIN_DATA", "BUILTIN_FILES", "BUILTIN_FIRST_N", "GENERATIONS", "OUTPUT_PARAMS",
           "SAMPLES", "SUITE", "AccuracyConfig", "AccuracyRun", "build_config", "build_engine", "command",
           "engine_choices", "execute", "primary_metric", "print_report", "run", "write_builtin_tasks"]
