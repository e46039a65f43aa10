"""Named drafting strategies, each one module behind one interface (`base.Strategy`): `seed`,
`evidence`, `histospec`, `seer`, `das`, `arctic`. A spec picks one and may change its most
draft tokens, its source and its step switch:
`NAME[:k=K][:paths=W][:tree_at=R][:cost=C][:sched=S][:divided=C][@SOURCES][/SWITCH]`,
e.g. `evidence:k=3@own`, `evidence:cost=0.1` (the evidence policy's cost per draft token, for
the strategies that draft with it: evidence, and histospec and arctic, where it is the
min_token_prob), `arctic:paths=4` (multi-path drafts of 4 paths where at most R (8)
requests run and nobody waits: sam/draft_tree.py), `seer:sched=context` (the rollout engine admits
waiting requests in Seer's context-aware order, bench/simulation/admission.py),
`seer:divided=8192` (Seer's divided rollout: the instances pull from one queue and a request
moves on every 8,192 tokens, bench/simulation/shared_queue.py), `seed/cost`,
`histospec/schedule:1-32=16;33-1024=0`, `seer/cutoff:8:0.3` (switches.py: always,
threshold:T, schedule:..., cost, costk, and `enginecutoff:W:T`, TensorRT-LLM's acceptance gate
over the whole engine; `cutoff:W:T` adds the same rolling cut-off per request,
rules.RollingCutoff). Torch-free."""

from __future__ import annotations

from dataclasses import replace

from samspec_bench.sam.strategies import arctic, das, evidence, histospec, seed, seer
from samspec_bench.sam.strategies.base import (NEEDS_DIVIDED, NEEDS_GROUP, NEEDS_HISTORY, NEEDS_SCHEDULER, NEEDS_SERVER,
                                               NEEDS_TREE,
                                               SCHEDULES, LengthRule, RuleDrafter, Strategy)
from samspec_bench.sam.strategies.rules import AimdLength, BudgetByLength, RollingCutoff
from samspec_bench.sam.strategies.switches import needs_cost, parse_switch, switch_threshold

STRATEGIES = {m.STRATEGY.name: m.STRATEGY for m in (seed, evidence, histospec, seer, das, arctic)}
STRATEGY_SOURCES = ("own", "group", "history", "group+history")

__all__ = ["STRATEGIES", "STRATEGY_SOURCES", "Strategy", "LengthRule", "RuleDrafter", "AimdLength", "BudgetByLength",
           "RollingCutoff", "parse_switch", "parse_strategy", "switch_threshold", "needs_cost", "NEEDS_DIVIDED",
           "NEEDS_GROUP", "NEEDS_HISTORY", "NEEDS_SCHEDULER", "NEEDS_SERVER", "NEEDS_TREE", "SCHEDULES"]


def _with_cutoff(base, window: int, threshold: float):
    return lambda: RollingCutoff(base() if base is not None else None, window=window, threshold=threshold)


def _cutoff_values(spec: str, switch: str) -> tuple[int, float]:
    """(window, threshold) of a `cutoff:WINDOW:THRESHOLD` switch; a ValueError naming the bad
    value and the form otherwise."""
    form = ("give cutoff:WINDOW:THRESHOLD, WINDOW a whole number >= 1 of a request's drafting steps and THRESHOLD "
            "its mean acceptance (accepted / drafted) in [0, 1] below which it stops drafting, e.g. cutoff:8:0.3")
    parts = switch.split(":")
    if len(parts) != 3:
        raise ValueError(f"strategy {spec!r}: {switch!r} has {len(parts) - 1} value(s) after 'cutoff', not 2; {form}")
    w, t = parts[1:]
    if not w.isdigit() or int(w) < 1:
        raise ValueError(f"strategy {spec!r}: WINDOW {w!r} is not a whole number >= 1; {form}")
    try:
        threshold = float(t)
    except ValueError:
        threshold = float("nan")
    if not 0.0 <= threshold <= 1.0:   # NaN too
        raise ValueError(f"strategy {spec!r}: THRESHOLD {t!r} is not a number in [0, 1]; {form}")
    return int(w), threshold


NAME_OPTIONS = {"k": "k", "paths": "paths", "tree_at": "tree_running", "divided": "divided"}   # option -> field


