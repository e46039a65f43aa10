"""accuracy's task files over the benchmark sets built into the package (`samspec_bench/benchmarks`):
links under the file names the task YAMLs read; a few-shot pool drawn from gsm8k's train split
becomes lm-eval's first_n sampler over the train problems shipped (not the whole split)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from samspec_bench.data import BUILTIN_BENCHMARKS
from samspec_bench.errors import UserError
from samspec_bench.evals.tasks import local_task_name, resolve_task, write_task_dir

# the built-in sets under the file names the task YAMLs read (gsm8k's train split: its first
# rows, the few-shot pool)
BUILTIN_FILES = {"gsm8k_test.jsonl": "gsm8k_test.jsonl", "gsm8k_train.jsonl": "gsm8k_fewshot.jsonl",
                 "math500_test.jsonl": "math500_test.jsonl", "aime24.jsonl": "aime24.jsonl",
                 "aime25.jsonl": "aime25.jsonl"}
PARTIAL_FILES = ("gsm8k_train.jsonl",)   # only the first rows are shipped: few-shot draws become first_n
BUILTIN_FIRST_N = ("gsm8k",)   # our short names whose few-shot pool is such a file
BUILTIN_DATA = ("built-in benchmark sets (samspec_bench/benchmarks); gsm8k few-shot examples from the first "
                "train problems (lm-eval's first_n sampler)")


def builtin_rows(file_name: str) -> int:
    with open(BUILTIN_BENCHMARKS / BUILTIN_FILES[file_name], encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def fewshot_from_partial(name: str) -> str | None:
    """The shipped partial file `name`'s few-shot examples are drawn from (None: not one)."""
    task = resolve_task(name)
    split = task.fewshot_pool_split()
    fname = (task.data or {}).get(split) if split else None
    return fname if fname in PARTIAL_FILES else None


def check_builtin_fewshot(names: list[str], num_fewshot: int | None) -> None:
    """More few-shot examples than the shipped pool holds is named before anything runs."""
    for name in names:
        fname = fewshot_from_partial(name)
        if fname is None:
            continue
        want = num_fewshot if num_fewshot is not None else resolve_task(name).config.get("num_fewshot") or 0
        have = builtin_rows(fname)
        if want > have:
            raise UserError(f"--num_fewshot {want}: {name}'s few-shot pool in the built-in sets holds {have} problems; "
                            f"use --num_fewshot {have} or less, or --data-dir with the full train split")


def write_builtin_tasks(task_dir: Path, data_dir: Path, names: list[str]) -> dict[str, str]:
    """Task YAMLs over the built-in sets: `data_dir` gets links (copies where links fail) under
    the YAMLs' file names; a few-shot pool from a partial file is drawn with first_n."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, src in BUILTIN_FILES.items():
        dst = data_dir / name
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        try:
            dst.symlink_to(BUILTIN_BENCHMARKS / src)
        except OSError:
            shutil.copyfile(BUILTIN_BENCHMARKS / src, dst)
    mapping = write_task_dir(task_dir, names, data_dir)
    for name in names:
        if fewshot_from_partial(name) is None:
            continue
        path = Path(task_dir) / f"{local_task_name(name)}.yaml"
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        spec["fewshot_config"] = {**(resolve_task(name).config.get("fewshot_config") or {}), "sampler": "first_n"}
        path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return mapping
