"""The `samspec-bench drafters` command: its options (the one source of defaults:
`build_config` has none) and the call of the suite."""

from __future__ import annotations

import sys

import click

from samspec_bench.errors import int_list
from samspec_bench.suites.drafters.config import DEFAULT_DRAFTERS, build_config
from samspec_bench.suites.drafters.running import execute


def _int_list(ctx, param, value: str) -> list[int]:
    """--sweep: context lengths >= 2, none twice (an empty item or a repeat is refused)."""
    return int_list(value, "--sweep", minimum=2, example="1024,32768")


OUTPUT_PARAMS = ("output", "json_out", "resume")   # where results go: execute's keywords, not settings


@click.command("drafters")
@click.option("--traces", "traces", multiple=True, type=click.Path(),
              help="Trace JSONL file or directory (repeatable). Default: <data dir>/traces/*.jsonl.")
@click.option("--tokenizer", type=click.Path(), help="Tokenizer directory. Default: <data dir>/tokenizers/qwen3.")
@click.option("--data-dir", type=click.Path(), help="Shared data directory (default: SAMSPEC_DATA_DIR or ../shared/data).")
@click.option("--drafters", default=",".join(DEFAULT_DRAFTERS), show_default=True,
              help="Comma-separated drafters to run (unavailable ones are reported and skipped).")
@click.option("-k", "--k", "k", default=8, show_default=True, type=int, help="Draft tokens per step.")
@click.option("--max-tokens", default=200_000, show_default=True, type=int,
              help="Most tokens replayed per drafter, prompts and responses: an equal share from each trace "
                   "file, the response that crosses it cut there. The context sweep reads the tokens --sweep needs where "
                   "that is more (a short file gives all it has, the others the rest; said).")
@click.option("--sweep", default="1024,32768,262144", show_default=True, callback=_int_list,
              help="Context lengths for the per-step cost sweep.")
@click.option("--sweep-steps", default=1000, show_default=True, type=int, help="Decode steps timed per context length.")
@click.option("--repeats", default=3, show_default=True, type=int,
              help="Timed repeats, taken round the drafters; each keeps its fastest.")
@click.option("--chat-template", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True)
@click.option("--on-error", type=click.Choice(["stop", "skip"]), default="stop", show_default=True,
              help="A malformed trace line: stop with its file and line, or skip it (counted in the result).")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_out", type=click.Path(), help="Also write the result JSON here ('-' for stdout).")
@click.option("--resume", type=click.Path(),
              help="Continue an interrupted run in this folder (its recorded rounds are kept; give its options again).")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def command(traces, tokenizer, data_dir, drafters, k, max_tokens, sweep, sweep_steps, repeats, chat_template,
            on_error, output, json_out, resume, no_progress):
    """Speed and memory of every drafter on real traces, and per-step cost versus context length."""
    params = {name: v for name, v in click.get_current_context().params.items() if name not in OUTPUT_PARAMS}
    code = execute(build_config(**params), output=output, resume=resume, json_path=json_out)
    if code:
        sys.exit(code)
