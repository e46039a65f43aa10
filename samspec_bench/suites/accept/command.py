"""The `samspec-bench accept` command: its options (help and defaults are the one source of
defaults: `build_config` has none) and the call of the suite."""

from __future__ import annotations

import sys

import click

from samspec_bench.bench.engines.engine_device import DEVICE_HELP
from samspec_bench.data import BENCHMARKS
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import BUILTIN_MODEL
from samspec_bench.suites.accept.config import ENGINES, TOOL_OUTPUT, build_config
from samspec_bench.suites.accept.running import execute
from samspec_bench.trace_formats import FORMATS


@click.command("accept")
@click.option("--engine", type=click.Choice(ENGINES), default=None,
              help="replay: exact greedy acceptance from recorded traces, no model; reference / vllm: the model "
                   "generates (from the traces' prompts, else the built-in --benchmark prompts). Default: replay, "
                   "or with --model the model itself (vllm where it imports, else reference).")
@click.option("--model", default=None, help=f"The model measured: {BUILTIN_MODEL}, a checkpoint directory, a Hugging "
              "Face id (from the local cache; downloaded unless HF_HUB_OFFLINE is set) or a short name (Qwen3-8B). "
              "Replay: its tokenizer, and only traces of that model (see --any-model).")
@click.option("--any-model", is_flag=True, default=False,
              help="Replay traces whose 'model' field names another model than --model (or token-id traces of "
                   "several models) anyway.")
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option("--engine-arg", "engine_arg", multiple=True, help="--engine vllm: a vLLM engine argument key=value "
              "(repeatable), e.g. tensor_parallel_size=2.")
@click.option("--traces", multiple=True, type=click.Path(), help="Traces (repeatable): a JSONL file or directory, a "
              "verl trainer.rollout_data_dir ({global_step}.jsonl), lm-eval --log_samples output. Default: the traces "
              "of the data directory (replay).")
@click.option("--trace-format", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="Trace format: detected per file, or samspec / verl / lm-eval / plain (prompt, response).")
@click.option("--tool-output", type=click.Choice(TOOL_OUTPUT), default="prefill", show_default=True,
              help="Tool output inside responses (multi-turn tool turns, ```output blocks): prefill = as a rollout "
                   "engine serves them, one request per model turn, drafts over generated tokens only (the tool "
                   "text is in the drafter's context); decode = replayed as generated tokens.")
@click.option("--history-includes-validation", is_flag=True, default=False,
              help="Replay verl validation generations (validation_data_dir, a val*/validation* folder, lines with "
                   "'reward' = 'score') with their steps as RL steps. Default: left out beside rollouts (counted "
                   "and printed); alone, replayed without RL steps.")
@click.option("--data-dir", type=click.Path(), default=None, help="Shared data directory (default: SAMSPEC_DATA_DIR, "
              "./shared/data or ../shared/data).")
@click.option("--tokenizer", type=click.Path(), default=None,
              help="Tokenizer directory (default: <data dir>/tokenizers/qwen3).")
