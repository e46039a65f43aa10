"""verl's validation generations, told apart from its RL rollouts.

verl dumps validation generations (`trainer.validation_data_dir`) with the same
`{global_step}.jsonl` naming as the rollouts (`trainer.rollout_data_dir`): `0.jsonl` before
training, then one file every `test_freq` steps (volcengine/verl, ray_trainer.py: `_validate` calls
`_dump_generations` with the validation folder). They are not RL steps: other prompts, other
sampling settings, no update between them. A record is a validation generation when
- its file sits in a folder named like val*, valid*, validation* (`val`, `val_generations`,
  `validation_data`; not `values`), or
- its line has verl's validation shape: `_validate` also stores the score under
  reward_extra_infos_dict["reward"], so its dump lines carry a "reward" equal to "score"; the
  rollout dumps of `fit` hold only the reward function's own extra keys.

`split_validation` keeps them out of the RL steps unless asked (history_includes_validation):
beside rollouts they are left out and counted; alone they are replayed without RL steps.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

from samspec_bench.data import TraceSet

VALIDATION_FOLDER = re.compile(r"^(val|valid|validation)([^a-z].*)?$", re.I)
SHAPE_REASON = "verl's validation shape ('reward' equal to 'score')"


def folder_reason(file: Path) -> str | None:
    """Why a file's records are validation generations by the name of its folder, or None."""
    name = file.parent.name
    return f"in a folder named {name!r}" if VALIDATION_FOLDER.match(name) else None


def validation_row(row: dict) -> bool:
    """Whether a verl dump line has the validation shape ('reward' equal to 'score')."""
    r, s = row.get("reward"), row.get("score")
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (r, s))
    return numbers and (r == s or (math.isnan(r) and math.isnan(s)))   # a NaN score is stored twice too


def split_validation(traces: TraceSet, include: bool) -> tuple[TraceSet, dict[str, Any] | None]:
    """The records to replay and what was done with the validation generations (None: there
    were none). include: they join the RL steps as their own steps (as earlier versions did)."""
    val = [r for r in traces.records if r.validation]
    if not val:
        return traces, None
    files: dict[str, str] = {}
    for r in val:
        files.setdefault(str(r.source), r.validation)
    rollouts = [r for r in traces.records if not r.validation]
    info: dict[str, Any] = {"responses": len(val), "files": files, "rollout_responses": len(rollouts),
                            "excluded": 0, "included": include}
    if include:
        info["handling"] = ("replayed with their steps as RL steps (--history-includes-validation): the history "
                            "source drafts from earlier validation rounds too")
        return traces, info
    if rollouts:
        info["excluded"] = len(val)
        info["handling"] = ("left out: validation rounds are not RL steps (--history-includes-validation replays "
                            "them as steps)")
        return dataclasses.replace(traces, records=rollouts), info
    info["handling"] = ("validation generations only: replayed without RL steps (a validation round is not a "
                        "step; --history-includes-validation uses the rounds as steps)")
    return dataclasses.replace(traces, records=[dataclasses.replace(r, step=None) for r in val]), info
