"""CSV exports: a step column and one column per metric.

Read: wandb's run-history export (`_step`, `_timestamp`, `_runtime`, metric columns), wandb's
chart export (`Step`, `<run> - <metric>`, `<run> - <metric>__MIN`, `__MAX`: the min/max
columns are dropped and the `<run> - ` prefix removed), TensorBoard's CSV download
(`Wall time`, `Step`, `Value`: one metric, named after the file: the tag part of its
`run-<run>-tag-<tag>.csv` name, so two runs' downloads of a tag compare) and any table with a step
column. Comma-, tab- or semicolon-separated (the one under which the header has a step column;
with `;`, a decimal comma `0,5` reads 0.5), with or without a BOM. Empty cells are missing
values; a cell that is not a number is counted and skipped. A row with more or fewer cells than
the header (an unquoted `0,5`) is skipped whole and counted (ragged_rows): its cells may sit
under the wrong columns; a column named twice in the header is a UserError. Counted too: rows
whose step is no step (non-integer, negative, past int64) and wall times that are not finite
numbers (bad_wall_times).
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs.series import SeriesBuilder, TrainingRun, step_notes, step_problem

STEP_COLUMNS = ("step", "_step", "global_step", "training/global_step", "trainer/global_step", "train/global_step")
WALL_COLUMNS = ("_timestamp", "wall time", "wall_time", "timestamp")
SKIP_COLUMNS = ("_runtime",)


def step_column(header: list[str]) -> int | None:
    low = [h.strip().lower() for h in header]
    for name in STEP_COLUMNS:
        if name in low:
            return low.index(name)
    return None


DELIMITERS = (",", "\t", ";")   # a spreadsheet in a comma-decimal locale writes `;`; pandas' sep="\t" a tab


def delimiter(first: str) -> str | None:
    """The delimiter under which a header line has a step column (None: under none)."""
    for d in DELIMITERS:
        if d not in first:
            continue
        try:
            header = next(csv.reader(io.StringIO(first), delimiter=d))
        except (csv.Error, StopIteration):
            continue
        if step_column(header) is not None:
            return d
    return None


def looks_like_csv(head: bytes) -> bool:
    text = head.decode("utf-8-sig", "replace")
    first = text.splitlines()[0] if text.strip() else ""
    return delimiter(first) is not None


DECIMAL_COMMA = re.compile(r"^[-+]?\d*,\d+(?:[eE][-+]?\d+)?$")


def number(cell: str, delim: str) -> float:
    """A cell's number; `0,5` is 0.5 in a `;`-delimited file (a comma-decimal locale's export)."""
    if delim == ";" and DECIMAL_COMMA.match(cell):
        cell = cell.replace(",", ".")
    return float(cell)


def csv_has_rows(path: Path) -> bool:
    """True when a CSV holds a non-empty line after its header (read line by line: cheap)."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            next(f, None)
            return any(line.strip(" ,;\t\r\n") for line in f)
    except OSError:
        return False


def _metric_names(header: list[str], path: Path) -> dict[int, str]:
    """Column index -> metric name for the metric columns."""
    cols = {}
    for i, h in enumerate(header):
        name = h.strip()
        if name.lower() in STEP_COLUMNS or name.lower() in WALL_COLUMNS or name in SKIP_COLUMNS or not name:
            continue
        if name.endswith(("__MIN", "__MAX")):
            continue
        cols[i] = name
    prefixes = {n.rsplit(" - ", 1)[0] for n in cols.values() if " - " in n}   # a run name may hold " - "
    if prefixes and all(" - " in n for n in cols.values()):
        if len(prefixes) > 1:
            raise UserError(f"{path}: a chart export holding {len(prefixes)} runs ({', '.join(sorted(prefixes)[:3])}"
                            f"...): export one run per file and pass each file")
        cols = {i: n.rsplit(" - ", 1)[1] for i, n in cols.items()}
    if list(cols.values()) == ["Value"]:          # TensorBoard's download: one tag, named by the file
        cols = {i: tensorboard_download(path)[1] for i in cols}
    return cols


TB_DOWNLOAD = re.compile(r"^run-(.+?)-tag-(.+)$")


