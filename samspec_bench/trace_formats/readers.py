"""Reading trace files of every format as `data.TraceRecord`s (`read_any`), with each
response's tool output marked (`tool_turns`) and verl's validation generations marked
(`validation`); the readers of verl dumps, lm-eval samples and plain JSONL."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Iterable, Iterator

from samspec_bench.data import SKIP_HINT, OnError, TraceRecord, TraceSet, read_traces
from samspec_bench.errors import UserError
from samspec_bench.trace_formats.files import FORMAT_FIELDS, VERL_STEP_FILE, blank_file, expand, unique_files
from samspec_bench.trace_formats.step_folders import merged_steps_line, one_file_per_folder_step, steps_in_folders
from samspec_bench.trace_formats.tool_turns import find_tool_spans
from samspec_bench.trace_formats.validation import (SHAPE_REASON, folder_reason, has_reward, split_validation,
                                                    validation_file, validation_row)


class BadLine(Exception):
    """A line a reader cannot use; the message says why."""


def read_any(paths: str | Path | Iterable[str | Path], fmt: str | None = None,
             on_error: OnError = "stop") -> tuple[TraceSet, dict[str, str]]:
    """Every record of `paths` (files or directories) in one TraceSet, and each file's format.
    fmt: the command's --trace-format, or None where it has no such option (`files.expand`).
    Records carry the character spans of their responses' tool output (`TraceRecord.tool_spans`)
    and why they are validation generations (`TraceRecord.validation`), where they are."""
    if on_error not in ("stop", "skip"):
        raise UserError(f"on_error {on_error!r} is not valid: use 'stop' or 'skip'")
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not items:
        raise UserError("no trace files given: pass at least one JSONL file or a directory")
    files: list[tuple[Path, str]] = []
    for x in items:
        files += expand(x, fmt)
    unique_files(files)
    formats = {str(f): kind for f, kind in files}
    traces = TraceSet(records=[], on_error=on_error)
    native = [f for f, kind in files if kind == "samspec"]
    if native:
        got = read_traces(native, on_error=on_error)
        traces.records += got.records
        traces.skipped += got.skipped
    state: dict[str, dict] = {"lm-eval labels": _lm_eval_labels([f for f, kind in files if kind == "lm-eval"])}
    for f, kind in files:
        if kind == "samspec":
            continue
        reader = READERS[kind]
        rows = 0
        for lineno, row in _json_lines(f, traces):
            rows += 1
            try:
                rec = reader(row, f, lineno, state)
            except BadLine as e:
                _reject(traces, f, lineno, str(e))
                continue
            if rec is not None:
                traces.records.extend(rec)
        if kind == "verl" and not rows and blank_file(f):   # an empty batch's dump: said, as a line skipped is
            traces.skipped.append((f, 1, "an RL step with no responses (verl writes an empty batch as one blank line)"))
    if not traces.records:
        detail = f" ({len(traces.skipped)} bad lines skipped)" if traces.skipped else ""
        raise UserError(f"no usable traces in {', '.join(str(x) for x in items)}{detail}: pass {FORMAT_FIELDS}")
    whole = {f for f, counts in state.get("verl lines", {}).items() if validation_file(*counts)}
    traces.records = [_marked(r, r.source in whole) for r in traces.records]
    one_file_per_folder_step([r for r in traces.records if not r.validation], formats)
    return traces, formats


def read_rl_steps(paths: str | Path | Iterable[str | Path], on_error: OnError = "stop",
                  include_validation: bool = False, counts: dict | None = None) -> tuple[TraceSet, str | None]:
    """Traces for a command that replays the responses of RL steps (the rollout simulation),
    read as `read_any` reads them (tool output marked), and a note to print (None: nothing to
    say). verl validation generations are handled as accept handles them (split_validation):
    left out beside rollouts, read without steps alone, read as RL steps with
    `include_validation` (--history-includes-validation); `counts["validation"]` records which
    (validation_line says it; an option that found nothing to include is recorded too). One
    step in the step files of several folders is merged (`step_folders`) and the lines skipped
    (an empty step file) are said in the note and counted into `counts` for the result JSON
    (merged_steps, merged_step_folders, skipped_lines, skipped)."""
    traces, formats = read_any(paths, on_error=on_error)
    traces, val = split_validation(traces, include_validation)
    if val is None and include_validation:   # the option read, with nothing to include: said
        val = {"responses": 0, "files": {}, "rollout_responses": len(traces.records), "excluded": 0, "included": True,
               "handling": "none among the traces, so --history-includes-validation includes nothing"}
    merged = steps_in_folders(traces.records, formats)
    if counts is not None:
        counts.update(validation=val, merged_steps=(merged or {}).get("merged_steps", 0),
                      merged_step_folders=(merged or {}).get("merged", []), **skipped_counts(traces.skipped))
    return traces, "; ".join(n for n in (merged_steps_line(merged), skipped_line(traces.skipped)) if n) or None


def skipped_counts(skipped: list[tuple[Path, int, str]]) -> dict:
    """The lines skipped, as the result JSON keeps them (skipped_lines, skipped)."""
    return {"skipped_lines": len(skipped),
            "skipped": [{"file": str(f), "line": ln, "reason": why} for f, ln, why in skipped]}


def skipped_line(skipped: list[tuple[Path, int, str]]) -> str | None:
    """What was read and not replayed (a verl step file with no responses), in one line; None: nothing."""
    if not skipped:
        return None
    shown = ", ".join(f"{f}:{ln} ({why})" for f, ln, why in skipped[:3])
    return f"{len(skipped)} line(s) skipped: {shown}{f' and {len(skipped) - 3} more' if len(skipped) > 3 else ''}"


def _marked(r: TraceRecord, validation_file: bool = False) -> TraceRecord:
    """The record with its tool output spans and its file's or folder's validation verdict added
    (validation_file: its verl dump file is validation generations whole)."""
    spans = find_tool_spans(r.response) if r.response else ()
    why = r.validation or (SHAPE_REASON if validation_file else None) or folder_reason(r.source)
    if not spans and why == r.validation:
        return r
    return dataclasses.replace(r, tool_spans=spans, validation=why)


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


def _read_verl(row: dict, file: Path, line: int, state: dict) -> list[TraceRecord]:
    shaped = validation_row(row)
    counts = state.setdefault("verl lines", {}).setdefault(file, [0, 0, 0])   # lines, with a 'reward', shaped
    counts[0], counts[1], counts[2] = counts[0] + 1, counts[1] + has_reward(row), counts[2] + shaped
    need = "'input' and 'output' strings (verl's rollout dump)"
    prompt, response = _text(row, "input", "verl", need), _text(row, "output", "verl", need)
    if not response:
        raise BadLine("the response ('output') is empty")
    m = VERL_STEP_FILE.match(file.name)
    field, named = row.get("step"), (int(m.group(1)) if m else None)
    if field is not None and type(field) is not int:
        raise BadLine(f"'step' is {field!r}, not an integer (verl writes the RL step there)")
    if field is not None and named is not None and field != named:
        # verl writes {step}.jsonl with the same step in every line: one of the two was changed
        raise BadLine(f"'step' is {field} but the file is named for step {named} (verl writes both from one step)")
    step = field if field is not None else named
    acc = row.get("acc")
    correct = acc if isinstance(acc, bool) else None
    return [TraceRecord(id=f"{step}:{line}", group=prompt_group(prompt), source=file, line=line, prompt=prompt,
                        response=response, dataset=row.get("data_source") if isinstance(row.get("data_source"), str)
                        else None, correct=correct, step=step,
                        validation=SHAPE_REASON if shaped else None)]


def _lm_eval_prompt(row: dict) -> str | None:
    """The prompt of a generate_until request: its arguments are (prompt, generation kwargs);
    a loglikelihood_rolling request's (text,) holds no prompt, its 'resps' a log-likelihood."""
    args = row.get("arguments")
    if isinstance(args, dict):   # lm-eval >= 0.4.3: {"gen_args_0": {"arg_0": prompt, "arg_1": gen_kwargs}}
        first = args.get("gen_args_0")
        first = [first.get("arg_0"), first.get("arg_1")] if isinstance(first, dict) else None
    else:                        # older versions: [[prompt, gen_kwargs], ...]
        first = args[0] if isinstance(args, list) and args and isinstance(args[0], list) else None
    if not first or len(first) < 2 or not isinstance(first[1], dict):
        return None
    return first[0]


