"""How many draft tokens to propose: the draft-length policies of `SamDrafter(length=...)`.

- `fixed`: SAM-Decoding's baseline: the continuation of the earliest occurrence (min_endpos)
  of the longest matching suffix, always up to k tokens whenever any suffix matches.
- `evidence`: token i of the draft is proposed only while the estimated probability that
  tokens 1..i are all accepted is at least `cost`, the marginal verify cost of one more draft
  token in decode steps (a draft token that is accepted saves about one decode step). The
  estimate multiplies, per token, a prior from the match length the token is predicted from,
  the continuation's frequency (occurrence counts kept by the automaton), and the request's
  own recent acceptance (observed, not told: the tokens emitted after a draft show how much
  of it was accepted), and drafter-wide corrections learnt online from the same judgements
  (per drafted token id and per bucket of the estimate's inputs). See docs/drafting.md.
- `AdaptiveLength` (a linear rule in the match length) still works: `SamDrafter(length=AdaptiveLength(...))`.

Every policy reads only what one automaton query returns (the match length and at most k+1
counts) and, for the corrections, a few dict entries per draft token, so its cost per step
does not grow with the context.

Specs are strings: "fixed", "evidence", "evidence:cost=0.2,half=2,choice=frequent" (see
`EvidenceLength` for the parameters); `parse_length` turns one into a policy.
"evidence:budget=1.5": at most 1.5 drafted tokens per step per request over a run, the cost
moved online to spend them where the estimate is strongest (sam/draft_budget.py).
"evidence:cost=auto": the cost is an `OnlineCost`, a value the engine running the drafter
sets from its measured step times (vLLM's SamProposer fits it online); it stays at the
default cost where nothing sets it (replay, the reference engine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable, Union

from samspec_bench.sam.automaton import CHOICES

# The fields the compiled chooser (_samcore.EvidenceBatch, sam/_evidence_policy.h, and its
# corrections' record AcceptanceStats, sam/_acceptance_stats.h) implements: a policy with any
# other field (a parameter added later) is chosen by choose() in Python; so is pairs > 0 (the
# C record keeps no pair table).
# (the budget's fields too: the drafter caps k and hands the cost to the chooser)
C_FIELDS = frozenset({"cost", "novelty", "depth", "cap", "tau", "decay", "choice", "tokens", "pairs", "shape",
                      "pooled", "budget", "burst", "rate", "windup", "pool", "ceiling", "spenddown", "bucket"})

DEFAULT_LENGTH = "evidence"   # the default of the 'sam' drafter (docs/drafting.md says why)
LENGTH_SPECS = ("fixed", "evidence")


@dataclass(frozen=True)
class AdaptiveLength:
    """Draft length as a function of the match length L, bounded by k:
    n = clamp(floor(factor * L + offset), min_tokens, k). factor=inf means always k."""

    factor: float = math.inf
    offset: float = 0.0
    min_tokens: int = 1

    def __call__(self, match_length: int, k: int) -> int:
        if match_length <= 0:
            return 0
        if math.isinf(self.factor):
            return k
        return max(self.min_tokens, min(k, int(self.factor * match_length + self.offset)))

    @property
    def fixed(self) -> bool:
        return math.isinf(self.factor)

    def spec(self) -> str:
        return "fixed" if self.fixed else f"adaptive:factor={self.factor},offset={self.offset},min_tokens={self.min_tokens}"

    def describe(self) -> dict[str, Any]:
        return {"policy": "fixed" if self.fixed else "adaptive",
                "factor": None if self.fixed else self.factor, "offset": self.offset, "min_tokens": self.min_tokens}


FIXED_LENGTH = AdaptiveLength()


class RequestEvidence:
    """One request's recent acceptance: decayed sums of what the policy predicted would be
    accepted and what was, for the drafts it proposed; and the draft waiting to be judged
    (its tokens, expected accepted tokens, and per token the estimate before the token
    correction, for TokenAcceptance)."""

    __slots__ = ("predicted", "accepted", "pending", "pending_pred", "pending_q")

    def __init__(self):
        self.predicted = 0.0
        self.accepted = 0.0
        self.pending: list[int] | None = None
        self.pending_pred: float = 0.0
        self.pending_q: list[float] = []


def shape_key(length: int, seen: int, count: int, j: int) -> tuple[int, int, int, int]:
    """The bucket of the estimate's own inputs the `shape=` correction is kept per: the
    match length (log2), the occurrences continued (log2), whether every one was continued
    by this token, and the draft position (1, 2, 3+)."""
    return (min(length, 255).bit_length(), min(seen, 31).bit_length(), int(count >= seen), min(j, 3))


class TokenAcceptance:
    """Drafter-wide acceptance statistics of the evidence policy's corrections: for every
    draft token the verifier reached (the tokens before it accepted), the estimate it was
    drafted with and whether it was accepted, kept per
    - drafted token id (`tokens=m`): some tokens are harder than their counts say (digits of
      a computation diverge, formatting repeats);
    - (previous draft token, token) (`pairs=m`; the first token of a draft keyed (-1, token)),
      its prior centred on the token's factor;
    - shape_key of the estimate's inputs (`shape=m`): where the count estimate itself is off.
    Each correction is a factor (accepted + m) / (predicted + m), a prior of weight m centred
    on no change; the estimate is the count estimate times the factors. With `pooled`, a
    shape's prior is centred instead on the pooled ratio of every shape judgement so far,
    (accepted + m) / (predicted + m) over the whole table (`shape_total`): a shape not yet
    judged starts from what the record has learnt overall, not from the raw estimate, so a
    young record is as calibrated on average as a mature one. Each table is judged
    against the estimate with the other tables' factors applied (online backfitting), so the
    tables do not both take the same bias. Entries: one per token id seen (the vocabulary),
    at most MAX_PAIRS pairs, a few hundred shapes. Acceptance statistics only, never draft
    content: one object may serve many requests (as one proposer in a serving engine does).
    The specification of the compiled record `_samcore.AcceptanceStats` (the same methods and
    tables, no pairs), which a drafter on the compiled path holds instead."""

    MAX_PAIRS = 1 << 18

    __slots__ = ("stats", "pair_stats", "shape_stats", "shape_total")

    def __init__(self):
        self.stats: dict[int, list[float]] = {}   # token id -> [sum of estimates, accepted]
        self.pair_stats: dict[tuple[int, int], list[float]] = {}
        self.shape_stats: dict[tuple, list[float]] = {}
        self.shape_total = [0.0, 0.0]   # every shape judgement: [sum of estimates, accepted]

    @staticmethod
    def _ratio(table: dict, key, m: float, centre: float = 1.0) -> float:
        s = table.get(key)
        return centre if s is None else (s[1] + m * centre) / (s[0] + m)

    def factor(self, token: int, m: float, prev: int = -1, m_pair: float = 0.0) -> float:
        """The token's correction (with m_pair > 0: its pair's, centred on the token's)."""
        f = self._ratio(self.stats, token, m) if m > 0 else 1.0
        return self._ratio(self.pair_stats, (prev, token), m_pair, f) if m_pair > 0 else f

    def shape_factor(self, key: tuple, m: float, pooled: bool = False) -> float:
        """The shape's correction; `pooled`: its prior centred on the pooled ratio of every shape."""
        if not m > 0:
            return 1.0
        t = self.shape_total
        return self._ratio(self.shape_stats, key, m, (t[1] + m) / (t[0] + m) if pooled else 1.0)

    def relax_pooled(self, d: float) -> None:
        """The pooled sums fade by d (EvidenceLength.choose: when the pooled prior alone silenced a draft)."""
        self.shape_total[0] *= d
        self.shape_total[1] *= d

    def update(self, draft: list[int], estimates: list, accepted: int, pairs: bool = False) -> None:
        """Draft token j (1-based) was reached when j <= accepted + 1, accepted when j <= accepted.
        estimates[j-1]: the count estimate, or (count estimate, token factor, shape factor, shape key)."""
        for j in range(min(len(draft), len(estimates), accepted + 1)):
            e = estimates[j]
            q, f_tok, f_shape, key = (e, 1.0, 1.0, None) if not isinstance(e, tuple) else e
            ok = j < accepted
            self._add(self.stats, draft[j], q * f_shape, ok)
            if pairs:
                self._add(self.pair_stats, (draft[j - 1] if j else -1, draft[j]), q * f_shape, ok, self.MAX_PAIRS)
            if key is not None:
                self._add(self.shape_stats, key, q * f_tok, ok)
                self.shape_total[0] += q * f_tok
                self.shape_total[1] += ok

    @staticmethod
    def _add(table: dict, key, predicted: float, ok: bool, most: int = 0) -> None:
        s = table.get(key)
        if s is None:
            if most and len(table) >= most:
                return
            s = table[key] = [0.0, 0.0]
        s[0] += predicted
        s[1] += ok

    def __len__(self) -> int:
        return len(self.stats)


