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

_EMPTY_THINK = r"(?:<think>\n\n</think>\n\n)?"
_PATTERN = re.compile(
    r"(?P<tool_response>(?:<\|im_start\|>)?user\n<tool_response>\n.*?\n</tool_response>(?:<\|im_end\|>)?\n"
    r"(?:<\|im_start\|>)?assistant\n" + _EMPTY_THINK + r")"
    r"|(?P<chat_turn>\n?<\|im_start\|>(?:user|tool|system)\n.*?<\|im_end\|>\n<\|im_start\|>assistant\n"
    + _EMPTY_THINK + r")"
    r"|(?P<output_block>\n```output\n.*?\n```(?:\n|\Z)(?:\nReach max function call limit\.)?)",
    re.S)
_MARKERS = ("<tool_response>", "<|im_start|>", "```output")

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
