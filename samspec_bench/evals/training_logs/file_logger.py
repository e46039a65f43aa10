"""verl's `file` logger (`trainer.logger=['console','file']`): JSON lines, one per logged step.

What verl writes (verl/utils/tracking.py, class FileLogger, in verl since v0.6.0; read at
volcengine/verl b178a3c, January 2026):
- one line per `Tracking.log(data, step)` call: `{"step": N, "data": {"tag": value, ...}}`, the
  tags as verl names them (`timing_s/gen`, `critic/score/mean`, `perf/throughput`, ...);
- to the file named by $VERL_FILE_LOGGER_PATH, else to
  `$VERL_FILE_LOGGER_ROOT/<project_name>/<experiment_name>.jsonl` ($VERL_FILE_LOGGER_ROOT
  defaults to the working directory);
- opened for writing, not appending: a resumed run starts the file afresh;
- up to verl v0.7 written with `json.dumps` through a buffered text file: NaN and inf come out as
  the non-standard `NaN` / `Infinity` (read as such), and a killed writer can leave a torn last
  line; since January 2026 (after v0.7.0) with orjson (OPT_SERIALIZE_NUMPY) through an unbuffered
  file: orjson writes NaN and inf as `null`, so a null value is a non-finite value whose kind is
  lost (counted as NaN, and as null_values).

Counted, never silent: a torn last line (truncated_lines), a line that is not such an object
(broken_lines), a step that is no step (non_integer_steps, negative_steps, out_of_range_steps: 2.5,
-3, 1e20), a value that is not a number (non_numeric_fields), non-finite values (per tag, as every
reader does).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from samspec_bench.evals.training_logs.series import SeriesBuilder, TrainingRun, step_notes, step_problem


def _record(line: str) -> dict | None:
    """The {"step": int, "data": dict} object of a line, or None."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), dict):
        return None
    step = obj.get("step")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step):
        return None
    return obj


def looks_like_file_logger(head: bytes) -> bool:
    """True when the first complete line of `head` is one of verl's file-logger records."""
    text = head.decode("utf-8", "replace")
    lines = text.split("\n")
    complete = lines[:-1] if len(lines) > 1 else lines
    first = next((ln for ln in complete if ln.strip()), None)
    return first is not None and _record(first) is not None


def read_file_logger(path: Path, label: str) -> TrainingRun:
    run = TrainingRun(path=str(path), format="jsonl", label=label)
    raw = Path(path).read_bytes()
    lines = raw.split(b"\n")
    torn_tail = lines[-1].strip() != b""         # no newline after the last record
    builder = SeriesBuilder()
    records = 0
    for k, b in enumerate(lines):
        if not b.strip():
            continue
        obj = _record(b.decode("utf-8", "replace"))
        if obj is None:
            run.count("truncated_lines" if torn_tail and k == len(lines) - 1 else "broken_lines")
            continue
        records += 1
        problem = step_problem(obj["step"])     # 2.5 truncated would collide with step 2; -3; 1e20
        if problem:
            run.count(problem)
            continue
        step = int(obj["step"])
        for tag, v in obj["data"].items():
            if v is None:                        # orjson's NaN / inf
                run.count("null_values")
                builder.add(str(tag), step, math.nan)
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                run.not_numeric(str(tag))
            else:
                builder.add(str(tag), step, float(v))
    builder.build_into(run)
    run.read["records"] = records
    if run.counts.get("truncated_lines"):
        run.notes.append("the last line is torn (the writer stopped mid-line): its step was not read")
    if run.counts.get("broken_lines"):
        run.notes.append(f"{run.counts['broken_lines']} line(s) not a {{\"step\": N, \"data\": {{...}}}} record: skipped")
    step_notes(run, "record(s)")
    if run.counts.get("null_values"):
        run.notes.append(f"{run.counts['null_values']} null value(s): verl's orjson writes NaN and inf as null; "
                         "counted as non-finite (shown as NaN)")
    return run
