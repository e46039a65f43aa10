"""A draft budget for the evidence policy (`evidence:budget=B`): at most B drafted tokens per
step per request on average, spent where the estimate expects the most accepted tokens.

Two parts, one drafter-wide state (`DraftBudget`):
- the policy's per-token cost acts as a Lagrange multiplier, adjusted online by dual ascent
  (integral control on drafted - B after every draft: cost += rate x (drafted - B), kept in
  [0, MAX_COST]; a draft the bucket cut counts as its length plus `windup` x its missing tokens
  there, so the price rises while the cap binds); it starts at the policy's own cost, so the estimate still picks which
  tokens are drafted, only the price of a token moves;
- a spend-down of savings (`spenddown`, per token; 0, off, by default): the price handed to the
  chooser is the multiplier less spenddown x the credit beyond one draft (k), at least 0. The
  multiplier is kept at 0 or above, so where even a free draft token finds too little evidence
  to spend B the deficit piles up in the bucket and is never spent (the qwen25math history
  steps). The spend-down spends it, but on weak tokens, leaving less for strong ones later: on
  the dev cells it dominated fewer (docs/drafting.md), so it stays off;
- a hard cap, a token bucket: every step (one propose) credits B; a draft may not exceed the
  credit (it is cut to floor(credit) tokens), which is kept at most max(burst, k) tokens, and
  starts empty. So over any run the drafted tokens never exceed B x steps: the mean drafted
  tokens per step is at most B, whatever the multiplier does.

The state is drafter-wide like the corrections' acceptance record and travels with it:
drafters sharing one record (a replay task's units, one serving proposer) share one budget
(`shared_budget`), and a new record (`reset_statistics`) starts a new budget. With a pool name
(`evidence:budget=B,pool=NAME`) the drafters of this process with that name share one budget
whatever their records: a replay that restarts the record every RL step then still keeps one
bucket over the whole run, so its drafted tokens over all steps are at most B x all steps (the
figure a pooled comparison reads), where per-step budgets bound each step's rate but not the
pooled one (steps weigh differently in two policies' pools). With a ceiling as well
(`evidence:budget=B,pool=NAME,ceiling=R`) the budget stays per record and the pool is only a
run-wide cap (`RunCeiling`): a bucket credited R every step that keeps whatever is unspent, so
a step may spend what earlier steps saved, the drafted tokens over the run stay within R x all
steps, and each record's own bucket still holds its step to B. Without a bucket of
its own (`bucket=0`, only under a ceiling) a record's budget only paces: the multiplier is kept
without a floor, so it remembers every token drafted over or under B since the record began
(the price handed to the chooser is that, at least 0), no draft is cut by the record's credit,
and the ceiling alone bounds what is drafted. A bucket that starts empty cuts the copy
stretches at the start of a step's responses even in a step that drafts less than B in all,
and a multiplier clipped at 0 forgets the stretches with nothing to draft (docs/drafting.md,
"A budget that paces"). Pure Python, no
engine import: the drafter hands the multiplier to the compiled chooser per draft (the
`cost=-1` path, as for a profile cost) with k cut to the credit.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Callable

MAX_COST = 0.99      # the multiplier's ceiling: at 1 no draft token pays for itself
KEPT_RECORDS = 64    # budgets kept per process, most recently used (one per live acceptance record)


class DraftBudget:
    """The drafter-wide budget state: the multiplier (`cost`), the bucket's `credit`, and what
    was spent (`steps`, `drafted`)."""

    __slots__ = ("budget", "burst", "rate", "windup", "spenddown", "bucket", "cost", "credit", "steps", "drafted",
                 "ceiling")

    def __init__(self, budget: float, burst: float, rate: float, cost: float, windup: float = 1.0,
                 spenddown: float = 0.0, bucket: bool = True):
        self.budget, self.burst, self.rate, self.windup = float(budget), float(burst), float(rate), float(windup)
        self.spenddown = float(spenddown)
        self.bucket = bool(bucket)   # False: no cap of its own, the multiplier unfloored (pacing only)
        self.cost = min(MAX_COST, max(0.0, float(cost)))
        self.credit = 0.0
        self.steps = 0
        self.drafted = 0
        self.ceiling: RunCeiling | None = None   # a run-wide cap over this and other budgets (set by the drafter)

    def _offer(self, credit: float, k: int) -> tuple[int, float]:
        """(most tokens, price) a step with this credit may draft at."""
        price = max(0.0, self.cost - self.spenddown * max(0.0, credit - k)) if self.spenddown else max(0.0, self.cost)
        return (min(int(k), int(credit)) if self.bucket else int(k)), price

    def _credited(self, k: int) -> float:
        """The credit after one more step's B: kept at most max(burst, k) with a bucket, all of
        it (and any debt) without."""
        return min(self.credit + self.budget, max(self.burst, float(k))) if self.bucket else self.credit + self.budget

    def peek(self, k: int, propose: Callable[[int, float], list]) -> list:
        """The draft a step would get now, with nothing credited, spent or learnt."""
        most, price = self._offer(self._credited(k), k)
        if self.ceiling is not None:
            most = min(most, int(self.ceiling.credit + self.ceiling.rate))
        return propose(most, price) if most > 0 else []

    def spend(self, k: int, propose: Callable[[int, float], list]) -> list:
        """One step: credit B, ask `propose(most tokens, cost)` for a draft of at most the credit
        (not called when the credit is under one token), debit it, move the multiplier."""
        self.credit = self._credited(k)
        most, price = self._offer(self.credit, k)
        if self.ceiling is not None:
            most = min(most, self.ceiling.credit_step())
        draft = propose(most, price) if most > 0 else []
        d = len(draft)
        if d > most:
            raise RuntimeError(f"draft budget: {d} tokens drafted for a cap of {most}")
        self.credit -= d
        if self.ceiling is not None:
            self.ceiling.debit(d)
        # a draft the credit cut counts as more than it got (anti-windup; windup 1: as k): else,
        # with the bucket binding, drafted - B averages 0 and the price would never rise to ration
        # by evidence
        wanted = d + self.windup * (k - d) if (d == most and most < k) else d
        # without a bucket no floor: a stretch with nothing to draft is remembered, not forgotten at 0
        floor = 0.0 if self.bucket else -math.inf
        self.cost = min(MAX_COST, max(floor, self.cost + self.rate * (wanted - self.budget)))
        self.steps += 1
        self.drafted += d
        return draft

    def describe(self) -> dict[str, Any]:
        return {"budget_per_step": self.budget, "windup": self.windup, "spenddown": self.spenddown,
                "bucket": self.bucket,
                "steps": self.steps, "drafted": self.drafted,
                "drafted_per_step": self.drafted / self.steps if self.steps else 0.0,
                "cost_now": max(0.0, self.cost), "multiplier_now": self.cost, "credit_now": self.credit,
                **({"ceiling": self.ceiling.describe()} if self.ceiling is not None else {})}


class RunCeiling:
    """A run-wide cap shared by budgets of several records: credited `rate` drafted tokens every
    step, unspent credit kept without limit (a step may spend what earlier ones saved), never
    lent. So the drafted tokens of every step it saw are at most rate x those steps."""

    __slots__ = ("rate", "credit", "steps", "drafted")

    def __init__(self, rate: float):
        self.rate, self.credit, self.steps, self.drafted = float(rate), 0.0, 0, 0

    def credit_step(self) -> int:
        """One step's credit added; the whole tokens it allows now."""
        self.credit += self.rate
        self.steps += 1
        return int(self.credit)

    def debit(self, drafted: int) -> None:
        if drafted > self.credit:
            raise RuntimeError(f"run ceiling: {drafted} tokens drafted for a credit of {self.credit:.3f}")
        self.credit -= drafted
        self.drafted += drafted

    def describe(self) -> dict[str, Any]:
        return {"ceiling_per_step": self.rate, "steps": self.steps, "drafted": self.drafted,
                "drafted_per_step": self.drafted / self.steps if self.steps else 0.0, "credit_now": self.credit}


