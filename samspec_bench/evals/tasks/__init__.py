"""Offline lm-eval tasks: YAML templates that `include` lm-eval's built-in tasks (their
prompts, filters and metrics) and read local JSONL files instead of the hub.

The templates here are not loadable as they stand: `include: "@lm_eval/..."` and the
relative `data_files` are made absolute by `write_task_dir`, which writes ready YAMLs into
a run's directory for `lm_eval.tasks.TaskManager(include_path=...)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from samspec_bench.errors import UserError
from samspec_bench.results import atomic_write_text


@dataclass(frozen=True)
class TaskSpec:
    name: str          # our name (--tasks)
    template: str      # YAML template in this package
    local_task: str    # lm-eval task name of the local (JSONL) variant
    hub_task: str      # lm-eval's built-in task (loads from the hub)


TASKS: dict[str, TaskSpec] = {
    "gsm8k": TaskSpec("gsm8k", "gsm8k.yaml", "samspec_gsm8k", "gsm8k"),
    "aime24": TaskSpec("aime24", "aime24.yaml", "samspec_aime24", "aime24"),
    "aime25": TaskSpec("aime25", "aime25.yaml", "samspec_aime25", "aime25"),
    "math500": TaskSpec("math500", "math500.yaml", "samspec_math500", "hendrycks_math500"),
}


def lm_eval_tasks_dir() -> Path:
    import lm_eval.tasks  # lazy: lm-eval is heavy and the task table is read without it
    return Path(lm_eval.tasks.__file__).resolve().parent


def benchmarks_dir(data_dir: str | Path) -> Path:
    """`data_dir` may be the shared data directory (holding benchmarks/) or benchmarks/ itself."""
    d = Path(data_dir).expanduser().resolve()
    if not d.is_dir():
        raise UserError(f"--data-dir {data_dir}: no such directory; pass the shared data directory "
                        "(holding benchmarks/*.jsonl)")
    return d / "benchmarks" if (d / "benchmarks").is_dir() else d


def parse_tasks(value: str) -> list[str]:
    names = [t.strip() for t in value.split(",") if t.strip()]
    bad = [t for t in names if t not in TASKS]
    if not names or bad:
        raise UserError(f"--tasks {value!r}: use a comma list of {', '.join(TASKS)}")
    return list(dict.fromkeys(names))


def write_task_dir(out_dir: str | Path, names: list[str], data_dir: str | Path) -> dict[str, str]:
    """Write ready task YAMLs for `names` into out_dir; returns {our name: lm-eval task name}.
    Every data file must exist (a missing one is named, with the fix)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bench = benchmarks_dir(data_dir)
    lm_tasks = lm_eval_tasks_dir()
    mapping = {}
    for name in names:
        spec = TASKS[name]
        cfg = yaml.safe_load(resources.files(__package__).joinpath(spec.template).read_text(encoding="utf-8"))
        cfg["include"] = str(lm_tasks / cfg["include"].removeprefix("@lm_eval/"))
        files = {}
        for split, rel in cfg["dataset_kwargs"]["data_files"].items():
            p = bench / Path(rel).name
            if not p.is_file():
                raise UserError(f"task {name}: data file {p} not found; pass --data-dir with the shared data "
                                f"(benchmarks/{Path(rel).name}), or leave --data-dir out to load from the hub")
            files[split] = str(p)
        cfg["dataset_kwargs"]["data_files"] = files
        atomic_write_text(out / f"{spec.local_task}.yaml", yaml.safe_dump(cfg, sort_keys=False))
        mapping[name] = spec.local_task
    return mapping
