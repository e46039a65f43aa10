"""accuracy's task files over the benchmark sets built into the package (`samspec_bench/benchmarks`):
links under the file names lm-eval's task templates read, gsm8k's few-shot sampler as first_n."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from samspec_bench.data import BUILTIN_BENCHMARKS
from samspec_bench.evals.tasks import TASKS, write_task_dir

# the built-in sets under the file names the task templates read (gsm8k's train split: its
# first rows, the few-shot pool); tasks whose few-shot sampler is switched to first_n there
BUILTIN_FILES = {"gsm8k_test.jsonl": "gsm8k_test.jsonl", "gsm8k_train.jsonl": "gsm8k_fewshot.jsonl",
                 "math500_test.jsonl": "math500_test.jsonl", "aime24.jsonl": "aime24.jsonl",
                 "aime25.jsonl": "aime25.jsonl"}
BUILTIN_FIRST_N = ("gsm8k",)
BUILTIN_DATA = ("built-in benchmark sets (samspec_bench/benchmarks); gsm8k 5-shot from the first five "
                "train problems (lm-eval's first_n sampler)")


def write_builtin_tasks(task_dir: Path, data_dir: Path, names: list[str]) -> dict[str, str]:
    """Task YAMLs over the built-in sets: `data_dir` gets links (copies where links fail) under
    the templates' file names; gsm8k's few-shot sampler becomes first_n (its pool is the first
    train problems, not the whole split)."""
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
        if name in BUILTIN_FIRST_N:
            path = Path(task_dir) / f"{TASKS[name].local_task}.yaml"
            spec = yaml.safe_load(path.read_text(encoding="utf-8"))
            spec["fewshot_config"] = {"sampler": "first_n"}
            path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return mapping
