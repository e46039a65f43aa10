"""The accept suite's inputs: the traces read in their format (samspec, verl rollout dumps,
lm-eval samples, plain JSONL) and tokenized (bad lines stopped at or skipped and counted),
verl's validation generations kept out of the RL steps (trace_formats.validation), one RL
step found in the step files of several folders counted (trace_formats.step_folders), checked
against --model, limited by --limit-groups (data.limit_groups: the first groups of each file, or
the same prompts at every RL step; what it kept is said and kept in `limit`), given RL steps for
the history source (emulated on single-step traces), multi-turn responses split into their
model turns (`turns`), and the static corpus for the 'corpus' source. Without traces (model
engines only), the prompts of a built-in benchmark set."""

from __future__ import annotations

import functools
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from samspec_bench.bench.engines.factory import engine_capabilities
from samspec_bench.bench.engines.replay import EMULATED_STEPS, build_corpus, emulate_steps, has_steps
from samspec_bench.data import (BUILTIN_BENCHMARKS, BENCHMARKS, LIMIT_GROUPS_PER, benchmarks_dir, encode_chat,
                                limit_groups, load_tokenizer, read_benchmark, several_steps, tokenize_traces)
from samspec_bench.errors import UserError
from samspec_bench.suites.accept.config import DEFAULT_BENCHMARK_PROMPTS, AcceptConfig, expand_trace_paths
from samspec_bench.suites.accept.turns import split_turns
from samspec_bench.trace_formats import check_models, read_any, split_validation, steps_in_folders, trace_models

# the system prompt of the built-in prompts (Qwen's math chain-of-thought instruction)
BENCHMARK_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass
class Inputs:
    items: list
    skipped: list[dict[str, Any]]
    files: list[Path]
    prompt_formats: dict[str, dict[str, int]]
    corpus: Any = None
    corpus_info: dict[str, Any] = field(default_factory=dict)
    trace_formats: dict[str, str] = field(default_factory=dict)     # file -> format
    models: dict[str, Any] = field(default_factory=dict)            # the traces' models, the --model check
    steps: str | None = None                                        # where the RL steps come from
    prompts: dict[str, Any] | None = None                           # built-in prompts (no traces)
    tool_output: dict[str, Any] | None = None                       # tool output in the responses, how replayed
    validation: dict[str, Any] | None = None                        # verl validation generations found, what was done
    merged_steps: dict[str, Any] | None = None                      # RL steps merged from several folders' step files
    limit: dict[str, Any] | None = None                             # what --limit-groups kept (limit_record)


@dataclass(frozen=True)
class PromptItem:
    """A prompt without a recorded response (model engines): generated up to max_tokens."""
    id: str
    group: str
    prompt_ids: np.ndarray
    response_ids: np.ndarray
    source: Path
    line: int
    prompt_format: str
    max_tokens: int
    step: int | None = None


@functools.lru_cache(maxsize=2)
def _load_tokenizer(path: str):
    """Tokenizers are loaded once per process (tests and sweeps call the suite repeatedly)."""
    return load_tokenizer(path)


def benchmark_items(cfg: AcceptConfig, tokenizer) -> tuple[list[PromptItem], dict[str, Any]]:
    """The first prompts of the built-in benchmark set `cfg.benchmark` (--limit-groups of them,
    DEFAULT_BENCHMARK_PROMPTS without it), through the tokenizer's chat template with Qwen's
    math instruction as the system turn (raw text where there is no template)."""
    n = cfg.limit_groups or DEFAULT_BENCHMARK_PROMPTS
    if n < 1:
        raise UserError(f"--limit-groups {n}: must be >= 1")
    rows = read_benchmark(cfg.benchmark)[:n]
    chat = bool(getattr(tokenizer, "chat_template", None)) and cfg.chat_template != "never"
    source = benchmarks_dir() / BENCHMARKS[cfg.benchmark][0]
    items = []
    for line, row in enumerate(rows, start=1):
        ids = encode_chat(tokenizer, row["question"], BENCHMARK_SYSTEM) if chat else \
            [int(t) for t in tokenizer(f"{BENCHMARK_SYSTEM}\n\n{row['question']}\n")["input_ids"]]
        items.append(PromptItem(id=row["id"], group=row["id"], prompt_ids=np.asarray(ids, dtype=np.int32),
                                response_ids=np.zeros(0, dtype=np.int32), source=source, line=line,
                                prompt_format="chat_template" if chat else "raw", max_tokens=cfg.max_tokens))
    return items, {"benchmark": cfg.benchmark, "dir": str(BUILTIN_BENCHMARKS), "prompts": len(items),
                   "max_tokens": cfg.max_tokens, "system": BENCHMARK_SYSTEM, "chat_template": chat,
                   "responses_per_prompt": 1}


