"""Rollouts as users have them, read as traces: the format of each file is detected (or
named with --trace-format) and every reader yields `data.TraceRecord`s.

- `samspec`: this package's JSONL (id, group, prompt / prompt_ids, response / response_ids,
  ...), read by `data.read_traces`.
- `verl`: verl's rollout dumps (`trainer.rollout_data_dir`): one `{global_step}.jsonl` per RL
  step, each line {"input", "output", "score", "step"} plus, in newer versions, "gts" and the
  reward function's extra keys (volcengine/verl @ 00401103, verl/trainer/ppo/ray_trainer.py:
  `RayPPOTrainer._dump_generations` and the `rollout_data_dir` branch of `fit`). `input` and
  `output` are `tokenizer.batch_decode(..., skip_special_tokens=True)` of the prompt and the
  response: the chat template's text is there but its special tokens are not, so prompts are
  tokenized as raw text (an approximation of the real prompt ids; responses are exact up to
  the decode/encode round trip). The batch is reordered before the dump (`balance_batch`),
  so a group is the lines of one step with the same `input`; its name is a hash of `input`,
  the same in every step, and the step is kept (`TraceRecord.step`).
- `lm-eval`: lm-eval's `--log_samples` files (`samples_<task>_<date>.jsonl`, one line per
  document and filter: doc_id, arguments, resps, ...). A group is one document's responses
  (`repeats`); the lines of other filters repeat the same responses and are read once. The
  model is taken from a `results_*.json` beside the samples when there is one.
- `plain`: JSONL with `prompt` and `response` strings (optional id, group, system, model);
  without a group, responses to the same prompt form one.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from samspec_bench.data import SKIP_HINT, OnError, TraceRecord, TraceSet, read_traces
from samspec_bench.errors import UserError
from samspec_bench.models.rl_names import resolve_alias

FORMATS = ("auto", "samspec", "verl", "lm-eval", "plain")
VERL_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
LM_EVAL_SAMPLES = "samples_*.jsonl"
FORMAT_FIELDS = ("samspec (id, group, prompt, response), verl rollout dumps (input, output, score, step), "
                 "lm-eval --log_samples files (doc_id, arguments, resps) or plain JSONL (prompt, response)")
SNIFF_LINES = 20


class BadLine(Exception):
    """A line a reader cannot use; the message says why."""


# --- detection -----------------------------------------------------------------------------------

class UnknownTraceFile(UserError):
    """A file in no known trace format; `why` says what was found, without the path."""

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why


def detect_file(path: Path) -> str:
    """The format of one JSONL file, from the keys of its first JSON object. A file without one
    in its first lines (empty, not text, not JSON objects) or one that cannot be read is named
    now, before anything is tokenized (UnknownTraceFile)."""
    keys = None
    try:
        with path.open("rb") as f:
            for lineno, raw in enumerate(f, start=1):
                if lineno > SNIFF_LINES:
                    break
                try:
                    row = json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
                except (UnicodeDecodeError, ValueError):
                    continue
                if isinstance(row, dict):
                    keys = set(row)
                    break
    except OSError as e:
        why = f"cannot be read ({e.strerror or type(e).__name__})"
        raise UnknownTraceFile(f"trace file {path} {why}: pass a readable JSONL file", why) from None
    if keys is None:
        why = f"no JSON object in its first {SNIFF_LINES} lines"
        raise UnknownTraceFile(f"trace file {path}: {why}: pass JSONL traces: {FORMAT_FIELDS}", why)
    if {"doc_id", "resps"} <= keys:
        return "lm-eval"
    if {"input", "output"} <= keys:
        return "verl"
    if {"id", "group"} <= keys and keys & {"prompt", "prompt_ids"}:
        return "samspec"
    if {"prompt", "response"} <= keys:
        return "plain"
    why = f"keys {', '.join(sorted(keys)[:6])}{', ...' if len(keys) > 6 else ''}"
    raise UnknownTraceFile(f"trace file {path}: not a known trace format (its first object has the keys "
                           f"{', '.join(sorted(keys)[:12])}): use {FORMAT_FIELDS}, or pass --trace-format", why)


def verl_step_files(directory: Path) -> list[Path]:
    """A verl rollout_data_dir's step files, in step order."""
    files = [p for p in directory.iterdir() if p.is_file() and VERL_STEP_FILE.match(p.name)]
    return sorted(files, key=lambda p: int(VERL_STEP_FILE.match(p.name).group(1)))


