"""The power statement of a run: for every template of the battery, the smallest loss each of
its tests detects with 80 % power at the number of trials the run gives it, and whether a loss
of 1 % at any single position is detected.

"Loss" here is a change of one token's probability by d at one position (d in total
variation), the form losses take in practice: over- or under-acceptance of the draft token,
the draft token leaking into the recovered law, mass moved onto or off one token. The trials
reaching position j are expected under the target law (trials x the per-token rule's
probability of accepting the drafts before j); alpha per criterion is the run's alpha over
the criteria of the whole battery (what a logits-level sampler runs; a probability-level one
runs fewer tests and has slightly more power). Each audit record holds the same numbers
computed from the trials that actually reached each position (`audit.observed_power`).

The logits-path cases run only on samplers that take logits: a template row of a case some
audited samplers do not run names them and why (`mark_not_applicable`; the table marks the row,
or leaves it out, counted, when no audited sampler runs it), and the per-position headline is
taken from the cases every sampler runs.
"""

from __future__ import annotations

import math
from typing import Optional

from samspec_bench.suites.sampler.audit import criteria
from samspec_bench.suites.sampler.battery import Case
from samspec_bench.suites.sampler.config import SamplerConfig
from samspec_bench.suites.sampler.exactness_stats import (POWER, detectable_excess, detectable_shift, overacceptance_bounds,
                                                partition)

TARGET_TV = 0.01


def _finite(x: float) -> Optional[float]:
    return None if x is None or not math.isfinite(x) else float(x)


def planned_power(cases: list[Case], cfg: SamplerConfig) -> dict:
    """{"alpha_per_test", "power", "target_tv", "templates": [per template: trials, per
    position n and mdd, over-acceptance mdd per level, logits_only], "positions": [best mdd per
    draft position and for the bonus, with the case, over the cases every sampler runs],
    "detects_target_everywhere"}."""
    alpha_t = cfg.alpha / max(1, sum(criteria(c) for c in cases))
    rows = []
    for case in cases:
        per_t = max(1, case.trials(cfg) // len(case.templates))
        for t in case.templates:
            reach = t.reach()
            pos = []
            for j in range(t.k + 1):
                n_j = int(per_t * reach[j])
                mdd = None
                if n_j >= 20:
                    _, P = partition(t.target[j], n_j)
                    mdd = _finite(detectable_shift(P, n_j, alpha_t).max()) if P.size > 1 else None
                pos.append({"position": j, "kind": "bonus" if j == t.k else "token", "n": n_j, "mdd": mdd})
            bounds = overacceptance_bounds(t.target, t.drafts, t.q) if t.k else []
            js = [j for j, b in enumerate(bounds, 1) if b is not None]
            over = [{"accepted_at_least": j, "bound": bounds[j - 1],
                     "mdd": _finite(detectable_excess(min(1.0, bounds[j - 1]), per_t, alpha_t / len(js)))} for j in js]
            rows.append({"case": case.name, "template": t.label, "seeded": t.seeded, "trials": per_t,
                         "positions": pos, "over_acceptance": over, "logits_only": case.needs_logits})
    best: dict = {}
    for r in rows:
        if r["logits_only"]:   # a probability-level sampler does not run it: not a statement for every sampler
            continue
        for p in r["positions"]:
            key = "bonus" if p["kind"] == "bonus" else p["position"]
            if p["mdd"] is not None and (key not in best or p["mdd"] < best[key]["mdd"]):
                best[key] = {"position": key, "mdd": p["mdd"], "case": r["case"], "template": r["template"],
                             "n": p["n"]}
    max_k = max((len(r["positions"]) - 1 for r in rows), default=0)
    keys = list(range(max_k)) + ["bonus"]
    positions = [best.get(k, {"position": k, "mdd": None}) for k in keys]
    everywhere = all(p["mdd"] is not None and p["mdd"] <= TARGET_TV for p in positions)
    return {"alpha_per_test": alpha_t, "power": POWER, "target_tv": TARGET_TV, "templates": rows,
            "positions": positions, "detects_target_everywhere": everywhere}


def mark_not_applicable(power: dict, records: list[dict]) -> dict:
    """The power statement with, per template row, the audited samplers that did not run its
    case and why (`not_applicable_to`, from each audit record's `not_applicable`; skipped samplers
    ran nothing and are not counted), whether any audited sampler ran it (`run`), and the count
    (`not_applicable`: rows marked, rows no sampler ran, the samplers and reasons)."""
    ran = [r for r in records if r.get("verdict") != "SKIPPED"]
    why: dict[str, dict[str, str]] = {}   # case -> sampler -> reason
    for r in ran:
        for line in r.get("not_applicable") or []:
            case, _, reason = line.partition(": ")
            why.setdefault(case, {})[r["name"]] = reason
    rows = []
    for row in power["templates"]:
        na = why.get(row["case"], {})
        rows.append(dict(row, not_applicable_to=na, run=len(na) < len(ran) or not ran))
    marked = [r for r in rows if r["not_applicable_to"]]
    summary = {"templates": len(marked), "templates_run_by_none": sum(not r["run"] for r in rows),
               "samplers": sorted({n for r in marked for n in r["not_applicable_to"]}),
               "reasons": sorted({f"{r['case']}: {why}" for r in marked for why in r["not_applicable_to"].values()})}
    return dict(power, templates=rows, not_applicable=summary)


def headline(power: dict) -> str:
    """One line: does the run detect a 1 % loss at every position, and where not."""
    t = power["target_tv"]
    pos = power["positions"]
    missing = [str(p["position"]) for p in pos if p["mdd"] is None or p["mdd"] > t]
    names = (", ".join(f"{p['position']}: {p['mdd']:.2%} ({p['case']})" for p in pos if p["mdd"] is not None)
             or "none: no loss is detectable at any position with these samples and --alpha")
    if not missing:
        return (f"A loss of {t:.0%} at any single position (draft positions 0..{len(pos) - 2} and the bonus) is "
                f"detected with >= {power['power']:.0%} power; smallest detectable loss per position: {names}.")
    return (f"A loss of {t:.0%} is NOT detected with {power['power']:.0%} power at position(s) "
            f"{', '.join(missing)} (raise --samples); smallest detectable loss per position: {names}.")


def fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2%}"
