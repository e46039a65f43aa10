"""The accept suite's inputs: the traces read and tokenized (bad lines stopped at or skipped
and counted), limited to the first groups, and the static corpus for the 'corpus' source."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from samspec_bench.bench.engines.replay import build_corpus
from samspec_bench.data import load_tokenizer, read_traces, tokenize_traces
from samspec_bench.errors import UserError
from samspec_bench.suites.accept.config import AcceptConfig, expand_trace_paths


@dataclass
class Inputs:
    items: list
    skipped: list[dict[str, Any]]
    files: list[Path]
    prompt_formats: dict[str, dict[str, int]]
    corpus: Any = None
    corpus_info: dict[str, Any] = field(default_factory=dict)


def limit_groups(items: list, n: int | None) -> list:
    """The responses of the first n groups of each trace file."""
    if n is None:
        return items
    if n < 1:
        raise UserError(f"--limit-groups {n}: must be >= 1")
    kept, seen = [], {}
    for it in items:
        groups = seen.setdefault(str(it.source), set())
        if it.group not in groups:
            if len(groups) >= n:
                continue
            groups.add(it.group)
        kept.append(it)
    return kept


@functools.lru_cache(maxsize=2)
def _load_tokenizer(path: str):
    """Tokenizers are loaded once per process (tests and sweeps call the suite repeatedly)."""
    return load_tokenizer(path)


def load_inputs(cfg: AcceptConfig, need_corpus: bool) -> Inputs:
    files = expand_trace_paths(cfg.traces)
    tokenizer = _load_tokenizer(str(Path(cfg.tokenizer).expanduser().resolve()))
    traces = read_traces(files, on_error=cfg.on_error)
    items = tokenize_traces(traces, tokenizer, chat_template=cfg.chat_template)
    skipped = [{"file": str(f), "line": ln, "reason": why} for f, ln, why in traces.skipped]
    items = limit_groups(items, cfg.limit_groups)
    if not items:
        raise UserError(f"--traces {', '.join(map(str, files))}: no usable responses ({len(skipped)} lines skipped)")
    formats: dict[str, Counter] = {}
    for it in items:
        formats.setdefault(str(it.source), Counter())[it.prompt_format] += 1
    inputs = Inputs(items=items, skipped=skipped, files=files,
                    prompt_formats={f: dict(c) for f, c in formats.items()})
    if need_corpus:
        if not cfg.corpus:
            raise UserError("--sources with 'corpus' needs --corpus: pass trace files (e.g. an earlier RL step) "
                            "to build the static corpus from")
        cfiles = expand_trace_paths(cfg.corpus, "--corpus")
        overlap = {f.resolve() for f in cfiles} & {f.resolve() for f in files}
        if overlap:
            raise UserError(f"--corpus {sorted(map(str, overlap))[0]} is also a replayed trace: the corpus must be "
                            "other traces, or every response would draft from itself")
        ctraces = read_traces(cfiles, on_error=cfg.on_error)
        citems = tokenize_traces(ctraces, tokenizer, chat_template=cfg.chat_template)
        inputs.skipped += [{"file": str(f), "line": ln, "reason": why, "corpus": True}
                           for f, ln, why in ctraces.skipped]
        inputs.corpus = build_corpus(citems)
        inputs.corpus_info = {"files": [str(f) for f in cfiles], "documents": len(citems),
                              "tokens": int(sum(i.prompt_ids.size + i.response_ids.size for i in citems)),
                              "document": "prompt followed by response"}
    return inputs
