"""Tool output inside a response: text the rollout appended between the model's turns, which a
rollout engine prefills (as the next turn's prompt) and never decodes, so never drafts.

Shapes recognised in the response text (character spans; `find_tool_spans`):

- `tool-response`: a tool turn of the ChatML / Qwen chat template as verl's multi-turn rollouts
  write it. verl's agent loop (volcengine/verl, verl/experimental/agent_loop/tool_agent_loop.py)
  calls the engine once per assistant turn with everything so far as the prompt, and appends the
  tool turn `apply_chat_template([{"role": "tool", ...}], add_generation_prompt=True)` to the
  response with response_mask 0; the dump decodes the response with skip_special_tokens=True,
  so with Qwen3's template the turn reads `user\\n<tool_response>\\n...\\n</tool_response>\\nassistant\\n`
  (`<|im_start|>` / `<|im_end|>` gone, `<tool_response>` kept: it is not a special token). The
  same turn with its special tokens kept, several tool responses in one turn, and the empty
  thinking block of enable_thinking=False after `assistant\\n` are included.
- `chat-turn`: any user / tool / system turn written with its special tokens
  (`<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n`), e.g. verl's interaction turns in a
  dump that keeps special tokens. Without them such a turn cannot be told from model text.
- `output-block`: an executor's result in tool-integrated reasoning (ToRA, Qwen2.5-Math TIR):
  the harness stops the model at "```output" and appends "\\n```output\\n{result}\\n```\\n"
  (microsoft/ToRA, src/infer/inference.py), "\\nReach max function call limit." after the last.

Everything else counts as generated. A model that writes one of these shapes itself is
misread as tool output: Qwen2.5-Math-Instruct, trained on tool-integrated reasoning, writes an
```output block itself in 5 of the 800 chain-of-thought responses of the shared traces (no
executor ran). Callers say how much they found; `accept --tool-output decode` replays every
token as generated.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Sequence

_EMPTY_THINK = r"(?:<think>\n\n</think>\n\n)?"
_PATTERN = re.compile(
    r"(?P<tool_response>(?:<\|im_start\|>)?user\n<tool_response>\n.*?\n</tool_response>(?:<\|im_end\|>)?\n"
    r"(?:<\|im_start\|>)?assistant\n" + _EMPTY_THINK + r")"
    r"|(?P<chat_turn>\n?<\|im_start\|>(?:user|tool|system)\n.*?<\|im_end\|>\n<\|im_start\|>assistant\n"
    + _EMPTY_THINK + r")"
    r"|(?P<output_block>\n```output\n.*?\n```(?:\n|\Z)(?:\nReach max function call limit\.)?)",
    re.S)
_MARKERS = ("<tool_response>", "<|im_start|>", "```output")

TOOL_OUTPUT = ("prefill", "decode")   # tool output in responses: prefilled as a rollout engine does, or decoded

SHAPES = {
    "tool-response": "<tool_response> turns (verl multi-turn, ChatML / Qwen template)",
    "chat-turn": "user / tool / system turns with their special tokens",
    "output-block": "```output blocks (ToRA / Qwen2.5-Math tool-integrated reasoning)",
}


def find_tool_spans(text: str) -> tuple[tuple[int, int, str], ...]:
    """(start, end, shape) of every stretch of tool output in a response text, in order and
    not overlapping; () when there is none."""
    if not any(m in text for m in _MARKERS):
        return ()
    return tuple((m.start(), m.end(), m.lastgroup.replace("_", "-")) for m in _PATTERN.finditer(text))


def tool_summary(items: Sequence[Any]) -> dict[str, Any] | None:
    """What tool output the responses hold: responses, spans, tokens by shape and by RL step
    (None when none has any)."""
    with_tools = [it for it in items if getattr(it, "tool_spans", ())]
    if not with_tools:
        return None
    shapes: Counter = Counter()
    by_step: Counter = Counter()
    tool = 0
    for it in with_tools:
        n = sum(end - start for start, end, _ in it.tool_spans)
        tool += n
        by_step[it.step] += n
        shapes.update(shape for _, _, shape in it.tool_spans)
    total = int(sum(it.response_ids.size for it in items))
    return {"responses": len(with_tools), "spans": sum(shapes.values()), "tool_tokens": tool,
            "generated_tokens": total - tool, "response_tokens": total,
            "shapes": {s: {"spans": n, "what": SHAPES.get(s, s)} for s, n in sorted(shapes.items())},
            "tool_tokens_by_step": {str(k): v for k, v in sorted(by_step.items(), key=lambda kv: -1 if kv[0] is None
                                                                  else kv[0])}}
