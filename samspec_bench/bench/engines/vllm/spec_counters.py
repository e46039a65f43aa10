"""vLLM's spec-decode Prometheus counters: their names, and the checks that what a scrape (or the
difference of two scrapes) holds is possible, read by spec_metrics.py.

- A counter (`..._total`) is a finite count >= 0.
- In one reading: accepted tokens <= draft tokens; a position is accepted at most once per draft
  (accepted at position i <= drafts); the per-position counts sum to at most the accepted
  tokens (vLLM adds one to each position up to the accepted length: they sum to it). Strict: no
  tolerance; a failed check is a one-line UserError naming the file, the scrape(s) and the counters.
- Between two scrapes each series is differenced on its own (`series_increase`), then summed.
- A counter absent from a scrape is unknown there (never 0): `missing_notes` names it and the
  scrapes without it, and the figures that need it are unknown.
- A series in one scrape and absent from the next while its counter is there (an engine that went
  away) has no increase there: left out of that interval, counted and named (`vanished_notes`).
  One absent from a scrape and present in the next (an engine that joined, or a restart under other
  labels: the other half of a label change) counts whole there, counted and named (`appeared_notes`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from samspec_bench.errors import UserError

PREFIX = "vllm:spec_decode_"
DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS = (f"{PREFIX}num_drafts", f"{PREFIX}num_draft_tokens",
                                           f"{PREFIX}num_accepted_tokens", f"{PREFIX}num_accepted_tokens_per_pos")
BETWEEN = "between these scrapes (a restart the counters did not show?); give scrapes of one server run"
AS_WRITTEN = "vLLM accepts at most what it drafts; give the scrape as the server wrote it"


def check_counter(series: str, raw: str, where: str) -> None:
    """A spec-decode counter (`..._total`) is a finite count >= 0; else a UserError naming where."""
    if not (series.startswith(PREFIX) and series.endswith("_total")):
        return
    x = float(raw)
    if not math.isfinite(x) or x < 0:
        what = "is not finite" if not math.isfinite(x) else "is negative"
        raise UserError(f"{where}: {series} value {raw} {what}; a counter is a finite count >= 0: give the scrape "
                        "as the server wrote it")


def _n(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:g}"


def check_counts(source: str, drafts: float | None, draft_tokens: float | None, accepted: float | None,
                 per_pos: Sequence[float] | None, between: bool) -> None:
    """The counts of one reading (None: unknown, not checked) are possible; else a UserError
    naming source (file and scrape, or the two scrapes) and the counters."""
    why = BETWEEN if between else AS_WRITTEN
    if accepted is not None and draft_tokens is not None and accepted > draft_tokens:
        raise UserError(f"{source}: accepted tokens {_n(accepted)} > draft tokens {_n(draft_tokens)}, "
                        f"impossible: {why}")
    why = BETWEEN if between else "give the scrape as the server wrote it"
    for p, x in enumerate(per_pos or ()):
        if drafts is not None and x > drafts:
            raise UserError(f'{source}: {PER_POS}_total{{position="{p}"}} {_n(x)} > {DRAFTS}_total {_n(drafts)}, '
                            f"impossible (a position is accepted at most once per draft): {why}")
    if per_pos and accepted is not None and sum(per_pos) > accepted:
        raise UserError(f"{source}: {PER_POS}_total summed over positions {_n(sum(per_pos))} > {ACCEPTED}_total "
                        f"{_n(accepted)}, impossible (each accepted token is counted at one position): {why}")


def positions(per_pos: dict[int, float]) -> list[float] | None:
    """A scrape's per-position counts as a list (position 0 first); None when a position below
    the highest is absent (unknown, not 0)."""
    k = max(per_pos, default=-1) + 1
    return None if len(per_pos) != k else [per_pos[p] for p in range(k)]


def missing_notes(totals: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """Notes naming each counter absent from some of the scrapes (name, totals) and what it leaves
    unknown; per-position series only where other scrapes have them, or a position is absent."""
    def lacking(test) -> str:
        names = [n for n, t in totals if test(t)]
        return f"{len(names)} scrape(s): {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}"

    notes = []
    for name, what, unknown in ((DRAFTS, "drafts", "no mean acceptance length or per-position rates"),
                                (DRAFT_TOKENS, "draft tokens", "no acceptance rate"),
                                (ACCEPTED, "accepted tokens", "no acceptance rate or mean acceptance length")):
        if any(t[name] is None for _, t in totals):
            v0 = " (vLLM V0 has none)" if name == DRAFTS else ""
            notes.append(f"{what} unknown (not 0): no {name}_total counter in {lacking(lambda t: t[name] is None)}"
                         f"{v0}; {unknown} there")
    if any(t[PER_POS] for _, t in totals) and any(not t[PER_POS] for _, t in totals):
        notes.append(f"per-position acceptance unknown (not 0): no {PER_POS}_total series in "
                     f"{lacking(lambda t: not t[PER_POS])} (the other scrapes have them)")
    if any(t[PER_POS] and positions(t[PER_POS]) is None for _, t in totals):
        notes.append(f"per-position acceptance unknown (not 0): {PER_POS}_total lacks a position below the highest in "
                     f"{lacking(lambda t: t[PER_POS] and positions(t[PER_POS]) is None)}")
    pairs = [(na, nb) for (na, a), (nb, b) in zip(totals, totals[1:])
             if a[PER_POS] and b[PER_POS] and len(a[PER_POS]) != len(b[PER_POS])]
    if pairs:
        notes.append(f"per-position acceptance unknown (not 0) between {len(pairs)} pair(s) of scrapes with different "
                     f"positions (k changed: a restart?): {', '.join(f'{x} -> {y}' for x, y in pairs[:5])}")
    return notes


def series_increase(a: dict[tuple, float], b: dict[tuple, float]) -> tuple[dict[tuple, float], int]:
    """Each spec-decode counter series' increase from scrape b to scrape a, as Prometheus'
    increase() takes it per series before any sum: a series that went down restarted (its new
    value is the increase), a series b lacks started after b (one engine of several restarted
    or joined). A counter b lacks altogether is left out: unknown there, not a restart. Also the
    restarts: the label sets (one an engine) with a series that went down."""
    names_before = {name for name, _ in b}
    out, restarted = {}, set()
    for key, x in a.items():
        name, labels = key
        if not name.startswith(PREFIX) or name not in names_before:
            continue
        y = b.get(key)
        if y is not None and x < y:
            restarted.add(tuple(lab for lab in labels if lab[0] != "position"))
        out[key] = x if y is None or x < y else x - y
    return out, len(restarted)


READ = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)


def _engine(labels: tuple) -> tuple:
    return tuple(lab for lab in labels if lab[0] != "position")


def vanished(a: dict[tuple, float], b: dict[tuple, float]) -> list[str]:
    """The label sets (engines) with a read counter series in scrape b that is absent from the
    next scrape a although a has that counter (a counter absent altogether: missing_notes; a
    per-position series gone while the engine keeps others: k changed, noted by missing_notes)."""
    names_after = {name for name, _ in a}
    pos_engines = {_engine(labels) for name, labels in a if name == f"{PER_POS}_total"}
    gone = {_engine(labels) for (name, labels) in b
            if name.endswith("_total") and name[: -len("_total")] in READ and name in names_after
            and (name, labels) not in a and not (name == f"{PER_POS}_total" and _engine(labels) in pos_engines)}
    return sorted(",".join(f'{k}="{v}"' for k, v in e) or "(no labels)" for e in gone)


def appeared(a: dict[tuple, float], b: dict[tuple, float]) -> list[str]:
    """The label sets (engines) with a read counter series in scrape a absent from the scrape b
    before although b has that counter: an engine that joined, or restarted under other labels
    (series_increase counts their whole value: started after b)."""
    return vanished(b, a)


def appeared_notes(new: Sequence[tuple[str, str, str]]) -> list[str]:
    """A note counting the series (label sets) absent from a scrape and present in the next
    ((before, after, labels) each): counted whole, as counters started after the scrape before."""
    if not new:
        return []
    shown = "; ".join(f"{{{lab}}} in {a}, not in {b}" for b, a, lab in new[:5])
    return [f"the series of {len(new)} label set(s) new in the next scrape (an engine that joined, or restarted "
            f"under other labels?): {shown}{'; ...' if len(new) > 5 else ''}; their whole value is counted in that "
            "interval (a counter that started after the scrape before; were it only relabelled, this counts its "
            "history again)"]


def vanished_notes(gone: Sequence[tuple[str, str, str]]) -> list[str]:
    """A note counting the series (label sets) present in a scrape and absent from the next
    ((before, after, labels) each): their increase there is unknown and not in the counts."""
    if not gone:
        return []
    shown = "; ".join(f"{{{lab}}} in {b}, not in {a}" for b, a, lab in gone[:5])
    return [f"the series of {len(gone)} label set(s) gone from the next scrape (an engine that went away?): {shown}"
            f"{'; ...' if len(gone) > 5 else ''}; their increase after the scrape before is unknown and left out "
            "of that interval's counts (the figures are of the series in both scrapes)"]