DEFAULT_COST = 0.215   # decode steps per draft token (docs/drafting.md: chosen on the dev split)


class OnlineCost:
    """A draft token's cost that an engine updates while it runs (spec `cost=auto`): called
    with k like a profile callable, it returns the value last `set`, DEFAULT_COST until then.
    The library only holds the number; the engine measures it (no engine import here)."""

    __slots__ = ("value", "updates")

    def __init__(self, value: float = DEFAULT_COST):
        self.value = float(value)
        self.updates = 0

    def set(self, value: float) -> None:
        if not 0.0 <= value < 1.0:
            raise ValueError(f"online cost {value}: must be in [0, 1) decode steps")
        self.value = float(value)
        self.updates += 1

    def __call__(self, k: int) -> float:
        return self.value

    def __eq__(self, other: object) -> bool:   # specs compare equal: both say cost=auto
        return isinstance(other, OnlineCost)

    def __hash__(self) -> int:
        return hash(OnlineCost)

    def __repr__(self) -> str:
        return f"OnlineCost({self.value:g})"


@dataclass(frozen=True)
class EvidenceLength:
    """Draft token i while P(tokens 1..i all accepted) >= cost; among candidate drafts, the
    one with the most expected accepted tokens net of cost.

    Candidates: the longest match and up to depth-1 shorter matches up its suffix links (a
    shorter match has seen more occurrences: better-estimated continuations). Each drafts
    the continuation `choice` picks (frequent: the most frequent token, step by step).
    Per token, with the match (plus the draft so far, l tokens) seen n times before and
    followed by this token c times: q = c / (n + novelty / l), the Chinese-restaurant
    estimate in which a new continuation gets pseudo-count novelty / l (an unseen token is
    likelier after a short match). q is scaled by the request's recent acceptance,
    (accepted + tau) / (predicted + tau) over its earlier drafts (decay per draft), clipped
    to [1/4, 4], then multiplied by the drafter-wide corrections learnt online from which
    draft tokens were accepted (TokenAcceptance: per drafted token id, weight `tokens`; per
    (previous token, token), `pairs`; per shape_key of the estimate's inputs, `shape`; 0 turns
    one off; `pooled=1`: the shape prior centred on the record's pooled ratio, 0: on no
    change), and capped at 0.99. P_i is the product of q_1..q_i, a candidate's score is
    sum(P_i - cost) over its tokens with P_i >= cost.
    Parameters: cost (the marginal verify cost of one draft token, in decode steps; a callable
    taking k is read per draft, e.g. from a step-time profile; an OnlineCost, spec cost=auto,
    is set by the engine from its measured step times), novelty, depth, tau, decay,
    choice (which continuation is drafted: frequent, recent = the latest earlier occurrence,
    earliest = min_endpos's), tokens, pairs, shape (prior weights of the corrections, in
    predicted accepted tokens), pooled (1 or 0); budget (drafted tokens per step per request at
    most, drafter-wide: the cost becomes a Lagrange multiplier moved online by `rate` and a token
    bucket of at most max(`burst`, k) tokens caps every draft; `windup`: the share of a cut draft's
    missing tokens the multiplier counts; `spenddown`: per token of credit saved beyond one draft,
    how much lower the price of a draft token is; `pool`: a name, the drafters of this process with that
    name share one budget for the whole run instead of one per acceptance record; `ceiling` with
    `pool`: the budget stays per acceptance record and the pool only caps the whole run at
    `ceiling` drafted tokens per step, keeping what earlier steps left unspent; `bucket=0` with
    a ceiling: the record's budget has no bucket of its own and only paces, its multiplier kept
    without a floor, the ceiling the only cap; sam/draft_budget.py)."""

    cost: Union[float, Callable[[int], float]] = DEFAULT_COST
    novelty: float = 1.0
    depth: int = 16
    cap: float = 0.0
    tau: float = 16.0
    decay: float = 0.99
    choice: str = "frequent"
    tokens: float = 8.0
    pairs: float = 0.0
    shape: float = 8.0
    pooled: float = 1.0
    budget: float | None = None   # drafted tokens per step per request at most (sam/draft_budget.py)
    burst: float = 1024.0         # the budget's bucket keeps at most max(burst, k) tokens of credit (dev split)
    rate: float = 0.001           # the budget's dual-ascent step: cost += rate x (drafted - budget) (dev split)
    windup: float = 1.0           # a draft the bucket cut counts as cut + windup x (k - cut) for the multiplier (dev split)
    pool: str | None = None       # the budget shared by this process's drafters of that name, over the whole run
    ceiling: float | None = None  # with pool: the pool is a run-wide cap at this rate, the budget per record
    spenddown: float = 0.0        # the budget's price falls by this much per token saved beyond one draft
    bucket: float = 1.0           # 1: the record's budget caps by its own bucket; 0: it only paces (needs ceiling)

    fixed = False

    def __post_init__(self):
        if not callable(self.cost) and not (0.0 <= float(self.cost) < 1.0):
            raise ValueError(f"evidence:cost={self.cost}: the marginal cost of a draft token must be in [0, 1) "
                             "decode steps (at 1 or more no draft token pays for itself)")
        for name in ("novelty", "tau"):
            if not getattr(self, name) > 0:
                raise ValueError(f"evidence:{name}={getattr(self, name)}: must be > 0")
        for name in ("tokens", "pairs", "shape"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"evidence:{name}={getattr(self, name)}: the prior weight of the per-token "
                                 "correction must be >= 0 (0: off)")
        if self.pooled not in (0, 1):
            raise ValueError(f"evidence:pooled={self.pooled}: 1 (the shape prior centred on the record's pooled "
                             "ratio) or 0 (centred on no change)")
        if not (float(self.depth) == int(self.depth) and 1 <= int(self.depth) <= 64):
            raise ValueError(f"evidence:depth={self.depth}: the number of candidate matches must be an integer in [1, 64]")
        object.__setattr__(self, "depth", int(self.depth))
        if self.choice not in CHOICES:
            raise ValueError(f"evidence:choice={self.choice}: use one of {', '.join(CHOICES)}")
        if not 0.0 <= self.decay <= 1.0:
            raise ValueError(f"evidence:decay={self.decay}: must be in [0, 1]")
        if self.budget is not None and not (math.isfinite(self.budget) and self.budget > 0):
            raise ValueError(f"evidence:budget={self.budget}: drafted tokens per step must be a finite number > 0 "
                             "(e.g. budget=1.5; leave it out for no budget)")
        for name in ("cap", "burst", "rate", "spenddown"):   # cap=inf crashed int() in Python, C took it as off
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ValueError(f"evidence:{name}={getattr(self, name)}: must be a finite number >= 0")
        if self.pool is not None and (self.budget is None or not str(self.pool).strip()):
            raise ValueError(f"evidence:pool={self.pool}: a pool names a shared draft budget; give budget=B with it "
                             "and a non-empty name")
        if self.ceiling is not None and not (self.pool is not None and math.isfinite(self.ceiling)
                                             and self.ceiling > 0):
            raise ValueError(f"evidence:ceiling={self.ceiling}: a run-wide cap in drafted tokens per step, a finite "
                             "number > 0 given with budget=B and pool=NAME (the pool that keeps it)")
        if self.bucket not in (0, 1):
            raise ValueError(f"evidence:bucket={self.bucket}: 1 (the budget caps by its own token bucket) or 0 (it "
                             "only paces the price, under a run-wide ceiling)")
        if self.bucket == 0 and self.ceiling is None:
            raise ValueError("evidence:bucket=0: a budget without its own bucket caps nothing; give it a run-wide "
                             "cap with pool=NAME,ceiling=R, or drop bucket=0")
        if not 0.0 <= self.windup <= 1.0:
            raise ValueError(f"evidence:windup={self.windup}: must be in [0, 1] (the share of a cut draft's "
                             "missing tokens counted against the budget)")

    @property
    def choice_code(self) -> int:
        return CHOICES[self.choice]

    def new_request(self) -> RequestEvidence:
        return RequestEvidence()

    def threshold(self, k: int) -> float:
        return float(self.cost(k)) if callable(self.cost) else float(self.cost)

    def choose(self, state: RequestEvidence | None, k: int, candidates, at_end: bool = True,
               token_stats: TokenAcceptance | None = None, cost: float | None = None,
               relax: bool = True) -> tuple[list[int], float]:
        """(draft, expected accepted tokens) from `candidates`, the automaton's evidence_chain:
        (match length, draft, counts) per candidate, counts[0] the occurrences of the match,
        counts[j] of the match followed by draft[:j]. `at_end`: the match's own current
        occurrence is among counts[0] (a dynamic source), so it is not a continuation.
        `token_stats` (with tokens > 0): the per-token correction; the estimates it is
        judged against are left in state.pending_q. `cost`: this draft's cost (a budget's
        multiplier) instead of the policy's. `relax` False: no side effect on the record (a peek)."""
        cost = self.threshold(k) if cost is None else cost
        scale = 1.0
        if state is not None:
            scale = min(4.0, max(0.25, (state.accepted + self.tau) / (state.predicted + self.tau)))
        per_token = token_stats if (self.tokens > 0 or self.pairs > 0 or self.shape > 0) else None
        best, best_n, best_score, best_exp, best_q = None, 0, 0.0, 0.0, None
        pooled = per_token is not None and self.pooled > 0 and self.shape > 0
        unpooled_pass = False   # some first token would pass with the shape prior centred on no change
        for cand in candidates:
            length, draft, counts = cand[0], cand[1], cand[2]
            # occurrences followed by some token: exact where the automaton sums them (choice
            # frequent: every growing document's current end excluded), else all but our own
            continued = cand[3] if len(cand) > 3 else None
            if length <= 0:
                continue
            p, score, expected, n = 1.0, 0.0, 0.0, 0
            most = min(k, len(counts) - 1)
            if self.cap > 0:
                most = min(most, int(self.cap * length + 1e-9))
            qs = []
            for j in range(1, most + 1):
                seen = continued[j - 1] if continued is not None else counts[j - 1] - (1 if (j == 1 and at_end) else 0)
                if seen <= 0:
                    break
                q = min(0.99, scale * counts[j] / (seen + self.novelty / (length + j - 1)))
                if per_token is not None:
                    f_tok = per_token.factor(draft[j - 1], self.tokens, draft[j - 2] if j > 1 else -1, self.pairs)
                    key = shape_key(length, seen, counts[j], j) if self.shape > 0 else None
                    f_shape = per_token.shape_factor(key, self.shape, self.pooled > 0) if key is not None else 1.0
                    if pooled and j == 1 and not unpooled_pass:
                        f0 = per_token.shape_factor(key, self.shape, False) if key is not None else 1.0
                        unpooled_pass = min(0.99, q * f_tok * f0) >= cost
                    qs.append((q, f_tok, f_shape, key))
                    q = min(0.99, q * f_tok * f_shape)
                else:
                    qs.append(q)
                p *= q
                if p < cost:
                    break
                n, score, expected = j, score + p - cost, expected + p
            if n and score > best_score:
                best, best_n, best_score, best_exp, best_q = draft, n, score, expected, qs
        if best is None:
            # The pooled prior is a guess about shapes; drafts alone can confirm or refute it. When
            # it alone keeps the drafter silent, it fades by the policy's decay, so a record that
            # started unlucky cannot stop drafting for good (it would never be judged again).
            if unpooled_pass and relax:
                per_token.relax_pooled(self.decay)
            return [], 0.0
        if state is not None:
            state.pending_q = best_q[:best_n]
        return best[:best_n], best_exp

    def c_params(self) -> dict[str, Any] | None:
        """EvidenceBatch's arguments for this policy, or None where the compiled chooser does not
        implement it (a subclass, a field it does not know, or pairs > 0): then drafts are chosen
        here. A profile cost, or a budget's multiplier, is passed as -1 (read per draft in Python
        and handed to propose, k cut to the budget's credit). tokens / shape apply with the drafter's record (EvidenceBatch.stats, an AcceptanceStats)."""
        if type(self) is not EvidenceLength or {f.name for f in fields(self)} != C_FIELDS or self.pairs > 0:
            return None
        handed = callable(self.cost) or self.budget is not None
        return {"cost": -1.0 if handed else float(self.cost), "novelty": float(self.novelty),
                "depth": self.depth, "cap": float(self.cap), "tau": float(self.tau), "decay": float(self.decay),
                "choice": self.choice_code, "tokens": float(self.tokens), "shape": float(self.shape),
                "pooled": int(self.pooled > 0)}

    def observe(self, state: RequestEvidence, predicted: float, accepted: int) -> None:
        state.predicted = self.decay * state.predicted + predicted
        state.accepted = self.decay * state.accepted + accepted

    def spec(self) -> str:
        default = EvidenceLength()
        exact = ("budget", "ceiling")   # printed exactly: a comparison budgets at another policy's measured rate
        parts = [f"{f.name}={repr(getattr(self, f.name)) if f.name in exact else _fmt(getattr(self, f.name))}"
                 for f in fields(self)
                 if getattr(self, f.name) != getattr(default, f.name) and not callable(getattr(self, f.name))]
        if isinstance(self.cost, OnlineCost):
            parts.insert(0, "cost=auto")
        elif callable(self.cost):
            parts.insert(0, "cost=<profile>")
        return "evidence" + (":" + ",".join(parts) if parts else "")

    def describe(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if isinstance(self.cost, OnlineCost):
            d["cost"] = f"auto (set by the engine from measured step times; now {self.cost.value:.3f}, " \
                        f"{self.cost.updates} updates)"
        else:
            d["cost"] = "from the step-time profile" if callable(self.cost) else float(self.cost)
        return {"policy": "evidence", "spec": self.spec(), **d}


def _fmt(v: Any) -> str:
    return str(int(v)) if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)


