"""Multi-turn requests in the rollout simulation: a response whose tool output the rollout wrote
between the model's turns (verl's tool agent loop, tool-integrated reasoning).

How the engine sees such a response (volcengine/verl, verl/experimental/agent_loop/
tool_agent_loop.py): every assistant turn is its own `generate` call whose prompt is everything
so far; the loop parses the turn's tool call, runs the tool off the engine, appends the tool
turn's tokens to the response (response_mask 0) and calls the engine again. So, per request:
- a turn ends at a tool span's start: the request leaves the engine (its batch slot is free);
- the tool runs for `latency_s` seconds (a fixed figure the user gives; 0 by default), then the
  request waits again at the back of the queue;
- readmitted, it prefills the tool tokens (and its last generated token, whose KV the engine
  had not written yet) as one chunk that samples the next turn's first token. Its earlier KV is
  assumed kept by the prefix cache: not counted against the cache while the tool runs, and not
  recomputed (under KV pressure vLLM may have evicted some of it; that is not modelled);
- tool text is never drafted or decoded; a draft is kept only up to the turn's end.

A tool span at the response's end (tool text appended after the last turn) reaches no engine:
the caller ends the response before it (`engine_spans`). Spans are response positions
[start, end), 0 < start < end < response length.
"""

from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np


def engine_spans(spans: Sequence[tuple[int, int]], n: int) -> tuple[list[tuple[int, int]], int]:
    """The tool spans of a response of n tokens the engine prefills, and the response length
    the engine generates to: a span at the end is cut off with the text after it (none
    follows), spans past n are dropped, a span reaching n cuts the response at its start."""
    out: list[tuple[int, int]] = []
    for s, e in sorted((int(s), int(e)) for s, e in spans):
        if s >= n or e <= s:
            continue
        if e >= n:
            return out, s
        out.append((s, e))
    return out, n


def span_mask(spans: Sequence[tuple[int, int]], n: int) -> np.ndarray:
    """Per response position, whether it is tool text."""
    m = np.zeros(n, dtype=bool)
    for s, e in spans:
        m[max(0, s):min(n, e)] = True
    return m


def mask_spans(mask: np.ndarray) -> list[tuple[int, int]]:
    """The runs of True in `mask` as [start, end) spans."""
    m = np.concatenate([[False], np.asarray(mask, dtype=bool), [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(m))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def turn_segments(spans: Sequence[tuple[int, int]] | None, n: int) -> list[tuple[int, int]]:
    """The model's turns of a response of n tokens as [start, end) stretches: from the start (or
    a tool span's end, the turn's first token) to the next tool span's start (or n)."""
    starts = [0] + [e for _, e in spans or ()]
    ends = [s for s, _ in spans or ()] + [n]
    return list(zip(starts, ends))


def turn_profile(prof: tuple, spans: Sequence[tuple[int, int]]) -> tuple:
    """A response's profile (drafted, accepted[, tree drafted, tree accepted]) as its turns read
    it: nothing drafted inside tool text nor at a turn's first token (the prefill samples it), a
    draft kept at most up to the turn's end (the token before the tool text)."""
    if not spans:
        return prof
    out = tuple(np.array(a, copy=True) for a in prof)
    n = len(out[0])
    pos = np.arange(n)
    end = np.full(n, n, dtype=np.int64)   # per position, where its turn ends
    for s, e in reversed(list(spans)):
        end[:s] = s
        out[0][s:min(n, e + 1)] = 0
        out[1][s:min(n, e + 1)] = 0
        if len(out) > 2:
            out[2][s:min(n, e + 1)] = 0
            out[3][s:min(n, e + 1)] = 0
    cap = np.maximum(end - 1 - pos, 0).astype(out[1].dtype)
    out[1][:] = np.minimum(out[1], cap)
    if len(out) > 2:
        out[3][:] = np.minimum(out[3], cap)
    return out


class ToolTurns:
    """The turn state of a simulated rollout's requests: where each request's current turn
    ends (`end`, its response length when no turn is left), the requests away running a tool,
    and what the turns cost (tool calls, tool tokens prefilled)."""

    def __init__(self, spans: Sequence, L: np.ndarray, latency_s: float = 0.0):
        self.spans = [list(s) if s is not None and len(s) else None for s in spans]
        self.any = any(s is not None for s in self.spans)
        self.latency_s = float(latency_s)
        self.L = np.array(L, dtype=np.int64, copy=True)
        self.end = self.L.copy()
        self.next = np.zeros(len(L), dtype=np.int64)
        for i, s in enumerate(self.spans):
            if s is not None:
                if not all(0 < a < b < L[i] for a, b in s):
                    raise ValueError(f"request {i}: tool spans {s} must lie inside its response (1 .. {L[i] - 1})")
                self.end[i] = s[0][0]
        self.away: list[tuple[float, int]] = []   # (back at, request) heap
        self.calls = 0
        self.tool_tokens = 0

    def more_turns(self, idx: np.ndarray) -> bool:
        """Whether any of `idx` has a turn after its current one, or a request is away."""
        return bool(self.away) or bool(np.any(self.end[idx] < self.L[idx]))

    def leave(self, idx: np.ndarray, pos: np.ndarray, clock: float) -> np.ndarray:
        """Those of `idx` at the end of a turn, not of their response, leave for their tool
        (`pause`); returns them."""
        if not self.any:
            return idx[:0]
        away = idx[(pos[idx] < self.L[idx]) & (pos[idx] >= self.end[idx])]
        if away.size:
            self.pause(away, pos, clock)
        return away

    def rejoin(self, queue, clock: float, busy: bool) -> float:
        """Requests whose tool returned by `clock` wait again at the back of `queue`; an engine
        with nothing else to do (`busy` False) idles until the first returns. Returns the clock."""
        if not busy:
            clock = max(clock, self.next_back_s())
        for i in self.back(clock):
            queue.push(i, clock)
        return clock

    def pause(self, idx: np.ndarray, pos: np.ndarray, clock: float) -> None:
        """Requests `idx` reached their turn's end: each skips its tool span (pos jumps to its
        end: tool text is prefilled, never emitted) and is away until `clock` + latency."""
        for i in idx.tolist():
            s, e = self.spans[i][self.next[i]]
            pos[i] = e
            self.next[i] += 1
            more = self.next[i] < len(self.spans[i])
            self.end[i] = self.spans[i][self.next[i]][0] if more else self.L[i]
            self.calls += 1
            self.tool_tokens += e - s
            heapq.heappush(self.away, (clock + self.latency_s, i))

    def back(self, clock: float) -> list[int]:
        """The requests whose tool finished by `clock`, in the order they finished."""
        out = []
        while self.away and self.away[0][0] <= clock:
            out.append(heapq.heappop(self.away)[1])
        return out

    def next_back_s(self) -> float:
        return self.away[0][0]

    def describe(self) -> dict:
        return {"tool_calls": self.calls, "tool_tokens_prefilled": int(self.tool_tokens),
                "tool_latency_s": self.latency_s}
