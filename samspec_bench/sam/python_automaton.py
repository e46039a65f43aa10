"""Pure-Python suffix automaton with the same semantics as the compiled core.

Kept as the differential-test oracle's second opinion and as the speed baseline the
drafter benchmark compares against: it is built the way the public pure-Python SAMs are
(one dict of transitions per state), so its cost per token is what those pay.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

_SEP = -1
COUNT_WALK = 64  # states counted per new position, as _samcore.c's count_position
MAX_TOKEN_ID = 0x7FFFFFFE  # the largest token id the compiled core takes (2^31-2)


def as_token_list(tokens: Iterable[int]) -> list[int]:
    """Validate token ids as the compiled core does: non-negative ints, not empty."""
    if isinstance(tokens, int):
        raise TypeError("token ids must be an iterable of ints, not a single int")
    out = []
    for i, t in enumerate(tokens.tolist() if hasattr(tokens, "tolist") else tokens):
        if isinstance(t, float) or not hasattr(t, "__index__"):
            raise ValueError(f"token id at index {i} is {t!r} ({type(t).__name__}), not an int")
        v = t.__index__()
        if v < 0 or v > MAX_TOKEN_ID:
            raise ValueError(f"token id {v} at index {i} is out of range [0, 2^31-2]")
        out.append(v)
    if not out:
        raise ValueError("no token ids given (empty input)")
    return out


def check_count(value: Any, name: str, minimum: int = 0) -> int:
    """An integer argument (k, l_threshold, min_n...) checked as the compiled core checks it
    (_samcore.c's as_count, in the same words): a Python or numpy integer alike (anything with
    __index__), never a bool or a float."""
    if isinstance(value, bool):
        raise ValueError(f"{name} = {value!r}: must be an integer >= {minimum}, not a bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} = {value!r} ({type(value).__name__}): must be an integer >= {minimum}") from None
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum} (got {v})")
    return v


def token_array(tokens, what: str = "token ids") -> np.ndarray:
    """Token ids checked as the compiled core checks them (non-negative ints up to 2^31-2; a
    1-D integer array, or any iterable of ints), as an int32 array; empty is allowed here. An
    id int32 cannot hold is refused (naming `what`, the value and its index), never wrapped."""
    if isinstance(tokens, np.ndarray) and tokens.ndim == 1 and tokens.dtype.kind in "iu":
        bad = np.flatnonzero((tokens < 0) | (tokens > MAX_TOKEN_ID))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{what}: token id {int(tokens[i])} at index {i} is out of range [0, 2^31-2]")
        return tokens.astype(np.int32, copy=False)
    if isinstance(tokens, np.ndarray) and tokens.ndim != 1:
        raise ValueError(f"{what}: token ids must be a 1-D sequence (got an array of shape {tokens.shape})")
    seq = tokens if hasattr(tokens, "__len__") or isinstance(tokens, int) else list(tokens)
    if not isinstance(seq, int) and len(seq) == 0:
        return np.zeros(0, dtype=np.int32)
    try:
        return np.asarray(as_token_list(seq), dtype=np.int32)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


def heap_bytes(root: object) -> int:
    """Bytes of every Python object reachable from root through containers and slots,
    each object counted once (shared small ints too, once)."""
    import sys

    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set)):
            stack.extend(obj)
        elif hasattr(obj, "__slots__"):
            stack.extend(getattr(obj, a) for a in obj.__slots__ if hasattr(obj, a))
        elif hasattr(obj, "__dict__"):
            stack.append(obj.__dict__)
    return total


class ReferenceSam:
    """Generalized suffix automaton over documents; mirrors `_samcore.SamCore`."""

    def __init__(self, interleaved: bool = False):
        self.interleaved = interleaved
        self.text: list[int] = []
        self.succ: list[int] = []
        self.len = [0]
        self.link = [-1]
        self.fpos = [-1]
        self.next: list[dict[int, int]] = [{}]
        self.cnt = [0]  # occurrences (end positions) per state, counted as the C core does
        self.rpos = [-1]  # latest end position before the document's current one (C: rpos)
        self.doc_last: list[int] = []
        self.doc_end: list[int] = []

    def new_doc(self) -> int:
        if not self.interleaved and self.text:
            self.text.append(_SEP)
        self.doc_last.append(0)
        self.doc_end.append(-1)
        return len(self.doc_last) - 1

    def _new_state(self, length: int, link: int, fpos: int, nxt: dict) -> int:
        self.len.append(length)
        self.link.append(link)
        self.fpos.append(fpos)
        self.next.append(nxt)
        self.cnt.append(0)
        self.rpos.append(-1)
        return len(self.len) - 1

    def _clone(self, q: int, length: int) -> int:
        cl = self._new_state(length, self.link[q], self.fpos[q], dict(self.next[q]))
        self.cnt[cl] = self.cnt[q]
        self.rpos[cl] = self.rpos[q]
        return cl

    def _redirect(self, p: int, c: int, q: int, cl: int) -> None:
        while p != -1 and self.next[p].get(c) == q:
            self.next[p][c] = cl
            p = self.link[p]

    def extend(self, tokens: Iterable[int], doc: int = 0) -> None:
        if not 0 <= doc < len(self.doc_last):
            raise IndexError(f"document {doc} does not exist")
        if not self.interleaved and doc != len(self.doc_last) - 1:
            raise ValueError("a contiguous automaton only extends its newest document")
        for c in as_token_list(tokens):
            if self.doc_end[doc] >= 0:
                self._mark_recent(self.doc_last[doc], self.doc_end[doc])
            self._append(doc, c)
            self._count_position(self.doc_last[doc])

    def _mark_recent(self, q: int, pos: int) -> None:
        """Before a document's next token: its previous end is the latest occurrence of the
        first COUNT_WALK states of that end's chain (so it lags one position, as in C)."""
        for _ in range(COUNT_WALK):
            if q <= 0:
                break
            self.rpos[q] = pos
            q = self.link[q]

    def _count_position(self, q: int) -> None:
        """The new end position belongs to the first COUNT_WALK states of q's suffix-link chain."""
        for _ in range(COUNT_WALK):
            if q <= 0:
                break
            self.cnt[q] += 1
            q = self.link[q]

    def _append(self, doc: int, c: int) -> None:
        pos = len(self.text)
        self.text.append(c)
        if self.interleaved:
            self.succ.append(-1)
            if self.doc_end[doc] >= 0:
                self.succ[self.doc_end[doc]] = pos
        self.doc_end[doc] = pos
        last = self.doc_last[doc]
        q = self.next[last].get(c)
        if q is not None:  # the new prefix already occurs in another document
            if self.len[last] + 1 == self.len[q]:
                self.doc_last[doc] = q
                return
            cl = self._clone(q, self.len[last] + 1)
            self._redirect(last, c, q, cl)
            self.link[q] = cl
            self.doc_last[doc] = cl
            return
        cur = self._new_state(self.len[last] + 1, 0, pos, {})
        p = last
        while p != -1 and c not in self.next[p]:
            self.next[p][c] = cur
            p = self.link[p]
        if p != -1:
            q = self.next[p][c]
            if self.len[p] + 1 == self.len[q]:
                self.link[cur] = q
            else:
                cl = self._clone(q, self.len[p] + 1)
                self._redirect(p, c, q, cl)
                self.link[q] = cl
                self.link[cur] = cl
        self.doc_last[doc] = cur

    def _succ(self, pos: int) -> int:
        if self.interleaved:
            return self.succ[pos]
        nx = pos + 1
        return nx if nx < len(self.text) and self.text[nx] != _SEP else -1

    def _usable(self, st: int, length: int, exclude: int) -> tuple[int, int]:
        while st > 0 and (self.fpos[st] == exclude or self._succ(self.fpos[st]) == -1):
            st = self.link[st]
            length = self.len[st]
        return (st, length) if st > 0 else (0, 0)

    def _draft_from(self, e: int, k: int) -> list[int]:
        out, p = [], e
        for _ in range(k):
            p = self._succ(p)
            if p == -1:
                break
            out.append(self.text[p])
        return out

    def match(self, doc: int = 0) -> tuple[int, int]:
        if self.doc_end[doc] < 0:
            return 0, -1
        last = self.doc_last[doc]
        st, length = self._usable(last, self.len[last], self.doc_end[doc])
        return length, (self.fpos[st] if st > 0 else -1)

    def draft(self, k: int, doc: int = 0) -> list[int]:
        k = check_count(k, "k")
        length, e = self.match(doc)
        return self._draft_from(e, k) if length > 0 else []

    @property
    def match_length(self) -> int:
        return self.match(0)[0]

    def advance(self, st: int, length: int, tokens: Iterable[int]) -> tuple[int, int]:
        for c in as_token_list(tokens):
            while st != 0 and c not in self.next[st]:
                st = self.link[st]
                length = self.len[st]
            if c in self.next[st]:
                st, length = self.next[st][c], length + 1
            else:
                st, length = 0, 0
        return st, length

    def lookup(self, st: int, length: int, k: int) -> tuple[int, list[int]]:
        k = check_count(k, "k")
        st, length = self._usable(st, length, -1)
        return (length, self._draft_from(self.fpos[st], k)) if st > 0 else (0, [])

    # ----- evidence for the draft-length policy (SamCore.evidence / lookup_evidence) -----

    def _frequent_child(self, q: int) -> int:
        """The definition C's frequent_child keeps per state (best) instead of scanning:
        the child with the most occurrences, ties to the latest occurrence, then to the
        earliest first one, over all of q's edges (tests compare the two for every state)."""
        kids = self.next[q].values()
        return max(kids, key=lambda t: (self.cnt[t], self.rpos[t], -self.fpos[t])) if kids else -1

    def _evidence_from(self, q: int, length: int, k: int, choice: int) -> tuple:
        """choice: 0 the earliest occurrence's continuation, 1 the most frequent token by
        token (with `continued`: the occurrences followed by some token, the sum over the
        edges), 2 the latest earlier occurrence's (the earliest's where it has none)."""
        k = check_count(k, "k")   # every evidence entry point comes here
        if q <= 0:
            return (0, [], [], []) if choice == 1 else (0, [], [])
        toks, cnts, cont, p = [], [self.cnt[q]], [], self.fpos[q]
        if choice == 2 and self.rpos[q] >= 0 and self._succ(self.rpos[q]) != -1:
            p = self.rpos[q]
        for _ in range(k):
            if choice == 1:
                t = self._frequent_child(q)
                if t < 0:
                    break
                c = self.text[self.fpos[t]]
                cont.append(sum(self.cnt[x] for x in self.next[q].values()))
            else:
                p = self._succ(p)
                if p == -1:
                    break
                c = self.text[p]
                t = self.next[q][c]
            toks.append(c)
            cnts.append(self.cnt[t])
            q = t
        return (length, toks, cnts, cont) if choice == 1 else (length, toks, cnts)

    def evidence(self, k: int, doc: int = 0, choice: int = 0) -> tuple[int, list[int], list[int]]:
        if self.doc_end[doc] < 0:
            return 0, [], []
        last = self.doc_last[doc]
        st, length = self._usable(last, self.len[last], self.doc_end[doc])
        return self._evidence_from(st, length, k, choice)

    def lookup_evidence(self, st: int, length: int, k: int, choice: int = 0):
        st, length = self._usable(st, length, -1)
        return self._evidence_from(st, length, k, choice)

    def _chain(self, q: int, length: int, k: int, choice: int, depth: int) -> list:
        k, depth, out = check_count(k, "k"), check_count(depth, "depth", 1), []
        for _ in range(depth):
            if q <= 0:
                break
            out.append(self._evidence_from(q, length, k, choice))
            q = self.link[q]
            length = self.len[q]
        return out

    def evidence_chain(self, k: int, doc: int, choice: int, depth: int) -> list:
        if self.doc_end[doc] < 0:
            return []
        last = self.doc_last[doc]
        st, length = self._usable(last, self.len[last], self.doc_end[doc])
        return self._chain(st, length, k, choice, depth)

    def lookup_evidence_chain(self, st: int, length: int, k: int, choice: int, depth: int) -> list:
        st, length = self._usable(st, length, -1)
        return self._chain(st, length, k, choice, depth)

    def count(self, st: int) -> int:
        return self.cnt[st]


