"""What `samspec-bench compare` prints: one line per arm (tok/s and its spread, the cost of
drafting, the proposer's time, greedy identity, ratios to the baselines) and one with vLLM's
names and units (output_throughput, TPOT in ms, acceptance rate in %, mean acceptance length,
per-position acceptance rates), the modelled speed-ups, the goal per sam arm; and the flat
per-arm table of result.json."""

from __future__ import annotations

from typing import Any


def _arm_line(m: str, r: dict) -> str:
    t = r["tokens_per_s"]
    vs = "  ".join(f"x{v['ratio_of_medians']:.3f} vs {b}" for b, v in r["tokens_per_s_vs"].items()
                   if v["ratio_of_medians"] is not None)
    prop, share = r.get("proposer_ms_per_step"), r.get("proposer_share_of_wall")
    g = r["greedy_identical_to_reference"]
    name = f"{m} ({r['draft_length']})" if "draft_length" in r and "[" not in m else m
    per_step = lambda key: "-" if r[key]["value"] is None else f"{r[key]['value']:.3f}"  # noqa: E731
    return (f"{name:11s} {t['median']:7.1f} tok/s [{t['min']:.1f}..{t['max']:.1f}, n={t['n']}]  "
            f"tokens/step {per_step('tokens_per_step')}  drafted/step {per_step('drafted_per_step')}  "
            f"verify/token {per_step('verify_tokens_per_emitted_token')}  "
            + (f"proposer {prop['median']:.3f} ms/step ({100 * share['median']:.2f} % wall)  " if prop else "")
            + (f"draft token cost {r['draft_token_cost']['median']:.2f} steps (fit)  " if "draft_token_cost" in r else "")
            + (f"online cost {r['online_cost']['median']:.2f} steps (cost=auto, fitted online)  "
               if "online_cost" in r else "")
            + f"identical {g['identical']}/{g['of']}  {vs}")


def _num(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def vllm_line(v: dict) -> str:
    """An arm's figures as vLLM names and prints them (vllm bench's result keys, its
    SpecDecoding log line's wording): output throughput, TPOT, acceptance in %, mean acceptance
    length, per-position acceptance rates."""
    pos = ", ".join(f"{p:.3f}" for p in v.get("spec_decode_per_position_acceptance_rates") or []) or "-"
    rate = v.get("spec_decode_acceptance_rate")
    return (f"{'':11s} vLLM: output_throughput {_num(v.get('output_throughput'), '.1f')} tok/s  "
            f"mean_tpot_ms {_num(v.get('mean_tpot_ms'), '.2f')}  median_tpot_ms {_num(v.get('median_tpot_ms'), '.2f')}  "
            f"acceptance rate {_num(rate, '.1f')}{' %' if rate is not None else ''}  "
            f"mean acceptance length {_num(v.get('spec_decode_acceptance_length'), '.2f')}  "
            f"per-position acceptance rate {pos}")


def lines(out: dict) -> list[str]:
    """The comparison as terminal lines (out: compare_methods' result)."""
    text = [f"prefill: {out['prefill']}"]
    if out.get("logprobs"):
        text.append(f"logprobs: {out['logprobs']['note']}")
    if out.get("cpu_threads"):
        ct = out["cpu_threads"]
        text.append(f"cpu threads: {ct.get('VLLM_CPU_OMP_THREADS_BIND', '-')} ({ct['source']})")
    for m, r in out["arms"].items():
        if "skipped" in r:
            text.append(f"{m:11s} skipped: {r['skipped']}")
            continue
        text.append(_arm_line(m, r))
        if r.get("vllm"):
            text.append(vllm_line(r["vllm"]))
        for b, w in r.get("wall_model_vs", {}).items():
            text.append(f"{'':11s} modelled vs {b} (a {w['fixed_ms']:.1f} ms/step + b {w['ms_per_verified_token']:.2f} "
                        f"ms/verified token, the run's fit): x{w['as_counted']:.3f} as counted, "
                        f"x{w['exact_drafts']:.3f} with exact drafts, x{w['free_verification']:.3f} with free "
                        "verification")
    for m, g in out["goal"].items():
        parts = "  ".join(f"{c} x{v['ratio']:.3f} (need {v['needed']})" for c, v in g.items()
                          if isinstance(v, dict) and v["ratio"] is not None)
        text.append(f"goal {m}: {'MET' if g['met'] else 'not met'}  {parts}  greedy identical {g['greedy_identical']}")
    return text


def _vllm_columns(v: dict) -> dict[str, Any]:
    """vLLM's names as table columns (units in the names: ms, %)."""
    return {"mean_tpot_ms": v.get("mean_tpot_ms"), "spec_decode_acceptance_rate_pct": v.get("spec_decode_acceptance_rate"),
            "spec_decode_acceptance_length": v.get("spec_decode_acceptance_length"),
            "spec_decode_per_position_acceptance_rates": v.get("spec_decode_per_position_acceptance_rates")}


def arm_table(arms: dict) -> list[dict[str, Any]]:
    """One flat row per measured arm: the figures a reader compares first (tok/s: measured;
    per step: counts)."""
    rows = []
    for m, r in arms.items():
        if "skipped" in r:
            rows.append({"arm": m, "skipped": r["skipped"]})
            continue
        g = r["greedy_identical_to_reference"]
        rows.append({"arm": m, "draft_length": r.get("draft_length"), "tokens_per_s": r["tokens_per_s"]["median"],
                     "tokens_per_s_min": r["tokens_per_s"]["min"], "tokens_per_s_max": r["tokens_per_s"]["max"],
                     "repeats": r["repeats"],
                     **{f"x_vs_{b}": v["ratio_of_medians"] for b, v in r["tokens_per_s_vs"].items()},
                     "tokens_per_step": r["tokens_per_step"]["value"],
                     "drafted_per_step": r["drafted_per_step"]["value"],
                     "verify_tokens_per_emitted_token": r["verify_tokens_per_emitted_token"]["value"],
                     "proposer_ms_per_step": (r.get("proposer_ms_per_step") or {}).get("median"),
                     "greedy_identical": f"{g['identical']}/{g['of']}", **_vllm_columns(r.get("vllm") or {})})
    return rows