def _refuse_stepless(items: list) -> None:
    """History replays RL steps in order: responses without a step (a samspec or plain file)
    beside RL steps (verl dumps) would be replayed as one step before every other, their text the
    history of the first real step, silently."""
    stepless = sorted({str(it.source) for it in items if it.step is None})
    if stepless:
        n = sum(it.step is None for it in items)
        raise UserError(f"--traces {stepless[0]}{f' and {len(stepless) - 1} more' if len(stepless) > 1 else ''}: "
                        f"{n} response(s) carry no RL step beside traces with RL steps (verl dumps); a history "
                        "source would replay them as a step before every other: replay the verl rollout folder "
                        "without them (pass the other traces in a run of their own)")


def limit_record(read: list, kept: list, n: int | None) -> dict[str, Any] | None:
    """What --limit-groups kept (data.limit_groups): its rule, the groups (a group field in a file)
    kept of those read, and with several RL steps the same per step."""
    if n is None:
        return None
    groups = lambda its: {(str(it.source), it.group, getattr(it, "step", None)) for it in its}  # noqa: E731
    by_step = lambda gs: Counter(str(step) for *_, step in gs if step is not None)  # noqa: E731
    steps = several_steps(read)
    before, after = groups(read), groups(kept)
    return {"groups": n, "per": LIMIT_GROUPS_PER, "kept_groups": len(after), "groups_read": len(before),
            "rule": f"the same prompts at every RL step, taken by a stable hash of their token ids until {n} group(s) "
                    "per step file on average" if steps else f"the first {n} group(s) of each trace file",
            "by_step": {s: {"kept": by_step(after).get(s, 0), "of": c} for s, c in by_step(before).items()}
            if steps else None}


def limit_line(rec: dict[str, Any]) -> str:
    """limit_record on one line: the rule, the groups kept, each RL step's (kept of read)."""
    steps = "; by RL step (kept of read): " + ", ".join(f"{s}: {c['kept']} of {c['of']}" for s, c in sorted(
        rec["by_step"].items(), key=lambda kv: int(kv[0]))) if rec["by_step"] else ""
    return (f"--limit-groups {rec['groups']}: {rec['rule']}; {rec['kept_groups']:,} of {rec['groups_read']:,} "
            f"group(s) kept{steps}")


def check_limit_meaning(saved: dict[str, Any], resume: Any,
                        unrecorded: str = "the first {n} groups of each step file") -> None:
    """Refuse to continue a run folder whose --limit-groups kept other responses than it keeps now:
    its config (`saved`) has no `limit_groups_per` equal to data.LIMIT_GROUPS_PER (`unrecorded`:
    what a folder without the key kept, {n}: N). Its records of a verl folder were replayed with
    another history (earlier steps' responses to other prompts) and cannot be mixed with new
    ones. Runs without --limit-groups, and accept's built-in prompts (no traces), are unchanged."""
    n, per = saved.get("limit_groups"), saved.get("limit_groups_per")
    if n is None or per == LIMIT_GROUPS_PER or saved.get("traces") == []:
        return
    was = (unrecorded if per is None else "the first {n} groups of each step file").format(n=n) \
        if per in (None, "file") else f"groups by the rule {per!r}"
    raise UserError(f"--resume {resume}: this run's --limit-groups {n} kept {was}, made before "
                    "--limit-groups kept the same prompts at every RL step of a verl folder (so that the history "
                    "source finds earlier steps' responses); its records cannot be continued: start a new run "
                    "(leave out --resume)")


