"""accept's draft sources side by side, as the report shows them: own / group / history /
group+history in columns, per drafter and k, then per RL step (verl dumps, or the emulated
earlier / current split of single-step traces), then what the history store held.

Read from result.json as suites/accept/running.py writes it: `tables.sources` (one row per
drafter and k, each source's tokens_per_step / acceptance_length and configuration label),
`tables.by_step` (configuration label -> per-step metrics) and `engine.history`. The figures
are counts (tokens per verify step), not times.
"""

from __future__ import annotations

from typing import Any

from samspec_bench.reports.tables import Table

# result.json's source names -> the report's column names
SOURCES = (("own", "own"), ("own+group", "group"), ("own+history", "history"), ("own+group+history", "group+history"))
METRICS = (("tokens_per_step", "tokens_per_step (tokens per verify step, counted)"),
           ("acceptance_length", "acceptance_length (1 + accepted per draft, counted)"))
SHOWN_KEYS = ("sources", "by_step")   # the generic renderings of these are replaced by the tables below
MIB = 1 << 20


def _step_name(step: Any) -> Any:
    return "(no step)" if step is None else step


def _names(row: dict) -> list[Any]:
    order = f" ({row['group_order']})" if row.get("group_order") else ""
    return [f"{row.get('drafter')}{order}", row.get("k")]


def side_by_side(result: dict) -> Table | None:
    """Rows (drafter, k, metric), a column per source (None where it did not run)."""
    rows = (result.get("tables") or {}).get("sources") or []
    if not rows:
        return None
    out = []
    for r in rows:
        for key, name in METRICS:
            out.append(_names(r) + [name] + [(r.get(src) or {}).get(key) for src, _ in SOURCES])
    return Table("draft sources side by side (counts, not time)", ["drafter", "k", "metric", *(c for _, c in SOURCES)],
                 out)


def by_step(result: dict) -> Table | None:
    """Rows (drafter, k, RL step), tokens_per_step of each source in that step."""
    tables = result.get("tables") or {}
    rows, steps = tables.get("sources") or [], tables.get("by_step") or {}
    if not rows or not steps:
        return None
    out = []
    for r in rows:
        per_source = {src: {s["step"]: s for s in steps.get((r.get(src) or {}).get("label"), [])} for src, _ in SOURCES}
        order: list[Any] = []
        for src, _ in SOURCES:
            order += [st for st in per_source[src] if st not in order]
        for st in order:
            cells = [(per_source[src].get(st) or {}).get("tokens_per_step") for src, _ in SOURCES]
            out.append(_names(r) + [_step_name(st), *cells])
    how = (result.get("inputs") or {}).get("steps") or "RL steps"
    return Table(f"tokens_per_step by RL step and draft source (counts, not time; {how})",
                 ["drafter", "k", "step", *(c for _, c in SOURCES)], out)


def history_store(result: dict) -> Table | None:
    """Per configuration with the history source: how many responses found earlier ones, and
    what the store held against its bounds."""
    hist = (result.get("engine") or {}).get("history") or {}
    by_conf = hist.get("by_configuration") or {}
    if not by_conf:
        return None
    out = []
    for label, h in by_conf.items():
        out.append([label, h.get("replayed_with_history"), h.get("replayed_responses"),
                    h.get("window_responses_per_prompt"), _mib(h.get("peak_stored_bytes")), _mib(h.get("budget_bytes")),
                    h.get("evicted_by_window"), h.get("evicted_by_budget")])
    return Table("history store (earlier RL steps' responses to the same prompt)",
                 ["configuration", "responses with history", "responses replayed", "window (responses per prompt)",
                  "peak stored (MiB)", "budget (MiB)", "evicted by window", "evicted by budget"], out)


def _mib(v: Any) -> float | None:
    return v / MIB if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def draft_source_tables(result: dict) -> list[Table]:
    """The tables above that this result has data for (none for other suites)."""
    if result.get("suite") != "accept":
        return []
    return [t for t in (side_by_side(result), by_step(result), history_store(result)) if t is not None]