def _task_date(file: Path) -> tuple[str, str]:
    """(task, date) of lm-eval's samples_<task>_<date>.jsonl; its results file is results_<date>.json."""
    task, _, date = file.stem.removeprefix("samples_").rpartition("_")
    return (task, date) if task else (date, "")


def _lm_eval_labels(files: list[Path]) -> dict[Path, str]:
    """The name of each samples file's documents: its task, or where several files hold one task
    (runs of other dates, other folders) the task and the file's date, so that every run's
    documents are groups of their own."""
    by_task: dict[str, list[Path]] = {}
    for f in files:
        by_task.setdefault(_task_date(f)[0], []).append(f)
    labels = {}
    for task, fs in by_task.items():
        names = [task] if len(fs) == 1 else [f"{task}@{_task_date(f)[1] or f.parent.name}" for f in fs]
        labels.update({f: n if names.count(n) == 1 else f"{n}#{i + 1}" for i, (f, n) in enumerate(zip(fs, names))})
    return labels


def _lm_eval_model(file: Path, state: dict) -> str | None:
    """The model of a samples file: model_name of the results file of its run (results_<date>.json,
    or <name>_<date>.json where --output_path named a .json file: lm-eval >= 0.4.9,
    EvaluationTracker.save_results_aggregated), else of the newest results_*.json beside it."""
    models = state.setdefault("lm-eval models", {})
    if file not in models:
        date = _task_date(file)[1]
        candidates = [file.parent / f"results_{date}.json", *sorted(file.parent.glob(f"*_{date}.json"))] if date else []
        models[file] = next((m for p in candidates + sorted(file.parent.glob("results_*.json"), reverse=True)
                             if (m := _results_model(p))), None)
    return models[file]


