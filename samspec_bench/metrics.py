"""Acceptance metrics of speculative decoding: one name, one definition (docs/architecture.md).

Every engine (trace replay, the reference engine, vLLM) describes a response's decode as
per-step records, `ResponseSteps`: for every decode step (one target forward pass) the
position at drafting time, how many tokens were drafted, how many of them were accepted and
how many tokens the step emitted (accepted + the bonus token). Everything below is computed
from those records only, so the suites do not care which engine produced them.

| name                       | definition                                                      |
|----------------------------|-----------------------------------------------------------------|
| tokens_per_step            | tokens emitted / decode steps, over ALL decode steps (1.0 = none)|
| acceptance_length          | 1 + accepted / drafts, over steps with a non-empty draft (vLLM)  |
| draft_hit_rate             | steps with a non-empty draft / all decode steps                  |
| acceptance_rate            | accepted draft tokens / drafted tokens                           |
| per_position_acceptance[i] | drafts whose token i was accepted / drafts (vLLM's per-position) |
| drafted_per_step           | drafted tokens / decode steps, over ALL decode steps (the cost)  |
| verify_tokens_per_token    | (decode steps + drafted tokens) / tokens emitted: tokens the     |
|                            | target verifies per token it emits (1.0 = no speculation)        |

All ratios are pooled (sums over steps, then divided), as vLLM's counters are; a metric
whose denominator is 0 is None. Binned curves put each step in the bin of its position at
drafting time: the sequence position (prompt + tokens generated so far, the default) or
the response position (tokens generated so far).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

METRIC_NAMES = ("tokens_per_step", "acceptance_length", "draft_hit_rate", "acceptance_rate",
                "per_position_acceptance", "drafted_per_step", "verify_tokens_per_token")
METRIC_DEFINITIONS = {
    "tokens_per_step": "tokens emitted / decode steps, over all decode steps (baseline 1.0)",
    "acceptance_length": "1 + accepted / drafts, over steps with a non-empty draft (vLLM's mean acceptance length)",
    "draft_hit_rate": "steps with a non-empty draft / all decode steps",
    "acceptance_rate": "accepted draft tokens / drafted tokens",
    "per_position_acceptance": "[i]: drafts whose token i was accepted / drafts",
    "drafted_per_step": "drafted tokens / decode steps, over all decode steps (the verify cost side; 0 = none)",
    "verify_tokens_per_token": "(decode steps + drafted tokens) / tokens emitted: tokens verified per token "
                               "emitted (1.0 = no speculation)",
}
POSITION_BASES = ("sequence", "response")
DEFAULT_BINS = "log2:64:32768"

# One character per decode step in per-response records: 0-9 then a-z (values 0..35).
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_DIGIT_VALUE = {c: i for i, c in enumerate(_DIGITS)}
MAX_ENCODED = len(_DIGITS) - 1


# ---------- the engine-neutral record ----------

@dataclass
class ResponseSteps:
    """The decode of one response, step by step.

    position[i]: response tokens already generated when step i drafted (the prompt is not
    counted; add `prompt_len` for the sequence position). drafted[i]: draft tokens proposed
    (0 = empty draft, the step is a plain decode step). accepted[i]: draft tokens the target
    accepted (<= drafted[i]). emitted[i]: tokens the step added (accepted + 1 bonus token,
    fewer only where the response ended). The first response token comes from the prefill
    and is not a decode step, so sum(emitted) = response_len - 1 for a finished replay.
    """

    key: str
    prompt_len: int
    response_len: int
    position: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    emitted: np.ndarray

    def __post_init__(self):
        self.position = np.asarray(self.position, dtype=np.int32)
        self.drafted = np.asarray(self.drafted, dtype=np.int16)
        self.accepted = np.asarray(self.accepted, dtype=np.int16)
        self.emitted = np.asarray(self.emitted, dtype=np.int16)
        n = self.position.size
        for name in ("drafted", "accepted", "emitted"):
            arr = getattr(self, name)
            if arr.ndim != 1 or arr.size != n:
                raise ValueError(f"ResponseSteps {self.key}: '{name}' has {arr.size} entries, position has {n}")
        if n and (np.any(self.accepted > self.drafted) or np.any(self.accepted < 0)
                  or np.any(self.emitted < self.accepted) or np.any(self.emitted > self.accepted + 1)):
            raise ValueError(f"ResponseSteps {self.key}: need 0 <= accepted <= drafted and "
                             "accepted <= emitted <= accepted + 1 at every step")

    @property
    def steps(self) -> int:
        return int(self.position.size)

    def counts(self) -> "AcceptanceCounts":
        return AcceptanceCounts.from_arrays(self.drafted, self.accepted, self.emitted)

    def to_record(self) -> dict[str, Any]:
        """JSON-ready summary plus the steps, one character per step (base 36). Positions
        are not stored: step 0 drafts at response position `first_position`, and every step
        advances the position by its emitted count; `step_emitted` is stored only where it
        differs from accepted + 1."""
        c = self.counts()
        rec: dict[str, Any] = {
            "key": self.key, "prompt_tokens": self.prompt_len, "response_tokens": self.response_len,
            "steps": c.steps, "tokens": c.tokens, "drafts": c.drafts, "drafted": c.drafted,
            "accepted": c.accepted,
            "tokens_per_step": c.tokens_per_step, "acceptance_length": c.acceptance_length,
            "first_position": int(self.position[0]) if self.steps else None,
            "step_drafted": encode_steps(self.drafted),
            "step_accepted": encode_steps(self.accepted),
        }
        if self.steps and not np.array_equal(self.emitted, self.accepted + 1):
            rec["step_emitted"] = encode_steps(self.emitted)
        return rec

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> "ResponseSteps":
        drafted = decode_steps(rec["step_drafted"])
        accepted = decode_steps(rec["step_accepted"])
        emitted = decode_steps(rec["step_emitted"]) if "step_emitted" in rec else accepted + 1
        if drafted.size:
            starts = np.concatenate([[0], np.cumsum(emitted[:-1], dtype=np.int64)])
            position = int(rec["first_position"]) + starts
        else:
            position = np.zeros(0, dtype=np.int32)
        return cls(key=rec["key"], prompt_len=int(rec["prompt_tokens"]), response_len=int(rec["response_tokens"]),
                   position=position, drafted=drafted, accepted=accepted, emitted=emitted)


def encode_steps(values: np.ndarray) -> str:
    arr = np.asarray(values)
    if arr.size and (arr.min() < 0 or arr.max() > MAX_ENCODED):
        raise ValueError(f"step values must lie in 0..{MAX_ENCODED} to be encoded (got {arr.min()}..{arr.max()})")
    return "".join(_DIGITS[v] for v in arr.tolist())


def decode_steps(text: str) -> np.ndarray:
    try:
        return np.fromiter((_DIGIT_VALUE[c] for c in text), dtype=np.int16, count=len(text))
    except KeyError as e:
        raise ValueError(f"bad step encoding: character {e.args[0]!r} is not one of 0-9a-z") from None


# ---------- counts and metrics ----------

def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


@dataclass
class AcceptanceCounts:
    """Additive counters from which every metric follows (sum them, then divide)."""

    steps: int = 0
    tokens: int = 0
    drafts: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    @classmethod
    def from_arrays(cls, drafted: np.ndarray, accepted: np.ndarray, emitted: np.ndarray) -> "AcceptanceCounts":
        drafted = np.asarray(drafted)
        accepted = np.asarray(accepted)
        kmax = int(drafted.max()) if drafted.size else 0
        per_pos = [int(np.count_nonzero(accepted > i)) for i in range(kmax)]
        return cls(steps=int(drafted.size), tokens=int(np.asarray(emitted, dtype=np.int64).sum()),
                   drafts=int(np.count_nonzero(drafted)), drafted=int(drafted.sum(dtype=np.int64)),
                   accepted=int(accepted.sum(dtype=np.int64)), accepted_per_pos=per_pos)

    def __add__(self, other: "AcceptanceCounts") -> "AcceptanceCounts":
        n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        a = self.accepted_per_pos + [0] * (n - len(self.accepted_per_pos))
        b = other.accepted_per_pos + [0] * (n - len(other.accepted_per_pos))
        return AcceptanceCounts(self.steps + other.steps, self.tokens + other.tokens, self.drafts + other.drafts,
                                self.drafted + other.drafted, self.accepted + other.accepted,
                                [x + y for x, y in zip(a, b)])

    @property
    def tokens_per_step(self) -> float | None:
        return _ratio(self.tokens, self.steps)

    @property
    def acceptance_length(self) -> float | None:
        return None if not self.drafts else 1.0 + self.accepted / self.drafts

    @property
    def draft_hit_rate(self) -> float | None:
        return _ratio(self.drafts, self.steps)

    @property
    def acceptance_rate(self) -> float | None:
        return _ratio(self.accepted, self.drafted)

    @property
    def drafted_per_step(self) -> float | None:
        return _ratio(self.drafted, self.steps)

    @property
    def verify_tokens_per_token(self) -> float | None:
        return _ratio(self.steps + self.drafted, self.tokens)

    @property
    def per_position_acceptance(self) -> list[float]:
        return [x / self.drafts for x in self.accepted_per_pos] if self.drafts else []

    def metrics(self) -> dict[str, Any]:
        """The metrics and the counts they come from."""
        return {
            "tokens_per_step": self.tokens_per_step,
            "drafted_per_step": self.drafted_per_step,
            "verify_tokens_per_token": self.verify_tokens_per_token,
            "acceptance_length": self.acceptance_length,
            "draft_hit_rate": self.draft_hit_rate,
            "acceptance_rate": self.acceptance_rate,
            "per_position_acceptance": self.per_position_acceptance,
            "counts": {"steps": self.steps, "tokens": self.tokens, "drafts": self.drafts,
                       "drafted": self.drafted, "accepted": self.accepted,
                       "accepted_per_pos": list(self.accepted_per_pos)},
        }


def total_counts(records: Iterable[ResponseSteps]) -> AcceptanceCounts:
    recs = list(records)
    if not recs:
        return AcceptanceCounts()
    return AcceptanceCounts.from_arrays(np.concatenate([r.drafted for r in recs]),
                                        np.concatenate([r.accepted for r in recs]),
                                        np.concatenate([r.emitted for r in recs]))


# ---------- position bins ----------

@dataclass(frozen=True)
class Bins:
    """Position bins [0, e0), [e0, e1), ..., [e_last, inf) from ascending positive edges."""

    edges: tuple[int, ...]

    def __post_init__(self):
        e = tuple(int(x) for x in self.edges)
        if not e or any(x <= 0 for x in e) or any(b <= a for a, b in zip(e, e[1:])):
            raise ValueError(f"bin edges {list(self.edges)}: need ascending positive integers")
        object.__setattr__(self, "edges", e)

    @classmethod
    def parse(cls, spec: str) -> "Bins":
        """'log2:LO:HI' (powers of two from LO to HI, both powers of two) or a comma list of
        edges ('256,1024,4096')."""
        s = spec.strip()
        if s.startswith("log2:"):
            parts = s.split(":")
            try:
                lo, hi = int(parts[1]), int(parts[2])
                if len(parts) != 3:
                    raise ValueError
            except (ValueError, IndexError):
                raise ValueError(f"bins {spec!r}: write log2:LO:HI, e.g. {DEFAULT_BINS}") from None
            if lo < 1 or hi < lo or lo & (lo - 1) or hi & (hi - 1):
                raise ValueError(f"bins {spec!r}: LO and HI must be powers of two with LO <= HI")
            return cls(tuple(2 ** i for i in range(int(math.log2(lo)), int(math.log2(hi)) + 1)))
        items = [x.strip() for x in s.split(",")]
        if "" in items:
            raise ValueError(f"bins {spec!r}: an empty item (a stray comma); give ascending integers separated by "
                             "single commas, e.g. 64,512,4096")
        try:
            edges = tuple(int(x) for x in items)
        except ValueError:
            raise ValueError(f"bins {spec!r}: give log2:LO:HI or ascending integers separated by commas") from None
        return cls(edges)

    @property
    def count(self) -> int:
        return len(self.edges) + 1

    def bounds(self, i: int) -> tuple[int, int | None]:
        lo = 0 if i == 0 else self.edges[i - 1]
        hi = self.edges[i] if i < len(self.edges) else None
        return lo, hi

    def label(self, i: int) -> str:
        lo, hi = self.bounds(i)
        return f"[{lo}, {hi})" if hi is not None else f"[{lo}, inf)"

    def center(self, i: int) -> float:
        """A representative position for plots: the geometric middle of the bin."""
        lo, hi = self.bounds(i)
        if hi is None:
            return lo * math.sqrt(2)
        return math.sqrt(max(lo, 1) * hi) if lo else hi / 2

    def index(self, positions: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.asarray(self.edges), positions, side="right")


def step_positions(rec: ResponseSteps, basis: str) -> np.ndarray:
    if basis == "sequence":
        return rec.position.astype(np.int64) + rec.prompt_len
    if basis == "response":
        return rec.position.astype(np.int64)
    raise ValueError(f"position basis {basis!r}: use one of {', '.join(POSITION_BASES)}")


def binned_counts(records: Sequence[ResponseSteps], bins: Bins, basis: str = "sequence") -> list[AcceptanceCounts]:
    """AcceptanceCounts per position bin (every bin, empty ones included)."""
    out = [AcceptanceCounts() for _ in range(bins.count)]
    recs = [r for r in records if r.steps]
    if not recs:
        return out
    pos = np.concatenate([step_positions(r, basis) for r in recs])
    drafted = np.concatenate([r.drafted for r in recs]).astype(np.int64)
    accepted = np.concatenate([r.accepted for r in recs]).astype(np.int64)
    emitted = np.concatenate([r.emitted for r in recs]).astype(np.int64)
    idx = bins.index(pos)
    nb = bins.count
    steps = np.bincount(idx, minlength=nb)
    tokens = np.bincount(idx, weights=emitted, minlength=nb)
    drafts = np.bincount(idx, weights=drafted > 0, minlength=nb)
    dsum = np.bincount(idx, weights=drafted, minlength=nb)
    asum = np.bincount(idx, weights=accepted, minlength=nb)
    kmax = int(drafted.max())
    per_pos = [np.bincount(idx, weights=accepted > i, minlength=nb) for i in range(kmax)]
    for b in range(nb):
        if not steps[b]:
            continue
        kb = int(drafted[idx == b].max())
        out[b] = AcceptanceCounts(steps=int(steps[b]), tokens=int(tokens[b]), drafts=int(drafts[b]),
                                  drafted=int(dsum[b]), accepted=int(asum[b]),
                                  accepted_per_pos=[int(per_pos[i][b]) for i in range(kb)])
    return out


def binned_metrics(records: Sequence[ResponseSteps], bins: Bins, basis: str = "sequence") -> list[dict[str, Any]]:
    """One row per bin: lo, hi, label and the metrics with their counts."""
    rows = []
    for i, c in enumerate(binned_counts(records, bins, basis)):
        lo, hi = bins.bounds(i)
        rows.append({"bin": i, "lo": lo, "hi": hi, "label": bins.label(i), **c.metrics()})
    return rows


# ---------- speedup from a step-cost model ----------

def step_cost(counts: AcceptanceCounts, verify_cost_ratio: float) -> float:
    """Cost of the decode steps in units of one plain (1-token) decode step: a step with an
    empty draft is a plain decode step (cost 1), a step with a draft is a verify step (cost
    `verify_cost_ratio`). Drafting itself is not charged (model-free drafters are cheap)."""
    return (counts.steps - counts.drafts) + counts.drafts * verify_cost_ratio


def speedup_estimate(counts: AcceptanceCounts, verify_cost_ratio: float) -> float | None:
    """Decode-time speedup over plain decoding (1 token per unit-cost step): tokens emitted /
    step cost. With verify_cost_ratio = 1 this equals tokens_per_step."""
    if verify_cost_ratio <= 0:
        raise ValueError(f"verify_cost_ratio = {verify_cost_ratio}: must be > 0")
    cost = step_cost(counts, verify_cost_ratio)
    return counts.tokens / cost if cost else None


# ---------- comparing two decodes of the same prompt ----------

def first_divergence(x: Sequence[int], y: Sequence[int]) -> int | None:
    """Index of the first differing token (the shorter length when one is a prefix), None if equal."""
    for i, (p, q) in enumerate(zip(x, y)):
        if p != q:
            return i
    return None if len(x) == len(y) else min(len(x), len(y))


def logit_margin(top: Sequence[tuple[int, float]] | None) -> float | None:
    """Logprob gap between the two most likely tokens of a position's top list (best first):
    how close a greedy choice was to flipping. None when fewer than two are known."""
    if not top or len(top) < 2:
        return None
    return float(top[0][1] - top[1][1])


# ---------- vLLM's names and units (`vllm bench serve`'s result JSON, its SpecDecoding log line) ----------

VLLM_NAMES = {
    "spec_decode_acceptance_rate": "% : 100 * accepted / drafted tokens (acceptance_rate in percent; the log "
                                   "line's 'Avg Draft acceptance rate')",
    "spec_decode_acceptance_length": "1 + accepted / drafts (= acceptance_length; the log line's 'Mean "
                                     "acceptance length')",
    "spec_decode_per_position_acceptance_rates": "[i]: drafts whose token i was accepted / drafts "
                                                 "(= per_position_acceptance)",
    "spec_decode_num_drafts": "drafts (steps with a non-empty draft)",
    "spec_decode_draft_tokens": "drafted tokens",
    "spec_decode_accepted_tokens": "accepted draft tokens",
    "mean_tpot_ms": "ms : mean over requests of (latency - time to first token) / (output tokens - 1), "
                    "requests of more than one output token",
    "median_tpot_ms": "ms : the median of the same",
    "output_throughput": "output tokens / s over the wall time of the run",
}


def vllm_spec_decode(drafts: int, draft_tokens: int, accepted: int,
                     accepted_per_pos: Sequence[int] = ()) -> dict[str, Any]:
    """Speculative-decoding figures under vLLM's names (VLLM_NAMES), from its counters' totals
    as `vllm bench serve` computes them; a figure whose denominator is 0 is None."""
    return {"spec_decode_acceptance_rate": 100.0 * accepted / draft_tokens if draft_tokens else None,
            "spec_decode_acceptance_length": 1.0 + accepted / drafts if drafts else None,
            "spec_decode_per_position_acceptance_rates": [a / drafts for a in accepted_per_pos] if drafts else [],
            "spec_decode_num_drafts": int(drafts), "spec_decode_draft_tokens": int(draft_tokens),
            "spec_decode_accepted_tokens": int(accepted)}


def vllm_counts_figures(counts: AcceptanceCounts) -> dict[str, Any]:
    """vllm_spec_decode of the project's pooled counts."""
    return vllm_spec_decode(counts.drafts, counts.drafted, counts.accepted, counts.accepted_per_pos)


def vllm_tpot_ms(requests: Iterable[tuple[float | None, float | None, int]]) -> dict[str, Any]:
    """vLLM's time per output token from (time to first token s, latency s, output tokens) per
    request: (latency - ttft) / (output tokens - 1) over requests of more than one token (and
    both times known), mean and median in ms; None where no request counts."""
    tpots = [(lat - ttft) / (n - 1) for ttft, lat, n in requests if n > 1 and ttft is not None and lat is not None]
    if not tpots:
        return {"mean_tpot_ms": None, "median_tpot_ms": None, "requests": 0}
    return {"mean_tpot_ms": 1e3 * float(np.mean(tpots)), "median_tpot_ms": 1e3 * float(np.median(tpots)),
            "requests": len(tpots)}
