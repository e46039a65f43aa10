"""Folders as runs: a folder that is one run (TensorBoard events of one run, a wandb run folder,
or a folder holding one log file, e.g. a verl output folder with its console log or file-logger
JSONL beside `.hydra/`), and a parent folder of several runs, expanded into them.

A parent's runs, in name order: each sub-folder that holds a run (named by the sub-folder), and
each log file directly in it (named by the file; event files of different runs side by side,
one file each, named by their prefix). Hidden entries (`.hydra`, `.git`) are passed over.
"""

from __future__ import annotations

from pathlib import Path

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs.formats import KNOWN, file_format
from samspec_bench.evals.training_logs.tensorboard import event_files
from samspec_bench.evals.training_logs.wandb_run import is_wandb_folder


def tensorboard_groups(files: list[Path]) -> list[tuple[str, str]]:
    """(folder, name prefix) of each run among event files: a restarted run adds files with
    later timestamps to its folder under the same prefix."""
    return sorted({(f.parent.as_posix(), f.name.split("events.out.tfevents")[0]) for f in files})


def _visible(p: Path) -> bool:
    return not p.name.startswith(".")


def log_files(folder: Path) -> list[Path]:
    """The log files directly in a folder (not event files, which go by groups), in name order."""
    return [f for f in sorted(folder.iterdir()) if f.is_file() and _visible(f) and "tfevents" not in f.name
            and file_format(f) not in (None, "tensorboard")]


def lone_log(folder: Path) -> Path | None:
    """The one log file of a folder that holds exactly one (and no event files), else None."""
    if not folder.is_dir() or event_files(folder):
        return None
    found = log_files(folder)
    return found[0] if len(found) == 1 else None


def is_run_folder(folder: Path) -> bool:
    """A folder that is one run by itself."""
    if is_wandb_folder(folder):
        return True
    files = event_files(folder)
    if files:
        return len(tensorboard_groups(files)) == 1
    return lone_log(folder) is not None


def _children(p: Path) -> list[Path]:
    """The runs a folder holds: sub-folders holding a run, event files (one per run) and log files."""
    runs = [sub for sub in sorted(p.iterdir())
            if sub.is_dir() and _visible(sub) and (is_wandb_folder(sub) or event_files(sub) or lone_log(sub))]
    direct = sorted((f for f in p.iterdir() if f.is_file() and "tfevents" in f.name), key=lambda f: f.name)
    for _, prefix in tensorboard_groups(direct):
        group = [f for f in direct if f.name.split("events.out.tfevents")[0] == prefix]
        if len(group) > 1:
            raise UserError(f"{p}: holds the event files of several runs side by side and {len(group)} of them share "
                            f"the prefix {prefix or '(none)'}; put each run's files in its own folder")
        runs.append(group[0])
    return sorted(runs + log_files(p), key=lambda r: r.name)


def expand_runs(path: str | Path) -> list[Path]:
    """[path] for a file, a missing path or a folder that is one run; the runs of a parent
    folder (two or more); a UserError for a folder holding no run."""
    p = Path(path)
    if not p.is_dir() or is_wandb_folder(p):
        return [p]
    runs = _children(p)
    if len(runs) >= 2:
        return runs
    if is_run_folder(p):
        return [p]
    if runs:
        return runs
    raise UserError(f"{p}: holds no training log, nor do its sub-folders; pass {KNOWN}")