@click.option("--chat-template", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Prompt format: auto uses the tokenizer's chat template for traces with a system prompt.")
@click.option("--drafter", "drafters", default="sam", show_default=True,
              help="Drafters, comma list: sam (evidence draft length), sam-fixed (SAM-Decoding's min_endpos, "
                   "always up to k), ngram (vLLM's prompt lookup), suffix (Arctic, when installed), "
                   "or a pure-Python SAM (sam-python, sam-public).")
@click.option("--num-spec-tokens", "-k", "ks", default="3", show_default=True, help="Draft lengths k, comma list.")
@click.option("--sources", default="own", show_default=True,
              help="Draft sources, comma list of own, group, history, corpus or '+' combinations (group+history): "
                   "own = the response's prompt and prefix, group = + its GRPO siblings so far, history = + earlier "
                   "RL steps' responses to the same prompt (replay; single-step traces: each group split into an "
                   "earlier and a current half), corpus = + a static corpus.")
@click.option("--strategy", default=None,
              help="Named strategies too, comma list of NAME[:k=K][:cost=C][@SOURCES]: seed, evidence, histospec, "
                   "seer, das, arctic "
                   "(each its drafter, k, sources and length rule; docs/drafting.md, 'Strategies').")
@click.option("--history-window", type=int, default=16, show_default=True,
              help="History source: earlier responses kept per prompt (the newest).")
@click.option("--history-budget-mb", type=float, default=512.0, show_default=True,
              help="History source: memory for stored responses, MiB (over it, the least recently seen prompts go).")
@click.option("--group-order", type=click.Choice(["concurrent", "sequential"]), default="concurrent", show_default=True,
              help="With group sharing: members advance one batched step at a time, or one after another.")
@click.option("--corpus", multiple=True, type=click.Path(), help="Traces (other than the replayed ones) that build "
              "the static corpus for the 'corpus' source (repeatable).")
@click.option("--bins", default="log2:64:32768", show_default=True,
              help="Position bins: log2:LO:HI or comma-separated edges.")
@click.option("--position", type=click.Choice(["sequence", "response"]), default="sequence", show_default=True,
              help="Bin by sequence position (prompt + generated) or response position at drafting time.")
@click.option("--verify-cost-ratio", type=float, default=None,
              help="Cost of a (k+1)-token verify step / a 1-token decode step, for the speedup estimate.")
@click.option("--engine-profile", type=click.Path(), default=None,
              help="Measured engine profile JSON with 'verify_cost_ratio' (a number or {k: number}).")
@click.option("--on-error", type=click.Choice(["stop", "skip"]), default="stop", show_default=True,
              help="A bad trace line stops the run (naming file and line) or is skipped and counted.")
@click.option("--limit-groups", type=int, default=None, help="Replay only the first N groups of each trace file; "
              "responses of several RL steps (a verl folder): the same prompts at every step, about N a step, so "
              "history finds earlier steps' responses (built-in prompts: the first N prompts, default 16).")
@click.option("--benchmark", type=click.Choice(list(BENCHMARKS)), default="gsm8k", show_default=True,
              help="Model engines without traces: the built-in benchmark set whose prompts are generated.")
@click.option("--max-tokens", type=int, default=256, show_default=True,
              help="Model engines on the built-in prompts: tokens per response (on traces: the recorded length).")
@click.option("--workers", type=int, default=0, show_default=True, help="Processes (0 = one per core).")
@click.option("--ngram-min", type=int, default=2, show_default=True, help="n-gram drafter: smallest n.")
@click.option("--ngram-max", type=int, default=5, show_default=True, help="n-gram drafter: largest n.")
@click.option("--sam-min-match", type=int, default=1, show_default=True,
              help="SAM drafter: no draft when the match is shorter (l_threshold).")
@click.option("--dev-split", type=float, default=None,
              help="Split the trace groups: this share (e.g. 0.5) chooses each family's best configuration by its "
                   "estimated speed-up, the rest reports it held out (result.json 'split').")
@click.option("--split-seed", type=int, default=0, show_default=True, help="With --dev-split: the seed of the split.")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.option("--resume", default=None, type=click.Path(), help="Continue the run in this directory.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
def command(output, json_path, resume, **params):
    """Acceptance of a drafter on real rollouts: tokens_per_step, acceptance_length and more,
    overall and by position, for every drafter x k x draft source."""
    try:
        cfg = build_config(**params)
    except UserError as e:
        ctx = click.get_current_context()
        if resume is None or any(ctx.get_parameter_source(n) != click.core.ParameterSource.DEFAULT for n in params):
            raise
        # only --resume given: it continues a run with the options it started with, not read back from it
        raise UserError(f"{e} (--resume {resume}: give the run's options again, as its config.json lists them)") from None
    code = execute(cfg, output=output, resume=resume, json_path=json_path)
    if code:
        sys.exit(code)
