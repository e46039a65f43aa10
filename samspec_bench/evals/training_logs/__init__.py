"""Training logs of RL runs (what verl writes) as scalar curves: `load_run(path)` ->
`TrainingRun` (tag -> Series of step, value).

Formats (detected; `format=` forces one):
- tensorboard: an event file (`*.tfevents.*`) or a folder holding them (read without
  TensorFlow: tensorboard.py);
- console: verl's console log, current and older formats (console.py);
- wandb: a wandb run folder (wandb_run.py);
- csv: a CSV export with a step column (csv_export.py).

A file in no known format is a UserError naming it; damaged parts of a known format (a corrupt
TensorBoard record, a line cut by wandb's capture) are skipped and counted on the run.
"""

from __future__ import annotations

from pathlib import Path

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs.console import looks_like_console, read_console
from samspec_bench.evals.training_logs.damage import lost_points, lost_text
from samspec_bench.evals.training_logs.csv_export import looks_like_csv, read_csv
from samspec_bench.evals.training_logs.series import Series, SeriesBuilder, TrainingRun
from samspec_bench.evals.training_logs.tensorboard import (EventScalars, event_files, looks_like_event_file,
                                                           read_event_file)
from samspec_bench.evals.training_logs.wandb_run import is_wandb_folder, read_wandb

FORMATS = ("tensorboard", "console", "wandb", "csv")
SNIFF_BYTES = 1 << 18
KNOWN = "a TensorBoard event file or folder, a verl console log, a wandb run folder or a CSV export with a step column"


def default_label(path: Path) -> str:
    """A short name for a run: the event file's prefix, the log's stem, the folder's name."""
    name = path.name
    if "tfevents" in name:
        prefix = name.split(".events.out.tfevents")[0].split("events.out.tfevents")[0].rstrip(".")
        return prefix or path.parent.name or name
    if path.is_dir() and path.name == "files":
        return path.parent.name
    for suffix in (".output.log", ".log", ".csv", ".txt", ".jsonl", ".wandb"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def detect_format(path: Path) -> str:
    """The format of a run (file or folder); a UserError when it is none of FORMATS."""
    if not path.exists():
        raise UserError(f"{path}: no such file or folder; pass a training log ({KNOWN})")
    if path.is_dir():
        if event_files(path):
            return "tensorboard"
        if is_wandb_folder(path):
            return "wandb"
        raise UserError(f"{path}: a folder with no TensorBoard event files and not a wandb run folder; pass "
                        f"{KNOWN}")
    if "tfevents" in path.name or looks_like_event_file(path):
        return "tensorboard"
    if path.suffix == ".wandb" or path.name == "wandb-history.jsonl":
        return "wandb"
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    if b"\x00" not in head[:4096]:
        if looks_like_csv(head):
            return "csv"
        if looks_like_console(head):
            return "console"
    raise UserError(f"{path}: not a known training log format; pass {KNOWN}, or force one with "
                    f"--format ({', '.join(FORMATS)})")


def _one_run(path: Path, files: list[Path]) -> None:
    """Event files of one run share a folder and a name prefix (a restarted run adds files with
    later timestamps); several folders or prefixes are several runs: a UserError."""
    groups = sorted({(f.parent.as_posix(), f.name.split("events.out.tfevents")[0]) for f in files})
    if len(groups) > 1:
        shown = ", ".join(str(Path(d) / (pre + "*")) if pre else d for d, pre in groups[:4])
        raise UserError(f"{path}: holds {len(groups)} TensorBoard runs ({shown}{', ...' if len(groups) > 4 else ''}); "
                        "pass each run's folder or event file as its own argument")


def read_tensorboard(path: Path, label: str) -> TrainingRun:
    files = event_files(path) if path.is_dir() else [path]
    if not files:
        raise UserError(f"{path}: no TensorBoard event files (*.tfevents.*) in it")
    _one_run(path, files)
    scalars = EventScalars()
    for f in files:
        read_event_file(f, scalars)
    run = TrainingRun(path=str(path), format="tensorboard", label=label)
    builder = SeriesBuilder()
    for tag, pts in scalars.points.items():
        for step, value, wall in pts:
            builder.add(tag, step, value, wall)
    builder.build_into(run)
    st = scalars.stats
    run.read.update({"files": len(files), "records": st.records})
    run.count("corrupt_records", st.corrupt)
    run.count("truncated_records", st.truncated_tail)
    run.count("undecodable_records", st.undecodable)
    run.count("skipped_bytes", st.skipped_bytes)
    lost = lost_points({t: [p[0] for p in pts] for t, pts in scalars.points.items()}, scalars.windows)
    run.count("lost_points", sum(len(t) for t in lost.values()))
    run.count("steps_lost", len(lost))
    if st.corrupt or st.truncated_tail or st.undecodable:
        run.notes.append(f"{st.corrupt} corrupt (CRC mismatch), {st.truncated_tail} truncated and "
                         f"{st.undecodable} undecodable record(s) skipped ({st.skipped_bytes} bytes passed over, "
                         f"reading resumed after each): {lost_text(lost)}"
                         + ("; damage before a file's first intact record: the points it held are not counted"
                            if any(before is None for before, _ in scalars.windows) else ""))
    if st.records == 0:
        raise UserError(f"{path}: no readable TensorBoard record (the file is empty or damaged from its first "
                        "record); pass an intact event file")
    return run


def load_run(path: str | Path, format: str | None = None, label: str | None = None) -> TrainingRun:
    """Read one run. `format` forces a reader (one of FORMATS)."""
    p = Path(path)
    if format is not None and format not in FORMATS:
        raise UserError(f"--format {format!r}: use one of {', '.join(FORMATS)}")
    if not p.exists():
        raise UserError(f"{path}: no such file or folder; pass a training log ({KNOWN})")
    fmt = format or detect_format(p)
    label = label or default_label(p)
    if fmt == "tensorboard":
        return read_tensorboard(p, label)
    if fmt == "wandb":
        folder = p if p.is_dir() else p.parent
        return read_wandb(folder, label)
    if p.is_dir():
        raise UserError(f"{path}: --format {fmt} reads a file; pass the log file itself")
    if fmt == "csv":
        return read_csv(p, label)
    run = read_console(p, label)
    if not run.read.get("step_lines"):
        raise UserError(f"{path}: no verl step lines (`step:N - key:value - ...`) in it; pass a verl console log "
                        "or another --format")
    return run


__all__ = ["FORMATS", "Series", "SeriesBuilder", "TrainingRun", "load_run", "detect_format", "default_label",
           "read_tensorboard", "read_console", "read_csv", "read_wandb"]
