"""What every reader returns: a `TrainingRun` (tag -> `Series` of (step, value[, wall time]),
counts of what was skipped, notes), and the builder the readers fill point by point."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


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
    format: str                        # tensorboard | console | wandb | csv
    label: str
    series: dict[str, Series] = field(default_factory=dict)
    # what was skipped or repaired, by kind (corrupt_records, truncated_lines, dropped_fields,
    # duplicate_steps, non_finite_values, ...); only kinds that occurred
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    read: dict[str, int] = field(default_factory=dict)   # what was read: files, records, step_lines, rows

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

    def summary(self) -> dict:
        """For result.json: where the run came from and what was skipped (no values)."""
        span = self.steps
        return {"path": self.path, "format": self.format, "label": self.label, "tags": len(self.series),
                "first_step": span[0] if span else None, "last_step": span[1] if span else None,
                "read": dict(self.read), "skipped": dict(self.counts), "notes": list(self.notes)}


class SeriesBuilder:
    """Points in the order a log holds them -> sorted Series. A step logged twice (a restarted
    run that re-logs steps after resuming from a checkpoint) keeps the later value; non-finite
    values are dropped. Both are counted on the run."""

    def __init__(self) -> None:
        self._points: dict[str, dict[int, tuple[float, float | None]]] = {}
        self.duplicates = 0
        self.non_finite = 0

    def add(self, tag: str, step: int, value: float, wall: float | None = None) -> None:
        if not math.isfinite(value):
            self.non_finite += 1
            return
        d = self._points.setdefault(tag, {})
        if step in d:
            self.duplicates += 1
        d[step] = (value, wall)

    def has(self, tag: str, step: int) -> bool:
        return step in self._points.get(tag, {})

    def build_into(self, run: TrainingRun) -> TrainingRun:
        for tag, d in self._points.items():
            steps = np.array(sorted(d), dtype=np.int64)
            vals = np.array([d[s][0] for s in steps], dtype=np.float64)
            walls = [d[s][1] for s in steps]
            wall = np.array(walls, dtype=np.float64) if all(w is not None for w in walls) else None
            run.series[tag] = Series(steps, vals, wall)
        run.count("duplicate_steps", self.duplicates)
        run.count("non_finite_values", self.non_finite)
        return run
