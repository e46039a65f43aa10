"""Offline lm-eval tasks: task YAMLs that `include` lm-eval's own (their prompts, few-shot
examples, filters and metrics) and read local JSONL files instead of the hub.

Any lm-eval task over a set we have locally runs this way (`catalog.resolve_task`: gsm8k,
gsm8k_cot, hendrycks_math500, minerva_math500, aime24, ...); `write_task_dir` writes the ready
YAMLs into a run's directory for `lm_eval.tasks.TaskManager(include_path=...)`. A task whose data
lm-eval reaches itself is left to lm-eval's own YAML (no file written).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from samspec_bench.errors import UserError, comma_list
from samspec_bench.evals.tasks.catalog import LmTask, lm_eval_tasks_dir, resolve_task
from samspec_bench.results import atomic_write_text


@dataclass(frozen=True)
class TaskSpec:
    name: str          # our name (--tasks)
    local_task: str    # lm-eval task name of the local (JSONL) variant
    hub_task: str      # lm-eval's built-in task (loads from the hub)


TASKS: dict[str, TaskSpec] = {
    "gsm8k": TaskSpec("gsm8k", "samspec_gsm8k", "gsm8k"),
    "aime24": TaskSpec("aime24", "samspec_aime24", "aime24"),
    "aime25": TaskSpec("aime25", "samspec_aime25", "aime25"),
    "math500": TaskSpec("math500", "samspec_math500", "hendrycks_math500"),
}

__all__ = ["TASKS", "LmTask", "TaskSpec", "benchmarks_dir", "lm_eval_tasks_dir", "local_task_name", "parse_tasks",
           "resolve_task", "write_task_dir"]


def local_task_name(name: str) -> str:
    """The task name of our YAML for `name` (ours or lm-eval's)."""
    return TASKS[name].local_task if name in TASKS else f"samspec_{resolve_task(name).lm_name}"


def benchmarks_dir(data_dir: str | Path) -> Path:
    """`data_dir` may be the shared data directory (holding benchmarks/) or benchmarks/ itself."""
    d = Path(data_dir).expanduser().resolve()
    if not d.is_dir():
        raise UserError(f"--data-dir {data_dir}: no such directory; pass the shared data directory "
                        "(holding benchmarks/*.jsonl)")
    return d / "benchmarks" if (d / "benchmarks").is_dir() else d


def parse_tasks(value: str) -> list[str]:
    """A comma list of task names (ours or lm-eval's), each resolved now: a name that cannot run
    here is a UserError naming the nearest supported one."""
    names = comma_list(value, "--tasks", "gsm8k,gsm8k_cot,math500")   # no empty item, none twice
    if importlib.util.find_spec("lm_eval") is None:   # nothing to resolve against: our names only (the run
        bad = [t for t in names if t not in TASKS]      # itself then says to install lm-eval)
        if bad:
            raise UserError(f"--tasks {bad[0]}: lm-eval's tasks need lm-eval installed "
                            f"(pip install 'lm-eval>=0.4.13'); without it: {', '.join(TASKS)}")
    else:
        for name in names:
            resolve_task(name)
    return names


# the fields lm-eval's tasks read from each local file (the hub's names: benchmarks/README.md)
DATA_FIELDS = {"gsm8k_train.jsonl": ("question", "answer"), "gsm8k_test.jsonl": ("question", "answer"),
               "math500_test.jsonl": ("problem", "solution"), "aime24.jsonl": ("Problem", "Answer"),
               "aime25.jsonl": ("problem", "answer")}


def check_data_file(path: Path, name: str) -> None:
    """A --data-dir file lm-eval can load: JSON objects one a line, at least one, each with the
    fields the task reads (an empty file, a damaged line or another layout failed inside lm-eval's
    loader, exit 3); else a UserError naming the file and line."""
    fields = DATA_FIELDS.get(path.name, ())
    fix = f"give the benchmark as JSON lines with the hub's fields ({', '.join(fields) or 'one layout'})"
    rows = 0
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"task {name}: data file {path} cannot be read ({e}); {fix}") from None
    rows_of = _json_array(text)   # a JSON array of objects loads too
    for lineno, line in enumerate(rows_of if rows_of is not None else text.splitlines(), start=1):
        if isinstance(line, str) and not line.strip():
            continue
        try:
            row = json.loads(line) if isinstance(line, str) else line
        except ValueError as e:
            raise UserError(f"task {name}: {path}:{lineno} is not JSON ({e.msg}); {fix}") from None
        if not isinstance(row, dict):
            raise UserError(f"task {name}: {path}:{lineno} is a JSON {type(row).__name__}, not an object; {fix}")
        missing = [f for f in fields if f not in row]
        if missing:
            raise UserError(f"task {name}: {path}:{lineno} has no {', '.join(missing)} field (it has "
                            f"{', '.join(list(row)[:6]) or 'none'}); {fix}")
        rows += 1
    if not rows:
        raise UserError(f"task {name}: data file {path} holds no problems (empty); {fix}")


def _json_array(text: str) -> list | None:
    if not text.lstrip().startswith("["):
        return None
    try:
        rows = json.loads(text)
    except ValueError:
        return None
    return rows if isinstance(rows, list) else None


def write_task_dir(out_dir: str | Path, names: list[str], data_dir: str | Path) -> dict[str, str]:
    """Write ready task YAMLs for `names` into out_dir; returns {name: lm-eval task name to run}.
    Every data file must exist and be loadable (`check_data_file`; one that is not is named, with the fix)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bench = benchmarks_dir(data_dir)
    mapping = {}
    for name in names:
        task = resolve_task(name)
        if not task.offline:
            mapping[name] = task.lm_name    # lm-eval's own YAML, its own data loading
            continue
        files = {}
        for split, fname in task.data.items():
            p = bench / fname
            if not p.is_file():
                raise UserError(f"task {name}: data file {p} not found; pass --data-dir with the shared data "
                                f"(benchmarks/{fname}), or leave --data-dir out for the built-in sets")
            check_data_file(p, name)
            files[split] = str(p)
        local = local_task_name(name)
        spec = {"task": local, "include": str(task.yaml_path), "dataset_path": "json", "dataset_name": None,
                "dataset_kwargs": {"data_files": files}}
        atomic_write_text(out / f"{local}.yaml", yaml.safe_dump(spec, sort_keys=False))
        mapping[name] = local
    return mapping