def tensorboard_download(path: Path) -> tuple[str | None, str]:
    """(run, tag) of TensorBoard's CSV download `run-<run>-tag-<tag>.csv` (a `/` in either became
    `_`): two runs' downloads of one tag share the tag; another file: (None, its stem)."""
    m = TB_DOWNLOAD.match(path.stem)
    return (m.group(1), m.group(2)) if m else (None, path.stem)


def _no_repeated_column(header: list[str], path: Path) -> None:
    """A column named twice: which one a value belongs to cannot be told (a UserError)."""
    seen: dict[str, int] = {}
    for i, h in enumerate(header):
        name = h.strip()
        if name and name in seen:
            raise UserError(f"{path}:1: column {name!r} appears twice in the header (columns {seen[name] + 1} and "
                            f"{i + 1}); keep one of them (delete or rename the other) and rerun")
        seen.setdefault(name, i)


def _wall(row: list[str], wi: int | None, run: TrainingRun, delim: str = ",") -> float | None:
    """The row's wall time; a cell that is not a finite number is counted (bad_wall_times)."""
    cell = row[wi].strip() if wi is not None else ""
    if not cell:
        return None
    try:
        wall = number(cell, delim)
    except ValueError:
        wall = math.nan
    if not math.isfinite(wall):
        run.count("bad_wall_times")
        return None
    return wall


def read_csv(path: Path, label: str) -> TrainingRun:
    run = TrainingRun(path=str(path), format="csv", label=label)
    text = Path(path).read_text(encoding="utf-8-sig", errors="replace")
    delim = delimiter(text.split("\n", 1)[0]) or ","
    reader = csv.reader(io.StringIO(text), delimiter=delim)
    try:
        header = next(reader)
    except StopIteration:
        raise UserError(f"{path}: empty CSV; export the run's history with a step column") from None
    si = step_column(header)
    if si is None:
        raise UserError(f"{path}: no step column (one of {', '.join(STEP_COLUMNS)}); add one, or pass --format for "
                        "another log type")
    _no_repeated_column(header, path)
    low = [h.strip().lower() for h in header]
    wi = next((low.index(w) for w in WALL_COLUMNS if w in low), None)
    cols = _metric_names(header, path)
    builder = SeriesBuilder()
    rows = 0
    ragged_line = None
    for row in reader:
        if not row or all(not c.strip() for c in row):
            continue
        rows += 1
        while len(row) > len(header) and not row[-1].strip():     # a trailing comma: nothing misplaced
            row = row[:-1]
        if len(row) != len(header):        # a ragged row: its cells may sit under the wrong column
            run.count("ragged_rows")
            ragged_line = ragged_line or reader.line_num
            continue
        step = row_step(row[si], run, delim)
        if step is None:
            continue
        wall = _wall(row, wi, run, delim)
        for i, name in cols.items():
            cell = row[i].strip()
            if not cell:
                continue
            try:
                x = number(cell, delim)
            except ValueError:
                run.not_numeric(name, "non_numeric_cells")
                continue
            builder.add(name, step, x, wall)
    builder.build_into(run)
    run.read["rows"] = rows
    if run.counts.get("ragged_rows"):
        run.notes.append(f"{run.counts['ragged_rows']} ragged row(s) with more or fewer cells than the header's "
                         f"{len(header)} (first at line {ragged_line}; an unquoted comma in a cell?): skipped whole, "
                         "as their cells may sit under the wrong columns")
    step_notes(run, "row(s)")
    if run.counts.get("bad_wall_times"):
        run.notes.append(f"{run.counts['bad_wall_times']} wall time(s) ({header[wi].strip()}) not a finite number "
                         "(NaN, inf or text): those rows read without a wall time")
    return run


def row_step(cell: str, run: TrainingRun, delim: str = ",") -> int | None:
    """The step of a row, or None (counted: rows_without_step, or step_problem's kind)."""
    try:
        x = number(cell.strip(), delim)
    except ValueError:
        x = math.nan
    if not math.isfinite(x):
        run.count("rows_without_step")
        return None
    problem = step_problem(x)
    if problem:
        run.count(problem)
        return None
    return int(x)
