"""Named drafting strategies, each one module behind one interface (`base.Strategy`): `seed`,
`evidence`, `histospec`, `seer`, `das`, `arctic`. A spec picks one and may change its most
draft tokens, its source and its step switch: `NAME[:k=K][:paths=W][:tree_at=R][@SOURCES][/SWITCH]`,
e.g. `evidence:k=3@own`, `arctic:paths=4` (multi-path drafts of 4 paths where at most R (8)
requests run and nobody waits: sam/draft_tree.py), `seed/cost`,
`histospec/schedule:1-32=16;33-1024=0`, `seer/cutoff:8:0.3` (switches.py: always,
threshold:T, schedule:..., cost, costk, and `enginecutoff:W:T`, TensorRT-LLM's acceptance gate
over the whole engine; `cutoff:W:T` adds the same rolling cut-off per request,
rules.RollingCutoff). Torch-free."""

from __future__ import annotations

from dataclasses import replace

from samspec_bench.sam.strategies import arctic, das, evidence, histospec, seed, seer
from samspec_bench.sam.strategies.base import (NEEDS_GROUP, NEEDS_HISTORY, NEEDS_SERVER, NEEDS_TREE, LengthRule,
                                               RuleDrafter, Strategy)
from samspec_bench.sam.strategies.rules import AimdLength, BudgetByLength, RollingCutoff
from samspec_bench.sam.strategies.switches import parse_switch

STRATEGIES = {m.STRATEGY.name: m.STRATEGY for m in (seed, evidence, histospec, seer, das, arctic)}
STRATEGY_SOURCES = ("own", "group", "history", "group+history")

__all__ = ["STRATEGIES", "STRATEGY_SOURCES", "Strategy", "LengthRule", "RuleDrafter", "AimdLength", "BudgetByLength",
           "RollingCutoff", "parse_switch", "parse_strategy", "NEEDS_GROUP", "NEEDS_HISTORY", "NEEDS_SERVER", "NEEDS_TREE"]


def _with_cutoff(base, window: int, threshold: float):
    return lambda: RollingCutoff(base() if base is not None else None, window=window, threshold=threshold)


NAME_OPTIONS = {"k": "k", "paths": "paths", "tree_at": "tree_running"}   # spec option -> Strategy field


def _name_options(spec: str, text: str) -> dict[str, int]:
    """`k=K:paths=W:tree_at=R` of a spec, any of them, as Strategy fields: k the most draft
    tokens a step may verify (>= 1; the suites check their own upper bound), W the paths of a
    multi-path draft (>= 1), R the most running requests of a step that verifies trees (>= 1)."""
    out = {}
    for part in text.split(":"):
        key, _, val = part.partition("=")
        if key not in NAME_OPTIONS or not val.isdigit() or int(val) < 1:
            raise ValueError(f"strategy {spec!r}: ':{part}' should be k=K, paths=W or tree_at=R with an "
                             "integer >= 1, each after a ':'")
        out[NAME_OPTIONS[key]] = int(val)
    if "tree_running" in out and "paths" not in out:
        raise ValueError(f"strategy {spec!r}: tree_at=R sets where multi-path drafts start; give paths=W too")
    return out


def parse_strategy(spec: str) -> Strategy:
    """`NAME[:k=K][:paths=W][:tree_at=R][@SOURCES][/SWITCH]` -> Strategy (ValueError with the choices on a
    bad spec)."""
    head, _, switch = spec.strip().partition("/")
    name, _, sources = head.partition("@")
    name, _, k_opt = name.partition(":")
    if name not in STRATEGIES:
        raise ValueError(f"strategy {name!r}: choose from {', '.join(STRATEGIES)}")
    s = STRATEGIES[name]
    if k_opt:
        s = replace(s, **_name_options(spec, k_opt))
    if sources:
        canon = "+".join(p for p in sources.split("+") if p != "own") or "own"
        if canon not in STRATEGY_SOURCES:
            raise ValueError(f"strategy {spec!r}: sources {sources!r}, use one of {', '.join(STRATEGY_SOURCES)}")
        s = replace(s, sources=canon)
    if switch:
        if switch.startswith("cutoff:"):
            try:
                _, w, t = switch.split(":")
                s = replace(s, rule=_with_cutoff(s.rule, int(w), float(t)))
                RollingCutoff(None, int(w), float(t))
            except ValueError:
                raise ValueError(f"strategy {spec!r}: cutoff:WINDOW:THRESHOLD, e.g. cutoff:8:0.3") from None
        else:
            parse_switch(switch, cost=lambda kind: None)   # checked now; built per arm
            s = replace(s, switch=switch)
    return replace(s, name=spec.strip())
