"""Which training-log format a file is (sniffed from its first bytes), and a run's default name."""

from __future__ import annotations

from pathlib import Path

from samspec_bench.evals.training_logs.console import looks_like_console, step_line_in_file
from samspec_bench.evals.training_logs.csv_export import looks_like_csv, tensorboard_download
from samspec_bench.evals.training_logs.file_logger import looks_like_file_logger
from samspec_bench.evals.training_logs.tensorboard import looks_like_event_file

FORMATS = ("tensorboard", "console", "jsonl", "wandb", "csv")
SNIFF_BYTES = 1 << 18
KNOWN = ("a TensorBoard event file or folder, a verl console log, a verl file-logger JSONL, a wandb run folder, "
         "a CSV export with a step column, or a folder of such runs")


def default_label(path: Path) -> str:
    """A short name for a run: the event file's prefix, the log's stem, the folder's name."""
    name = path.name
    if "tfevents" in name:
        prefix = name.split(".events.out.tfevents")[0].split("events.out.tfevents")[0].rstrip(".")
        return prefix or path.parent.name or name
    if path.is_dir() and path.name == "files":
        return path.parent.name
    if name.endswith(".csv") and name.startswith("run-"):
        run, _ = tensorboard_download(path)     # TensorBoard's download: run-<run>-tag-<tag>.csv
        if run:
            return run
    for suffix in (".output.log", ".log", ".csv", ".tsv", ".txt", ".jsonl", ".wandb"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def file_format(path: Path) -> str | None:
    """The format of a log file, or None when it is none of FORMATS."""
    if "tfevents" in path.name:
        return "tensorboard"
    if path.suffix == ".wandb" or path.name == "wandb-history.jsonl":
        return "wandb"
    if looks_like_event_file(path):
        return "tensorboard"
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        return None
    if b"\x00" in head[:4096]:
        return None
    if looks_like_file_logger(head):
        return "jsonl"
    if looks_like_csv(head):
        return "csv"
    if looks_like_console(head):
        return "console"
    if len(head) == SNIFF_BYTES and step_line_in_file(path):
        return "console"           # a console log with long start-up output before its first step line
    return None
