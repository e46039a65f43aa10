"""One verl RL step found in the step files of several folders (two runs passed together, a
resumed job that dumped into a new folder, a validation folder not recognised as one): its
rows are replayed as one step, and with a history source one folder's responses become the
other's history. Allowed (verl validation generations included on purpose, accept's
--history-includes-validation, merge by step: said as such, with no advice to split them),
but counted and said, never silent."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from samspec_bench.errors import UserError

SHOWN = 4   # steps and folders named in the line; the rest counted


def steps_in_folders(records: Iterable[Any], formats: dict[str, str]) -> dict[str, Any] | None:
    """The RL steps whose verl records (`formats`: file -> format, as read_any returns it) come from
    more than one folder: {"merged_steps": count, "merged": [{"step", "folders", "responses"}]},
    the folders as given and each one's responses of that step, and "validation_folders" where
    merged folders hold verl validation generations replayed as steps (records marked
    `validation` that kept their step: included on purpose); None where no step is."""
    by_step: dict[int, dict[Path, list]] = {}
    where_of: dict[str, tuple[Path, str]] = {}   # file -> (its folder resolved, as given): resolved once a file
    validation: set[Path] = set()
    for r in records:
        if r.step is None or formats.get(str(r.source)) != "verl":
            continue
        if str(r.source) not in where_of:
            folder = Path(r.source).parent
            where_of[str(r.source)] = (folder.resolve(), str(folder))
        key, name = where_of[str(r.source)]
        by_step.setdefault(r.step, {}).setdefault(key, [name, 0])[1] += 1
        if getattr(r, "validation", None):
            validation.add(key)
    merged, val_names = [], {}
    for step, where in sorted(by_step.items()):
        if len(where) > 1:
            merged.append({"step": step, "folders": [name for name, _ in where.values()],
                           "responses": [n for _, n in where.values()]})
            val_names.update((name, None) for key, (name, _) in where.items() if key in validation)
    if not merged:
        return None
    info = {"merged_steps": len(merged), "merged": merged}
    if val_names:
        info["validation_folders"] = list(val_names)
    return info


def one_file_per_folder_step(records: Iterable[Any], formats: dict[str, str]) -> None:
    """Refuses one RL step in two verl files of one folder by their lines' 'step' (a copy named
    '3 (copy).jsonl' or 'step_3.jsonl' beside 3.jsonl): verl writes one {global_step}.jsonl per step,
    so reading both would count the step's responses twice, silently (files.one_file_per_step
    catches the names alone). `records`: the rollouts (validation generations beside them are
    kept apart by split_validation)."""
    first: dict[tuple[Path, int], str] = {}
    folder_of: dict[str, Path] = {}
    for r in records:
        src = str(r.source)
        if r.step is None or formats.get(src) != "verl":
            continue
        if src not in folder_of:
            folder_of[src] = Path(src).parent.resolve()
        seen = first.setdefault((folder_of[src], r.step), src)
        if seen != src:
            raise UserError(f"trace directory {Path(src).parent}: {Path(seen).name} and {Path(src).name} both hold "
                            f"step {r.step} (verl writes one {{global_step}}.jsonl per step, so one is a copy or "
                            "another run's): keep one of them and move the other out of the folder")


def merged_steps_line(info: dict[str, Any] | None) -> str | None:
    """The one line that says which steps were merged from which folders (None: none were). Where
    validation folders were included on purpose it says so, and advises splitting only rollout
    folders merged with each other."""
    if not info:
        return None
    steps = [m["step"] for m in info["merged"]]
    folders = list(dict.fromkeys(f for m in info["merged"] for f in m["folders"]))
    more = f" (and {len(steps) - SHOWN} more)" if len(steps) > SHOWN else ""
    more_folders = f", and {len(folders) - SHOWN} more" if len(folders) > SHOWN else ""
    line = (f"verl step {', '.join(map(str, steps[:SHOWN]))}{more} found in {len(folders)} folders "
            f"({', '.join(folders[:SHOWN])}{more_folders}): their rows were merged as one step each; with a history "
            "source one folder's responses are the other's history")
    val = info.get("validation_folders") or []
    if not val:
        return line + "; pass one run's folder to keep them apart"
    more_val = f" and {len(val) - SHOWN} more" if len(val) > SHOWN else ""
    line += (f"; {', '.join(val[:SHOWN])}{more_val}: verl validation generations, their rounds included as history "
             "by --history-includes-validation")
    if any(sum(f not in val for f in m["folders"]) > 1 for m in info["merged"]):
        line += "; pass one run's rollout folder to keep the rollout folders apart"
    return line
