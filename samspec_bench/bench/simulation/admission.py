"""Which waiting request the simulated engine admits next (`RolloutSimulation._admit`).

- `fcfs`: first come first served, the order the requests were submitted in (vLLM's default
  scheduler, and what verl's rollout gets today).
- `context`: Seer's context-aware scheduling (arXiv 2511.14617, section "context-aware
  scheduling", as read from the paper; no code of it is public). The responses of one prompt
  have similar lengths, so the first response of each group to be admitted is a probe: every
  group's probe goes ahead of the other waiting requests, first come first served among
  probes. The rest of a group waits behind the probes and is admitted by its group's estimated
  length, longest first (an approximation of longest-job-first, which shortens the tail): a
  group none of whose admitted members has finished counts as longest (its length is unknown
  and at least as long as its running members have got), otherwise the estimate is the
  longest length among its finished members. Ties go first come first served.

  Seer also divides each request into chunks and moves them between instances through a
  global KV pool (divided rollout, shared_queue.py); there the order ranks one queue for every
  instance, and a chunk that comes back is ranked by its group's estimate like the rest. Without
  it each instance keeps its own requests (`--dp-shard`) and a request, once admitted, runs to
  its end (only KV preemption interrupts it, as in the engine). Preempted requests go back to
  the front of their instance's queue under both orders, as the engine does.

Online only: the order reads what the engine has seen (which members finished, and their
lengths), never a waiting request's own length.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

ADMISSION_ORDERS = ("fcfs", "context")


class ContextAwareOrder:
    """Seer's admission order over one instance's requests (the module docstring)."""

    def __init__(self, groups: Sequence, lengths: np.ndarray):
        keys = {}
        self.group = np.array([keys.setdefault(g, len(keys)) for g in groups], dtype=np.int64)
        self.L = np.asarray(lengths, dtype=np.int64)
        self.n_groups = len(keys)
        self.waiting = np.ones(len(self.L), dtype=bool)
        self.started = np.zeros(self.n_groups, dtype=bool)    # a member has been admitted
        self.known = np.full(self.n_groups, -1, dtype=np.int64)   # longest finished member; -1: none yet

    def finished(self, idx: np.ndarray) -> None:
        """Requests that just finished: their groups' estimates learn their lengths."""
        if len(idx):
            np.maximum.at(self.known, self.group[idx], self.L[idx])

    def peek(self) -> int:
        """The next request to admit (there must be one waiting)."""
        cand = np.flatnonzero(self.waiting)
        g = self.group[cand]
        probe = ~self.started[g]
        if probe.any():
            return int(cand[np.argmax(probe)])   # the earliest waiting request of an unstarted group
        est = np.where(self.known[g] < 0, np.iinfo(np.int64).max, self.known[g])
        return int(cand[np.argmax(est)])         # argmax takes the first of equals: first come first served

    def take(self, i: int) -> None:
        self.waiting[i] = False
        self.started[self.group[i]] = True

    def rejoin(self, i: int) -> None:
        """A started request waits again (a divided rollout's chunk): ranked by its group's
        estimate, first come first served by request index among equals."""
        self.waiting[i] = True


def make_order(name: str, groups: Sequence, lengths: np.ndarray) -> ContextAwareOrder | None:
    """The admission order `name` over these requests (None: first come first served)."""
    if name not in ADMISSION_ORDERS:
        raise ValueError(f"admission order {name!r}: use one of {', '.join(ADMISSION_ORDERS)}")
    if name == "fcfs":
        return None
    if any(g is None for g in groups):
        raise ValueError("context-aware admission needs every request's group (SimRequest.group)")
    return ContextAwareOrder(groups, lengths)