def expand(path: str | Path, fmt: str = "auto") -> list[tuple[Path, str]]:
    """The (file, format) pairs a --traces value stands for: a file, or a directory (a verl
    rollout_data_dir, a folder of lm-eval samples, or *.jsonl files)."""
    if fmt not in FORMATS:
        raise UserError(f"--trace-format {fmt!r}: use one of {', '.join(FORMATS)}")
    p = Path(path).expanduser()
    if p.is_file():
        return [(p, detect_file(p) if fmt == "auto" else fmt)]
    if not p.is_dir():
        raise UserError(f"trace file {p} does not exist: pass an existing JSONL file or a directory of them")
    if fmt == "auto":
        return _detect_folder(p)
    if fmt == "verl":
        steps = verl_step_files(p)
        if steps:
            return [(f, "verl") for f in steps]
        raise UserError(f"trace directory {p} holds no verl step files ({{global_step}}.jsonl, e.g. 1.jsonl): "
                        "pass the directory set as trainer.rollout_data_dir")
    if fmt == "lm-eval":
        samples = sorted(p.rglob(LM_EVAL_SAMPLES))
        if samples:
            return [(f, "lm-eval") for f in samples]
        raise UserError(f"trace directory {p} holds no lm-eval samples files ({LM_EVAL_SAMPLES}): pass the "
                        "--output_path of an lm-eval run with --log_samples")
    files = sorted(p.glob("*.jsonl"))
    if not files:
        raise UserError(f"trace directory {p} holds no *.jsonl files: pass a directory or files with traces "
                        "(a verl rollout_data_dir, lm-eval samples, or JSONL)")
    return [(f, fmt) for f in files]


def _detect_folder(p: Path) -> list[tuple[Path, str]]:
    """Every trace file of a folder, each in its own detected format: its *.jsonl (verl step
    files first, in step order) and lm-eval samples files below it. A folder is read whole or
    refused: files in no known format are listed in one UserError."""
    steps = verl_step_files(p)
    rest = sorted((set(p.glob("*.jsonl")) | set(p.rglob(LM_EVAL_SAMPLES))) - set(steps))
    if not steps and not rest:
        raise UserError(f"trace directory {p} holds no *.jsonl files: pass a directory or files with traces "
                        "(a verl rollout_data_dir, lm-eval samples, or JSONL)")
    found, unknown = [], []
    for f in [*steps, *rest]:
        try:
            found.append((f, detect_file(f)))
        except UnknownTraceFile as e:
            unknown.append(f"{f.relative_to(p).as_posix()} ({e.why})")
    if unknown:
        more = f", and {len(unknown) - 6} more" if len(unknown) > 6 else ""
        raise UserError(f"trace directory {p}: {len(unknown)} of {len(found) + len(unknown)} file(s) not understood "
                        f"as traces: {'; '.join(unknown[:6])}{more}; move them out, pass the trace files "
                        f"themselves, or name the format with --trace-format; known: {FORMAT_FIELDS}")
    return found


# --- reading -------------------------------------------------------------------------------------

def read_any(paths: str | Path | Iterable[str | Path], fmt: str = "auto",
             on_error: OnError = "stop") -> tuple[TraceSet, dict[str, str]]:
    """Every record of `paths` (files or directories) in one TraceSet, and each file's format."""
    if on_error not in ("stop", "skip"):
        raise UserError(f"on_error {on_error!r} is not valid: use 'stop' or 'skip'")
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not items:
        raise UserError("no trace files given: pass at least one JSONL file or a directory")
    files: list[tuple[Path, str]] = []
    for x in items:
        files += expand(x, fmt)
    formats = {str(f): kind for f, kind in files}
    traces = TraceSet(records=[], on_error=on_error)
    native = [f for f, kind in files if kind == "samspec"]
    if native:
        got = read_traces(native, on_error=on_error)
        traces.records += got.records
        traces.skipped += got.skipped
    results: dict[str, dict] = {}
    for f, kind in files:
        if kind == "samspec":
            continue
        reader = READERS[kind]
        for lineno, row in _json_lines(f, traces):
            try:
                rec = reader(row, f, lineno, results)
            except BadLine as e:
                _reject(traces, f, lineno, str(e))
                continue
            if rec is not None:
                traces.records.extend(rec)
    if not traces.records:
        detail = f" ({len(traces.skipped)} bad lines skipped)" if traces.skipped else ""
        raise UserError(f"no usable traces in {', '.join(str(x) for x in items)}{detail}: pass {FORMAT_FIELDS}")
    return traces, formats


