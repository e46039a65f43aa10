"""The drafter benchmark's tokens: responses from the traces (an equal share from each
file, each read in its format as `accept` reads it: samspec, verl dumps, lm-eval samples, plain
JSONL), their groups, and the concatenated stream the context sweep indexes (its own, taken as the
files allow, where it needs more than the replay's). Tool output inside responses stays in the
stream: it is context a drafter indexes, and this suite times drafters."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from samspec_bench.data import load_tokenizer, tokenize_traces
from samspec_bench.errors import UserError
from samspec_bench.suites.drafters.config import DraftersConfig
from samspec_bench.trace_formats import read_any


def load_workload(cfg: DraftersConfig):
    """Tokenized responses, an equal share of max_tokens from each trace file, in file order; the
    trace lines skipped (--on-error skip) as {"file", "line", "reason"}; the prompt formats; and
    the token budget (`token_budget`); and each file's whole token stream as (file, tokens), the
    context sweep's source (`sweep_stream`). The cap is kept: the response that would cross a
    file's share is cut there (its prompt whole and the first response tokens that fit), so no
    more than --max-tokens tokens are replayed."""
    tok = load_tokenizer(cfg.tokenizer)
    files = [Path(t) for t in cfg.traces]
    share = cfg.max_tokens // max(1, len(files))
    responses, skipped, formats, shares, streams = [], [], set(), [], []
    for f in files:
        ts, _ = read_any(f, on_error=cfg.on_error)
        if any(r.sub is not None for r in ts.records):   # its replay names a request by file and line
            raise UserError(f"drafters --traces {f}: lm-eval samples with several responses per document (repeats) "
                            "are not read by drafters yet: pass samples of one repeat, verl dumps, samspec or plain "
                            "JSONL traces")
        resp = tokenize_traces(ts, tok, chat_template=cfg.chat_template)
        skipped += [{"file": str(sf), "line": ln, "reason": why} for sf, ln, why in ts.skipped]
        streams.append((str(f), token_stream(resp)))
        taken, cut = within_share(resp, share)
        responses += taken
        formats.update(r.prompt_format for r in taken)
        shares.append({"file": str(f), "tokens": sum(r.prompt_ids.size + r.response_ids.size for r in taken),
                       "responses": len(taken), "cut": cut, "first_prompt_tokens": int(resp[0].prompt_ids.size)
                       if resp else None})
    if not responses:
        short = [s for s in shares if s["first_prompt_tokens"] is not None]
        if short:   # responses there, but the share holds not even the first prompt and one response token
            raise UserError(f"--max-tokens {cfg.max_tokens}: each of the {len(files)} trace file(s) gets {share} "
                            f"token(s), fewer than its first prompt and one response token ({short[0]['file']}: "
                            f"{short[0]['first_prompt_tokens']} prompt tokens); raise --max-tokens")
        raise UserError(f"--traces {', '.join(cfg.traces)}: no usable responses; check the files")
    return responses, skipped, sorted(formats), token_budget(cfg.max_tokens, share, shares), streams


def within_share(resp: list, share: int) -> tuple[list, bool]:
    """The file's responses in order up to `share` tokens (prompt and response): the one that
    crosses it is cut to the response tokens that fit; one whose prompt and first response token
    do not fit ends the file's share. Returns (responses, whether the last one was cut)."""
    taken, used = [], 0
    for r in resp:
        room = share - used - r.prompt_ids.size
        if room < 1:
            break
        if r.response_ids.size > room:
            taken.append(cut_response(r, room))
            return taken, True
        taken.append(r)
        used += r.prompt_ids.size + r.response_ids.size
    return taken, False


def cut_response(r, n: int):
    """The response with its first n response tokens (logprobs and tool-output spans cut alike)."""
    spans = tuple((a, min(b, n), shape) for a, b, shape in r.tool_spans if a < n)
    return dataclasses.replace(r, response_ids=r.response_ids[:n], tool_spans=spans,
                               logprobs=None if r.logprobs is None else r.logprobs[:n])


def token_budget(max_tokens: int, share: int, shares: list[dict]) -> dict:
    """What the replay used against --max-tokens (result.json's token_budget, printed)."""
    used = sum(s["tokens"] for s in shares)
    return {"max_tokens": max_tokens, "share_per_file": share, "tokens": used,
            "responses_cut": sum(s["cut"] for s in shares),
            "files_without_tokens": [s["file"] for s in shares if not s["tokens"]],
            "files": [{k: s[k] for k in ("file", "tokens", "responses", "cut")} for s in shares],
            "rule": "an equal share of --max-tokens per trace file, prompt and response tokens counted; the response "
                    "crossing a share is cut there (its prompt whole), one whose prompt does not fit is left out"}


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
    """Every response's prompt and response tokens, concatenated in order (empty for none)."""
    return np.concatenate([np.zeros(0, np.int64)] + [np.concatenate([r.prompt_ids, r.response_ids])
                                                     for r in responses])


def fill_shares(sizes: list[int], total: int) -> list[int]:
    """How many of `total` tokens each file of `sizes` tokens gives, as evenly as the files allow:
    one shorter than an equal share gives all it has and the others share the rest (the
    remainder of a division to the longer files). Together they give min(total, sum(sizes))."""
    give, left = [0] * len(sizes), total
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    for n, i in enumerate(order):
        give[i] = min(sizes[i], left // (len(order) - n))
        left -= give[i]
    return give


def sweep_stream(streams: list[tuple[str, np.ndarray]], total: int) -> tuple[np.ndarray, list[dict]]:
    """The context sweep's own stream: up to `total` tokens, each file's share as fill_shares takes
    it (from the start of the file, in file order; the last prompt or response taken may be cut:
    the sweep indexes a context, it replays no response). Returns (tokens, [{"file", "tokens"}])."""
    give = fill_shares([s.size for _, s in streams], total)
    stream = np.concatenate([np.zeros(0, np.int64)] + [s[:g] for (_, s), g in zip(streams, give)])
    return stream, [{"file": f, "tokens": g} for (f, _), g in zip(streams, give)]
