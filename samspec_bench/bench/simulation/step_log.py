"""What a simulated rollout records: one row of `STEP_COLUMNS` per engine step (appended one
step or one closed-form block of steps at a time) and the tail's acceptance by position bin.
`tree`: the step verified multi-path draft trees (scheduler.py's tree steps; `num_drafted`
then counts tree tokens, the verify tokens the step model prices)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

STEP_COLUMNS = ("step", "time_s", "clock_s", "num_running", "num_waiting", "num_scheduled_tokens",
                "num_prefill_tokens", "num_decode_reqs", "context_tokens", "num_drafted", "num_accepted",
                "num_emitted", "speculative", "num_finished", "num_preempted", "tree")


class StepLog:
    """Per-step columns, each a list of scalars (one step) or arrays (a block of steps)."""

    def __init__(self):
        self._cols: dict[str, list] = {c: [] for c in STEP_COLUMNS}

    def add(self, **values) -> None:
        """One step (scalars) or a block of steps (arrays of equal length), every column named."""
        for c in STEP_COLUMNS:
            self._cols[c].append(values[c])

    def arrays(self) -> dict[str, np.ndarray]:
        steps = {}
        for c in STEP_COLUMNS:
            parts = [np.atleast_1d(np.asarray(v)) for v in self._cols[c]]
            steps[c] = np.concatenate(parts) if parts else np.zeros(0)
        for c in ("speculative", "tree"):
            steps[c] = steps[c].astype(bool)
        return steps


class TailAcceptance:
    """Drafted and accepted tokens, and steps with a draft, of the tail's decode steps, binned
    by token position at drafting time (bins split at `edges`). Inactive without a threshold."""

    def __init__(self, threshold: int | None, edges: Sequence[int]):
        self.threshold = threshold
        self.edges = np.asarray(list(edges), dtype=np.int64)
        nb = len(self.edges) + 1
        self.drafted = np.zeros(nb, dtype=np.int64)
        self.accepted = np.zeros(nb, dtype=np.int64)
        self.draft_steps = np.zeros(nb, dtype=np.int64)

    @property
    def active(self) -> bool:
        return self.threshold is not None

    def add(self, positions: np.ndarray, drafted: np.ndarray, accepted: np.ndarray) -> None:
        bins = np.searchsorted(self.edges, positions, side="right")
        np.add.at(self.drafted, bins, drafted)
        np.add.at(self.accepted, bins, accepted)
        np.add.at(self.draft_steps, bins, (drafted > 0).astype(np.int64))

    def result(self) -> dict[str, np.ndarray] | None:
        if not self.active:
            return None
        return {"edges": self.edges, "drafted": self.drafted, "accepted": self.accepted,
                "draft_steps": self.draft_steps}
