"""Loaders for the shared data: response traces (JSONL), tokenizers and benchmark sets.

Bad input never disappears silently: with on_error="stop" the first bad line raises a
UserError naming file and line; with on_error="skip" it is recorded in TraceSet.skipped.
A bad line is one that is not UTF-8 text, not a JSON object, lacks a field or has one of the
wrong type, or repeats an id seen earlier in the same file: ids identify responses (results
key them by file and line, resume matches them), so a repeated id is refused with
on_error="stop" and, with "skip", the first line with that id is kept and every repeat is
skipped and recorded (never counted twice). Ids are per file: two files may use the same ids.
transformers is imported inside functions only (the CLI's --help must stay light).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal

import numpy as np

from samspec_bench.errors import UserError
from samspec_bench.paths import default_data_dir
from samspec_bench.sam.history import prompt_key
from samspec_bench.sam.python_automaton import MAX_TOKEN_ID

OnError = Literal["stop", "skip"]
ChatTemplate = Literal["auto", "always", "never"]
SKIP_HINT = ("fix or remove the line (accept, rollout and drafters can skip such lines with --on-error skip, counted "
             "and shown; dominance replays every line and stops at it)")


@dataclass(frozen=True)
class TraceRecord:
    """One response as read from a trace file. Each side is text or token ids (not both)."""

    id: str
    group: str
    source: Path
    line: int  # 1-based
    prompt: str | None = None
    response: str | None = None
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    model: str | None = None
    dataset: str | None = None
    system: str | None = None
    correct: bool | None = None
    logprobs: list[float] | None = None
    step: int | None = None  # the RL step that generated it (verl dumps, a 'step' field), else None
    sub: int | None = None   # which response of its line, where a line holds several (lm-eval repeats)
    tool_spans: tuple = ()   # (start, end, shape) character spans of tool output in `response`
    validation: str | None = None   # why it is a validation generation (not an RL rollout), else None


@dataclass
class TraceSet:
    records: list[TraceRecord]
    skipped: list[tuple[Path, int, str]] = field(default_factory=list)  # (file, line, reason)
    on_error: OnError = "stop"  # tokenize_traces follows the same policy


@dataclass(frozen=True)
class TokenizedResponse:
    id: str
    group: str
    prompt_ids: np.ndarray  # int32
    response_ids: np.ndarray  # int32
    source: Path
    line: int
    prompt_format: str  # "chat_template", "raw" or "ids" (given as token ids in the trace)
    logprobs: np.ndarray | None = None  # float32, one per response token
    step: int | None = None  # the RL step (TraceRecord.step)
    sub: int | None = None   # TraceRecord.sub
    tool_spans: tuple = ()   # (start, end, shape) token spans of tool output in response_ids
    validation: str | None = None   # TraceRecord.validation


class _BadLine(Exception):
    """A trace line that cannot be used; the message says why."""


# --- traces -----------------------------------------------------------------------------------

def read_traces(path: str | Path | Iterable[str | Path], on_error: OnError = "stop") -> TraceSet:
    """Read trace JSONL from a file, a directory (its *.jsonl, sorted) or a list of files."""
    if on_error not in ("stop", "skip"):
        raise UserError(f"on_error {on_error!r} is not valid: use 'stop' or 'skip'")
    if not isinstance(path, (str, Path)):
        path = list(path)  # read twice: for the files and for error messages
    traces = TraceSet(records=[], on_error=on_error)
    for file in _trace_files(path):
        first_line: dict[str, int] = {}   # id -> line of its first record in this file
        for lineno, text in _lines(file):
            if not text.strip():
                continue  # blank lines (e.g. a trailing one) hold no record
            try:
                rec = _parse_record(text, file, lineno)
                if rec.id in first_line:
                    raise _BadLine(f"id {rec.id!r} repeats line {first_line[rec.id]} (each response needs its "
                                   "own id; accept and drafters keep the first with --on-error skip)")
                first_line[rec.id] = lineno
                traces.records.append(rec)
            except _BadLine as e:
                _reject(traces, file, lineno, str(e))
    if not traces.records:
        detail = f" ({len(traces.skipped)} bad lines skipped)" if traces.skipped else ""
        raise UserError(f"no usable traces in {_describe(path)}{detail}: pass JSONL files with one "
                        "response a line (id, group, prompt, response)")
    return traces


def _lines(file: Path) -> Iterable[tuple[int, str]]:
    """(1-based line number, text) of each line; a line that is not UTF-8 comes back as the
    _UNDECODABLE marker with its reason (a BOM at the start is dropped)."""
    try:
        f = file.open("rb")
    except OSError as e:
        raise UserError(f"trace file {file} cannot be read ({e.strerror or type(e).__name__}): pass a "
                        "readable JSONL file") from None
    with f:
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield lineno, _UNDECODABLE + f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1})"


_UNDECODABLE = "\x00undecodable:"


def _trace_files(path: str | Path | Iterable[str | Path]) -> list[Path]:
    if isinstance(path, (str, Path)):
        p = Path(path).expanduser()
        if p.is_dir():
            files = sorted(p.glob("*.jsonl"))
            if not files:
                raise UserError(f"trace directory {p} holds no *.jsonl files: pass a directory or files with traces")
            return files
        paths = [p]
    else:
        paths = [Path(x).expanduser() for x in path]
        if not paths:
            raise UserError("no trace files given: pass at least one JSONL file or a directory")
    for p in paths:
        if not p.is_file():
            raise UserError(f"trace file {p} does not exist: pass an existing JSONL file or a directory of them")
    return paths


def _describe(path: str | Path | Iterable[str | Path]) -> str:
    return str(path) if isinstance(path, (str, Path)) else ", ".join(str(p) for p in path)


def _reject(traces: TraceSet, file: Path, line: int, reason: str) -> None:
    if traces.on_error == "stop":
        raise UserError(f"{file}:{line}: {reason}: {SKIP_HINT}")
    traces.skipped.append((file, line, reason))


def _parse_record(text: str, file: Path, line: int) -> TraceRecord:
    if text.startswith(_UNDECODABLE):
        raise _BadLine(text[len(_UNDECODABLE):])
    try:
        row = json.loads(text)
    except ValueError as e:
        raise _BadLine(f"not valid JSON ({e.msg})") from None
    if not isinstance(row, dict):
        raise _BadLine("not a JSON object")
    for key in ("id", "group"):
        if not isinstance(row.get(key), (str, int)) or isinstance(row.get(key), bool):
            raise _BadLine(f"field {key!r} is missing or not a string or integer")
    prompt, prompt_ids = _side(row, "prompt")
    response, response_ids = _side(row, "response")
    if not (response or response_ids):
        raise _BadLine("the response is empty")
    logprobs = row.get("logprobs")
    if logprobs is not None and not (isinstance(logprobs, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in logprobs)):
        raise _BadLine("field 'logprobs' is not a list of finite numbers")
    bad = [i for i, x in enumerate(logprobs or ()) if not math.isfinite(x)]
    if bad:   # counted and named: a NaN / inf logprob is a broken rollout, not a number to average
        raise _BadLine(f"field 'logprobs' holds {len(bad)} non-finite value(s) (NaN/inf) of {len(logprobs)}, the "
                       f"first at token {bad[0]}")
    return TraceRecord(
        id=str(row["id"]), group=str(row["group"]), source=file, line=line,
        prompt=prompt, response=response, prompt_ids=prompt_ids, response_ids=response_ids,
        model=_opt_str(row, "model"), dataset=_opt_str(row, "dataset"), system=_opt_str(row, "system"),
        correct=row.get("correct") if isinstance(row.get("correct"), bool) else None,
        logprobs=logprobs, step=_opt_step(row),
    )


def _side(row: dict, name: str) -> tuple[str | None, list[int] | None]:
    """(text, None) or (None, ids) for `name` ("prompt" or "response")."""
    ids = row.get(f"{name}_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(type(x) is int for x in ids):
            raise _BadLine(f"field '{name}_ids' is not a list of token ids (integers in [0, 2^31-2])")
        # the compiled SAM core's range: an id past it would fail far from this line
        bad = next((i for i, x in enumerate(ids) if not 0 <= x <= MAX_TOKEN_ID), None)
        if bad is not None:
            raise _BadLine(f"field '{name}_ids' is not a list of token ids in [0, 2^31-2] (token id {ids[bad]} "
                           f"at index {bad})")
        return None, ids
    text = row.get(name)
    if not isinstance(text, str):
        raise _BadLine(f"field {name!r} (or '{name}_ids') is missing or not a string")
    return text, None


def _opt_step(row: dict) -> int | None:
    value = row.get("step")
    if value is not None and type(value) is not int:   # "3" or 3.5 would be dropped: the RL step lost
        raise _BadLine(f"field 'step' is {type(value).__name__} ({value!r}): the RL step is an integer or null")
    return value


def _opt_str(row: dict, key: str) -> str | None:
    value = row.get(key)
    if value is not None and not isinstance(value, str):   # a system prompt of 5 would vanish unseen
        raise _BadLine(f"field {key!r} is {type(value).__name__} ({value!r}): use a string or null")
    return value


# --- tokenization -----------------------------------------------------------------------------

def load_tokenizer(path: str | Path) -> Any:
    """A Hugging Face tokenizer from a local directory (never from a hub)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        what = "is a file, not a directory" if p.exists() else "does not exist"
        raise UserError(f"tokenizer directory {p} {what}: pass a directory with tokenizer.json "
                        "(e.g. shared/data/tokenizers/qwen3 or a model checkpoint)")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"cannot load a tokenizer from {p} ({reason}): pass a directory with tokenizer.json") from None