def _with_cost(spec: str, s: Strategy, value: str) -> str:
    """The strategy's length spec with the evidence policy's cost set to `value` (in [0, 1))."""
    try:
        cost = float(value)
    except ValueError:
        cost = -1.0
    if not 0.0 <= cost < 1.0:
        raise ValueError(f"strategy {spec!r}: cost={value}: the cost per draft token is a number in [0, 1)")
    length = s.length or "evidence"
    if s.drafter != "sam" or not length.startswith("evidence"):
        raise ValueError(f"strategy {spec!r}: cost=C sets the evidence policy's cost, and {s.name} drafts without it "
                         f"({s.drafter}); drop cost=")
    head, _, params = length.partition(":")
    kept = [p for p in params.split(",") if p and not p.startswith("cost=")]
    return f"{head}:" + ",".join([f"cost={cost!r}", *kept])


def _name_options(spec: str, text: str, s: Strategy) -> dict:
    """`k=K:paths=W:tree_at=R:cost=C:sched=S:divided=D` of a spec, any of them, as Strategy fields: k the most
    draft tokens a step may verify (>= 1; the suites check their own upper bound), W the paths of a
    multi-path draft (>= 1), R the most running requests of a step that verifies trees (>= 1), C
    the evidence policy's cost per draft token (the length spec), S the rollout engine's admission
    order (SCHEDULES), D the response tokens a divided rollout's chunk runs before it may move to
    another instance."""
    out: dict = {}
    seen: set = set()
    for part in text.split(":"):
        key, _, val = part.partition("=")
        if key in seen:   # seed:k=3:k=5 would keep one of them silently
            raise ValueError(f"strategy {spec!r}: {key}= given twice; give each option once")
        seen.add(key)
        if key == "cost":
            out["length"] = _with_cost(spec, s, val)
            continue
        if key == "sched":
            if val not in SCHEDULES:
                raise ValueError(f"strategy {spec!r}: sched={val}: the admission order is one of {', '.join(SCHEDULES)}")
            out["schedule"] = val
            continue
        if key not in NAME_OPTIONS or not val.isdigit() or int(val) < 1:
            raise ValueError(f"strategy {spec!r}: ':{part}' should be k=K, paths=W, tree_at=R or divided=D with "
                             "an integer >= 1, cost=C or sched=S, each after a ':'")
        out[NAME_OPTIONS[key]] = int(val)
    if "tree_running" in out and "paths" not in out:
        raise ValueError(f"strategy {spec!r}: tree_at=R sets where multi-path drafts start; give paths=W too")
    return out


def parse_strategy(spec: str) -> Strategy:
    """`NAME[:k=K][:paths=W][:tree_at=R][:cost=C][:sched=S][:divided=D][@SOURCES][/SWITCH]` -> Strategy
    (ValueError with the choices on a bad spec)."""
    if not spec.isascii():   # int("３") is 3: a full-width digit would pass, and label the arm with it
        bad = next(c for c in spec if not c.isascii())
        raise ValueError(f"strategy {spec!r}: {bad!r} is not ASCII; write the spec in ASCII, e.g. seed:k=3@own")
    head, slash, switch = spec.strip().partition("/")
    name, at, sources = head.partition("@")
    name, colon, k_opt = name.partition(":")
    for sep, text, what in ((colon, k_opt, "an option (k=K, ...)"), (at, sources, "the sources"),
                            (slash, switch, "the switch")):
        if sep and not text:   # 'seed/' would run as seed under another label
            raise ValueError(f"strategy {spec!r}: nothing after '{sep}'; give {what} after it, or drop the '{sep}'")
    if name not in STRATEGIES:
        raise ValueError(f"strategy {name!r}: choose from {', '.join(STRATEGIES)}")
    s = STRATEGIES[name]
    if k_opt:
        s = replace(s, **_name_options(spec, k_opt, s))
    if sources:
        canon = "+".join(p for p in sources.split("+") if p != "own") or "own"
        if canon not in STRATEGY_SOURCES:
            raise ValueError(f"strategy {spec!r}: sources {sources!r}, use one of {', '.join(STRATEGY_SOURCES)}")
        s = replace(s, sources=canon)
    if switch:
        if switch.startswith("cutoff:"):
            s = replace(s, rule=_with_cutoff(s.rule, *_cutoff_values(spec, switch)))
        else:
            parse_switch(switch, cost=lambda kind: None)   # checked now; built per arm
            s = replace(s, switch=switch)
    return replace(s, name=spec.strip())
