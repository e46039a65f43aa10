"""Folders as runs: a folder that is one run (TensorBoard events of one run, a wandb run folder,
or a folder holding one log file, e.g. a verl output folder with its console log or file-logger
JSONL beside `.hydra/`), and a parent folder of several runs, expanded into them.

A parent's runs, in name order: each sub-folder that holds a run (named by the sub-folder), and
each log file directly in it (named by the file; event files of different runs side by side,
one file each, named by their prefix). Event files that all share one prefix are one run
restarted (verl's SummaryWriter names them events.out.tfevents.{time}.{host}.{pid}.{uid}): the
folder is that run. Hidden entries (`.hydra`, `.git`) are passed over, and so is a link to another
of the runs (wandb's `latest-run`); every other file that is not read as a run (empty, no known
format, a CSV without a step column or rows) is listed with why, for the command to show.
"""

from __future__ import annotations

from pathlib import Path

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs.csv_export import STEP_COLUMNS, csv_has_rows
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


def why_not_a_log(f: Path) -> str | None:
    """Why a file in a folder of runs is not read as a run, or None for a log file with data."""
    try:
        size = f.stat().st_size
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if size == 0:
        return "empty file"
    fmt = file_format(f)
    if fmt is None:
        if f.suffix.lower() == ".csv":
            return f"a CSV with no step column (one of {', '.join(STEP_COLUMNS)})"
        return "not a training log in a known format"
    if fmt == "csv" and not csv_has_rows(f):
        return "a CSV header with no data rows"
    return None


def _children(p: Path, ignored: list[str]) -> list[Path]:
    """The runs a folder holds: sub-folders holding a run, event files (one run per prefix) and
    log files; what is passed over goes to `ignored` as 'path: why'."""
    runs = []
    for sub in sorted(p.iterdir()):
        if not sub.is_dir() or not _visible(sub):
            continue
        if is_wandb_folder(sub) or event_files(sub) or lone_log(sub):
            runs.append(sub)
        elif (n := len(log_files(sub))) > 1:       # several runs one level down: not guessed at
            ignored.append(f"{sub}: a folder holding {n} log files; pass it as its own argument")
    direct = sorted((f for f in p.iterdir() if f.is_file() and "tfevents" in f.name), key=lambda f: f.name)
    groups = tensorboard_groups(direct)
    for _, prefix in groups:
        group = [f for f in direct if f.name.split("events.out.tfevents")[0] == prefix]
        if len(group) == 1:
            runs.append(group[0])
        elif len(groups) == 1:     # one restarted run: its files, read in timestamp order, are the folder
            runs.append(p)
        else:
            raise UserError(f"{p}: holds the event files of {len(groups)} runs side by side and the prefix "
                            f"{prefix or '(none)'} has {len(group)} files (a restarted run); put each run's files "
                            "in its own folder")
    logs = []
    for f in sorted(p.iterdir()):
        if not f.is_file() or not _visible(f) or "tfevents" in f.name:
            continue
        why = why_not_a_log(f)
        if why is None:
            logs.append(f)
        else:
            ignored.append(f"{f}: {why}")
    return _one_entry_each(sorted(runs + logs, key=lambda r: r.name), ignored)


def _one_entry_each(runs: list[Path], ignored: list[str]) -> list[Path]:
    """The runs with each link to another of them passed over (`ignored`): wandb's own folder
    holds `latest-run`, a link to its newest run folder, which would be read twice (as a run of its
    own and as the run it points at) and, named first, taken for the baseline."""
    real = {r.resolve(): r for r in runs if not r.is_symlink()}
    out = []
    for r in runs:
        target = r.resolve()
        if r.is_symlink() and target in real:
            ignored.append(f"{r}: a link to {real[target]}, read once as that run")
            continue
        real.setdefault(target, r)
        if real[target] == r:
            out.append(r)
    return out


def expand_runs(path: str | Path, ignored: list[str] | None = None) -> list[Path]:
    """[path] for a file, a missing path or a folder that is one run; the runs of a parent
    folder (two or more), the files it passed over added to `ignored` ('path: why'); a
    UserError for a folder holding no run."""
    p = Path(path)
    if not p.is_dir() or is_wandb_folder(p):
        return [p]
    passed: list[str] = []
    runs = _children(p, passed)
    if runs == [p] or (len(runs) < 2 and is_run_folder(p)):
        return [p]
    if runs:
        if ignored is not None:
            ignored.extend(passed)
        return runs
    raise UserError(f"{p}: holds no training log, nor do its sub-folders; pass {KNOWN}"
                    + (f" (passed over: {'; '.join(passed[:3])}{'; ...' if len(passed) > 3 else ''})" if passed else ""))
