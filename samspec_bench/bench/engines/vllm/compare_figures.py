"""The figures of the vLLM method comparison (compare.py), from its run records: one record
per (arm, repeat), written as each generate call finishes, so that a resumed comparison and a
finished one give the same figures. Each figure says its unit and source (measured wall time,
step counts, or modelled).

A run record (`run_record`) holds the call's tok/s, its responses' token ids (greedy identity),
its acceptance counts, engine steps, prompt tokens prefilled, the proposer's own figures
(measured inside vLLM's worker) and the engine's start-up facts.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Sequence

from samspec_bench.bench.engines.vllm.spec_metrics import from_get_metrics
from samspec_bench.bench.engines.vllm.wall_model import modelled_ratios
from samspec_bench.metrics import AcceptanceCounts, first_divergence, vllm_counts_figures, vllm_tpot_ms

BASELINES = ("none", "none-plain", "ngram")
GOAL_OVER_NONE = 1.15   # the goal: SAM tok/s >= ngram's and >= 1.15x no speculation
MEASURED = "measured (wall time of the generate call)"
PER_REQUEST = "measured (each request's first and last token times in the generate call)"
VLLM_COUNTERS = "vLLM's spec-decode counters (LLM.get_metrics), their difference over the call"
FROM_COUNTS = "from step counts (not a time)"
PREFILL_NOTE = ("every engine prefilled the measured prompts once before the first repeat (one token each), "
                "so that no arm pays a cold start; vLLM's prefix cache keeps only full KV blocks (128 tokens "
                "on CPU by default), so a measured call still prefills what is left: prompt_tokens_prefilled "
                "per arm, the same work in every arm and part of its wall time")


def fig(value: Any, unit: str, source: str) -> dict[str, Any]:
    return {"value": value, "unit": unit, "source": source}


def spread(values: Sequence[float], unit: str, source: str) -> dict[str, Any]:
    """median, min, max, stdev (0 for one value) and every run's value, with unit and source."""
    vals = [float(v) for v in values]
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "stdev": statistics.stdev(vals) if len(vals) > 1 else 0.0, "runs": vals, "n": len(vals),
            "unit": unit, "source": source}


def run_record(arm: str, repeat: int, engine_key: str, draft_length: str | None, res,
               engine_info: dict | None = None) -> dict[str, Any]:
    """One generate call of an arm as a JSON-ready record (what the figures need of it)."""
    return {"arm": arm, "repeat": repeat, "engine": engine_key, "draft_length": draft_length,
            "output_tokens_per_s": res.metrics()["output_tokens_per_s"],
            "output_tokens": res.num_output_tokens,
            "token_ids": [[int(t) for t in o.token_ids] for o in res.outputs],
            "counts": dataclasses.asdict(res.counts()),
            "engine_steps": len(res.steps),
            "prompt_tokens_prefilled": sum(s.num_prefill_tokens for s in res.steps),
            "proposer": res.engine.get("proposer"),
            "tpot": vllm_tpot_ms((o.first_token_time_s, o.finish_time_s, len(o.token_ids)) for o in res.outputs),
            "vllm_counters": res.engine.get("spec_counters"),
            "engine_info": engine_info or {}}


def _counts(rec: dict) -> AcceptanceCounts:
    return AcceptanceCounts(**rec["counts"])


def _cost_figures(rec: dict) -> dict[str, Any]:
    """Acceptance and its cost from the step counts of one generate call."""
    c = _counts(rec)
    steps = c.steps or 0
    return {"tokens_per_step": fig(c.tokens_per_step, "tokens / decode step", FROM_COUNTS),
            "drafted_per_step": fig(c.drafted / steps if steps else None, "draft tokens / decode step", FROM_COUNTS),
            "verify_tokens_per_emitted_token": fig((steps + c.drafted) / c.tokens if c.tokens else None,
                                                   "target positions / emitted token", FROM_COUNTS),
            "acceptance_rate": fig(c.acceptance_rate, "accepted / drafted", FROM_COUNTS),
            "acceptance_length": fig(c.acceptance_length, "tokens / step with a draft", FROM_COUNTS),
            "per_position_acceptance": fig(c.per_position_acceptance, "[i]: drafts whose token i was accepted / drafts",
                                           FROM_COUNTS),
            "decode_steps": fig(steps, "request decode steps", FROM_COUNTS),
            "engine_steps": fig(rec["engine_steps"], "engine steps", FROM_COUNTS)}


