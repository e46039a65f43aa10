"""The `samspec-bench sampler` command: its options, `config.build_config` turning them into a
config, and `execute` (the suite contract) running it.

The audits and the speed benchmark run torch. They live in `running` and the modules it
imports, which `execute` loads by name when the command runs (as the CLI loads a command), so
that `samspec-bench sampler --help`, `samspec-bench run --help` and importing this package
import no torch."""

from __future__ import annotations

import importlib
from typing import Optional

import click

from samspec_bench.suites.sampler.config import (BUILTIN_AUDITS, DEFAULT_AUDIT_TIMEOUT, DEFAULT_BUILTINS, SamplerConfig,
                                                 build_config)

RUNNING = "samspec_bench.suites.sampler.running"   # imports torch


def execute(config: SamplerConfig, *, output: str, resume: Optional[str] = None,
            json_path: Optional[str] = None) -> int:
    """Everything the command does after parsing its options (the suite contract): run, print
    the tables, write the run directory, emit the JSON; 0, or 1 with a one-line finding."""
    return importlib.import_module(RUNNING).execute(config, output=output, resume=resume, json_path=json_path)


@click.command("sampler")
@click.option("--output", default="results", show_default=True, help="Root directory for run directories.")
@click.option("--json", "json_path", default=None, help="Also write the result dict to PATH ('-' for stdout).")
@click.option("--resume", default=None, help="Continue an interrupted run directory.")
@click.option("--audit", "audits", multiple=True,
              help="Sampler to audit: module:function taking one samspec_bench.bench.rejection.RejectionInputs "
                   "(probabilities) or LogitsInputs (logits with per-request temperature / top-k / top-p / "
                   "generators; annotate the parameter), or with vLLM's rejection_sample signature "
                   "(samspec_bench.suites.sampler.adapters has worked examples); or a built-in name (see "
                   "--builtins). Repeatable.")
@click.option("--audit-timeout", default=DEFAULT_AUDIT_TIMEOUT, show_default=True, type=float,
              help="Seconds one call of an --audit module:function sampler may take. Such a sampler runs in a "
                   "worker process; a call that outlasts this is stopped and the audit is ERROR, naming the case. "
                   "0: no limit, run in this process (for a debugger). Built-ins run in this process.")
@click.option("--builtin/--no-builtin", default=True, show_default=True,
              help="Also audit the built-ins of --builtins.")
@click.option("--builtins", default=",".join(DEFAULT_BUILTINS), show_default=True,
              help="Built-ins audited with --builtin (vllm and vllm-ascend where importable): "
                   + ", ".join(BUILTIN_AUDITS) + ". '-demo' ones are negative controls (lossy on purpose).")
@click.option("--samples", default=4000, show_default=True, type=int,
              help="Trials per battery case (base; the power case gets 7.5x: a 1 % loss at any position is "
                   "detected with 80 % power at the default).")
@click.option("--alpha", default=1e-3, show_default=True, type=float, help="Family-wise false-alarm rate per sampler.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--max-vocab", default="151936", show_default=True,
              help="Skip battery cases with a larger vocabulary (one size).")
@click.option("--large-vocab", default="151936", show_default=True,
              help="Vocabulary of the large-vocab cases (one size).")
@click.option("--full", is_flag=True, help="Extra cases and 4x the samples (minutes).")
@click.option("--device", default="auto", show_default=True,
              help="Where the battery, the audits and the speed grid run: auto (CUDA, then NPU, then CPU), cpu, "
                   "cuda[:N] or npu[:N]. On an accelerator the speed grid is timed in device time (events).")
@click.option("--speed/--no-speed", default=True, show_default=True, help="Run the speed benchmark.")
@click.option("--speed-batch", default="1,4,16,64,256", show_default=True, help="Batch sizes.")
@click.option("--speed-k", default="1,2,3,4,8", show_default=True, help="Draft lengths.")
@click.option("--speed-vocab", default="32000,151936", show_default=True, help="Vocabulary sizes (or 32k, 151k, qwen3...).")
@click.option("--speed-reps", default=3, show_default=True, type=int, help="Minimum timed calls per configuration.")
@click.option("--speed-min-time", default=0.3, show_default=True, type=float,
              help="Keep timing each configuration at least this many seconds.")
@click.option("--speed-threads", default=1, show_default=True, type=int,
              help="Intra-op threads while timing; with 1 the reported CPU time is the work done, "
                   "unaffected by other load on the machine.")
def command(output, json_path, resume, **params):
    """Prove rejection samplers exact or lossy (statistical battery, --audit any sampler) and time
    the vectorised sampler against the loop reference."""
    code = execute(build_config(**params), output=output, resume=resume, json_path=json_path)
    if code:
        click.get_current_context().exit(code)
