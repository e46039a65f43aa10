"""The simulated requests' acceptance profiles packed into one array, read by (request,
position): what a request drafts and how much of it is accepted at a response position; the
tree profiles (multi-path drafts verified in the tail's tree steps, scheduler.py) in a second
table; and the one rule for what a decoding request drafts and keeps at a position.

A request may carry a second profile read from a response position on (`LateProfile`): a
group source's profile drafted after the request's siblings have finished
(profiles.after_siblings_profiles), read once the request has passed every sibling's length."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from samspec_bench.bench.simulation.profiles import stretch_positions


class LateProfile(NamedTuple):
    """The profile a request reads from response position `from_pos` on (the same positions as
    its first profile, read through the same stretch rule), and its tree profile (or None)."""
    from_pos: int
    drafted: np.ndarray
    accepted: np.ndarray
    tree_drafted: np.ndarray | None = None
    tree_accepted: np.ndarray | None = None


NEVER = np.iinfo(np.int64).max   # late_from of a request without a late profile


class ProfileTable:
    """Profiles stored once per distinct array (tiled workloads share them). Slot 0 is a shared
    empty profile: a request without one, or a position beyond its profile, drafts nothing.
    A request marked `stretch` reads its profile at its response length through
    `profiles.stretch_positions`; one with a `late` profile (LateProfile) reads that one from
    its `from_pos` on."""

    def __init__(self, requests: Sequence, response_lens: np.ndarray):
        n = len(requests)
        slot: dict[int, int] = {}
        chunks_d, chunks_a = [np.zeros(1, dtype=np.int16)], [np.zeros(1, dtype=np.int16)]
        total = 1

        def packed(d, a) -> int:
            nonlocal total
            key = id(d)
            if key not in slot:
                slot[key] = total
                chunks_d.append(np.asarray(d, dtype=np.int16))
                chunks_a.append(np.minimum(np.asarray(a, dtype=np.int16), chunks_d[-1]))
                total += len(d)
            return slot[key]

        self.offsets = np.zeros(n, dtype=np.int64)   # start of request i's profile (0 = the empty one)
        self.lengths = np.zeros(n, dtype=np.int64)   # positions beyond it draft nothing
        self.late_offsets = np.zeros(n, dtype=np.int64)
        self.late_from = np.full(n, NEVER, dtype=np.int64)
        for i, r in enumerate(requests):
            if r.drafted is None:
                continue
            if r.accepted is None or len(r.accepted) != len(r.drafted):
                raise ValueError(f"request {i}: drafted and accepted profiles differ in length")
            self.offsets[i] = packed(r.drafted, r.accepted)
            self.lengths[i] = len(r.drafted)
            late = getattr(r, "late", None)
            if late is not None:
                if len(late.drafted) != len(r.drafted) or len(late.accepted) != len(r.drafted):
                    raise ValueError(f"request {i}: its late profile and its profile differ in length")
                self.late_offsets[i] = packed(late.drafted, late.accepted)
                self.late_from[i] = max(int(late.from_pos), 0)
        self.any_late = bool((self.late_from < NEVER).any())
        self.stretch = np.array([bool(r.stretch) and r.drafted is not None for r in requests], dtype=bool)
        self.any_stretch = bool(self.stretch.any())
        self.response_lens = response_lens
        # int64 reads faster; past 50M positions int16 keeps the memory down
        wide = total < 50_000_000
        self.drafts = np.concatenate(chunks_d).astype(np.int64) if wide else np.concatenate(chunks_d)
        self.accepts = np.concatenate(chunks_a).astype(np.int64) if wide else np.concatenate(chunks_a)

    def index(self, idx: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Index into the packed arrays of position p of requests idx (0 = no draft)."""
        off = np.where(p >= self.late_from[idx], self.late_offsets[idx], self.offsets[idx]) if self.any_late \
            else self.offsets[idx]
        if self.any_stretch:
            p = np.where(self.stretch[idx],
                         stretch_positions(p, np.maximum(self.lengths[idx], 1), self.response_lens[idx]), p)
        return np.where(p < self.lengths[idx], off + p, 0)

    def drafted(self, idx: np.ndarray, p: np.ndarray) -> np.ndarray:
        return self.drafts[self.index(idx, p)]

    def accepted(self, idx: np.ndarray, p: np.ndarray) -> np.ndarray:
        return self.accepts[self.index(idx, p)]


class _TreeView(NamedTuple):
    """A request as the tree table reads it: its tree profile, or its linear one without."""
    drafted: object
    accepted: object
    stretch: bool
    late: LateProfile | None = None


def _late_tree(r) -> LateProfile | None:
    """The tree table's late profile of request r: its late tree profile, else its late linear one."""
    late = getattr(r, "late", None)
    if late is None or late.tree_drafted is None:
        return late
    return LateProfile(late.from_pos, late.tree_drafted, late.tree_accepted)


def tree_table(requests: Sequence, response_lens: np.ndarray, linear: ProfileTable) -> ProfileTable:
    """The profiles tree steps read: each request's tree profile (`tree_drafted`,
    `tree_accepted`), or its linear one where it has none; `linear` itself when no request has
    a tree profile. A tree profile has the linear one's length (read through the same
    stretch rule)."""
    if all(getattr(r, "tree_drafted", None) is None for r in requests):
        return linear
    views = []
    for i, r in enumerate(requests):
        td, ta = getattr(r, "tree_drafted", None), getattr(r, "tree_accepted", None)
        if td is None:
            views.append(_TreeView(r.drafted, r.accepted, r.stretch, getattr(r, "late", None)))
            continue
        if ta is None or len(ta) != len(td):
            raise ValueError(f"request {i}: tree_drafted and tree_accepted profiles differ in length")
        if r.drafted is not None and len(r.drafted) != len(td):
            raise ValueError(f"request {i}: the tree profile ({len(td)} positions) and the linear one "
                             f"({len(r.drafted)}) differ in length")
        views.append(_TreeView(td, ta, r.stretch, _late_tree(r)))
    return ProfileTable(views, response_lens)


def drafts_at(table: ProfileTable, idx: np.ndarray, p: np.ndarray, M: np.ndarray, k: int,
              tree: bool) -> np.ndarray:
    """Draft tokens requests `idx` (decoding at positions `p`, the engine's limits `M`: max_tokens,
    the response length where the engine knows the end) verify with at most k: a linear draft
    min(k, profile's, M - p - 1), vLLM's max_tokens cap; a tree min(k, profile's) node count, not
    capped by that (a node count is not a depth), none at the limit's last token. Before an EOS
    end the engine cannot see it and drafts on (the accepted count stops at the end)."""
    left = M - 1 - p
    d = np.minimum(table.drafted(idx, p), k)
    return np.where(left > 0, d, 0) if tree else np.maximum(np.minimum(d, left), 0)


def accepted_at(table: ProfileTable, idx: np.ndarray, p: np.ndarray, L: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Tokens kept of `d` drafted: the profile's accepted count, capped by the draft and by the
    tokens left - 1 (a tree's longest confirmed candidate can be longer than the response's rest)."""
    return np.minimum(np.minimum(table.accepted(idx, p), d), L - 1 - p)
