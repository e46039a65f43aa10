"""The waiting requests of a simulated rollout, in the order the engine admits them
(`RolloutSimulation._admit`): one engine instance's own queue, or one queue that several
instances pull from (shared_queue.py, Seer's divided rollout).

First come first served keeps a FIFO; `context` is Seer's order (admission.py), which picks
among the waiting requests by group. A request may come back (`push`): a chunk of a divided
rollout that left its instance; it then waits again, at the back under first come first
served. Preempted requests do not come through here: they go back to the front of their own
instance (the scheduler's `requeue`), as in the engine.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np

from samspec_bench.bench.simulation.admission import make_order


class WaitingQueue:
    """Requests waiting for a slot, indices 0 .. n-1 all waiting at first, in submission order."""

    def __init__(self, admission: str, groups: Sequence, lengths: np.ndarray):
        n = len(lengths)
        self.order = make_order(admission, groups, lengths)   # None: first come first served
        self.fifo = deque(range(n)) if self.order is None else None
        self.count = n
        self.ready_s = np.zeros(n)   # when each request (last) joined the queue, in simulated seconds

    def __len__(self) -> int:
        return self.count

    def peek(self) -> int:
        """The request admitted next (there must be one waiting)."""
        return self.fifo[0] if self.order is None else self.order.peek()

    def take(self, i: int) -> None:
        """Request i (the one `peek` gave) leaves the queue for an instance."""
        if self.order is None:
            if self.fifo.popleft() != i:
                raise ValueError(f"request {i} taken out of first-come-first-served order")
        else:
            self.order.take(i)
        self.count -= 1

    def push(self, i: int, at_s: float) -> None:
        """Request i waits again from time `at_s` (a divided rollout's chunk left its instance)."""
        if self.order is None:
            self.fifo.append(i)
        else:
            self.order.rejoin(i)
        self.ready_s[i] = at_s
        self.count += 1

    def finished(self, idx: np.ndarray) -> None:
        """Requests that just finished (an order that learns from them hears of it)."""
        if self.order is not None:
            self.order.finished(idx)