def _ratios(num: dict, den: dict) -> dict[str, Any]:
    """num's tok/s over den's: ratio of medians, and the per-repeat ratios (same repeat index:
    measured close in time)."""
    pairs = [a / b for a, b in zip(num["runs"], den["runs"]) if b > 0]
    out: dict[str, Any] = {"ratio_of_medians": num["median"] / den["median"] if den["median"] > 0 else None,
                           "unit": "x", "source": "measured (ratio of tok/s in the same run)"}
    if pairs:
        out.update(per_repeat_median=statistics.median(pairs), per_repeat_min=min(pairs), per_repeat_max=max(pairs))
    return out


def _proposer_figures(props: list[dict]) -> dict[str, Any]:
    """The proposer's time, the offline fit of a draft token's cost and the cost it fitted
    online, over the repeats (measured inside vLLM's worker)."""
    row: dict[str, Any] = {}
    if not props or any(p["ms_per_call_mean"] is None for p in props):
        return row
    row["proposer_ms_per_step"] = spread([p["ms_per_call_mean"] for p in props],
                                         "ms / propose call (one per engine step)",
                                         "measured inside vLLM's worker (time.perf_counter around propose)")
    row["proposer_share_of_wall"] = spread([p["share_of_wall_time"] for p in props],
                                           "fraction of the generate call's wall time", "measured inside vLLM's worker")
    fits = [p["verify_cost"] for p in props if p.get("verify_cost")]
    if fits and all(f["draft_token_cost_decode_steps"] is not None for f in fits):
        row["draft_token_cost"] = spread([f["draft_token_cost_decode_steps"] for f in fits],
                                         "decode steps per draft token (the evidence policy's cost)", fits[0]["source"])
        row["ms_per_verified_token"] = spread([f["ms_per_verified_token"] for f in fits],
                                              "ms per verified token (marginal)", fits[0]["source"])
        row["fixed_ms_per_step"] = spread([f["fixed_ms"] for f in fits], "ms per engine step (fixed part)",
                                          fits[0]["source"])
    online = [p["online_cost"] for p in props if p.get("online_cost")]
    if online:   # cost=auto: the cost the proposer fitted online, at the end of each repeat
        row["online_cost"] = {**spread([o["final"] for o in online], online[0]["unit"], online[0]["source"]),
                              "series_last_repeat": online[-1]["series"], "series_unit": "[propose call, cost]"}
    if all(p["step_wall_ms_mean"] for p in props):
        row["step_wall_ms"] = spread([p["step_wall_ms_mean"] for p in props], "ms / engine step", MEASURED)
    return row


def _tpot_figure(recs: list[dict]) -> dict[str, Any]:
    """vLLM's TPOT (mean over requests, ms) over the repeats; none for records without it."""
    means = [(r.get("tpot") or {}).get("mean_tpot_ms") for r in recs]
    if not means or any(v is None for v in means):
        return {}
    return {"tpot_ms": spread(means, "ms / output token after the first (vLLM's TPOT, mean over requests)",
                              PER_REQUEST)}


def vllm_figures(recs: list[dict]) -> dict[str, Any]:
    """An arm under vLLM's names and units (metrics.VLLM_NAMES): output_throughput (tok/s, the
    median over repeats), mean / median TPOT (ms, medians over repeats), and the last repeat's
    spec_decode_* figures (acceptance rate in %, mean acceptance length, per-position rates)
    from vLLM's own counters where the record has them, else from the step counts."""
    last = recs[-1]
    tpots = [r.get("tpot") or {} for r in recs]
    med = (lambda key: statistics.median(t[key] for t in tpots) if all(t.get(key) is not None for t in tpots)  # noqa: E731
           else None)
    spec = from_get_metrics(last.get("vllm_counters"))
    return {"output_throughput": statistics.median(r["output_tokens_per_s"] for r in recs),
            "mean_tpot_ms": med("mean_tpot_ms"), "median_tpot_ms": med("median_tpot_ms"),
            **(spec if spec is not None else vllm_counts_figures(_counts(last))),
            "source": {"output_throughput": MEASURED, "tpot": PER_REQUEST,
                       "spec_decode": VLLM_COUNTERS if spec is not None else FROM_COUNTS}}


def _identity(recs: list[dict], base: dict[int, list], reference: str | None) -> dict[str, Any]:
    """Greedy identity with the reference arm's responses of the same repeat (else its first)."""
    base_any = next(iter(base.values()), None)
    same, firsts, total = 0, [], 0
    for rec in recs:
        ref = base.get(rec["repeat"], base_any)
        total += len(rec["token_ids"])
        for a, b in zip(rec["token_ids"], ref):
            f = first_divergence(a, b)
            same += f is None
            if f is not None:
                firsts.append(f)
    return {"identical": same, "of": total, "reference_arm": reference, "first_divergence": firsts,
            "unit": "responses (all repeats)"}


