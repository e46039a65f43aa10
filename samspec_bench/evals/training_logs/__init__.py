"""Training logs of RL runs (what verl writes) as scalar curves: `load_run(path)` ->
`TrainingRun` (tag -> Series of step, value), and `expand_runs(path)`: a parent folder of
several runs as those runs.

Formats (detected; `format=` forces one):
- tensorboard: an event file (`*.tfevents.*`) or a folder holding them (read without
  TensorFlow: tensorboard.py, tensorboard_run.py);
- console: verl's console log, current and older formats (console.py);
- jsonl: verl's `file` logger, one `{"step": N, "data": {...}}` a line (file_logger.py);
- wandb: a wandb run folder (wandb_run.py);
- csv: a CSV export with a step column (csv_export.py).
A folder holding one log file (a verl output folder with its log beside `.hydra/`) reads that
file (runs_folder.py). Each run's GPU count, where the log tells it, is on `run.setup`
(run_setup.py).

A file in no known format is a UserError naming it; damaged parts of a known format (a corrupt
TensorBoard record, a line cut by wandb's capture, a torn JSONL line) are skipped and counted on
the run.
"""

from __future__ import annotations

from pathlib import Path

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs.console import read_console
from samspec_bench.evals.training_logs.csv_export import read_csv
from samspec_bench.evals.training_logs.file_logger import read_file_logger
from samspec_bench.evals.training_logs.formats import FORMATS, KNOWN, default_label, file_format
from samspec_bench.evals.training_logs.run_setup import read_setup
from samspec_bench.evals.training_logs.runs_folder import expand_runs, lone_log
from samspec_bench.evals.training_logs.series import Series, SeriesBuilder, TrainingRun, replaced_text
from samspec_bench.evals.training_logs.tensorboard import event_files
from samspec_bench.evals.training_logs.tensorboard_run import read_tensorboard
from samspec_bench.evals.training_logs.wandb_run import is_wandb_folder, read_wandb


def detect_format(path: Path) -> str:
    """The format of a run (file or folder); a UserError when it is none of FORMATS."""
    if not path.exists():
        raise UserError(f"{path}: no such file or folder; pass a training log ({KNOWN})")
    if path.is_dir():
        if event_files(path):
            return "tensorboard"
        if is_wandb_folder(path):
            return "wandb"
        one = lone_log(path)
        if one is not None:
            return detect_format(one)
        raise UserError(f"{path}: a folder with no TensorBoard event files, not a wandb run folder and not holding "
                        f"one log file; pass {KNOWN}")
    fmt = file_format(path)
    if fmt is None:
        raise UserError(f"{path}: not a known training log format; pass {KNOWN}, or force one with "
                        f"--format ({', '.join(FORMATS)})")
    return fmt


def _read(p: Path, fmt: str, label: str) -> TrainingRun:
    if fmt == "tensorboard":
        return read_tensorboard(p, label)
    if fmt == "wandb":
        return read_wandb(p, label) if p.is_dir() else read_wandb(p.parent, label, given=p)
    if p.is_dir():
        one = lone_log(p)
        if one is None:
            raise UserError(f"{p}: --format {fmt} reads a file; pass the log file itself")
        run = _read(one, fmt, label)
        run.path = str(p)          # the run is the folder (its config beside the log)
        return run
    if fmt == "csv":
        return read_csv(p, label)
    if fmt == "jsonl":
        run = read_file_logger(p, label)
        if not run.read.get("records"):
            raise UserError(f"{p}: no verl file-logger record (`{{\"step\": N, \"data\": {{...}}}}` a line) in it; "
                            "pass a log of verl's file logger or another --format")
        return run
    run = read_console(p, label)
    if not run.read.get("step_lines"):
        raise UserError(f"{p}: no verl step lines (`step:N - key:value - ...`) in it; pass a verl console log "
                        "or another --format")
    return run


def load_run(path: str | Path, format: str | None = None, label: str | None = None) -> TrainingRun:
    """Read one run. `format` forces a reader (one of FORMATS)."""
    p = Path(path)
    if format is not None and format not in FORMATS:
        raise UserError(f"--format {format!r}: use one of {', '.join(FORMATS)}")
    if not p.exists():
        raise UserError(f"{path}: no such file or folder; pass a training log ({KNOWN})")
    run = _read(p, format or detect_format(p), label or default_label(p))
    read_setup(run)
    return run


__all__ = ["FORMATS", "Series", "SeriesBuilder", "TrainingRun", "load_run", "detect_format", "default_label",
           "expand_runs", "replaced_text", "read_tensorboard", "read_console", "read_csv", "read_file_logger",
           "read_wandb"]