LIMIT_GROUPS_PER = "file; several RL steps: the same prompts at every step"   # as run folders record it


def several_steps(items: list) -> bool:
    """Whether the responses that carry an RL step span more than one (a verl folder's steps)."""
    return len({it.step for it in items if getattr(it, "step", None) is not None}) > 1


def limit_groups(items: list, n: int | None) -> list:
    """What --limit-groups N keeps in accept and dominance. Responses of several RL steps (a verl
    folder, a file per step; a trace with a step field): the same prompts at every step, so the
    history source finds earlier steps' responses (verl shuffles each step's batch: the first N
    of each step are other prompts). Prompts are taken in the order of a stable hash of their token
    ids (history's prompt_key, blake2b; not Python's salted hash()) until the groups kept (a prompt
    in a step file) reach N per step file: N per step on average. Without steps, or of one step:
    the first N groups of each trace file."""
    if n is None:
        return items
    if n < 1:
        raise UserError(f"--limit-groups {n}: must be >= 1")
    prompts = _hash_sample(items, n) if several_steps(items) else None
    kept, seen = [], {}
    for it in items:
        if prompts is not None and it.step is not None:
            if prompt_key(it.prompt_ids) in prompts:
                kept.append(it)
            continue
        groups = seen.setdefault(str(it.source), set())
        if it.group not in groups:
            if len(groups) >= n:
                continue
            groups.add(it.group)
        kept.append(it)
    return kept


