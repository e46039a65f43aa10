"""What to draft with: one drafter configuration of a sweep (`DraftConfig`: drafter, k, draft
sources, group order, options), the limits on it (`MAX_K`), which configurations a drafter
can run at all (`unsupported_reason`) and a fresh drafter for one (`build_drafter`).

Shared by every engine and the simulation: the trace replay, the acceptance suite over a
model engine, and the acceptance profiles that price a simulated rollout. Torch-free.

Draft sources: the response's own prompt and prefix (`own`, always), the GRPO group's sibling
responses generated so far (`group`), earlier RL steps' responses to the same prompt
(`history`, SAM only: sam/history.py) and a static corpus (`corpus`, SAM only). Group
members advance `concurrent`ly (one batched decode step) or `sequential`ly (file order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from samspec_bench.metrics import MAX_ENCODED
from samspec_bench.sam.drafters import (DRAFTERS, ArcticSuffixDrafter, Drafter, SamDrafter, arctic_available,
                                        make_drafter)
from samspec_bench.sam.history import HistoryStore
from samspec_bench.sam.strategies import parse_strategy
from samspec_bench.sam.strategies.base import RuleDrafter, rule_context

GROUP_ORDERS = ("concurrent", "sequential")
SOURCE_NAMES = ("own", "group", "history", "corpus")
SAM_DRAFTERS = ("sam", "sam-fixed")  # the suffix-automaton drafter with its default / fixed length
MAX_K = MAX_ENCODED - 1  # emitted = accepted + 1 must fit the per-step encoding


@dataclass(frozen=True)
class DraftConfig:
    """One drafter configuration of a sweep: drafter, k and draft sources."""

    drafter: str = "sam"
    k: int = 3
    group: bool = False
    corpus: bool = False
    order: str = "concurrent"  # group order; meaningful only with group=True
    options: tuple[tuple[str, Any], ...] = ()  # drafter keyword options, sorted (name, value) pairs
    history: bool = False  # earlier RL steps' responses to the same prompt
    strategy: str | None = None  # a named strategy's spec (sam/strategies): its length rule wraps the drafter

    def __post_init__(self):
        if self.drafter not in DRAFTERS:
            raise ValueError(f"unknown drafter {self.drafter!r}: choose from {', '.join(DRAFTERS)}")
        if isinstance(self.k, bool) or not isinstance(self.k, (int, np.integer)) or not 1 <= self.k <= MAX_K:
            raise ValueError(f"k = {self.k!r}: the number of draft tokens must be an integer in 1..{MAX_K}")
        if self.order not in GROUP_ORDERS:
            raise ValueError(f"group order {self.order!r}: use one of {', '.join(GROUP_ORDERS)}")

    @property
    def sources(self) -> str:
        return "+".join(["own"] + (["group"] if self.group else []) + (["history"] if self.history else [])
                        + (["corpus"] if self.corpus else []))

    @property
    def label(self) -> str:
        """Unique name of the configuration, e.g. 'sam k=3 own+group(concurrent)'."""
        src = self.sources + (f"({self.order})" if self.group else "")
        return (f"{self.strategy}: " if self.strategy else "") + f"{self.drafter} k={self.k} {src}"

    def describe(self) -> dict[str, Any]:
        return {"label": self.label, "drafter": self.drafter, "k": self.k, "sources": self.sources,
                "group_order": self.order if self.group else None, "options": dict(self.options),
                **({"strategy": self.strategy} if self.strategy else {})}


def unsupported_reason(cfg: DraftConfig) -> str | None:
    """Why no engine can run `cfg` here (None when the drafter supports it)."""
    if cfg.drafter == "suffix" and not arctic_available():
        return "the 'suffix' drafter needs arctic-inference, which is not installed (pip install arctic-inference)"
    if cfg.group and cfg.drafter not in SAM_DRAFTERS + ("suffix",):
        return f"the '{cfg.drafter}' drafter drafts from the request's own context only: no group sharing"
    if cfg.corpus and cfg.drafter not in SAM_DRAFTERS:
        return f"a static corpus is supported by the 'sam' drafter only, not '{cfg.drafter}'"
    if cfg.strategy and cfg.drafter not in SAM_DRAFTERS:
        return f"strategy {cfg.strategy!r} drafts with SAM only, not '{cfg.drafter}'"
    if cfg.history and cfg.drafter not in SAM_DRAFTERS:
        return f"the history source is supported by the 'sam' drafter only, not '{cfg.drafter}'"
    return None


def build_drafter(cfg: DraftConfig, corpus=None, history: HistoryStore | None = None,
                  token_stats=None) -> Drafter:
    """A fresh drafter for `cfg`. Group sharing: SAM keeps one automaton per group; Arctic's
    suffix drafter keeps finished responses cached (one drafter per group, so nothing is
    shared across groups). History: SAM drafts from `history` too. `token_stats`: SAM's
    acceptance record to share (another drafter's `token_stats`), None for a new one."""
    reason = unsupported_reason(cfg)
    if reason:
        raise ValueError(reason)
    opts = dict(cfg.options)
    if cfg.drafter in SAM_DRAFTERS:
        if cfg.drafter == "sam-fixed":
            opts.setdefault("length", "fixed")
        if cfg.corpus and corpus is None:
            raise ValueError("a corpus draft source needs a CorpusAutomaton")
        if cfg.history and history is None:
            raise ValueError("a history draft source needs a HistoryStore")
        d = SamDrafter(group_sharing=cfg.group, corpus=corpus if cfg.corpus else None,
                       history=history if cfg.history else None, token_stats=token_stats, **opts)
        rule = parse_strategy(cfg.strategy).rule if cfg.strategy else None
        if rule is None:
            return d
        hist = history if cfg.history else None
        return RuleDrafter(d, rule(), context=lambda prompt: rule_context(hist, prompt))
    if cfg.drafter == "suffix":
        return ArcticSuffixDrafter(share_finished=cfg.group, **opts)
    return make_drafter(cfg.drafter, **opts)


def strategy_config(spec: str, order: str = "concurrent") -> DraftConfig:
    """The DraftConfig of a named strategy (sam/strategies): its drafter, k, sources and
    drafter options; its length rule wraps the drafter in `build_drafter`. Its step switch is
    the rollout's (an acceptance replay has no batch)."""
    st = parse_strategy(spec)
    return DraftConfig(drafter=st.drafter, k=st.k, group="group" in st.sources, order=order,
                       options=tuple(sorted(st.drafter_options().items())), history="history" in st.sources,
                       strategy=spec)
