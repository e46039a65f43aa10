"""Per-request state of the SAM proposer inside vLLM's worker, and the acceptance records it
keeps for the caller.

A record holds, for every decode step of a request: its response position when drafting,
tokens drafted, accepted and emitted (accepted = emitted - 1 of the next step's sampled
tokens, capped by the draft) and propose_s, the seconds the proposer spent on the request's
row for that step's draft (0.0 where none was proposed). `gaps` counts the times vLLM skipped
the proposer while the request ran (near max_model_len vLLM gives every row k drafts of token
0 instead of calling it): the outcome of the draft pending then and the steps up to the next
call are not recorded, their tokens are counted in `unseen_tokens`. Records of finished requests wait
until the caller takes them (`SamWorkerExtension.samspec_take_records`); a request that was
preempted and comes back continues its record.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_FINISHED_RECORDS = 100_000  # records nobody collects are dropped beyond this (oldest first)


class RequestState:
    """One request's drafting state (see the package docstring for the options)."""

    __slots__ = ("rid", "key", "mode", "k", "sam", "prompt_len", "indexed", "pending", "oracle",
                 "on_track", "tokens", "threshold", "max_tokens", "steps", "emitted", "verified", "tail")

    def __init__(self, rid, key, mode, k, sam, prompt_len):
        self.rid = rid
        self.key = key
        self.mode = mode
        self.k = k
        self.sam = sam            # (SamDrafter, its request key) or None
        self.prompt_len = prompt_len
        self.indexed = prompt_len  # context tokens known to the drafter
        self.pending = None       # (position, drafted, seconds to index and draft) of the draft awaiting verification
        self.oracle = None
        self.on_track = True
        self.tokens = None        # content mapping: the indexed tokens (np.int32)
        self.threshold = None     # batch-size switch: draft only when the next batch is <= this
        self.max_tokens = None    # the request's max_tokens (no draft past its last token)
        self.steps = self.emitted = self.verified = 0   # decode steps seen, tokens they emitted and verified
        self.tail = False         # option "tail": price drafts by the row's chance to finish last (tail_cost.py)

    def remember(self, new, n: int) -> None:
        """Content mapping: keep the indexed tokens (the row's first n) to match rows by."""
        if n > self.tokens.size:
            grown = np.empty(max(2 * self.tokens.size, n, 64), dtype=np.int32)
            grown[: self.indexed] = self.tokens[: self.indexed]
            self.tokens = grown
        self.tokens[self.indexed:n] = new

    def follow_oracle(self, new) -> None:
        """Mode oracle: still on the given continuation after these new tokens?"""
        if self.oracle is not None and self.on_track:
            start = self.indexed - self.prompt_len
            want = self.oracle[start: start + len(new)]
            self.on_track = len(want) == len(new) and all(int(a) == b for a, b in zip(new, want))


def match_content(states: dict[Any, RequestState], row, n: int, hint=None) -> RequestState | None:
    """Content mapping: a state whose indexed tokens are exactly the row's first tokens (the
    row's state of the last call, `hint`, is tried first). Two requests with identical
    contexts have identical automata, so either may serve either."""
    cands = [states[hint]] if hint in states else []
    for st in cands + list(states.values()):
        m = st.indexed
        if st.tokens is not None and m <= n and np.array_equal(row[:m], st.tokens[:m]):
            return st
    return None


class RecordStore:
    """Acceptance records by the caller's key: of requests still running, and of finished
    ones until they are taken."""

    def __init__(self):
        self.running: dict[Any, dict] = {}
        self.finished: dict[Any, dict] = {}

    def open(self, key, *, vllm_request_id: str | None, prompt_len: int, mode: str, k: int, group) -> dict:
        """The record of a request entering the batch: a new one, or its earlier record when it
        was preempted and comes back (counted in `resumed`)."""
        rec = self.running.get(key)
        if rec is None and key in self.finished:   # preempted, now back
            rec = self.running[key] = self.finished.pop(key)
            rec["finished"] = False
            rec["resumed"] += 1
        elif rec is not None:
            rec["resumed"] += 1
        if rec is None:
            rec = self.running[key] = {"key": key, "vllm_request_id": vllm_request_id, "prompt_len": prompt_len,
                                       "mode": mode, "k": k, "group": group, "position": [], "drafted": [],
                                       "accepted": [], "emitted": [], "propose_s": [], "resumed": 0,
                                       "gaps": 0, "unseen_tokens": 0}
        return rec

    @staticmethod
    def add_step(rec: dict, position: int, drafted: int, accepted: int, emitted: int, propose_s: float) -> None:
        rec["position"].append(position)
        rec["drafted"].append(drafted)
        rec["accepted"].append(accepted)
        rec["emitted"].append(emitted)
        rec["propose_s"].append(propose_s)

    @staticmethod
    def add_gap(rec: dict, tokens: int) -> None:
        rec["gaps"] += 1
        rec["unseen_tokens"] += tokens

    def finish(self, key) -> None:
        rec = self.running.pop(key, None)
        if rec is not None:
            rec["finished"] = True
            self.finished[key] = rec
            while len(self.finished) > MAX_FINISHED_RECORDS:
                self.finished.pop(next(iter(self.finished)))

    def take(self, keys: list | None = None) -> list[dict]:
        """Records of requests that left the batch (finished), removed from the store. With
        `keys`, those requests' records, also of requests still in the batch: vLLM removes a
        finished request from its batch only at its next step, so the last requests of a
        generate call are still there when it returns. A record is handed out once."""
        if keys is None:
            out = list(self.finished.values())
            self.finished.clear()
            return out
        out = []
        for k in keys:
            if k in self.finished:
                out.append(self.finished.pop(k))
            elif k in self.running:   # still in the batch (vLLM frees it at its next step)
                out.append(dict(self.running.pop(k), finished=False))
        return out