def _hash_sample(items: list, n: int) -> set[bytes]:
    """The prompts of the lowest hashes whose groups (a prompt in a step file) reach n per step file."""
    groups = {(str(it.source), it.step, prompt_key(it.prompt_ids)) for it in items if it.step is not None}
    per_prompt, target, taken, chosen = Counter(key for *_, key in groups), n * len({g[:2] for g in groups}), 0, set()
    for key in sorted(per_prompt):
        if taken >= target:
            break
        chosen.add(key)
        taken += per_prompt[key]
    return chosen


def tokenize_traces(traces: TraceSet, tokenizer: Any, chat_template: ChatTemplate = "auto") -> list[TokenizedResponse]:
    """Token ids for every record. Text prompts use the tokenizer's chat template (system +
    user message, generation prompt added) when chat_template="always", or with "auto" when
    the tokenizer has one and the record has a system prompt; otherwise the raw text.
    Responses are tokenized as raw text. Records with ids beyond the vocabulary follow
    traces.on_error (skipped ones are added to traces.skipped)."""
    if chat_template not in ("auto", "always", "never"):
        raise UserError(f"chat_template {chat_template!r} is not valid: use auto, always or never")
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template == "always" and not has_template:
        raise UserError("the tokenizer has no chat template: pass --chat-template never or auto, or a tokenizer with one")

    records = traces.records
    formats = [_prompt_format(r, chat_template, has_template) for r in records]
    # Raw prompts get the tokenizer's own special tokens (e.g. a BOS); templated prompts and
    # responses none: the template already holds them and a response continues its prompt.
    raw = _encode(tokenizer, [r.prompt if f == "raw" else None for r, f in zip(records, formats)], True)
    templated = _encode(tokenizer, [_chat_prompt(r, tokenizer) if f == "chat_template" else None
                                    for r, f in zip(records, formats)], False)
    responses, spans = _encode_responses(tokenizer, records)

    vocab = len(tokenizer)
    out: list[TokenizedResponse] = []
    for r, fmt, raw_ids, chat_ids, r_ids, tool in zip(records, formats, raw, templated, responses, spans):
        p_ids = np.asarray(next(x for x in (r.prompt_ids, raw_ids, chat_ids) if x is not None), dtype=np.int64)
        r_ids = np.asarray(r.response_ids if r.response_ids is not None else r_ids, dtype=np.int64)
        problem = _check_ids(p_ids, r_ids, vocab, r.logprobs)
        if problem:
            _reject(traces, r.source, r.line, problem)
            continue
        out.append(TokenizedResponse(
            id=r.id, group=r.group, prompt_ids=p_ids.astype(np.int32), response_ids=r_ids.astype(np.int32),
            source=r.source, line=r.line, prompt_format=fmt,
            logprobs=None if r.logprobs is None else np.asarray(r.logprobs, dtype=np.float32), step=r.step,
            sub=r.sub, tool_spans=tool, validation=r.validation,
        ))
    return out