def _results_model(path: Path) -> str | None:
    try:
        model = json.loads(path.read_text(encoding="utf-8")).get("model_name")
    except (OSError, ValueError, AttributeError):
        return None
    return model if isinstance(model, str) and model else None


def _read_lm_eval(row: dict, file: Path, line: int, state: dict) -> list[TraceRecord] | None:
    prompt = _lm_eval_prompt(row)
    if not isinstance(prompt, str) or "doc_id" not in row:
        raise BadLine("an lm-eval samples line needs 'doc_id' and 'arguments' with the prompt and the generation "
                      "kwargs (gen_args_0.arg_0, arg_1); generation tasks only (--log_samples of generate_until, not "
                      "loglikelihood or perplexity tasks)")
    resps = row.get("resps")
    if isinstance(resps, list) and resps and isinstance(resps[0], list):
        resps = resps[0]         # one request per document for generation tasks: its repeats
    if not isinstance(resps, list) or not resps or not all(isinstance(r, str) for r in resps):
        raise BadLine("'resps' is not a list of response strings (a generate_until task's samples)")
    empty = [i for i, text in enumerate(resps) if not text]
    if empty:
        raise BadLine(f"the response is empty ({len(empty)} of the {len(resps)} in 'resps', the first at index "
                      f"{empty[0]})")
    doc = str(row["doc_id"])
    seen = state.setdefault("lm-eval docs", {}).setdefault(file, {})   # doc_id -> (line, what it holds)
    held = hash((prompt, tuple(resps)))
    if doc in seen:
        if seen[doc][1] == held:   # the same document under another filter: the same responses, read once
            return None
        raise BadLine(f"doc_id {doc} repeats line {seen[doc][0]} with other responses (lm-eval writes one line per "
                      "document and filter, each with the document's responses): keep one run per samples file")
    seen[doc] = (line, held)
    task = _task_date(file)[0]
    group = f"{state.get('lm-eval labels', {}).get(file, task)}:{doc}"
    model = _lm_eval_model(file, state)
    return [TraceRecord(id=f"{group}:{r}", group=group, source=file, line=line, prompt=prompt, response=text,
                        model=model, dataset=task, sub=r if len(resps) > 1 else None)
            for r, text in enumerate(resps)]


def _read_plain(row: dict, file: Path, line: int, _state: dict) -> list[TraceRecord]:
    need = "'prompt' and 'response' strings"
    prompt, response = _text(row, "prompt", "plain", need), _text(row, "response", "plain", need)
    if not response:
        raise BadLine("the response is empty")
    name = {k: _plain_field(row, k, (str, int), "a string or an integer") for k in ("id", "group", "model", "dataset")}
    step = _plain_field(row, "step", (int,), "an integer (the RL step)")
    return [TraceRecord(id=name["id"] or f"{file.stem}:{line}", group=name["group"] or prompt_group(prompt),
                        source=file, line=line, prompt=prompt, response=response, model=name["model"],
                        dataset=name["dataset"], system=_plain_field(row, "system", (str,), "a string or null"),
                        step=int(step) if step is not None else None)]


def _plain_field(row: dict, key: str, kinds: tuple[type, ...], use: str) -> str | None:
    """An optional field of a plain line as text (None: absent or null); another type is refused,
    not dropped: a system prompt, group or step left out changes what is measured."""
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, kinds) and not isinstance(value, bool):
        return str(value)
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    if key == "step":
        raise BadLine(f"'step' is {shown}, not an integer (the RL step, or null)")
    what = "the system prompt" if key == "system" else f"'{key}'"
    raise BadLine(f"'{key}' is {type(value).__name__} ({shown}): {what} must be {use}")


READERS = {"verl": _read_verl, "lm-eval": _read_lm_eval, "plain": _read_plain}
