"""curves' settings: the config object and `build_config`, which turns the click command's
parameters into it (validating them; the click options hold the defaults). A parent folder of
several runs is expanded here into those runs (training_logs.expand_runs), so the run count,
--labels and the record all see the runs compared."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from samspec_bench.errors import UserError, comma_list, nearest
from samspec_bench.evals.curve_stats import Margin, parse_margin
from samspec_bench.evals.training_logs import FORMATS, expand_runs
from samspec_bench.evals.training_logs.formats import KNOWN
from samspec_bench.suites.curves.metric_families import FAMILIES

SUITE = "curves"
FAIL_ON = ("never", "different", "not-equivalent")
FIGURE_LEARNING = "curves_learning.png"
FIGURE_SPEED = "curves_speed.png"
FIGURE_VERDICTS = "curves_verdicts.png"


@dataclass
class CurvesConfig:
    runs: list[str]                                  # the first is the baseline
    labels: list[str] | None = None
    format: str | None = None                        # None: detected per run
    families: list[str] = field(default_factory=lambda: list(FAMILIES))
    metrics: list[str] = field(default_factory=list)          # extra learning tags / globs
    speed_metrics: list[str] = field(default_factory=list)    # extra speed tags / globs
    margins: dict[str, str] = field(default_factory=dict)     # family, metric or tag -> "0.05" / "10%"
    alpha: float = 0.05
    min_steps: int = 10
    final_fraction: float = 0.25
    step_range: tuple[int | None, int | None] | None = None
    smooth: float = 0.6
    fail_on: str = "never"
    gpus: dict[str, int] = field(default_factory=dict)        # run label -> GPU count (--gpus RUN=N)
    margin_args: dict[str, str] = field(default_factory=dict)  # margin name -> the --margin argument as typed
    ignored: list[str] = field(default_factory=list)          # 'path: why' of files a folder of runs passed over

    def margin_arg(self, key: str) -> str:
        """The --margin argument that set `key`, as typed (errors echo it)."""
        return self.margin_args.get(key) or f"{key}={self.margins[key]}"

    def margin_objects(self) -> dict[str, Margin]:
        return {k: check_margin(self.margin_arg(k), v) for k, v in self.margins.items()}

    def record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_step_range(text: str | None) -> tuple[int | None, int | None] | None:
    """--steps 'START:END' (either side may be empty), or None."""
    if text is None or not str(text).strip():
        return None
    t = str(text).strip()
    lo_s, sep, hi_s = t.partition(":")
    try:
        lo = int(lo_s) if lo_s.strip() else None
        hi = int(hi_s) if sep and hi_s.strip() else (None if sep else lo)
    except ValueError:
        raise UserError(f"--steps {text!r}: give START:END (e.g. 1:100, 50: or :100)") from None
    if lo is not None and hi is not None and hi < lo:
        raise UserError(f"--steps {text!r}: END must be >= START")
    return lo, hi


def _shown(arg: str) -> str:
    """An argument as a shell would need it typed: quoted only where it holds spaces or quotes."""
    return arg if arg and not any(ch in arg for ch in " \t'\"") else repr(arg)


def check_margin(arg: str, value: str) -> Margin:
    """The margin of --margin `arg` (NAME=VALUE); a UserError echoing `arg` as typed."""
    try:
        return parse_margin(value)
    except UserError:
        raise UserError(f"--margin {_shown(arg)}: give VALUE > 0 in the metric's unit (reward=0.02) or as a "
                        "percentage of the baseline's mean (entropy=5%)") from None


def _margins(items) -> tuple[dict[str, str], dict[str, str]]:
    """(name -> value, name -> the argument as typed)."""
    out: dict[str, str] = {}
    typed: dict[str, str] = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UserError(f"--margin {_shown(str(item))}: give NAME=VALUE, e.g. reward=0.02 or entropy=5% (NAME: a "
                            "family, a metric or a tag)")
        check_margin(str(item), value.strip())
        out[key.strip()] = value.strip()
        typed[key.strip()] = str(item)
    return out, typed


def parse_gpus(items) -> dict[str, int]:
    """--gpus RUN=N (repeatable, or comma-separated): run label -> GPU count."""
    out: dict[str, int] = {}
    for item in items or ():
        for part in comma_list(item, "--gpus", "sam_off=8,sam_on=8"):
            key, sep, value = part.partition("=")
            try:
                n = int(value.strip()) if sep and key.strip() else 0
            except ValueError:
                n = 0
            if n < 1:
                raise UserError(f"--gpus {part.strip()!r}: give RUN=N, the run's label and its GPU count (nodes x GPUs "
                                "per node), e.g. --gpus sam_off=8")
            if key.strip() in out:   # a later count would silently replace the first
                raise UserError(f"--gpus {key.strip()}: the run is given twice ({key.strip()}={out[key.strip()]} "
                                f"and {part}); give each run's GPU count once")
            out[key.strip()] = n
    return out


def _list(text: str | None, option: str, example: str) -> list[str]:
    """An optional comma list: blank is none; else no empty item and none twice (comma_list)."""
    return comma_list(text, option, example) if str(text or "").strip() else []


def check_run_paths(runs, extra_runs) -> None:
    """Every run path given is there, before any is read (`samspec-bench run` checks its config
    with build_config): a typo is one line naming it, with the option where it came by --run."""
    for option, paths in (("", runs), ("--run ", extra_runs)):
        for p in paths or ():
            if not Path(p).exists():   # as load_run reads it (no ~ expansion)
                raise UserError(f"{option}{p}: no such file or folder; pass an existing training log ({KNOWN})")


def build_config(*, runs, extra_runs, labels, format, families, metrics, speed_metrics, margins, alpha, min_steps,
                 final_fraction, step_range, smooth, fail_on, gpus) -> CurvesConfig:
    """The command's parameters (by their Python names) as a checked CurvesConfig. Raises
    UserError naming the bad option."""
    given = [str(p) for p in (runs or ())] + [str(p) for p in (extra_runs or ())]
    ignored: list[str] = []
    paths = [str(r) for p in given for r in expand_runs(p, ignored)]
    if len(paths) < 2:
        got = f"got {len(paths)}" + (f" ({paths[0]})" if paths else "")
        raise UserError(f"curves compares training runs: give at least two (the baseline first, e.g. "
                        f"`samspec-bench curves sam_off/ sam_on/`, or a folder holding them), {got}")
    labs = _list(labels, "--labels", "sam_off,sam_on") or None
    if labs is not None and len(labs) != len(paths):
        raise UserError(f"--labels {labels!r}: {len(labs)} name(s) for {len(paths)} runs; give one per run")
    fmt = None if format in (None, "auto") else format
    if fmt is not None and fmt not in FORMATS:
        raise UserError(f"--format {format!r}: use auto or one of {', '.join(FORMATS)}")
    fams = _list(families, "--families", ",".join(FAMILIES[:2]))
    bad = [f for f in fams if f not in FAMILIES]
    if bad or (not fams and not metrics and not speed_metrics):
        raise UserError(f"--families {families!r}: use a comma list of {', '.join(FAMILIES)}"
                        + (nearest(bad[0], FAMILIES) if bad else ""))
    if not 0 < alpha < 0.5:
        raise UserError(f"--alpha {alpha}: give a level in (0, 0.5), e.g. 0.05")
    if min_steps < 3:
        raise UserError(f"--min-steps {min_steps}: give at least 3")
    if not 0 <= final_fraction < 0.5:
        raise UserError(f"--final-window {final_fraction}: give a fraction in [0, 0.5) (0 turns it off)")
    if not 0 <= smooth < 1:
        raise UserError(f"--smooth {smooth}: give an EMA weight in [0, 1)")
    if fail_on not in FAIL_ON:
        raise UserError(f"--fail-on {fail_on!r}: use one of {', '.join(FAIL_ON)}")
    margin_values, margin_args = _margins(margins)
    span, gpu_counts = parse_step_range(step_range), parse_gpus(gpus)
    check_run_paths(runs, extra_runs)   # after the options' own checks, which need no file
    return CurvesConfig(runs=paths, labels=labs, format=fmt, families=fams, metrics=list(metrics or ()),
                        speed_metrics=list(speed_metrics or ()), margins=margin_values, alpha=alpha,
                        min_steps=min_steps, final_fraction=final_fraction, step_range=span,
                        smooth=smooth, fail_on=fail_on, gpus=gpu_counts, margin_args=margin_args,
                        ignored=ignored)
