"""What a log says about the run's setup: how many GPUs it ran on, and where that came from.

verl's `perf/throughput` is tokens per second per GPU: perf/total_num_tokens / (perf/time_per_step
x n_gpus), n_gpus the trainer's resource pools together (verl/trainer/ppo/metric_utils.py,
compute_throughout_metrics). Two runs on different GPU counts are compared on total throughput,
which needs each run's count. Read, best first:
- `derived`: the log's own perf metrics, total_num_tokens / (time_per_step x throughput) at every
  step: the divisor verl used, exact (it must be the same whole number at every step);
- `config`: trainer.n_gpus_per_node x trainer.nnodes from the run's config: `.hydra/config.yaml`
  beside the log (hydra's output folder), a wandb run's `files/config.yaml`, or the config dict
  verl's main_ppo pretty-prints into its console log (`'trainer': {... 'n_gpus_per_node': 8,
  'nnodes': 1 ...}`).
A user's `--gpus RUN=N` (curves) overrides both. Where config and derived counts disagree
(reward-model pools count in verl's divisor), the derived one is kept and the disagreement noted.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import yaml

from samspec_bench.evals.training_logs.console import ANSI, RAY_PREFIX
from samspec_bench.evals.training_logs.series import TrainingRun
from samspec_bench.evals.training_logs.wandb_run import run_files

PERF = ("perf/total_num_tokens", "perf/time_per_step", "perf/throughput")
WHOLE = 0.01          # derived counts within 1% of a whole number at every step
TRAINER_DICT = re.compile(r"'trainer':\s*\{")
TOP_KEY = re.compile(r"'(n_gpus_per_node|nnodes)':\s*(\d+)")
CONSOLE_HEAD = 4 << 20     # the config is printed at start-up: the first 4 MiB are searched


def derived_gpus(run: TrainingRun) -> int | None:
    """n_gpus from the perf metrics at the steps that log all three, when it is one whole number."""
    series = [run.series.get(t) for t in PERF]
    if any(s is None for s in series):
        return None
    steps = np.intersect1d(np.intersect1d(series[0].steps, series[1].steps), series[2].steps)
    if not steps.size:
        return None
    tokens, time, thr = (s.at(steps) for s in series)
    ok = (time > 0) & (thr > 0)
    if not ok.any():
        return None
    n = tokens[ok] / (time[ok] * thr[ok])
    whole = round(float(np.median(n)))
    return whole if whole >= 1 and np.all(np.abs(n - whole) <= WHOLE * whole) else None


def _gpus_of(trainer) -> int | None:
    if isinstance(trainer, dict) and isinstance(trainer.get("value"), dict):    # wandb: {desc, value}
        trainer = trainer["value"]
    if not isinstance(trainer, dict):
        return None
    per, nodes = trainer.get("n_gpus_per_node"), trainer.get("nnodes", 1)
    if isinstance(per, int) and isinstance(nodes, int) and per >= 1 and nodes >= 1:
        return per * nodes
    return None


def _yaml_gpus(path: Path) -> int | None:
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, yaml.YAMLError):
        return None
    return _gpus_of(cfg.get("trainer")) if isinstance(cfg, dict) else None


def _top_level(text: str, start: int) -> str:
    """The characters of the dict opened at text[start] that sit at its own depth (nested
    dicts and lists left out; quotes respected)."""
    depth, out, quote = 0, [], None
    for ch in text[start:]:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "{[":
            depth += 1
            continue
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                break
            continue
        if depth == 1:
            out.append(ch)
    return "".join(out)


def console_gpus(path: Path) -> int | None:
    """trainer.n_gpus_per_node x trainer.nnodes from the config verl pretty-prints at start-up."""
    try:
        with open(path, "rb") as f:
            text = f.read(CONSOLE_HEAD).decode("utf-8", "replace")
    except OSError:
        return None
    text = RAY_PREFIX.sub("", ANSI.sub("", text))
    m = TRAINER_DICT.search(text)
    if not m:
        return None
    keys = dict(TOP_KEY.findall(_top_level(text, m.end() - 1)))
    return _gpus_of({k: int(v) for k, v in keys.items()})


def config_gpus(run: TrainingRun) -> tuple[int | None, str | None]:
    """(GPUs, where) from the run's config files or its console dump."""
    p = Path(run.path)
    folder = p if p.is_dir() else p.parent
    hydra = folder / ".hydra" / "config.yaml"
    if hydra.is_file() and (n := _yaml_gpus(hydra)):
        return n, f"config: {hydra}"
    for wandb_cfg in (folder / "files" / "config.yaml", folder / "config.yaml"):
        if run.format == "wandb" and wandb_cfg.is_file() and (n := _yaml_gpus(wandb_cfg)):
            return n, f"config: {wandb_cfg}"
    # a wandb run may be given as its folder or its files/ folder: run_files finds output.log in both
    console = p if run.format == "console" else run_files(folder)["console"] if run.format == "wandb" else None
    if console is not None and console.is_file() and (n := console_gpus(console)):
        return n, f"config printed in {console.name}"
    return None, None


def read_setup(run: TrainingRun) -> None:
    """Fill run.setup: {"gpus": N or None, "gpus_source": where}."""
    derived = derived_gpus(run)
    conf, where = config_gpus(run)
    if derived is not None:
        run.setup.update({"gpus": derived, "gpus_source": "derived: perf/total_num_tokens / (perf/time_per_step x "
                                                          "perf/throughput)"})
        if conf is not None and conf != derived:
            run.notes.append(f"{where} gives {conf} GPUs, but verl divided perf/throughput by {derived} "
                             f"(its perf metrics): {derived} kept")
    elif conf is not None:
        run.setup.update({"gpus": conf, "gpus_source": where})
    else:
        run.setup.update({"gpus": None, "gpus_source": None})
