"""Any JSON shape to rectangular tables, for the renderers: a result's `tables` and `metrics`
come in many shapes (lists of records, dicts of records, dicts of dicts of records)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from samspec_bench.reports.values import flatten


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]]


def _record(obj: Any) -> bool:
    """A dict that reads as one table row: mostly scalars (nested dicts are flattened)."""
    return isinstance(obj, dict) and bool(obj) and all(not isinstance(v, list) or len(v) <= 16 for v in obj.values())


def _rows_table(title: str, records: list[dict], key_cols: list[tuple[str, list]] | None = None) -> Table:
    flat = [flatten(r) for r in records]
    cols: dict[str, None] = {}
    for f in flat:
        for k in f:
            cols.setdefault(k, None)
    # short lists flatten to name[0], name[1]...: show them as one column instead
    columns, seen = [], set()
    for c in cols:
        base = c.split("[", 1)[0] if c.endswith("]") and "[" in c else c
        if base not in seen:
            seen.add(base)
            columns.append(base)
    rows = []
    for rec, f in zip(records, flat):
        row = []
        for c in columns:
            if c in f:
                row.append(f[c])
            else:
                v = _dig(rec, c)
                row.append(v)
        rows.append(row)
    if key_cols:
        columns = [k for k, _ in key_cols] + columns
        rows = [[vals[i] for _, vals in key_cols] + row for i, row in enumerate(rows)]
    return Table(title, columns, rows)


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def shape_tables(title: str, obj: Any, depth: int = 0) -> list[Table]:
    """Tables for one JSON value: a list of records is a table; a dict of records is a table
    with a key column; a dict of dicts of records gets two key columns; scalars become a
    (name, value) table; anything else is split by key into sub-tables."""
    if isinstance(obj, list):
        if obj and all(isinstance(r, dict) for r in obj):
            return [_rows_table(title, obj)]
        if any(isinstance(r, dict) for r in obj):   # rows and things that are not rows (malformed.py names them)
            return [_rows_table(title, [r for r in obj if isinstance(r, dict)]),
                    Table(f"{title} (not rows)", ["row", "value"], [[i, r] for i, r in enumerate(obj)
                                                                    if not isinstance(r, dict)])]
        if not obj:
            return [Table(title, ["(empty)"], [])]
        return [Table(title, ["value"], [[v] for v in obj])]
    if not isinstance(obj, dict):
        return [Table(title, ["value"], [[obj]])]
    if not obj:
        return [Table(title, ["(empty)"], [])]
    scalars = {k: v for k, v in obj.items() if not isinstance(v, (dict, list))}
    nested = {k: v for k, v in obj.items() if isinstance(v, (dict, list))}
    out: list[Table] = []
    if scalars:
        out.append(Table(title, ["name", "value"], [[k, v] for k, v in scalars.items()]))
    if not nested:
        return out
    if all(_record(v) and all(not isinstance(x, dict) or not x or _record(x) for x in v.values()) for v in nested.values()) \
            and not all(isinstance(x, dict) for v in nested.values() for x in v.values()):
        out.append(_rows_table(title if not scalars else f"{title} (by key)", list(nested.values()),
                               [("key", list(nested))]))
        return out
    if all(isinstance(v, dict) and v and all(_record(x) for x in v.values()) for v in nested.values()):
        keys1, keys2, recs = [], [], []
        for k1, inner in nested.items():
            for k2, rec in inner.items():
                keys1.append(k1)
                keys2.append(k2)
                recs.append(rec)
        out.append(_rows_table(title, recs, [("key", keys1), ("sub-key", keys2)]))
        return out
    if depth >= 3:
        out.append(Table(title, ["name", "value"], [[k, v] for k, v in nested.items()]))
        return out
    for k, v in nested.items():
        out.extend(shape_tables(f"{title} / {k}", v, depth + 1))
    return out
