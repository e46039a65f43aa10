"""lm-eval's own output files for each arm of `accuracy`, written by lm-eval's writer
(`lm_eval.loggers.EvaluationTracker`, as `lm_eval run --output_path P --log_samples` writes them):

    <root>/sam_off/<model sanitized>/results_<date>.json, samples_<task>_<date>.jsonl
    <root>/sam_on/<model sanitized>/...            (sam_off_sample2/ ... with --num-samples > 1)

Each arm folder is one lm-eval --output_path: `samspec-bench accept --traces <root>/sam_on` reads
its samples (lm-eval's format; the model from results_*.json). The run folder holds them under
lm_eval/; --output_path gets a copy (results only, samples too with --log_samples). Task names
are lm-eval's (`hendrycks_math500`, `gsm8k_cot`), not the names of our local task files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

LM_EVAL_DIR = "lm_eval"


def arm_dir(arm: str, sample: int, num_samples: int) -> str:
    """The arm's folder: one lm-eval --output_path per arm and sample (accept reads one response
    per document and folder, so samples of one arm are not mixed)."""
    return f"sam_{arm}" + (f"_sample{sample + 1}" if num_samples > 1 else "")


def model_args(cfg, arm: str) -> dict[str, Any]:
    """What lm-eval records as model_args: `pretrained` names the model (lm-eval's model_name,
    hence the folder), the rest says how the arm generated."""
    return {"pretrained": cfg.model, "samspec_engine": cfg.engine, "dtype": cfg.dtype,
            "drafter": cfg.drafter if arm == "on" else None,
            "num_spec_tokens": cfg.num_spec_tokens if arm == "on" else None}


def git_hash() -> str | None:
    """lm-eval's `git_hash` record (`git describe --always` in the working directory, else the
    HEAD file it finds there) with git's stderr kept: outside a checkout git prints
    "fatal: not a git repository" on the console. None (lm-eval's value for it): no checkout."""
    try:
        out = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, timeout=5)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    from lm_eval.loggers.utils import get_commit_from_path  # lazy: imports lm-eval
    return get_commit_from_path(os.getcwd())


@contextlib.contextmanager
def quiet_git_hash() -> Iterator[None]:
    """simple_evaluate records the git hash through lm_eval.evaluator.get_git_commit_hash, which
    lets git write to the console: ours (`git_hash`) stands in for it meanwhile."""
    import lm_eval.evaluator as evaluator  # lazy: imports lm-eval
    own = evaluator.get_git_commit_hash
    evaluator.get_git_commit_hash = git_hash
    try:
        yield
    finally:
        evaluator.get_git_commit_hash = own


def new_tracker(folder: Path):
    from lm_eval.loggers import EvaluationTracker  # lazy: imports lm-eval
    return EvaluationTracker(output_path=str(folder))


def _renamed(results: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """lm-eval's results dict with the task `old` (our local task file's name) called `new`."""
    if old == new:
        return dict(results)
    out: dict[str, Any] = {}
    for key, value in results.items():
        if isinstance(value, dict) and old in value:
            value = {(new if k == old else k): v for k, v in value.items()}
        out[key] = value
    if isinstance(out.get("results", {}).get(new), dict):
        out["results"][new] = {**out["results"][new], "alias": new, "name": new}
    if isinstance(out.get("configs", {}).get(new), dict):
        out["configs"][new] = {**out["configs"][new], "task": new}
    return out


def write_arm_files(tracker, results: dict[str, Any], lm_task: str, lm_name: str) -> list[Path]:
    """results_<date>.json and samples_<lm_name>_<date>.jsonl of one evaluation, by lm-eval's
    writer; `results` is simple_evaluate's (log_samples=True) and is left as it was."""
    samples = [dict(s) for s in results["samples"][lm_task]]   # the writer rewrites fields of each
    out = _renamed({k: v for k, v in results.items() if k != "samples"}, lm_task, lm_name)
    tracker.save_results_aggregated(results=out, samples={lm_name: samples})
    tracker.save_results_samples(task_name=lm_name, samples=samples)
    folder = Path(tracker.output_path) / str(tracker.general_config_tracker.model_name_sanitized)
    files = [folder / f"results_{tracker.date_id}.json", folder / f"samples_{lm_name}_{tracker.date_id}.jsonl"]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:   # lm-eval's writer logs its failures instead of raising
        raise RuntimeError(f"lm-eval did not write {', '.join(missing)}")
    return files


def copy_out(files: list[Path], run_root: Path, output_path: str | None, log_samples: bool) -> list[Path]:
    """The files (under run_root) copied to the same place under --output_path: results always,
    samples with --log_samples (lm-eval's rule)."""
    if not output_path:
        return []
    copied = []
    for f in files:
        if f.name.startswith("samples_") and not log_samples:
            continue
        dst = Path(output_path) / f.relative_to(run_root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dst)
        copied.append(dst)
    return copied