class ObjectSam:
    """The design of the public pure-Python SAMs (SAM-Decoding's dynamic SAM, the Ascend RL
    recipe), kept call for call as they are built, since the baseline is what people run
    today: one dataclass object per state holding a dict of transitions and its min_endpos,
    made with keyword arguments; clones made with copy.deepcopy; per appended token one call
    to walk the drafting state (itself a call to the transfer step) and one to add the state
    (itself a call to store it); the token list extended after the batch. Written here from
    that description; drafts follow the same min_endpos semantics as `SuffixAutomaton`."""

    @dataclass
    class State:
        next: dict
        link: int
        length: int
        min_endpos: int

    def __init__(self):
        self.states = [ObjectSam.State(next={}, link=-1, length=0, min_endpos=-1)]
        self.tokens: list[int] = []
        self.last = 0
        self.max_length = 0
        self.cur, self.cur_len = 0, 0  # the drafting state: longest suffix seen before

    def extend(self, tokens: Iterable[int]) -> None:
        tokens = as_token_list(tokens)
        for c in tokens:
            self._walk_drafting_state(c)  # over the text before this token, as the public code does
            self._add_state(c)
        self.tokens.extend(tokens)

    def _store(self, state: "ObjectSam.State") -> int:
        self.states.append(state)
        return len(self.states) - 1

    def _transfer(self, st: int, ln: int, c: int) -> tuple[int, int]:
        while st != 0 and c not in self.states[st].next:
            st = self.states[st].link
            ln = self.states[st].length
        if c in self.states[st].next:
            return self.states[st].next[c], ln + 1
        return 0, 0

    def _walk_drafting_state(self, c: int) -> None:
        self.cur, self.cur_len = self._transfer(self.cur, self.cur_len, c)

    def _add_state(self, c: int) -> None:
        import copy

        pos = self.max_length  # 0-based end position of this token
        self.max_length += 1
        cur = self._store(ObjectSam.State(next={}, link=-1, length=self.max_length, min_endpos=pos))
        p = self.last
        while p != -1 and c not in self.states[p].next:
            self.states[p].next[c] = cur
            p = self.states[p].link
        if p == -1:
            self.states[cur].link = 0
        else:
            q = self.states[p].next[c]
            if self.states[p].length + 1 == self.states[q].length:
                self.states[cur].link = q
            else:
                clone = self._store(copy.deepcopy(self.states[q]))
                self.states[clone].length = self.states[p].length + 1
                while p != -1 and self.states[p].next.get(c) == q:
                    self.states[p].next[c] = clone
                    p = self.states[p].link
                self.states[q].link = self.states[cur].link = clone
        self.last = cur

    def draft(self, k: int) -> list[int]:
        # the walked state matches the text before the last token; its min_endpos is earlier
        if self.cur_len == 0:
            return []
        e = self.states[self.cur].min_endpos
        return self.tokens[e + 1: e + 1 + k]