def _say_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def load_inputs(cfg: AcceptConfig, need_corpus: bool, need_history: bool = False,
                say: Callable[[str], None] = _say_stderr) -> Inputs:
    """The inputs of a run (module docstring); `say` gets what --limit-groups kept (limit_line)."""
    tokenizer = _load_tokenizer(str(Path(cfg.tokenizer).expanduser().resolve()))
    replays = engine_capabilities(cfg.engine).needs_traces   # the traces' own responses are replayed
    if not cfg.traces:
        if replays:
            raise UserError(f"accept --engine {cfg.engine} needs traces: pass --traces or --data-dir")
        items, prompts = benchmark_items(cfg, tokenizer)
        formats = Counter(it.prompt_format for it in items)
        return Inputs(items=items, skipped=[], files=[], prompt_formats={str(items[0].source): dict(formats)},
                      prompts=prompts)
    traces, trace_fmt = read_any(cfg.traces, cfg.trace_format, on_error=cfg.on_error)
    files = [Path(f) for f in trace_fmt]
    traces, validation = split_validation(traces, cfg.history_includes_validation)
    if replays:   # they must be the model's
        models = check_models(traces, cfg.model, cfg.any_model)
    else:   # the model writes its own responses: the traces give prompts (and lengths) only
        models = {"models": trace_models(traces), "note": "the traces' prompts only: the model generates"}
    if cfg.chat_template == "always" and "verl" in trace_fmt.values():
        raise UserError("--chat-template always: verl's 'input' already holds the chat template's text; "
                        "use --chat-template auto or never with verl rollout dumps")
    items = tokenize_traces(traces, tokenizer, chat_template=cfg.chat_template)
    skipped = [{"file": str(f), "line": ln, "reason": why} for f, ln, why in traces.skipped]
    read, items = items, limit_groups(items, cfg.limit_groups)
    limit = limit_record(read, items, cfg.limit_groups)
    if limit is not None:
        say(limit_line(limit))
    if not items:
        raise UserError(f"--traces {', '.join(map(str, files))}: no usable responses ({len(skipped)} lines skipped)")
    merged = steps_in_folders(items, trace_fmt)   # the responses replayed: validation left out, groups limited
    steps = None
    if has_steps(items):
        if need_history:
            _refuse_stepless(items)
        steps = f"RL steps from the traces ({len({it.step for it in items})} steps)"
    elif need_history:
        items, steps = emulate_steps(items), EMULATED_STEPS
    formats: dict[str, Counter] = {}
    for it in items:
        formats.setdefault(str(it.source), Counter())[it.prompt_format] += 1
    items, tool_output = split_turns(items, cfg.tool_output, replays)
    inputs = Inputs(items=items, skipped=skipped, files=files,
                    prompt_formats={f: dict(c) for f, c in formats.items()}, trace_formats=trace_fmt,
                    models=models, steps=steps, tool_output=tool_output, validation=validation,
                    merged_steps=merged, limit=limit)
    if need_corpus:
        if not cfg.corpus:
            raise UserError("--sources with 'corpus' needs --corpus: pass trace files (e.g. an earlier RL step) "
                            "to build the static corpus from")
        cfiles = expand_trace_paths(cfg.corpus, "--corpus", fmt=None)   # None: --trace-format is not --corpus's
        overlap = {f.resolve() for f in cfiles} & {f.resolve() for f in files}
        if overlap:
            raise UserError(f"--corpus {sorted(map(str, overlap))[0]} is also a replayed trace: the corpus must be "
                            "other traces, or every response would draft from itself")
        ctraces, _ = read_any(cfiles, None, on_error=cfg.on_error)
        citems = tokenize_traces(ctraces, tokenizer, chat_template=cfg.chat_template)
        inputs.skipped += [{"file": str(f), "line": ln, "reason": why, "corpus": True}
                           for f, ln, why in ctraces.skipped]
        inputs.corpus = build_corpus(citems)
        inputs.corpus_info = {"files": [str(f) for f in cfiles], "documents": len(citems),
                              "tokens": int(sum(i.prompt_ids.size + i.response_ids.size for i in citems)),
                              "document": "prompt followed by response"}
    return inputs