def _reject(traces: TraceSet, file: Path, line: int, reason: str) -> None:
    if traces.on_error == "stop":
        raise UserError(f"{file}:{line}: {reason}: {SKIP_HINT}")
    traces.skipped.append((file, line, reason))


def _json_lines(path: Path, traces: TraceSet) -> Iterator[tuple[int, dict]]:
    """(line number, JSON object) for each non-blank line; bad lines follow traces.on_error."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
            except UnicodeDecodeError as e:
                _reject(traces, path, lineno, f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1})")
                continue
            except ValueError as e:
                _reject(traces, path, lineno, f"not valid JSON ({getattr(e, 'msg', e)})")
                continue
            if not isinstance(row, dict):
                _reject(traces, path, lineno, "not a JSON object")
                continue
            yield lineno, row


def prompt_group(text: str) -> str:
    """A group name for the responses to one prompt text: the same in every file and step."""
    return "p" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _text(row: dict, key: str, fmt: str, need: str) -> str:
    value = row.get(key)
    if not isinstance(value, str):
        raise BadLine(f"a {fmt} line needs {need}; '{key}' is {'missing' if key not in row else type(value).__name__} "
                      f"(keys: {', '.join(sorted(row)[:10])})")
    return value


def _read_verl(row: dict, file: Path, line: int, _results: dict) -> list[TraceRecord]:
    need = "'input' and 'output' strings (verl's rollout dump)"
    prompt, response = _text(row, "input", "verl", need), _text(row, "output", "verl", need)
    if not response:
        raise BadLine("the response ('output') is empty")
    m = VERL_STEP_FILE.match(file.name)
    step = row.get("step") if type(row.get("step")) is int else (int(m.group(1)) if m else None)
    acc = row.get("acc")
    correct = acc if isinstance(acc, bool) else None
    return [TraceRecord(id=f"{step}:{line}", group=prompt_group(prompt), source=file, line=line, prompt=prompt,
                        response=response, dataset=row.get("data_source") if isinstance(row.get("data_source"), str)
                        else None, correct=correct, step=step)]


def _lm_eval_prompt(row: dict) -> str | None:
    args = row.get("arguments")
    if isinstance(args, dict):   # lm-eval >= 0.4.3: {"gen_args_0": {"arg_0": prompt, "arg_1": gen_kwargs}}
        first = args.get("gen_args_0")
        return first.get("arg_0") if isinstance(first, dict) else None
    if isinstance(args, list) and args and isinstance(args[0], list) and args[0]:
        return args[0][0]        # older versions: [[prompt, gen_kwargs], ...]
    return None


def _lm_eval_model(file: Path, results: dict) -> str | None:
    key = str(file.parent)
    if key not in results:
        model = None
        for p in sorted(file.parent.glob("results_*.json"), reverse=True):
            try:
                model = json.loads(p.read_text(encoding="utf-8")).get("model_name")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(model, str) and model:
                break
            model = None
        results[key] = {"model": model, "seen": set()}
    return results[key]["model"]


def _read_lm_eval(row: dict, file: Path, line: int, results: dict) -> list[TraceRecord] | None:
    prompt = _lm_eval_prompt(row)
    if not isinstance(prompt, str) or "doc_id" not in row:
        raise BadLine("an lm-eval samples line needs 'doc_id' and 'arguments' with the prompt (gen_args_0.arg_0); "
                      "generation tasks only (--log_samples of generate_until)")
    resps = row.get("resps")
    if isinstance(resps, list) and resps and isinstance(resps[0], list):
        resps = resps[0]         # one request per document for generation tasks: its repeats
    if not isinstance(resps, list) or not resps or not all(isinstance(r, str) for r in resps):
        raise BadLine("'resps' is not a list of response strings (a generate_until task's samples)")
    model = _lm_eval_model(file, results)
    task = file.stem.removeprefix("samples_").rsplit("_", 1)[0]
    seen = results[str(file.parent)]["seen"]
    key = (task, str(row["doc_id"]))
    if key in seen:              # the same document under another filter: the same responses
        return None
    seen.add(key)
    group = f"{task}:{row['doc_id']}"
    return [TraceRecord(id=f"{group}:{r}", group=group, source=file, line=line, prompt=prompt, response=text,
                        model=model, dataset=task, sub=r if len(resps) > 1 else None)
            for r, text in enumerate(resps) if text]


def _read_plain(row: dict, file: Path, line: int, _results: dict) -> list[TraceRecord]:
    need = "'prompt' and 'response' strings"
    prompt, response = _text(row, "prompt", "plain", need), _text(row, "response", "plain", need)
    if not response:
        raise BadLine("the response is empty")
    def opt(key: str) -> str | None:
        v = row.get(key)
        return str(v) if isinstance(v, (str, int)) and not isinstance(v, bool) else None
    return [TraceRecord(id=opt("id") or f"{file.stem}:{line}", group=opt("group") or prompt_group(prompt),
                        source=file, line=line, prompt=prompt, response=response, model=opt("model"),
                        dataset=opt("dataset"), system=opt("system"),
                        step=row.get("step") if type(row.get("step")) is int else None)]


READERS = {"verl": _read_verl, "lm-eval": _read_lm_eval, "plain": _read_plain}


# --- which model wrote them --------------------------------------------------------------------------

def same_model(trace_model: str, spec: str) -> bool:
    """Whether a trace's `model` field names the model `spec`: equal after resolving short
    names, or equal repository / directory names (Qwen/Qwen3-8B ~ Qwen3-8B ~ /ckpt/Qwen3-8B)."""
    def names(x: str) -> set[str]:
        x = x.strip().rstrip("/")
        out = {x.lower(), x.lower().rsplit("/", 1)[-1]}
        if not x.startswith("builtin:"):
            alias = resolve_alias(x)
            out |= {alias.lower(), alias.lower().rsplit("/", 1)[-1]}
        return out
    return bool(names(trace_model) & names(spec))


def trace_models(traces: TraceSet) -> dict[str, list[str]]:
    """The `model` values of each file (files without one are left out)."""
    out: dict[str, set[str]] = {}
    for r in traces.records:
        if r.model:
            out.setdefault(str(r.source), set()).add(r.model)
    return {f: sorted(m) for f, m in out.items()}


def check_models(traces: TraceSet, model: str | None, any_model: bool = False) -> dict[str, Any]:
    """Refuse traces of another model than `model` (the `model` field; records without one
    are of an unstated model), and token-id traces written with different models' tokenizers.
    `any_model` lets both through. Returns what was found, for result.json."""
    models = trace_models(traces)
    unstated = sorted({str(r.source) for r in traces.records if not r.model})
    id_models: dict[str, str] = {}
    for r in traces.records:
        if r.model and (r.prompt_ids is not None or r.response_ids is not None):
            id_models.setdefault(r.model, str(r.source))
    if not any_model:
        if len(id_models) > 1:
            (m1, f1), (m2, f2) = list(id_models.items())[:2]
            raise UserError(f"--traces: {f1} and {f2} hold token ids from different models ({m1!r}, {m2!r}), so from "
                            "different tokenizers: replay them separately (or pass --any-model)")
        if model is not None:
            for f, names in models.items():
                other = [m for m in names if not same_model(m, model)]
                if other:
                    raise UserError(f"--traces {f}: responses of {other[0]!r}, not of --model {model}: pass traces "
                                    "written by that model, or --any-model to replay them with its tokenizer anyway")
    return {"models": models, "unstated": unstated, "any_model": any_model}
