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
  rollout dumps of `fit` hold only the reward function's own extra keys. "reward" is the float32
  token-level score summed, "score" the reward function's own where it returns a dict (it
  overwrites verl's), so the two agree to float32 precision only (0.1 beside 0.10000000149011612)
  and differ where the reward manager adds a penalty (DAPO's overlong buffer: reward = score +
  overlong_reward). verl writes a file per `_dump_generations` call, so a file with lines of
  the shape whose every line carries a numeric "reward" is validation whole (`validation_file`).

`split_validation` keeps them out of the RL steps unless asked (`accept` and `rollout`
--history-includes-validation): beside rollouts they are left out and counted; alone they are
replayed without RL steps. `validation_line` says what was done, in one line. A reward manager that
stores the score again as "reward" in every line of its rollout dumps makes them look like
validation generations: the line then points at the option that replays them as RL steps.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

from samspec_bench.data import TraceSet

SHOWN = 4   # files named per reason in the line; the rest counted

VALIDATION_FOLDER = re.compile(r"^(val|valid|validation)([^a-z].*)?$", re.I)
SHAPE_REASON = "verl's validation shape ('reward' equal to 'score')"
F32_TOL = 1e-6   # float32 keeps 24 bits: a relative error of 6e-8 at most


def folder_reason(file: Path) -> str | None:
    """Why a file's records are validation generations by the name of its folder, or None."""
    name = file.parent.name
    return f"in a folder named {name!r}" if VALIDATION_FOLDER.match(name) else None


def validation_row(row: dict) -> bool:
    """Whether a verl dump line has the validation shape ('reward' equal to 'score' to float32
    precision: the reward is a float32 tensor's sum)."""
    r, s = row.get("reward"), row.get("score")
    if not (_number(r) and _number(s)):
        return False
    return math.isclose(r, s, rel_tol=F32_TOL, abs_tol=F32_TOL) or (math.isnan(r) and math.isnan(s))   # NaN twice too


def has_reward(row: dict) -> bool:
    """Whether a verl dump line carries a numeric 'reward' (every line of a validation dump does)."""
    return _number(row.get("reward"))


def validation_file(lines: int, with_reward: int, shaped: int) -> bool:
    """Whether a verl dump file is validation generations whole: some of its `lines` have the
    validation shape and all of them a 'reward' (one that differs from 'score' by a penalty is
    still a validation line: verl dumps one validation round per file)."""
    return shaped > 0 and with_reward == lines


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


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


def validation_line(info: dict[str, Any] | None) -> str | None:
    """What split_validation found and did (its info), in one line; None: nothing was found. Files
    known by the validation shape, not included, get the hint that rollouts of a reward manager
    storing 'reward' = 'score' look the same (the handling names the option that replays them)."""
    if not info:
        return None
    if not info["responses"]:   # a caller's own record: the option given, nothing to include
        return f"validation generations: {info['handling']}"
    by_why: dict[str, list[str]] = {}
    for f, why in info["files"].items():
        by_why.setdefault(why, []).append(f"{Path(f).parent.name}/{Path(f).name}")
    found = "; ".join(f"{', '.join(fs[:SHOWN])}{f' and {len(fs) - SHOWN} more' if len(fs) > SHOWN else ''} ({why})"
                      for why, fs in by_why.items())
    left = (f"; {info['excluded']:,} left out, {info['rollout_responses']:,} rollout responses replayed"
            if info["excluded"] else "")
    hint = ("; rollout dumps of a reward manager that writes 'reward' = 'score' in every line look the same"
            if SHAPE_REASON in by_why and not info["included"] else "")
    return (f"validation generations: {info['responses']:,} response(s) in {len(info['files'])} file(s): {found}{left}; "
            f"{info['handling']}{hint}")
