"""The drafter benchmark's tokens: responses from the traces (an equal share from each
file, each read in its format as `accept` reads it: samspec, verl dumps, lm-eval samples, plain
JSONL), their groups, and the concatenated stream the context sweep indexes. Tool output inside
responses stays in the stream: it is context a drafter indexes, and this suite times drafters."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from samspec_bench.data import load_tokenizer, tokenize_traces
from samspec_bench.errors import UserError
from samspec_bench.suites.drafters.config import DraftersConfig
from samspec_bench.trace_formats import read_any


def load_workload(cfg: DraftersConfig):
    """Tokenized responses, an equal share of max_tokens from each trace file, in file order; the
    trace lines skipped (--on-error skip) as {"file", "line", "reason"}; the prompt formats."""
    tok = load_tokenizer(cfg.tokenizer)
    files = [Path(t) for t in cfg.traces]
    per_file = max(1, cfg.max_tokens // max(1, len(files)))
    responses, skipped, formats = [], [], set()
    for f in files:
        ts, _ = read_any(f, on_error=cfg.on_error)
        if any(r.sub is not None for r in ts.records):   # its replay names a request by file and line
            raise UserError(f"drafters --traces {f}: lm-eval samples with several responses per document (repeats) "
                            "are not read by drafters yet: pass samples of one repeat, verl dumps, samspec or plain "
                            "JSONL traces")
        resp = tokenize_traces(ts, tok, chat_template=cfg.chat_template)
        skipped += [{"file": str(sf), "line": ln, "reason": why} for sf, ln, why in ts.skipped]
        used = 0
        for r in resp:
            if used >= per_file:
                break
            responses.append(r)
            formats.add(r.prompt_format)
            used += r.prompt_ids.size + r.response_ids.size
    if not responses:
        raise UserError(f"--traces {', '.join(cfg.traces)}: no usable responses; check the files")
    return responses, skipped, sorted(formats)


def trace_groups(responses):
    """Consecutive responses of one group (a trace file's group key)."""
    out, key = [], None
    for r in responses:
        k = (r.source.name, r.group)
        if k != key:
            out.append([])
            key = k
        out[-1].append(r)
    return out


def token_stream(responses) -> np.ndarray:
    """Every response's prompt and response tokens, concatenated in order."""
    return np.concatenate([np.concatenate([r.prompt_ids, r.response_ids]) for r in responses])