LengthPolicy = Union[AdaptiveLength, EvidenceLength]


def parse_length(spec: "str | LengthPolicy | None") -> LengthPolicy:
    """A draft-length policy from a spec string ("fixed", "evidence", "evidence:cost=0.2,...")
    or a policy object (returned as is). None: the default (DEFAULT_LENGTH)."""
    if spec is None:
        spec = DEFAULT_LENGTH
    if isinstance(spec, (AdaptiveLength, EvidenceLength)):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"draft length {spec!r}: give 'fixed', 'evidence' or 'evidence:cost=0.2' "
                         "(or an AdaptiveLength / EvidenceLength)")
    name, _, params = spec.strip().partition(":")
    if name == "fixed" and not params:
        return FIXED_LENGTH
    if name != "evidence":
        raise ValueError(f"draft length {spec!r}: use one of {', '.join(LENGTH_SPECS)} "
                         "(parameters after ':', e.g. evidence:cost=0.2)")
    known = {f.name: f for f in fields(EvidenceLength)}
    kw: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in params.split(","))):
        key, eq, val = item.partition("=")
        if not eq or key not in known:
            raise ValueError(f"draft length {spec!r}: '{item}' is not key=value with a key among "
                             f"{', '.join(known)}")
        if key == "cost" and val == "auto":
            kw[key] = OnlineCost()
            continue
        try:
            kw[key] = val if key in ("choice", "pool") else float(val)
        except ValueError:
            raise ValueError(f"draft length {spec!r}: {key}={val!r} is not a number"
                             + (" (or auto: fitted by the engine)" if key == "cost" else "")) from None
    return EvidenceLength(**kw)
