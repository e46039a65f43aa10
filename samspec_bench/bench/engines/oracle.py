"""The oracle drafter: drafts a known continuation of each request (typically its own greedy
output without speculation), so that every verify step checks k tokens the target will
accept. Passed to `Engine.generate(drafter=...)` like any drafter (capabilities.oracle_drafts):
the reference engine calls it in this process; the vLLM adapter hands the continuations to
SAM's proposer inside vLLM (its "oracle" mode). Used to measure the verify path against the
decode path (op-equivalence) and a verify step's cost (rollout profile)."""

from __future__ import annotations

from typing import Any, Hashable, Sequence

from samspec_bench.sam.drafters import Drafter


class OracleDrafter(Drafter):
    """Proposes `continuations[req_id]` from the request's current output position: k tokens
    per step, and with `mixed` ({req_id: width}) on every other step `mixed[req_id]` tokens
    (0..k, different across the batch, as a real drafter's are), so that a step-time fit can
    tell a verify step's cost per request from its cost per draft token. Mixed widths need
    an engine with capabilities.mixed_oracle_widths; a request without a continuation gets
    empty drafts."""

    name = "oracle"

    def __init__(self, continuations: dict[Hashable, Sequence[int]], mixed: dict[Hashable, int] | None = None):
        self.continuations = {r: [int(t) for t in c] for r, c in continuations.items()}
        self.mixed = {r: int(w) for r, w in (mixed or {}).items()}
        self.pos: dict[Hashable, int] = {}
        self.calls: dict[Hashable, int] = {}

    def start(self, req_id, prompt_ids, group=None) -> None:
        self.pos[req_id] = 0
        self.calls[req_id] = 0

    def extend(self, req_id, token_ids) -> None:
        self.pos[req_id] += len(list(token_ids))

    def propose(self, req_id, k: int) -> list[int]:
        p, c = self.pos[req_id], self.calls[req_id]
        self.calls[req_id] = c + 1
        w = min(self.mixed[req_id], int(k)) if c % 2 and req_id in self.mixed else int(k)
        return self.continuations.get(req_id, [])[p: p + w]

    def stop(self, req_id) -> None:
        self.pos.pop(req_id, None)
        self.calls.pop(req_id, None)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "what": "each request's given continuation"
                + (" (k drafts every other step, mixed widths in between)" if self.mixed else "")}
