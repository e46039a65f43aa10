"""CSV exports: a step column and one column per metric.

Read: wandb's run-history export (`_step`, `_timestamp`, `_runtime`, metric columns), wandb's
chart export (`Step`, `<run> - <metric>`, `<run> - <metric>__MIN`, `__MAX`: the min/max
columns are dropped and the `<run> - ` prefix removed), TensorBoard's CSV download
(`Wall time`, `Step`, `Value`: one metric, named after the file) and any table with a step
column. Empty cells are missing values; a cell that is not a number is counted and skipped.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs.series import SeriesBuilder, TrainingRun

STEP_COLUMNS = ("step", "_step", "global_step", "training/global_step", "trainer/global_step", "train/global_step")
WALL_COLUMNS = ("_timestamp", "wall time", "wall_time", "timestamp")
SKIP_COLUMNS = ("_runtime",)


def step_column(header: list[str]) -> int | None:
    low = [h.strip().lower() for h in header]
    for name in STEP_COLUMNS:
        if name in low:
            return low.index(name)
    return None


def looks_like_csv(head: bytes) -> bool:
    text = head.decode("utf-8-sig", "replace")
    first = text.splitlines()[0] if text.strip() else ""
    if "," not in first:
        return False
    try:
        header = next(csv.reader(io.StringIO(first)))
    except (csv.Error, StopIteration):
        return False
    return step_column(header) is not None


def csv_has_rows(path: Path) -> bool:
    """True when a CSV holds a non-empty line after its header (read line by line: cheap)."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            next(f, None)
            return any(line.strip(" ,\t\r\n") for line in f)
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
    prefixes = {n.split(" - ", 1)[0] for n in cols.values() if " - " in n}
    if prefixes and all(" - " in n for n in cols.values()):
        if len(prefixes) > 1:
            raise UserError(f"{path}: a chart export holding {len(prefixes)} runs ({', '.join(sorted(prefixes)[:3])}"
                            f"...): export one run per file and pass each file")
        cols = {i: n.split(" - ", 1)[1] for i, n in cols.items()}
    if list(cols.values()) == ["Value"]:          # TensorBoard's download: one tag, named by the file
        cols = {i: path.stem for i in cols}
    return cols


def read_csv(path: Path, label: str) -> TrainingRun:
    run = TrainingRun(path=str(path), format="csv", label=label)
    text = Path(path).read_text(encoding="utf-8-sig", errors="replace")
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise UserError(f"{path}: empty CSV; export the run's history with a step column") from None
    si = step_column(header)
    if si is None:
        raise UserError(f"{path}: no step column (one of {', '.join(STEP_COLUMNS)}); add one, or pass --format for "
                        "another log type")
    low = [h.strip().lower() for h in header]
    wi = next((low.index(w) for w in WALL_COLUMNS if w in low), None)
    cols = _metric_names(header, path)
    builder = SeriesBuilder()
    rows = 0
    for row in reader:
        if not row or all(not c.strip() for c in row):
            continue
        rows += 1
        if len(row) != len(header):        # a ragged row: its cells may sit under the wrong column
            run.count("malformed_rows")
            run.count("ignored_cells", max(0, len(row) - len(header)))
            run.count("missing_cells", max(0, len(header) - len(row)))
        step = row_step(row[si] if si < len(row) else "", run)
        if step is None:
            continue
        wall = None
        if wi is not None and wi < len(row):
            try:
                wall = float(row[wi])
            except ValueError:
                wall = None
            if wall is not None and not math.isfinite(wall):
                wall = None
        for i, name in cols.items():
            cell = row[i].strip() if i < len(row) else ""
            if not cell:
                continue
            try:
                x = float(cell)
            except ValueError:
                run.not_numeric(name, "non_numeric_cells")
                continue
            builder.add(name, step, x, wall)
    builder.build_into(run)
    run.read["rows"] = rows
    if run.counts.get("malformed_rows"):
        run.notes.append(f"{run.counts['malformed_rows']} malformed row(s) with more or fewer cells than the header's "
                         f"{len(header)}: {run.counts.get('ignored_cells', 0)} extra cell(s) ignored, "
                         f"{run.counts.get('missing_cells', 0)} missing")
    if run.counts.get("non_integer_steps"):
        run.notes.append(f"{run.counts['non_integer_steps']} row(s) with a non-integer step (e.g. 3.5): skipped, "
                         "not rounded onto a real step")
    return run


def row_step(cell: str, run: TrainingRun) -> int | None:
    """The step of a row, or None (counted: rows_without_step, non_integer_steps)."""
    try:
        x = float(cell)
    except ValueError:
        x = math.nan
    if not math.isfinite(x):
        run.count("rows_without_step")
        return None
    if x != int(x):                        # 3.5 is no step: truncating it would collide with step 3
        run.count("non_integer_steps")
        return None
    return int(x)
