"""One verl RL step found in the step files of several folders (two runs passed together, a
resumed job that dumped into a new folder, a validation folder not recognised as one): its
rows are replayed as one step, and with a history source one folder's responses become the
other's history. Allowed (a validation folder passed beside the rollouts on purpose merges by
step), but counted and said, never silent."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

SHOWN = 4   # steps and folders named in the line; the rest counted


def steps_in_folders(records: Iterable[Any], formats: dict[str, str]) -> dict[str, Any] | None:
    """The RL steps whose verl records (`formats`: file -> format, as read_any returns it) come from
    more than one folder: {"merged_steps": count, "merged": [{"step", "folders", "responses"}]},
    the folders as given and each one's responses of that step; None where no step is."""
    by_step: dict[int, dict[Path, list]] = {}
    where_of: dict[str, tuple[Path, str]] = {}   # file -> (its folder resolved, as given): resolved once a file
    for r in records:
        if r.step is None or formats.get(str(r.source)) != "verl":
            continue
        if str(r.source) not in where_of:
            folder = Path(r.source).parent
            where_of[str(r.source)] = (folder.resolve(), str(folder))
        key, name = where_of[str(r.source)]
        by_step.setdefault(r.step, {}).setdefault(key, [name, 0])[1] += 1
    merged = [{"step": step, "folders": [name for name, _ in where.values()],
               "responses": [n for _, n in where.values()]}
              for step, where in sorted(by_step.items()) if len(where) > 1]
    return {"merged_steps": len(merged), "merged": merged} if merged else None


def merged_steps_line(info: dict[str, Any] | None) -> str | None:
    """The one line that says which steps were merged from which folders (None: none were)."""
    if not info:
        return None
    steps = [m["step"] for m in info["merged"]]
    folders = list(dict.fromkeys(f for m in info["merged"] for f in m["folders"]))
    more = f" (and {len(steps) - SHOWN} more)" if len(steps) > SHOWN else ""
    more_folders = f", and {len(folders) - SHOWN} more" if len(folders) > SHOWN else ""
    return (f"verl step {', '.join(map(str, steps[:SHOWN]))}{more} found in {len(folders)} folders "
            f"({', '.join(folders[:SHOWN])}{more_folders}): their rows were merged as one step each; with a history "
            "source one folder's responses are the other's history; pass one run's folder to keep them apart")
