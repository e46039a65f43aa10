"""Headlines of the suites that read or run another tool (verl's training logs, vLLM): they are
named the way that tool names them (verl's metric tags, `vllm bench serve`'s result keys) so a
user finds the figure they know, with the project's own name only beside it."""

from __future__ import annotations

from typing import Callable

from samspec_bench.reports.fmt import fmt
from samspec_bench.reports.model import NOT_BOOLEAN, Gate, Headline, Summarizer, gate, headline, unknown_gate

TOOL_SUMMARIZERS: dict[str, Summarizer] = {}


def _suite(name: str) -> Callable[[Summarizer], Summarizer]:
    def deco(fn: Summarizer) -> Summarizer:
        TOOL_SUMMARIZERS[name] = fn
        return fn
    return deco


def _tag(entry: dict, family: str) -> str:
    """verl's tag first (`timing_s/gen`), the project's family name beside it when they differ."""
    tag = entry.get("metric")
    return f"{tag} ({family})" if tag and tag != family else family


def _unit(entry: dict) -> str:
    return f" {entry['unit']}" if entry.get("unit") else ""


@_suite("curves")
def _curves(result: dict) -> tuple[list[Headline], list[Gate]]:
    m = result["metrics"]
    base = m.get("baseline")
    order = [r.get("label") for r in result.get("runs") or []]
    comps = sorted((m.get("comparisons") or {}).items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 0)
    rank = {x.get("name"): i for i, x in enumerate(m.get("metrics") or []) if isinstance(x, dict)}
    heads, gates = [], []
    for label, c in comps:
        n = c.get("counts") or {}
        heads.append(headline(f"{label} vs {base}: learning", c.get("verdict"),
                              note=", ".join(f"{v} {k}" for k, v in n.items() if v) or None))
        speed = c.get("speed") or {}
        main = [k for k in ("gen_time", "step_time") if k in speed]
        rest = sorted((k for k in speed if k not in main), key=lambda k: rank.get(k, len(rank)))
        for name in main:
            s = speed[name]
            heads.append(headline(f"{label}: {_tag(s, name)} ratio B/A", s.get("ratio"), s.get("ci"),
                                  note=f"{s.get('change')}; {s.get('source')}; {s.get('steps')} steps{_unit(s)}"))
        learning = c.get("learning") or {}
        for name in sorted(learning, key=lambda k: rank.get(k, len(rank))):
            r = learning[name]
            w = r.get("whole") or {}
            heads.append(headline(f"{label}: {_tag(r, name)}", r.get("verdict"),
                                  note=f"B - A {fmt(w.get('diff'))}{_unit(r)} [{fmt((w.get('ci_tost') or [None])[0])}, "
                                       f"{fmt((w.get('ci_tost') or [None, None])[1])}], margin ±{fmt(w.get('margin'))}; "
                                       f"{w.get('steps')} steps"))
        for name in rest:
            s = speed[name]
            norm = "" if s.get("normalised", True) else "; NOT normalised by GPU count (counts unknown)"
            heads.append(headline(f"{label}: {_tag(s, name)} ratio B/A", s.get("ratio"), s.get("ci"),
                                  note=f"{s.get('change')}; {s.get('source')}{_unit(s)}{norm}"))
        v = c.get("verdict")
        gates.append(gate(f"{label}: learning equivalent to {base}", True if v == "EQUIVALENT" else
                          False if v == "DIFFERENT" else None, v, "EQUIVALENT",
                          note="not judged: INCONCLUSIVE (see the metrics)" if v == "INCONCLUSIVE" else None))
    return heads, gates