def _keep(registry: OrderedDict, key: Any, value: Any) -> Any:
    """`value` stored (or kept) under `key` as the most recently used; the least recently used
    entries go beyond KEPT_RECORDS."""
    registry[key] = value
    registry.move_to_end(key)
    while len(registry) > KEPT_RECORDS:
        registry.popitem(last=False)
    return value


_BY_CEILING: "OrderedDict[str, RunCeiling]" = OrderedDict()


def pooled_ceiling(pool: str, rate: float) -> RunCeiling:
    """The run-wide cap named `pool` in this process (a new one the first time, or when its rate
    changed); the least recently used names go beyond KEPT_RECORDS."""
    state = _BY_CEILING.get(pool)
    return _keep(_BY_CEILING, pool, state if state is not None and state.rate == rate else RunCeiling(rate))


_BY_RECORD: "OrderedDict[int, tuple[Any, DraftBudget]]" = OrderedDict()


_BY_POOL: "OrderedDict[str, DraftBudget]" = OrderedDict()


def pooled_budget(pool: str, budget: float, burst: float, rate: float, cost: float,
                  windup: float = 1.0, spenddown: float = 0.0, bucket: bool = True) -> DraftBudget:
    """The budget named `pool` in this process (a new one the first time, or when its parameters
    changed); the least recently used names go beyond KEPT_RECORDS."""
    state = _BY_POOL.get(pool)
    if state is None or (state.budget, state.burst, state.rate, state.windup, state.spenddown, state.bucket) != \
            (budget, burst, rate, windup, spenddown, bool(bucket)):
        state = DraftBudget(budget, burst, rate, cost, windup, spenddown, bucket)
    return _keep(_BY_POOL, pool, state)


def shared_budget(record: Any, budget: float, burst: float, rate: float, cost: float,
                  windup: float = 1.0, spenddown: float = 0.0, bucket: bool = True) -> DraftBudget:
    """The budget of the drafters sharing the acceptance record `record` (a new one for a record
    not seen yet). Kept by the record's identity with the record held, so an identity is not
    reused while its entry lives; the least recently used entries go beyond KEPT_RECORDS (a
    replay makes a new record per task and does not return to old ones)."""
    key = id(record)
    entry = _BY_RECORD.get(key)
    if entry is not None and entry[0] is record and \
            (entry[1].budget, entry[1].windup, entry[1].spenddown, entry[1].bucket) == \
            (budget, windup, spenddown, bool(bucket)):
        return _keep(_BY_RECORD, key, entry)[1]
    return _keep(_BY_RECORD, key, (record, DraftBudget(budget, burst, rate, cost, windup, spenddown, bucket)))[1]