def arm_rows(records: Sequence[dict], methods: Sequence[str], skipped: dict[str, str]) -> tuple[dict, str | None]:
    """(per-arm figures, the reference arm: the first arm measured) from the run records."""
    runs: dict[str, list[dict]] = {}
    for rec in sorted(records, key=lambda r: r["repeat"]):
        runs.setdefault(rec["arm"], []).append(rec)
    reference = next((m for m in methods if runs.get(m)), None)
    base = {rec["repeat"]: rec["token_ids"] for rec in runs.get(reference, [])}
    rows: dict[str, Any] = {m: {"skipped": why} for m, why in skipped.items()}
    for m in [m for m in methods if runs.get(m)]:
        rr = runs[m]
        last = rr[-1]
        row = {"engine": last["engine"], "repeats": len(rr),
               "tokens_per_s": spread([r["output_tokens_per_s"] for r in rr], "output tokens / s", MEASURED),
               **({"draft_length": last["draft_length"]} if last.get("draft_length") else {}),
               "output_tokens": fig(last["output_tokens"], "tokens", "counted"),
               "prompt_tokens_prefilled": fig(last["prompt_tokens_prefilled"],
                                              "prompt tokens computed in the last repeat", FROM_COUNTS),
               **_cost_figures(last),
               "greedy_identical_to_reference": _identity(rr, base, reference),
               **_proposer_figures([r["proposer"] for r in rr if r.get("proposer")]),
               **_tpot_figure(rr),
               "vllm": vllm_figures(rr)}
        rows[m] = row
    for m, row in rows.items():
        if "tokens_per_s" in row:
            row["tokens_per_s_vs"] = {b: _ratios(row["tokens_per_s"], rows[b]["tokens_per_s"])
                                      for b in BASELINES if b != m and "tokens_per_s" in rows.get(b, {})}
    _add_wall_model(rows, {m: rr[-1] for m, rr in runs.items() if m in rows})
    return rows, reference


def _add_wall_model(rows: dict, last: dict[str, dict]) -> None:
    """Each arm that drafted: its speed-up over the plain engine (else `none`) modelled from
    the last repeat's step counts at one step cost for the whole run (wall_model.py): a and b
    are the medians of the drafting arms' fits, since every arm runs the same model and one
    arm's fit alone scatters (the arms of one run on a 2-core CPU: a 42 to 58 ms, b 2.7 to 5.0 ms)."""
    base = next((b for b in ("none-plain", "none") if b in last), None)
    if base is None:
        return
    counts = {m: _counts(rec) for m, rec in last.items()}
    drafting = [m for m, c in counts.items() if m != base and c.drafted]
    fitted = [rows[m] for m in drafting if "fixed_ms_per_step" in rows[m]]
    if not fitted:
        return
    a = statistics.median(r["fixed_ms_per_step"]["median"] for r in fitted)
    b = statistics.median(r["ms_per_verified_token"]["median"] for r in fitted)
    b_c = counts[base]
    for m in drafting:
        c = counts[m]
        model = modelled_ratios(a, b, last[base]["engine_steps"], b_c.steps + b_c.drafted, last[m]["engine_steps"],
                                c.steps + c.drafted, c.drafted - c.accepted)
        if model is not None:
            rows[m]["wall_model_vs"] = {base: {**model, "fitted_arms": len(fitted)}}


def goal(rows: dict) -> dict[str, Any]:
    """The issue's goal for every sam arm: tok/s >= ngram's and >= 1.15x none (both none arms
    where measured; ratio of medians), greedy outputs identical."""
    out = {}
    for m, row in rows.items():
        if not m.startswith("sam") or "tokens_per_s_vs" not in row:
            continue
        vs = row["tokens_per_s_vs"]
        checks = {}
        if "ngram" in vs:
            checks["vs_ngram"] = (vs["ngram"]["ratio_of_medians"], 1.0)
        for b in ("none", "none-plain"):
            if b in vs:
                checks[f"vs_{b}"] = (vs[b]["ratio_of_medians"], GOAL_OVER_NONE)
        g = row["greedy_identical_to_reference"]
        met = all(r is not None and r >= need for r, need in checks.values()) and g["identical"] == g["of"]
        out[m] = {**{c: {"ratio": r, "needed": need, "unit": "x"} for c, (r, need) in checks.items()},
                  "greedy_identical": g["identical"] == g["of"], "met": met and bool(checks)}
    return out


def engines_of(records: Sequence[dict]) -> dict[str, dict]:
    """Each engine's start-up facts (drafter class, async scheduling, start-up time)."""
    return {rec["engine"]: rec["engine_info"] for rec in records if rec.get("engine_info")}
