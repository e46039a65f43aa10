"""The decode walk a profile follows (profiles.py): where an always-speculating decode of one
response at k drafts, and what each of its steps emits, turn by turn.

A profile reads a draft at every response position, because the simulation's own walk
(thresholds, budget cuts, a per-step k) may differ from this one. But a drafter that learns
from acceptance (the evidence policy's record and per-request scale, a draft budget) has to
learn what a decode teaches it: one judgement per step, by the tokens that step emits. Judged
one appended token at a time instead, every draft would look accepted for one token at most.
So on this walk's positions the drafter proposes and is judged by the step's tokens
(`Drafter.settle`), and off it the drafter only peeks (`Drafter.peek`). On a drafter without
such state both give the same drafts. The walk is `accept`'s replay
(bench/engines/replay.replay_response): pos += accepted + 1, with no bonus token past the end.

Multi-turn responses (tool spans [start, end) in response positions, tool_turns.py): nothing is
drafted in the tool text, nor at the next turn's first token, which the prefill samples. A step
emits nothing past its turn's end. Each model turn is a new engine request, as in verl's agent
loop and in `accept` (suites/accept/turns.py), so a walk over one response restarts its
request at every turn (`restarts`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np


class DecodeWalk:
    """One response's walk: `next` is the next position the decode drafts at."""

    __slots__ = ("next", "end", "skip", "restarts")

    def __init__(self, n: int, spans: Sequence[tuple[int, int]] | None = None):
        self.next = 1
        self.end = np.full(max(n, 1), n, dtype=np.int64)     # per position, where its turn ends
        self.skip = np.zeros(max(n, 1), dtype=bool)          # tool text and a turn's first token
        self.restarts: set[int] = set()
        for s, e in reversed(list(spans or ())):
            self.end[:s] = s
            self.skip[s:min(n, e + 1)] = True
            if e < n:
                self.restarts.add(int(e))

    def on(self, p: int) -> bool:
        """Whether the decode drafts at p (a prefilled position passes the walk on by one)."""
        if self.skip[p]:
            if self.next == p:
                self.next = p + 1
            return False
        return self.next == p

    def step(self, p: int, accepted: int) -> int:
        """The tokens the step at p emits with `accepted` draft tokens confirmed (within its
        turn); the walk moves past them."""
        end = int(self.end[p])
        a = min(int(accepted), end - p)
        e = a + 1 if p + a < end else a
        self.next = p + e
        return e
