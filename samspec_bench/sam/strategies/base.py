"""What every drafting strategy is made of (`Strategy`): a drafter and its sources, the most
draft tokens a step may verify, an optional per-request length rule applied over the
drafter's drafts (`LengthRule`), a step switch (sam/strategies/switches.py), what it needs to
run, and the paper or code it follows. `RuleDrafter` applies a length rule inside any engine's
decode loop (accept's replay, the acceptance engines); the rollout simulation applies the same
rule along each response's decode walk (bench/simulation/profiles.py, `rule_profile`).

Torch-free: a switch is any callable (StepState) -> bool and reads the state's counts by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from samspec_bench.sam.drafters import Drafter

# what a strategy needs from the training system (the report's third answer names them)
NEEDS_HISTORY = "history kept between RL steps (earlier responses per prompt)"
NEEDS_GROUP = "group sharing (siblings of a GRPO group drafted from one index, in one engine instance)"
NEEDS_SERVER = "a draft index shared across engine instances (a draft server)"
NEEDS_TREE = ("tree verification of multi-path drafts in the engine (tree attention; vLLM's suffix and ngram "
              "methods and this project's proposer verify one path)")
NEEDS_SCHEDULER = ("an engine scheduler that admits by the group's estimated length (Seer's context-aware "
                   "scheduling; vLLM and vllm-ascend admit first come first served)")
NEEDS_DIVIDED = ("one request queue and a KV pool shared by the engine instances, requests moving between them "
                 "chunk by chunk (Seer's divided rollout; verl gives each instance a fixed shard)")
SCHEDULES = ("fcfs", "context")   # admission orders (bench/simulation/admission.py)
TREE_RUNNING = 8   # trees where at most this many requests run and nobody waits: the seed's switch point


class LengthRule:
    """A per-request draft-length rule: `start(context)` gives a request's state, `length`
    how many draft tokens it may propose now, `update` what the last draft got (tokens
    drafted, tokens accepted). `context`: what is known when the request starts
    (e.g. `predicted_len`, `long_len`)."""

    name = "rule"

    def start(self, context: dict[str, Any] | None = None) -> Any:
        return None

    def length(self, state: Any, k: int) -> int:
        return k

    def update(self, state: Any, drafted: int, accepted: int) -> None:
        """Called after every draft the verifier judged (drafted >= 1)."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


@dataclass(frozen=True)
class Strategy:
    """One named arm: drafter, sources and k, an optional length rule and a step switch."""

    name: str
    drafter: str                      # 'sam-fixed' (prefix-consistent drafts) or 'sam' (its own length policy)
    sources: str                      # own, group, history or group+history
    k: int                            # most draft tokens per step
    switch: str = "always"            # switches.parse_switch spec
    length: str | None = None         # the drafter's length spec (None: the drafter's default)
    rule: Callable[[], LengthRule] | None = None   # per-request rule over the drafts (None: none)
    history_window: int = 16          # history source: responses kept per prompt
    server: bool = False              # needs an index shared across engine instances
    follows: str = ""
    differs: str = ""
    options: tuple[tuple[str, Any], ...] = field(default=())   # other drafter keyword options
    paths: int = 0                    # multi-path drafts in the tail: paths per tree (0: one path always)
    tree_running: int = TREE_RUNNING  # a step verifies trees at most this many running, nobody waiting
    schedule: str = "fcfs"            # the engine's admission order (rollout only): fcfs or context
    divided: int = 0                  # divided rollout's chunk in response tokens (rollout only; 0: fixed shards)

    @property
    def needs(self) -> tuple[str, ...]:
        """What the training system must provide, from the sources. A divided rollout moves
        requests between instances, so a group or history index must serve them all."""
        return tuple(n for n, on in ((NEEDS_HISTORY, "history" in self.sources),
                                     (NEEDS_GROUP, "group" in self.sources),
                                     (NEEDS_SERVER, self.server or (self.divided > 0 and self.sources != "own")),
                                     (NEEDS_TREE, self.paths > 0), (NEEDS_SCHEDULER, self.schedule != "fcfs"),
                                     (NEEDS_DIVIDED, self.divided > 0))
                     if on)

    def drafter_options(self) -> dict[str, Any]:
        opts = dict(self.options)
        if self.length is not None:
            opts["length"] = self.length
        return opts

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "drafter": self.drafter, "sources": self.sources, "k": self.k,
                "switch": self.switch, "length": self.length,
                "rule": self.rule().describe() if self.rule is not None else None,
                "history_window": self.history_window if "history" in self.sources else None,
                "paths": self.paths, "tree_running": self.tree_running if self.paths else None,
                "schedule": self.schedule, "divided": self.divided or None,
                "needs": list(self.needs), "follows": self.follows, "differs": self.differs}


