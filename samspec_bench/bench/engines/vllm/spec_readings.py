"""What a vLLM run's spec-decode metrics gave (spec_metrics.py reads them): an `Interval` of
counts (exact from Prometheus counters; from a log line, drafts maybe estimated; None where a
count is unknown, never 0) and a `Reading` of a set of files (the intervals, a tally of every
line, what could not be read or told), pooled by `Reading.total`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from samspec_bench.metrics import vllm_spec_decode


@dataclass
class Interval:
    """The counts of one reading: exact from counters; from a log line, drafts maybe estimated.
    None: unknown (a counter absent from a scrape), never taken as 0."""

    source: str
    drafts: float | None
    draft_tokens: int | None
    accepted: int | None
    accepted_per_pos: list[float] | None
    drafts_exact: bool = True
    printed: dict[str, Any] = field(default_factory=dict)   # a log line's own figures, as printed

    def figures(self) -> dict[str, Any]:
        """vLLM's names (metrics.vllm_spec_decode), the project's beside them, and the source."""
        d = self.drafts if self.drafts else 0
        v = vllm_spec_decode(d, self.draft_tokens or 0, self.accepted or 0, self.accepted_per_pos or [])
        if self.accepted is None or self.draft_tokens is None:   # unknown, not 0: so are the figures from it
            v["spec_decode_acceptance_rate"] = None
        if self.accepted is None:
            v["spec_decode_acceptance_length"] = None
        for key, x in (("num_drafts", self.drafts), ("draft_tokens", self.draft_tokens),
                       ("accepted_tokens", self.accepted)):
            v[f"spec_decode_{key}"] = _number(x)
        v["spec_decode_per_position_acceptance_rates"] = (None if self.accepted_per_pos is None else
                                                          [p / d for p in self.accepted_per_pos] if d else [])
        ours = {"acceptance_rate": None if v["spec_decode_acceptance_rate"] is None
                else v["spec_decode_acceptance_rate"] / 100,
                "acceptance_length": v["spec_decode_acceptance_length"],
                "per_position_acceptance": v["spec_decode_per_position_acceptance_rates"]}
        return {"source": self.source, **v, **ours, "drafts_exact": self.drafts_exact,
                **({"printed": self.printed} if self.printed else {})}


def _number(x: float | None) -> float | int | None:
    return None if x is None else (int(x) if float(x).is_integer() else float(x))


@dataclass
class Reading:
    """What a set of files gave: the format, the intervals, and a tally of every line."""

    format: str
    intervals: list[Interval]
    lines: dict[str, int]
    not_understood: list[str]
    resets: int = 0
    inconsistent: list[str] = field(default_factory=list)   # log lines whose printed rate disagrees
    why_not_understood: list[str] = field(default_factory=list)   # beside each spec-decode line quoted
    non_finite: list[str] = field(default_factory=list)   # "file:line (field, ...)": printed, not used
    not_used: dict[str, int] = field(default_factory=dict)   # spec-decode series read but not used
    notes: list[str] = field(default_factory=list)   # what the reader could not tell (drafts unknown)

    def __post_init__(self):
        if len(self.k_values()) > 1:
            self.notes.append(f"the intervals draft {' or '.join(map(str, self.k_values()))} positions (k changed: a "
                              "restart?): pooled per-position rates unknown; each interval's are its own")

    def k_values(self) -> list[int]:
        return sorted({len(i.accepted_per_pos) for i in self.intervals if i.accepted_per_pos})

    def total(self) -> Interval:
        """Every interval pooled (sums, then ratios); a count unknown in one interval is unknown
        pooled; drafts exact only if every interval's is. Per-position counts pool only where
        every interval has them for one k: a position k lacks has fewer drafts than the pool."""
        iv = self.intervals

        def pooled(xs: list[Any]) -> Any:
            return None if any(x is None for x in xs) else sum(xs)

        per_pos = None
        if all(i.accepted_per_pos is not None for i in iv) and len(self.k_values()) <= 1:
            k = max((len(i.accepted_per_pos) for i in iv), default=0)
            per_pos = [sum(i.accepted_per_pos[p] for i in iv if p < len(i.accepted_per_pos)) for p in range(k)]
        return Interval(f"{len(iv)} interval(s) pooled", pooled([i.drafts for i in iv]),
                        pooled([i.draft_tokens for i in iv]), pooled([i.accepted for i in iv]), per_pos,
                        all(i.drafts_exact for i in iv))
