"""Multi-turn responses in `rollout --engine replay`: tool output (verl's tool agent loop,
tool-integrated reasoning; trace_formats/tool_turns.py finds it) is prefilled between the
model's turns, as the engine serves such a rollout (bench/simulation/tool_turns.py), or with
`--tool-output decode` replayed as generated tokens (every token drafted and decoded).

Per response (`turn_pairs`): tool text before the first generated token joins the prompt
(the engine never decodes it), tool text after the last generated token is cut off (no turn
follows, so no engine prefills it), and the spans between turns stay, in response positions.
Both edges are counted. Drawn lengths (`--length-dist`) read a response's turns through the
profile's block resampling (`stretched_turns`): a target position is tool text when the
source position it reads is, so turns and profiles stretch alike, and a response stretched to
x times its length makes about x times its tool calls (tool text per token is kept, not the
number of calls).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from samspec_bench.bench.simulation.profiles import stretch_positions
from samspec_bench.bench.simulation.tool_turns import engine_spans, mask_spans, span_mask
from samspec_bench.suites.rollout.tool_latency import latency_text
from samspec_bench.trace_formats import tool_summary

PREFILLED = ("prefilled between turns: a request leaves the engine at its turn's end, its tool runs for "
             "--tool-latency-s, then it prefills the tool text as one chunk (its earlier KV kept by the prefix "
             "cache); tool text is never drafted or decoded")
DECODED = "--tool-output decode: tool output replayed as generated tokens (drafted and decoded)"


def turn_pairs(items: Sequence[Any], max_len: int, mode: str) -> tuple[list, list, dict[str, Any] | None]:
    """(prompt_ids, response_ids) per item, cut at `max_len` response tokens, its tool spans
    between turns (None: single-turn, or mode "decode"), and the tool output summary (None when
    no response holds tool output)."""
    info = tool_summary(items)
    pairs, turns = [], []
    lead = trail = 0
    for it in items:
        prompt, resp = it.prompt_ids, it.response_ids[:max_len]
        spans = [(int(s), int(e)) for s, e, _ in getattr(it, "tool_spans", ())] if mode == "prefill" else []
        if spans and spans[0][0] == 0:   # tool text before the model's first token: part of the prompt
            e = min(spans[0][1], len(resp))
            prompt, resp = np.concatenate([prompt, resp[:e]]), resp[e:]
            lead += e
            spans = [(s - e, t - e) for s, t in spans[1:]]
        kept, n = engine_spans(spans, len(resp))
        trail += len(resp) - n
        pairs.append((prompt, resp[:n]))
        turns.append(kept or None)
    if info is not None:
        info.update(handling=PREFILLED if mode == "prefill" else DECODED, mode=mode,
                    multi_turn_requests=sum(t is not None for t in turns),
                    tool_calls=sum(len(t) for t in turns if t), tool_tokens_into_prompt=lead,
                    tool_tokens_after_last_turn=trail)
    return pairs, turns, info


def stretched_turns(spans: Sequence[tuple[int, int]] | None, n_src: int, n_tgt: int
                    ) -> tuple[list[tuple[int, int]] | None, int]:
    """A response's tool spans read at another length through the profile's block resampling,
    and the length the engine generates to (tool text at the end cut off)."""
    if not spans or n_tgt == n_src:
        return (list(spans) if spans else None), n_tgt
    mask = span_mask(spans, n_src)[stretch_positions(np.arange(n_tgt), n_src, n_tgt)]
    mask[0] = False   # a response starts with a generated token (a source position 0 is never tool text)
    kept, n = engine_spans(mask_spans(mask), n_tgt)
    return kept or None, n


def tool_line(info: dict[str, Any] | None) -> str | None:
    """The terminal's line on tool output (None when the traces hold none)."""
    if not info:
        return None
    share = 100 * info["tool_tokens"] / max(info["response_tokens"], 1)
    line = (f"tool output: {info['tool_tokens']:,} of {info['response_tokens']:,} response tokens ({share:.1f} %) in "
            f"{info['responses']:,} response(s)")
    if info["mode"] == "decode":
        return f"{line}; {DECODED}"
    edges = [f"{info[k]:,} {what}" for k, what in (("tool_tokens_into_prompt", "before the first turn, read as prompt"),
                                                   ("tool_tokens_after_last_turn", "after the last turn, cut off"))
             if info[k]]
    return (f"{line}: {info['tool_calls']:,} tool call(s) in {info['multi_turn_requests']:,} response(s) prefilled "
            f"between turns, each tool round taking {latency_text(info.get('tool_latency_s', 0), info.get('tool_latency_from'))}"
            + (f"; {', '.join(edges)}" if edges else ""))
