"""What in a result.json's tables and per-arm objects the report cannot show as it is, named and
counted (`collect` puts each on its run as a note and counts them among its headlines; nothing
here raises):

- a table that is not rows: every suite writes a table as a list of row objects, or such lists
  (or objects of rows) by key; a number, a string or a list in its place is named;
- a row that is not an object (a list, a number, null);
- a row that lacks columns every other row of its table has (of two rows, only one without most
  of the other's columns; a row that says it was `skipped` is a row of its own kind);
- an entry of a suite's object of arms / pairs / comparisons that is not an object: the
  summary leaves it out.
"""

from __future__ import annotations

import json
from typing import Any

# per suite: the metrics that are objects of objects (one per arm, pair, compared run)
OBJECT_MAPS = {"rollout": ("arms",), "compare": ("arms",), "op-equivalence": ("pairs",), "curves": ("comparisons",)}
LISTED = 3   # rows named in one note; the rest are counted


def json_kind(v: Any) -> str:
    """The JSON name of a value's type: object, list, string, number, boolean, null."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return {dict: "object", list: "list", tuple: "list", str: "string"}.get(type(v), type(v).__name__)


def _shown(v: Any, width: int = 40) -> str:
    text = repr(v) if isinstance(v, str) else json.dumps(v, default=str)
    return text if len(text) <= width else text[:width - 1] + "…"


def _rows(where: str, rows: list) -> list[str]:
    out = []
    n = len(rows)
    bad = [(i, r) for i, r in enumerate(rows) if not isinstance(r, dict)]
    if bad:
        named = "; ".join(f"row {i}: " + ("null" if r is None else f"a JSON {json_kind(r)} {_shown(r)}")
                          for i, r in bad[:LISTED])
        more = f"; {len(bad) - LISTED} more" if len(bad) > LISTED else ""
        verb = "is not a row object" if len(bad) == 1 else "are not row objects"
        out.append(f"{where}: {len(bad)} of {n} rows {verb} ({named}{more})")
    recs = [(i, r) for i, r in enumerate(rows) if isinstance(r, dict) and "skipped" not in r]
    count: dict[str, int] = {}   # column -> rows that have it, in first-seen order
    for _, r in recs:
        for c in r:
            count[c] = count.get(c, 0) + 1
    short = []
    for i, r in recs:   # a column every other row has is in len(recs) - 1 rows, this one not among them
        lacks = [c for c, k in count.items() if k == len(recs) - 1 and c not in r]
        # against one other row, only a row without most of its columns is the odd one out
        if lacks and (len(recs) >= 3 or 2 * len(lacks) > len(next(x for j, x in recs if j != i))):
            short.append((i, lacks))
    if short:
        named = "; ".join(f"row {i}: no {', '.join(map(str, cols[:6]))}{' …' if len(cols) > 6 else ''}"
                          for i, cols in short[:LISTED])
        more = f"; {len(short) - LISTED} more" if len(short) > LISTED else ""
        verb = "lacks" if len(short) == 1 else "lack"
        out.append(f"{where}: {len(short)} of {n} rows {verb} columns the others have ({named}{more}); shown blank")
    return out


def table_problems(name: str, table: Any) -> list[str]:
    """What is wrong with one of a result's tables (result["tables"][name]); [] when nothing."""
    where = f"tables.{name}"
    if isinstance(table, list):
        return _rows(where, table)
    if not isinstance(table, dict):
        return [f"{where}: a JSON {json_kind(table)} ({_shown(table)}), not a table (a list of row objects)"]
    out = []
    for key, sub in table.items():
        if isinstance(sub, list):
            out += _rows(f"{where}.{key}", sub)
        elif not isinstance(sub, dict):
            out.append(f"{where}.{key}: a JSON {json_kind(sub)} ({_shown(sub)}), not rows (a table is a list of row "
                       "objects, or such lists by key)")
    return out


def malformed(result: dict) -> list[str]:
    """Every malformed table, row and per-arm entry of a result, one line each."""
    out = []
    tables = result.get("tables")
    if isinstance(tables, dict):
        for name, table in tables.items():
            out += table_problems(str(name), table)
    metrics = result.get("metrics")
    for key in OBJECT_MAPS.get(result.get("suite"), ()):
        if not isinstance(metrics, dict) or key not in metrics:
            continue
        v = metrics[key]
        if not isinstance(v, dict):
            out.append(f"metrics.{key}: a JSON {json_kind(v)} ({_shown(v)}), not an object (one entry per name); "
                       "left out of the summary")
            continue
        out += [f"metrics.{key}.{name}: a JSON {json_kind(x)} ({_shown(x)}), not an object; left out of the summary"
                for name, x in v.items() if not isinstance(x, dict)]
    return out
