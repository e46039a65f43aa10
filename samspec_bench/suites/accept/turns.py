"""Multi-turn responses as a rollout engine serves them: one request per model turn.

A multi-turn rollout (verl's agent loop, tool-integrated reasoning) calls the engine once per
assistant turn with everything so far as the prompt: earlier turns and the tool output after
them are prefilled, only the turn itself is decoded. So a response with tool output
(`TokenizedResponse.tool_spans`) is replayed as one `TurnItem` per stretch of generated tokens:
its prompt is the response's prompt plus everything before the turn (tool text included: the
drafter indexes it), its response the turn's generated tokens. Drafts are proposed and counted
over generated tokens only; tool tokens are counted apart (`split_turns`' summary).

The first turn keeps the response's key, group and RL step. The sources reach later turns too,
as an agent loop's requests would meet them:
- group: turn t of the responses of one group (trace file, group, RL step) is a group of its
  own, its members replayed side by side as the siblings' turns t run, each with its own prompt
  (its own earlier turns and tool output), all of them indexed in the group's automaton; so a
  turn drafts from what the siblings wrote in their earlier turns and in this one so far. The
  members share the response's prompt (`root_prompt_ids`), not the turn's.
- history: a history store keeps each earlier response whole (every turn and its tool output,
  `history_response`, added once with the first turn) under the response's prompt, and a later
  turn, whose prompt begins with that prompt, finds it (sam/history.py: the longest held prompt
  that begins the asked one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from samspec_bench.errors import UserError
from samspec_bench.trace_formats import tool_summary

PREFILL = ("tool output is prefilled, not decoded: one request per model turn, its prompt everything "
           "before it (tool text included, the drafter indexes it); drafts over generated tokens only")
DECODE = "--tool-output decode: tool output replayed as generated tokens (drafted and counted)"
LATER_TURNS = ("later turns draft from group and history sources too: turn t of the siblings side by side, and the "
               "earlier steps' whole responses to the response's prompt")
MODEL_ENGINE = "the model generates its own responses to the traces' prompts: tool output only counted"


@dataclass(frozen=True)
class TurnItem:
    """One model turn of a multi-turn response, replayed as its own request."""
    id: str
    group: str
    prompt_ids: np.ndarray
    response_ids: np.ndarray
    source: Path
    line: int
    prompt_format: str
    step: int | None
    sub: Any            # the response's sub, with ".t<turn>" from the second turn on (keys stay unique)
    turn: int           # 0 for the first turn
    logprobs: np.ndarray | None = None
    response_group: str | None = None   # the response's own group (`group` names the turn from the second turn)
    root_prompt_ids: np.ndarray | None = None    # the response's prompt: what the turn's group members share
    history_response: np.ndarray | None = None   # what a history store keeps of the response: whole, on turn 0


def generated_stretches(n: int, spans: Sequence[tuple[int, int, str]]) -> list[tuple[int, int]]:
    """[start, end) of every non-empty stretch of generated tokens in a response of n tokens."""
    out, at = [], 0
    for start, end, _ in spans:
        if start > at:
            out.append((at, start))
        at = max(at, end)
    if n > at:
        out.append((at, n))
    return out


def _turns(it: Any) -> list[TurnItem]:
    resp = it.response_ids
    out = []
    for turn, (start, end) in enumerate(generated_stretches(int(resp.size), it.tool_spans)):
        later = turn > 0
        sub = (f"{it.sub}.t{turn}" if it.sub is not None else f"t{turn}") if later else it.sub
        out.append(TurnItem(
            id=f"{it.id}.t{turn}" if later else it.id,
            group=f"{it.group}#turn{turn}" if later else it.group,
            prompt_ids=np.concatenate([it.prompt_ids, resp[:start]]).astype(np.int32) if start else it.prompt_ids,
            response_ids=resp[start:end], source=it.source, line=it.line, prompt_format=it.prompt_format,
            step=it.step, sub=sub, turn=turn, logprobs=None if it.logprobs is None else it.logprobs[start:end],
            response_group=it.group, root_prompt_ids=it.prompt_ids, history_response=None if later else resp))
    return out


def split_turns(items: Sequence[Any], mode: str, replays: bool) -> tuple[list, dict[str, Any] | None]:
    """The items to run and the tool output summary. mode "prefill" on a replaying engine: one
    TurnItem per model turn of each response with tool output (others unchanged); "decode" or a
    model engine: the items as they are."""
    info = tool_summary(items)
    if info is None:
        return list(items), None
    if mode == "decode" or not replays:
        info.update(handling=DECODE if mode == "decode" else MODEL_ENGINE, requests=len(items))
        return list(items), info
    out: list = []
    for it in items:
        out.extend(_turns(it) if getattr(it, "tool_spans", ()) else [it])
    if not out:   # every response is tool output: nothing generated to draft for
        raise UserError(f"--traces: all {len(items)} response(s) are tool output "
                        "(no generated tokens to replay); pass traces with model-generated text, or --tool-output "
                        "decode to replay the tool output as generated")
    later = [t for t in out if getattr(t, "turn", 0) > 0]
    info.update(handling=PREFILL, requests=len(out), later_turns=len(later),
                later_turn_tokens=int(sum(t.response_ids.size for t in later)), sources_note=LATER_TURNS)
    return out, info
