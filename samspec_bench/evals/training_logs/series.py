"""What every reader returns: a `TrainingRun` (tag -> `Series` of (step, value[, wall time]),
counts of what was skipped and of what was replaced (a step logged again: the later value
kept), notes), and the builder the readers fill point by point."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# verl's console: a validation block's value at a step whose step line logged that key (console.py)
VALIDATION_REPEATS = "validation_block_repeats"
# counted beside what was skipped, yet the step keeps a value: a step logged again (a resumed run
# re-logs the steps after its checkpoint) replaced the one read before it, a damaged record's
# points were logged again by a restarted run's later file (tensorboard_run.py), or a validation
# block repeated what the step line logged; kind -> the value kept
RELOGGED_DAMAGE = "damaged_points_relogged"
REPLACED = {"duplicate_steps": "later", RELOGGED_DAMAGE: "later file's", VALIDATION_REPEATS: "step line's"}


@dataclass
class Series:
    """One scalar per step, steps strictly increasing."""
    steps: np.ndarray                  # int64
    values: np.ndarray                 # float64, finite
    wall_time: np.ndarray | None = None   # seconds since the epoch (TensorBoard, wandb), else None

    def __len__(self) -> int:
        return int(self.steps.size)

    def at(self, steps: np.ndarray) -> np.ndarray:
        """Values at `steps` (each must be one of this series' steps)."""
        idx = np.searchsorted(self.steps, steps)
        return self.values[idx]


@dataclass
class TrainingRun:
    path: str
    format: str                        # tensorboard | console | jsonl | wandb | csv
    label: str
    series: dict[str, Series] = field(default_factory=dict)
    # what was skipped or repaired, by kind (corrupt_records, truncated_lines, dropped_fields,
    # duplicate_steps, non_finite_values, ...); only kinds that occurred
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    read: dict[str, int] = field(default_factory=dict)   # what was read: files, records, step_lines, rows
    # tag -> {"count": non-finite steps, "steps": steps logged, "first_step", "nan", "inf"}: a
    # diverged metric is a finding, so its NaN/inf steps are kept here (the Series holds the rest)
    non_finite: dict[str, dict] = field(default_factory=dict)
    non_finite_steps: dict[str, np.ndarray] = field(default_factory=dict, repr=False)   # tag -> those steps
    setup: dict = field(default_factory=dict)   # what the log says of the setup: gpus, gpus_source (run_setup.py)
    # tag -> values logged under it that were not numbers: a metric every value of which was
    # unparseable is "present but not numeric", not absent
    non_numeric: dict[str, int] = field(default_factory=dict)
    # the steps of a console log's lines cut at wandb's 4096 bytes (console.py): a wandb run folder
    # whose history holds those steps lost nothing there (wandb_run.py)
    cut_steps: list[int] = field(default_factory=list, repr=False)

    @property
    def tags(self) -> list[str]:
        return sorted(self.series)

    @property
    def steps(self) -> tuple[int, int] | None:
        """(first, last) step over all tags, None for an empty run."""
        if not self.series:
            return None
        return (int(min(s.steps[0] for s in self.series.values())),
                int(max(s.steps[-1] for s in self.series.values())))

    def count(self, kind: str, n: int = 1) -> None:
        if n:
            self.counts[kind] = self.counts.get(kind, 0) + n

    def not_numeric(self, tag: str, kind: str = "non_numeric_fields") -> None:
        """A value logged under `tag` that is not a number: counted as `kind` and per tag."""
        self.count(kind)
        self.non_numeric[tag] = self.non_numeric.get(tag, 0) + 1

    def skipped(self) -> dict[str, int]:
        """What was lost, by kind: the counts apart from the points that replaced another (REPLACED)."""
        return {k: v for k, v in self.counts.items() if k not in REPLACED}

    def replaced(self) -> dict[str, dict]:
        """Points logged again at a step already read, by kind: {"points": count, "kept": which
        value the Series holds}; nothing was lost there."""
        return {k: {"points": self.counts[k], "kept": kept} for k, kept in REPLACED.items() if self.counts.get(k)}

    def summary(self) -> dict:
        """For result.json: where the run came from, what was skipped and what was replaced (no values)."""
        span = self.steps
        return {"path": self.path, "format": self.format, "label": self.label, "tags": len(self.series),
                "first_step": span[0] if span else None, "last_step": span[1] if span else None,
                "read": dict(self.read), "skipped": self.skipped(), "replaced": self.replaced(),
                "notes": list(self.notes),
                "setup": dict(self.setup), "non_numeric": dict(sorted(self.non_numeric.items())),
                "non_finite": {t: dict(v) for t, v in sorted(self.non_finite.items())}}

    def non_finite_text(self, tag: str) -> str | None:
        """'N of M steps non-finite (NaN/inf) from step S' for a tag with such steps, else None."""
        nf = self.non_finite.get(tag)
        if not nf:
            return None
        return f"{nf['count']} of {nf['steps']} steps non-finite ({non_finite_kinds(nf)}, first at step {nf['first_step']})"


MAX_STEP = 2 ** 63 - 1     # a Series' steps are int64
# A finite value past this is no measurement (float32 metrics end at 3.4e38; 1.7e308 is an
# overflowed or uninitialised double) and the statistics' sums of squares overflow near 1e154:
# it is counted and shown as non-finite ("huge"), kept out of the Series like NaN and inf.
HUGE = 1e100
HUGE_TEXT = "|value| > 1e100"


def usable(v: float) -> bool:
    """A value a Series may hold: finite and within ±HUGE."""
    return math.isfinite(v) and abs(v) <= HUGE


def non_finite_kinds(nf: dict | None) -> str:
    """'NaN/inf', 'huge (|value| > 1e100)'...: the kinds of a tag's non-finite steps (its
    `TrainingRun.non_finite` entry), 'non-finite' where none is known."""
    names = {"nan": "NaN", "inf": "inf", "huge": f"huge ({HUGE_TEXT})"}
    return "/".join(v for k, v in names.items() if (nf or {}).get(k)) or "non-finite"


def diverged_kinds(nf: dict | None) -> str:
    """'NaN/inf' as a divergence is said, the kinds named where huge values are among them."""
    return non_finite_kinds(nf) if (nf or {}).get("huge") else "NaN/inf"


def replaced_text(replaced: dict[str, dict]) -> str:
    """'30 value(s) logged again at a step (duplicate_steps; the later value kept)' for a
    summary's `replaced` ('' when nothing was): the terminal's words for every caller."""
    return ", ".join(f"{v['points']} value(s) logged again at a step ({k}; the {v['kept']} value kept)"
                     for k, v in replaced.items())


# what each unusable step costs, said on the run: "N <what> <text>"
STEP_NOTES = {"non_integer_steps": "with a non-integer step (e.g. 3.5): skipped, not rounded onto a real step",
              "negative_steps": "with a negative step (e.g. -3): skipped, no training step is negative",
              "out_of_range_steps": "with a step past 2^63-1 (e.g. 1e20): skipped, no training step is that large"}


def step_problem(x: int | float) -> str | None:
    """Why a finite step value is no step (its count kind in STEP_NOTES), None for a usable one:
    3.5 truncated would collide with step 3, -3 is no step, 1e20 does not fit int64."""
    if x != int(x):
        return "non_integer_steps"
    if x < 0:
        return "negative_steps"
    return "out_of_range_steps" if x > MAX_STEP else None


def step_notes(run: TrainingRun, what: str) -> None:
    """The notes of the unusable steps a reader counted ('what': 'row(s)', 'record(s)', ...)."""
    for kind, text in STEP_NOTES.items():
        if run.counts.get(kind):
            run.notes.append(f"{run.counts[kind]} {what} {text}")


class SeriesBuilder:
    """Points in the order a log holds them -> sorted Series. A step logged twice (a restarted
    run that re-logs steps after resuming from a checkpoint) keeps the later value; non-finite
    values (and finite ones past ±HUGE) are kept out of the Series and counted per tag on the run
    (`TrainingRun.non_finite`):
    a metric that turned NaN or inf is a finding for the comparison, not a gap."""

    def __init__(self) -> None:
        self._points: dict[str, dict[int, tuple[float, float | None]]] = {}
        self.duplicates = 0
        self.non_finite = 0

    def add(self, tag: str, step: int, value: float, wall: float | None = None) -> None:
        d = self._points.setdefault(tag, {})
        if step in d:
            self.duplicates += 1
        d[step] = (value, wall)

    def steps(self) -> set[int]:
        """Every step some tag was logged at."""
        return set().union(*(d.keys() for d in self._points.values())) if self._points else set()

    def has(self, tag: str, step: int) -> bool:
        return step in self._points.get(tag, {})

    def build_into(self, run: TrainingRun) -> TrainingRun:
        for tag, d in self._points.items():
            bad = sorted(s for s, (v, _) in d.items() if not usable(v))
            if bad:
                self.non_finite += len(bad)
                huge = sum(math.isfinite(d[s][0]) for s in bad)
                run.non_finite[tag] = {"count": len(bad), "steps": len(d), "first_step": int(bad[0]),
                                       "nan": sum(math.isnan(d[s][0]) for s in bad),
                                       "inf": sum(math.isinf(d[s][0]) for s in bad), **({"huge": huge} if huge else {})}
                run.non_finite_steps[tag] = np.array(bad, dtype=np.int64)
            steps = np.array(sorted(s for s in d if usable(d[s][0])), dtype=np.int64)
            if not steps.size:
                continue
            vals = np.array([d[s][0] for s in steps], dtype=np.float64)
            walls = [d[s][1] for s in steps]
            wall = np.array(walls, dtype=np.float64) if all(w is not None for w in walls) else None
            run.series[tag] = Series(steps, vals, wall)
        run.count("duplicate_steps", self.duplicates)
        run.count("non_finite_values", self.non_finite)
        if run.non_finite:
            shown = "; ".join(f"{t}: {run.non_finite_text(t)}" for t in sorted(run.non_finite)[:4])
            more = f"; and {len(run.non_finite) - 4} more tag(s)" if len(run.non_finite) > 4 else ""
            run.notes.append(f"{self.non_finite} non-finite value(s) in {len(run.non_finite)} tag(s): {shown}{more}")
        huge = sum(nf.get("huge", 0) for nf in run.non_finite.values())
        if huge:
            run.notes.append(f"{huge} of the non-finite value(s) finite but huge ({HUGE_TEXT}, e.g. 1.7e308: an overflowed float), counted "
                             "as non-finite: no trainer metric reaches such values and the statistics overflow on them")
        return run
