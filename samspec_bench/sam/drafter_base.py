"""The drafter interface every drafter keeps (`Drafter`: start, extend, propose, stop, per
request), the checks of k and other counts, and what pickling a drafter keeps; sam/drafters.py
holds the drafters and re-exports them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Hashable, Iterable

import numpy as np

from samspec_bench.sam.draft_length import TokenAcceptance


class Drafter(ABC):
    """Per-request drafting state for a batch of requests."""

    name: str = "drafter"

    @abstractmethod
    def start(self, req_id: Hashable, prompt_ids: Iterable[int], group: Hashable | None = None) -> None: ...

    @abstractmethod
    def extend(self, req_id: Hashable, token_ids: Iterable[int]) -> None: ...

    @abstractmethod
    def propose(self, req_id: Hashable, k: int) -> list[int]: ...

    @abstractmethod
    def stop(self, req_id: Hashable) -> None: ...

    def peek(self, req_id: Hashable, k: int) -> list[int]:
        """The draft `propose` would give now, with no side effect: nothing learnt from it, no
        budget spent (a profile reads drafts at positions a decode walk skips). A drafter whose
        proposals change its state overrides it."""
        return self.propose(req_id, k)

    def settle(self, req_id: Hashable, emitted: Iterable[int]) -> None:
        """Judge the last proposal by the tokens its step emits (the accepted prefix and the
        target's token after it) before they are appended, possibly one at a time; `extend`
        then judges nothing more. For drafters that learn from acceptance; others keep none."""

    def memory_bytes(self) -> int:
        """Bytes held for the requests currently started (0 where unknown)."""
        return 0

    def describe(self) -> dict[str, Any]:
        """Name and options, for result files."""
        return {"name": self.name}

    @property
    def active(self) -> int:
        return len(getattr(self, "_reqs", {}))


def rebuild_options(drafter: Drafter, options: dict[str, Any], record: Any) -> dict[str, Any]:
    """What pickling a drafter with no live request keeps: its constructor's options, to build it
    anew (its automata are C objects, and a request's state belongs to the process serving it).
    `record`, its acceptance record (token_stats), goes with them where it is a Python one; a
    compiled one is left behind (a new empty one made) only while it holds nothing."""
    name = type(drafter).__name__
    if drafter.active:
        raise TypeError(f"cannot pickle a {name} with {drafter.active} live request(s): live automata are not "
                        "pickled; fork the process, or build the drafter in the worker")
    if isinstance(record, TokenAcceptance):
        return {**options, "token_stats": record}
    if len(record) or record.shape_stats or any(record.shape_total):
        raise TypeError(f"cannot pickle a {name} whose compiled acceptance record (token_stats) has learnt from "
                        "earlier requests: it is not pickled; build the drafter in the worker")
    return dict(options)


def check_k(k: int) -> int:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k = {k!r}: the number of draft tokens must be an integer >= 1")
    return int(k)