def _encode_responses(tokenizer: Any, records: list[TraceRecord]) -> tuple[list, list[tuple]]:
    """Response ids and their tool output as token spans. A response with tool output is
    tokenized piece by piece (generated text, tool text, ...), as the rollout built it: the
    tool turn is tokenized on its own (verl's agent loop) or appended as text between turns."""
    pieces: list[tuple[int, str, str | None]] = []   # (record, text, tool shape or None)
    for n, r in enumerate(records):
        if r.response is None or not r.tool_spans:
            continue
        at = 0
        for start, end, shape in r.tool_spans:
            pieces += [(n, r.response[at:start], None), (n, r.response[start:end], shape)]
            at = end
        pieces.append((n, r.response[at:], None))
    pieces = [p for p in pieces if p[1]]
    split = {n for n, _, _ in pieces}
    ids = _encode(tokenizer, [None if n in split else r.response for n, r in enumerate(records)], False)
    spans: list[tuple] = [()] * len(records)
    encoded = _encode(tokenizer, [text for _, text, _ in pieces], False)
    for (n, _, shape), piece in zip(pieces, encoded):
        if ids[n] is None:
            ids[n] = []
        if shape is not None and piece:
            spans[n] += ((len(ids[n]), len(ids[n]) + len(piece), shape),)
        ids[n] += piece
    return ids, spans


def _prompt_format(r: TraceRecord, mode: ChatTemplate, has_template: bool) -> str:
    if r.prompt_ids is not None:
        return "ids"
    if mode == "always" or (mode == "auto" and has_template and r.system):
        return "chat_template"
    return "raw"


def encode_chat(tokenizer: Any, user: str, system: str | None = None, *, tokenize: bool = True):
    """The one chat encoding of the package: an optional system turn and one user turn through
    the tokenizer's chat template, with the generation prompt. Token ids, or the text when
    tokenize=False. Callers decide whether a template applies (they fall back to raw text)."""
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user})
    enc = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=tokenize)
    if not tokenize:
        return enc
    if hasattr(enc, "keys"):  # transformers 5 returns a BatchEncoding
        enc = enc["input_ids"]
    return [int(t) for t in enc]


def _chat_prompt(r: TraceRecord, tokenizer: Any) -> str:
    return encode_chat(tokenizer, r.prompt, r.system, tokenize=False)


def _encode(tokenizer: Any, texts: list[str | None], add_special_tokens: bool) -> list[list[int] | None]:
    """Batch-encode the texts that are not None (one call: the fast tokenizer parallelises it)."""
    out: list[list[int] | None] = [None] * len(texts)
    idx = [i for i, t in enumerate(texts) if t is not None]
    if idx:
        encoded = tokenizer([texts[i] for i in idx], add_special_tokens=add_special_tokens)["input_ids"]
        for i, ids in zip(idx, encoded):
            out[i] = ids
    return out


def _check_ids(prompt_ids: np.ndarray, response_ids: np.ndarray, vocab: int, logprobs: list[float] | None) -> str | None:
    for name, ids in (("prompt", prompt_ids), ("response", response_ids)):
        if ids.size and ids.max() >= vocab:
            return f"{name} token id {int(ids.max())} is outside the tokenizer's vocabulary (0..{vocab - 1})"
    if response_ids.size == 0:
        return "the response is empty after tokenization"
    if logprobs is not None and len(logprobs) != response_ids.size:
        return f"'logprobs' has {len(logprobs)} values but the response has {response_ids.size} tokens"
    return None


