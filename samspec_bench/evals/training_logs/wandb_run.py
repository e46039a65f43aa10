"""wandb run folders (`wandb/run-<date>-<id>/`, or its `files/` folder).

What a folder holds and what is read, best first:
- `run-<id>.wandb`: the binary log with every `wandb.log` call (leveldb's log format holding
  protobuf records), read directly: no wandb package needed (recent wandb versions no longer
  ship a Python reader for it).
- `files/wandb-history.jsonl` (older wandb versions): one JSON object per step, read directly.
- `files/output.log`: the captured console, read as a verl console log (lines cut at 4096
  bytes: see console.py). It fills in what the history lacks (or is all there is).
A history value wins over the console's for the same tag and step; the console's values there are
counted in a note, as the same as the history's or differing (the tags and a first example named).
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from pathlib import Path

import numpy as np

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs.console import WANDB_LINE_CUT, read_console
from samspec_bench.evals.training_logs.protowire import Bad, fields, signed64, zigzag
from samspec_bench.evals.training_logs.series import Series, SeriesBuilder, TrainingRun, step_notes, step_problem


def run_files(folder: Path) -> dict[str, Path | None]:
    """The files of a wandb run folder that this reader uses (None where absent)."""
    files = folder / "files" if (folder / "files").is_dir() else folder
    root = folder if files != folder else (folder.parent if folder.name == "files" else folder)
    binary = sorted(root.glob("*.wandb"))
    hist = files / "wandb-history.jsonl"
    out = files / "output.log"
    return {"binary": binary[0] if binary else None, "history": hist if hist.is_file() else None,
            "console": out if out.is_file() else None}


def is_wandb_folder(folder: Path) -> bool:
    return folder.is_dir() and any(v is not None for v in run_files(folder).values())


_NOT_JSON = object()      # a value_json that did not parse: not a number (never a null)


def _flatten(prefix: str, value, out: dict, run: TrainingRun) -> None:
    """Numbers under their (nested) keys into `out`; what is not one is counted on the run:
    a null (null_values), a string, bool or list (non_numeric_fields), a media object
    (non_scalar_values)."""
    if isinstance(value, dict):
        if "_type" in value:          # a media object (table, image, histogram): not a scalar
            run.count("non_scalar_values")
            return
        for k, v in value.items():
            _flatten(f"{prefix}/{k}" if prefix else str(k), v, out, run)
    elif value is None:
        run.not_numeric(prefix, "null_values")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix] = float(value)
    else:
        run.not_numeric(prefix)


def _add_row(builder: SeriesBuilder, row: dict, run: TrainingRun) -> None:
    step = row.get("_step")
    if not isinstance(step, (int, float)) or isinstance(step, bool) or not math.isfinite(step):
        run.count("history_rows_without_step")
        return
    problem = step_problem(step)      # 7.5 truncated would collide with step 7; -3; 1e20
    if problem:
        run.count(problem)
        return
    wall = row.get("_timestamp")
    wall = float(wall) if isinstance(wall, (int, float)) and math.isfinite(wall) else None
    flat: dict[str, float] = {}
    for k, v in row.items():
        if not str(k).startswith("_"):
            _flatten(str(k), v, flat, run)
    for k, x in flat.items():
        builder.add(k, int(step), x, wall)


def history_notes(run: TrainingRun) -> None:
    """What the history rows held that was not a number, said on the run."""
    c = run.counts
    if c.get("null_values"):
        run.notes.append(f"{c['null_values']} null value(s) in the history: no number to read, skipped")
    if c.get("non_numeric_fields"):
        run.notes.append(f"{c['non_numeric_fields']} history value(s) not a number (strings, bools, lists): skipped")
    step_notes(run, "history row(s)")


def read_history_jsonl(path: Path, run: TrainingRun, builder: SeriesBuilder) -> int:
    rows = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                run.count("broken_history_lines")
                continue
            if isinstance(row, dict):
                rows += 1
                _add_row(builder, row, run)
    return rows


WANDB_IDENT = b":W&B"
BLOCK = 32768           # the leveldb log format's block size, counted from the file's start
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def iter_log_records(blob: bytes, run: TrainingRun):
    """The records of a .wandb file: leveldb's log format after a 7-byte header (":W&B",
    magic, version); each chunk is `u32 crc32(type + data) | u16 length | u8 type | data`,
    chunks never cross a 32 KiB block (a block's last < 7 bytes are padding) and a record
    longer than a block is split FIRST, MIDDLE..., LAST. A chunk whose CRC fails is counted
    and reading resumes at the next block, as leveldb's reader does."""
    pos, n = len(WANDB_IDENT) + 3, len(blob)
    pending: list[bytes] | None = None
    while pos + 7 <= n:
        left = BLOCK - pos % BLOCK
        if left < 7:
            pos += left
            continue
        crc, length, kind = struct.unpack_from("<IHB", blob, pos)
        if crc == 0 and length == 0 and kind == 0:       # zero fill up to the block's end
            pos += left
            continue
        data = blob[pos + 7:pos + 7 + length]
        if len(data) < length:
            run.count("truncated_records")
            return
        if zlib.crc32(bytes([kind]) + data) != crc or kind not in (FULL, FIRST, MIDDLE, LAST):
            run.count("corrupt_records")
            pending = None
            pos += left
            continue
        pos += 7 + length
        if kind == FULL:
            pending = None
            yield data
        elif kind == FIRST:
            pending = [data]
        elif pending is None:                            # a MIDDLE or LAST without its FIRST
            run.count("corrupt_records")
        elif kind == MIDDLE:
            pending.append(data)
        else:
            yield b"".join(pending + [data])
            pending = None


def _history_row(buf: bytes) -> dict | None:
    """wandb_internal.proto: Record.history = 2 -> HistoryRecord {item = 1, step = 2 {num = 1}};
    HistoryItem {key = 1, nested_key = 2, integer = 5 (sint64), number = 6 (double),
    json = 8, value_json = 16}. None for other records."""
    hist = next((v for num, wt, v in fields(buf) if num == 2 and wt == 2), None)
    if hist is None:
        return None
    row: dict = {}
    for num, wt, val in fields(hist):
        if num == 2 and wt == 2:
            step = next((v for n, w, v in fields(val) if n == 1 and w == 0), None)
            if step is not None:
                row.setdefault("_step", signed64(step))
        elif num == 1 and wt == 2:
            key, nested, value = None, [], None
            for inum, iwt, ival in fields(val):
                if inum == 1 and iwt == 2:
                    key = ival.decode("utf-8", "replace")
                elif inum == 2 and iwt == 2:
                    nested.append(ival.decode("utf-8", "replace"))
                elif inum == 6 and iwt == 1:
                    value = struct.unpack("<d", ival)[0]
                elif inum == 5 and iwt == 0:
                    value = zigzag(ival)
                elif inum in (8, 16) and iwt == 2:
                    try:
                        value = json.loads(ival)
                    except ValueError:
                        value = _NOT_JSON
            name = key or "/".join(nested)
            if name:
                row[name] = value
    return row


def read_wandb_log(path: Path, run: TrainingRun, builder: SeriesBuilder) -> int:
    """History rows of a run-<id>.wandb file (read directly: no wandb package needed)."""
    blob = Path(path).read_bytes()
    if not blob.startswith(WANDB_IDENT):
        run.notes.append(f"{path.name}: not a .wandb log (no ':W&B' header); skipped")
        return 0
    rows = 0
    for data in iter_log_records(blob, run):
        try:
            row = _history_row(data)
        except (Bad, struct.error):
            run.count("undecodable_records")
            continue
        if row is not None:
            rows += 1
            _add_row(builder, row, run)
    return rows


def read_wandb(folder: Path, label: str, given: Path | None = None) -> TrainingRun:
    """The run of a wandb run folder; `given`: the file of it the user passed (read through its
    folder), which the run's path and every message name."""
    files = run_files(folder)
    where = f"{given} (read through its folder {folder})" if given is not None else str(folder)
    if all(v is None for v in files.values()):
        raise UserError(f"{where}: not a wandb run folder (no run-*.wandb, files/wandb-history.jsonl or "
                        "files/output.log); pass wandb/run-<date>-<id>/")
    run = TrainingRun(path=str(given if given is not None else folder), format="wandb", label=label)
    builder = SeriesBuilder()
    rows = 0
    if files["binary"] is not None:
        rows = read_wandb_log(files["binary"], run, builder)
        run.read["history_rows"] = rows
    if rows == 0 and files["history"] is not None:
        rows = read_history_jsonl(files["history"], run, builder)
        run.read["history_rows"] = rows
    history_notes(run)       # before the console's counts join the same kinds
    held = builder.steps() if rows else set()
    builder.build_into(run)
    if files["console"] is not None:
        con = read_console(files["console"], label)
        run.read["step_lines"] = con.read.get("step_lines", 0)
        _history_covers_cuts(con, held)
        for kind, n in con.counts.items():
            run.count(kind, n)
        for tag, n in con.non_numeric.items():
            run.non_numeric[tag] = run.non_numeric.get(tag, 0) + n
        run.notes.extend(con.notes)
        _merge(run, con)
    if not run.series:
        raise UserError(f"{where}: a wandb run folder with no scalars this reader can use "
                        f"({'no history rows in ' + files['binary'].name if files['binary'] else 'no history'}"
                        f"{', console log without step lines' if files['console'] else ''})")
    return run


def _history_covers_cuts(con: TrainingRun, held: set[int]) -> None:
    """The console's lines cut at 4096 bytes cost nothing at steps the history holds (its values
    win there): those are taken off the console's counts and its note says so."""
    covered = [s for s in con.cut_steps if s in held]
    if not covered:
        return
    for kind in ("truncated_lines", "dropped_fields"):
        con.counts[kind] -= len(covered)
        if not con.counts[kind]:
            del con.counts[kind]
    cut, left = len(con.cut_steps), len(con.cut_steps) - len(covered)
    con.notes = [n for n in con.notes if not n.startswith(f"{cut} step line(s) cut at {WANDB_LINE_CUT} bytes")]
    con.notes.append(f"{cut} step line(s) of output.log cut at {WANDB_LINE_CUT} bytes (wandb's console capture): "
                     f"{len(covered)} at steps the history holds, read from it (nothing lost)"
                     + (f"; {left} at steps it lacks: the cut field was dropped and the keys after it are absent "
                        "there" if left else ""))


def _same(history: np.ndarray, console: np.ndarray, decimals: int | None) -> np.ndarray:
    """Whether console values repeat the history's: equal up to a float32 metric's repr (the
    history holds it widened to float64), or to the rounding of a console printed with N decimals."""
    atol = 0.5 * 10.0 ** -decimals * (1 + 1e-9) if decimals else 0.0
    return np.isclose(console, history, rtol=1e-6, atol=atol)


def _overlap_note(run: TrainingRun, overlap: dict[str, tuple[int, int, str | None]]) -> None:
    """Says how many console points the history's values won over, and which differed."""
    total = sum(n for n, _, _ in overlap.values())
    if not total:
        return
    differ = {t: (d, ex) for t, (_, d, ex) in overlap.items() if d}
    n_diff = sum(d for d, _ in differ.values())
    text = (f"{total} value(s) of output.log at steps the history also holds: the history's kept; "
            f"{total - n_diff} the same as the history's")
    if differ:
        worst = sorted(differ.items(), key=lambda kv: (-kv[1][0], kv[0]))
        shown = "; ".join(f"{t}: {d} ({ex})" for t, (d, ex) in worst[:4])
        more = f"; and {len(worst) - 4} more tag(s)" if len(worst) > 4 else ""
        text += f", {n_diff} differ ({shown}{more})"
    run.notes.append(text)


def _merge(run: TrainingRun, con: TrainingRun) -> None:
    """Console points for the tags and steps the history lacks (and its non-finite counts for
    tags the history has none of); those at steps the history holds are compared with its values
    and said in a note."""
    for tag, nf in con.non_finite.items():
        if tag not in run.non_finite:
            run.non_finite[tag] = nf
            run.non_finite_steps[tag] = con.non_finite_steps[tag]
    overlap: dict[str, tuple[int, int, str | None]] = {}    # tag -> (points, differing, first difference)
    for tag, s in con.series.items():
        have = run.series.get(tag)
        if have is None:
            run.series[tag] = s
            continue
        both = np.isin(s.steps, have.steps)
        if both.any():
            hist, cons = have.at(s.steps[both]), s.values[both]
            diff = np.flatnonzero(~_same(hist, cons, con.read.get("decimals")))
            ex = (f"first at step {int(s.steps[both][diff[0]])}: history {float(hist[diff[0]])!r}, "
                  f"console {float(cons[diff[0]])!r}") if diff.size else None
            overlap[tag] = (int(both.sum()), int(diff.size), ex)
        extra = ~both
        if not extra.any():
            continue
        steps = np.concatenate([have.steps, s.steps[extra]])
        vals = np.concatenate([have.values, s.values[extra]])
        order = np.argsort(steps, kind="stable")
        run.series[tag] = Series(steps[order], vals[order], None)
    _overlap_note(run, overlap)