def rule_context(history, prompt_ids) -> dict[str, Any]:
    """What a length rule knows when a request starts: its prompt's earlier responses' mean
    length (`predicted_len`, None without any) and the median of that mean over every prompt
    the history holds (`long_len`)."""
    if history is None:
        return {"predicted_len": None, "long_len": None}
    mine = history.responses(prompt_ids)
    means = history.mean_response_lengths()
    return {"predicted_len": sum(len(r) for r in mine) / len(mine) if mine else None,
            "long_len": float(sorted(means)[len(means) // 2]) if means else None}


class RuleDrafter(Drafter):
    """A drafter whose drafts are cut to a length rule's length; the rule learns from the
    tokens emitted after each draft (the accepted prefix is the common prefix), as the
    evidence policy judges its own drafts. Everything else is the inner drafter's."""

    def __init__(self, inner: Drafter, rule: LengthRule, context: Callable[[Any], dict] | None = None):
        self.inner, self.rule, self.context = inner, rule, context
        self.name = f"{inner.name}+{rule.name}"
        self._state: dict[Hashable, Any] = {}
        self._pending: dict[Hashable, list[int]] = {}

    @property
    def token_stats(self):
        return getattr(self.inner, "token_stats", None)

    def reset_statistics(self) -> None:
        if hasattr(self.inner, "reset_statistics"):
            self.inner.reset_statistics()

    def start(self, req_id, prompt_ids, group=None):
        self.inner.start(req_id, prompt_ids, group=group)
        self._state[req_id] = self.rule.start(self.context(prompt_ids) if self.context else None)

    def extend(self, req_id, token_ids):
        toks = list(token_ids.tolist() if hasattr(token_ids, "tolist") else token_ids)
        self._judge_pending(req_id, toks)
        self.inner.extend(req_id, toks)

    def propose(self, req_id, k):
        n = min(int(k), self.rule.length(self._state[req_id], int(k)))
        draft = list(self.inner.propose(req_id, k))[:max(n, 0)] if n > 0 else []
        if draft:
            self._pending[req_id] = draft
        return draft

    def peek(self, req_id, k):
        n = min(int(k), self.rule.length(self._state[req_id], int(k)))
        return list(self.inner.peek(req_id, k))[:max(n, 0)] if n > 0 else []

    def settle(self, req_id, emitted):
        toks = list(emitted)
        self._judge_pending(req_id, toks)
        self.inner.settle(req_id, toks)

    def _judge_pending(self, req_id, toks) -> None:
        """The rule learns how much of its pending draft `toks` accepted."""
        draft = self._pending.pop(req_id, None)
        if draft:
            a = 0
            while a < min(len(draft), len(toks)) and toks[a] == draft[a]:
                a += 1
            self.rule.update(self._state[req_id], len(draft), a)

    def stop(self, req_id):
        self.inner.stop(req_id)
        self._state.pop(req_id, None)
        self._pending.pop(req_id, None)

    def memory_bytes(self):
        return self.inner.memory_bytes()

    @property
    def active(self) -> int:
        return len(self._state)

    def describe(self):
        return {**self.inner.describe(), "rule": self.rule.describe()}