# --- benchmarks and data directories -----------------------------------------------------------

# name -> (file under <data_dir>/benchmarks/, id field, question field, answer field)
BENCHMARKS: dict[str, tuple[str, str | None, str, str]] = {
    "gsm8k": ("gsm8k_test.jsonl", None, "question", "answer"),
    "math500": ("math500_test.jsonl", "unique_id", "problem", "answer"),
    "aime24": ("aime24.jsonl", "ID", "Problem", "Answer"),
    "aime25": ("aime25.jsonl", "id", "problem", "answer"),
}
_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.S)
# The built-in copies shipped with the package (licences and sources in its README.md).
BUILTIN_BENCHMARKS = Path(__file__).resolve().parent / "benchmarks"


def benchmarks_dir(data_dir: str | Path | None = None) -> Path:
    """<data_dir>/benchmarks, or the package's built-in sets when data_dir is None."""
    return BUILTIN_BENCHMARKS if data_dir is None else Path(data_dir).expanduser() / "benchmarks"


def read_benchmark(name: str, data_dir: str | Path | None = None) -> list[dict]:
    """Rows as {"id", "question", "answer" (the final answer as a string), "raw" (the row)},
    from <data_dir>/benchmarks or (data_dir None) the built-in sets.
    GSM8K's answer is the text after "####" without thousands separators ("2,125" -> "2125")."""
    if name not in BENCHMARKS:
        raise UserError(f"unknown benchmark {name!r}: use one of {', '.join(BENCHMARKS)}")
    fname, id_key, q_key, a_key = BENCHMARKS[name]
    path = benchmarks_dir(data_dir) / fname
    if not path.is_file():
        raise UserError(f"benchmark {name} not found: expected {path} (pass --data-dir pointing at the shared data)")
    rows = []
    seen: dict[str, int] = {}
    restore = "restore the file from the shared data"
    with path.open("rb") as f:
        for lineno, bline in enumerate(f, start=1):
            try:
                text = bline.decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(f"{path}:{lineno}: not UTF-8 text: {restore}") from None
            if not text.strip():
                continue
            try:
                raw = json.loads(text)
                answer = str(raw[a_key])
                question = raw[q_key]
                row_id = str(raw[id_key]) if id_key else f"{name}-{len(rows)}"
            except (ValueError, KeyError, TypeError) as e:
                raise UserError(f"{path}:{lineno}: not a {name} row ({type(e).__name__}: {e}): "
                                "restore the file from the shared data") from None
            if name == "gsm8k":
                m = _GSM8K_FINAL.search(answer)
                if m is None:
                    raise UserError(f"{path}:{lineno}: the answer has no '#### N' line: restore the file from the shared data")
                answer = m.group(1).replace(",", "")
            if row_id in seen:
                raise UserError(f"{path}:{lineno}: id {row_id!r} repeats line {seen[row_id]}: {restore}")
            seen[row_id] = lineno
            rows.append({"id": row_id, "question": question, "answer": answer, "raw": raw})
    return rows


def find_traces(data_dir: str | Path) -> list[Path]:
    """The trace files <data_dir>/traces/*.jsonl, sorted."""
    traces = Path(data_dir).expanduser() / "traces"
    files = sorted(traces.glob("*.jsonl"))
    if not files:
        raise UserError(f"no trace files found: expected {traces}/*.jsonl (pass --data-dir pointing at the shared data)")
    return files


def check_data_dir(opt: str | Path | None) -> Path | None:
    """A given --data-dir as a path; one that is not a directory is refused, also where the run
    would not read it (traces and tokenizer given: nothing is silent)."""
    if opt is None:
        return None
    p = Path(opt).expanduser()
    if not p.is_dir():
        raise UserError(f"--data-dir {opt}: no such directory; pass the shared data directory (traces/, tokenizers/, "
                        "benchmarks/), or drop --data-dir")
    return p


def resolve_data_dir(opt: str | Path | None = None) -> Path:
    """`opt` when given, else SAMSPEC_DATA_DIR or ./shared/data or ../shared/data."""
    if opt is not None:
        return check_data_dir(opt)
    p = default_data_dir()
    if p is None or not p.is_dir():
        where = f" ({p} does not exist)" if p is not None else ""
        raise UserError(f"no data directory found{where}: pass --data-dir or set SAMSPEC_DATA_DIR")
    return p