def _vllm_heads(arm: str, v: dict) -> list[Headline]:
    """An arm's figures under `vllm bench serve`'s keys and units."""
    src = v.get("source") or {}
    heads = []
    if v.get("mean_tpot_ms") is not None:
        heads.append(headline(f"{arm}: mean_tpot_ms", v["mean_tpot_ms"], note=f"ms; {src.get('tpot')}"))
    if v.get("spec_decode_acceptance_rate") is not None:
        heads.append(headline(f"{arm}: spec_decode_acceptance_rate", v["spec_decode_acceptance_rate"],
                              note=f"%; {src.get('spec_decode')}"))
        heads.append(headline(f"{arm}: spec_decode_acceptance_length", v.get("spec_decode_acceptance_length"),
                              note=f"1 + accepted / drafts; {src.get('spec_decode')}"))
        pos = v.get("spec_decode_per_position_acceptance_rates") or []
        if pos:
            heads.append(headline(f"{arm}: per-position acceptance", ", ".join(fmt(p) for p in pos),
                                  note="accepted at position i / drafts"))
    return heads


@_suite("compare")
def _compare(result: dict) -> tuple[list[Headline], list[Gate]]:
    """vLLM method comparison: each arm's tok/s (measured) and its ratio to the plain engine,
    tokens per step (counts), vLLM's own figures; gates: greedy identity per arm, and the goal
    per sam arm."""
    m = result["metrics"]
    heads, gates = [], []
    for arm, row in (m.get("arms") or {}).items():
        if "skipped" in row:
            heads.append(headline(f"{arm}: skipped", row["skipped"]))
            continue
        tps = row.get("tokens_per_s") or {}
        heads.append(headline(f"{arm}: output tokens/s", tps.get("median"), [tps.get("min"), tps.get("max")],
                              note=f"median of {tps.get('n')} repeats (min..max); measured"))
        for base, ratio in (row.get("tokens_per_s_vs") or {}).items():
            if base in ("none-plain", "ngram"):
                heads.append(headline(f"{arm}: tok/s vs {base}", ratio.get("ratio_of_medians"), note="ratio of medians"))
        heads.append(headline(f"{arm}: tokens_per_step", (row.get("tokens_per_step") or {}).get("value"),
                              note="counts, not time"))
        heads += _vllm_heads(arm, row.get("vllm") or {})
        g = row.get("greedy_identical_to_reference") or {}
        if g.get("of"):
            gates.append(gate(f"{arm}: greedy outputs identical to {g.get('reference_arm')}",
                              g.get("identical") == g.get("of"), f"{g.get('identical')}/{g.get('of')}", "all"))
    for arm, goal in (m.get("goal") or {}).items():
        ratios = {k: v.get("ratio") for k, v in goal.items() if isinstance(v, dict)}
        name, value, bar = (f"{arm}: tok/s >= ngram's and >= 1.15x no speculation, greedy identical",
                            ", ".join(f"{k} {fmt(v)}" for k, v in ratios.items()) or None, "vs_ngram >= 1, vs_none >= 1.15")
        met = goal.get("met")
        gates.append(gate(name, met, value, bar) if isinstance(met, bool)
                     else unknown_gate(name, value, bar, note=f"met {met!r}", why=NOT_BOOLEAN))
    return heads, gates


@_suite("spec-metrics")
def _spec_metrics(result: dict) -> tuple[list[Headline], list[Gate]]:
    """A real vLLM run's own spec-decode counters or log lines, pooled: read, not measured here."""
    m = result["metrics"]
    total = m.get("total") or {}
    src = f"read from {m.get('format')} ({m.get('intervals')} interval(s)); vLLM's own counts"
    est = "" if total.get("drafts_exact", True) else "; drafts estimated (log lines do not print them)"
    heads = [headline("spec_decode_acceptance_rate", total.get("spec_decode_acceptance_rate"), note=f"%; {src}"),
             headline("spec_decode_acceptance_length", total.get("spec_decode_acceptance_length"),
                      note=f"1 + accepted / drafts; {src}{est}")]
    pos = total.get("spec_decode_per_position_acceptance_rates") or []
    if pos:
        heads.append(headline("per-position acceptance", ", ".join(fmt(p) for p in pos), note=src))
    lines = m.get("lines") or {}
    if lines.get("not_understood"):
        heads.append(headline("lines not understood", lines["not_understood"], note="counted, not read"))
    if m.get("counter_resets"):
        heads.append(headline("counter resets", m["counter_resets"], note="the server restarted between scrapes"))
    return heads, []
