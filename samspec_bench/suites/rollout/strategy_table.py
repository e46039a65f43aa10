"""One answer per strategy: a row per arm of `rollout --strategy` (and the source arms beside
them): tokens per step (overall and over the tail's steps: the requests that finish last draft
worst, which bounds the tail speed-up), drafted tokens per step, verify tokens per emitted token, overall and
tail time with speed-ups over the off baseline, and what the strategy needs. Time is modelled
by the run's step model (a roofline or a measured profile), decode steps without one; the
rows say which (`basis`).

Every figure is the median [min, max] over the run's draws of the lengths (draws.py), so a
ranking is not read off one draw: a row holds the median (the figure's plain key, what the
report reads) and its spread (`spread`), the best strategy is the one with the shortest
median total, and the table says in how many draws it was the fastest (`best_in_draws`).
With a dev / held-out split (heldout.py) the rows are the held-out prompts' and say which
arm each family chose on the dev prompts."""

from __future__ import annotations

from typing import Any

from samspec_bench.sam.strategies import NEEDS_TREE
from samspec_bench.suites.rollout.lines import fig
from samspec_bench.suites.rollout.spread import fmt

COLUMNS = ("tokens/step", "tail tokens/step", "drafted/step", "verify/emitted", "total", "tail", "speed-up",
           "tail speed-up", "last-10% speed-up")
# the columns' figures, by their seconds names; the tail is what the tail speed-up divides: pooled
# over instances (every instance's own tail summed), the rollout's tail with one instance
FIGURES = ("tokens_per_step", "tokens_per_step_tail", "drafted_per_step", "verify_tokens_per_token", "total_s",
           "tail_s_pooled", "speedup_overall", "speedup_tail", "speedup_last10")
ROW_KEYS = {"total_s": "total", "tail_s_pooled": "tail"}   # row keys that differ from the figure's name


def strategy_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """A row per non-off arm (strategies first): each figure's median over the draws (None where
    missing) and its spread (`spread`: figure -> median / min / max / values)."""
    strategies = (summary.get("workload") or {}).get("strategies") or {}
    arms = summary["arms"]
    order = [lbl for lbl in arms if lbl in strategies] + [lbl for lbl in arms if lbl not in strategies and lbl != "off"]
    split = summary.get("split")
    chosen = set((split or {}).get("chosen", {}).values())
    rows = []
    for lbl in order:
        m, st = arms[lbl], strategies.get(lbl) or {}
        sps = {f: fig(m, f) for f in FIGURES}
        # no pooled figure (one engine instance measured, or a result from before it): the arm's own tail
        sps["tail_s_pooled"] = sps["tail_s_pooled"] or fig(m, "tail_s")
        row = {"arm": lbl, "strategy": bool(st), "sources": st.get("sources"), "k": st.get("k"),
               "switch": st.get("switch"), "needs": st.get("needs", []), "follows": st.get("follows"),
               "split": "held-out" if split else "all", "chosen_on_dev": (lbl in chosen) if split else None}
        row.update({ROW_KEYS.get(f, f): (sp or {}).get("median") for f, sp in sps.items()})
        row["spread"] = {ROW_KEYS.get(f, f): sp for f, sp in sps.items() if sp is not None}
        rows.append(row)
    best = best_strategy(rows, (split or {}).get("best_strategy"))
    if best is not None:
        best["best_in_draws"] = best_in_draws(rows, best)
        one = best_one_path(rows, best, (split or {}).get("best_one_path"))
        if one is not None:
            one["best_one_path"] = True
    return rows


def needs_tree(row: dict[str, Any]) -> bool:
    return NEEDS_TREE in (row.get("needs") or [])


def best_one_path(rows: list[dict[str, Any]], best: dict[str, Any] | None,
                  chosen: str | None = None) -> dict[str, Any] | None:
    """Where the best strategy drafts trees, the best one that verifies one path per request (what
    vLLM and this project's proposer run today): the shortest median total among strategy rows
    without trees, or in a dev / held-out run the dev prompts' (`chosen`); None where the best
    needs no trees or no one-path strategy ran."""
    if best is None or not needs_tree(best):
        return None
    if chosen is not None:
        return next((r for r in rows if r["arm"] == chosen), None)
    cands = [r for r in rows if r["strategy"] and not needs_tree(r) and r["total"] is not None]
    return min(cands, key=lambda r: r["total"]) if cands else None


def best_strategy(rows: list[dict[str, Any]], chosen: str | None = None) -> dict[str, Any] | None:
    """The strategy row with the shortest median total, or, in a dev / held-out run, the one the
    dev prompts chose (`chosen`); None without strategy rows."""
    if chosen is not None:
        return next((r for r in rows if r["arm"] == chosen), None)
    cands = [r for r in rows if r["strategy"] and r["total"] is not None]
    return min(cands, key=lambda r: r["total"]) if cands else None


def best_in_draws(rows: list[dict[str, Any]], best: dict[str, Any]) -> dict[str, int]:
    """In how many draws `best` had the shortest total of the strategy rows ({"best": n,
    "draws": m}; draws where some strategy has no value are not counted)."""
    cands = [r for r in rows if r["strategy"] and (r.get("spread") or {}).get("total")]
    per = [r["spread"]["total"]["values"] for r in cands]
    n = min((len(v) for v in per), default=0)
    won = counted = 0
    for i in range(n):
        vals = [v[i] for v in per]
        if any(v is None for v in vals):
            continue
        counted += 1
        won += min(range(len(cands)), key=lambda j: vals[j]) == cands.index(best)
    return {"best": won, "draws": counted}


def basis(summary: dict[str, Any]) -> str:
    if summary["units"] != "s":
        return "decode steps (no --step-model: not time)"
    kind = (summary.get("priced_by") or {}).get("kind", "step model")
    return "measured" if summary.get("measured") else f"modelled by the {kind} step model"


def _cell(row: dict[str, Any], key: str, spec: str, unit: str = "") -> str:
    sp = row["spread"].get(key)
    return "-" if sp is None else fmt(sp, spec, unit)


def strategy_lines(summary: dict[str, Any]) -> list[str]:
    """The terminal table (median [min, max] over the draws) and the best strategy's line."""
    rows = strategy_rows(summary)
    if not any(r["strategy"] for r in rows):
        return []
    unit = "s" if summary["units"] == "s" else "steps"
    n = ((summary.get("workload") or {}).get("draws") or {}).get("n") or 1
    over = f"median [min, max] over {n} draws" if n > 1 else "one draw"
    split = summary.get("split")
    where = "; HELD-OUT prompts, * = chosen on the dev prompts" if split else ""
    dp = ((summary.get("workload") or {}).get("dp") or {}).get("instances") or 1
    tail = f"tail summed over the {dp} instances' own tails" if dp > 1 else "tail"
    w = min(max([28] + [len(r["arm"]) + 2 for r in rows]), 64)   # whole labels: seer:... arms differ at the end
    out = [f"strategies ({basis(summary)}; {over}{where}; total and {tail} in {unit}, speed-ups over off):",
           f"  {'arm':{w}s} " + " ".join(f"{c:>24s}" for c in COLUMNS)]
    for r in rows:
        vals = (_cell(r, "tokens_per_step", ".2f"), _cell(r, "tokens_per_step_tail", ".2f"), _cell(r, "drafted_per_step", ".2f"),
                _cell(r, "verify_tokens_per_token", ".2f"), _cell(r, "total", ".4g"), _cell(r, "tail", ".4g"),
                _cell(r, "speedup_overall", ".3f", "x"), _cell(r, "speedup_tail", ".3f", "x"),
                _cell(r, "speedup_last10", ".3f", "x"))
        name = (r["arm"][:w - 2] + " *") if r.get("chosen_on_dev") else r["arm"][:w]
        out.append(f"  {name:{w}s} " + " ".join(f"{v:>24s}" for v in vals))
    out.append("  (tail: the steps with at most T running and nobody waiting, the seed's reading; last 10 %: from when "
               "90 % of the requests had finished to the last one, Seer's reading of the long tail)")
    out += gate_lines(summary)
    best = best_strategy(rows, (split or {}).get("best_strategy"))
    if best is not None:
        won = best.get("best_in_draws") or {}
        draws = f"; fastest strategy in {won['best']} of {won['draws']} draws" if won.get("draws", 0) > 1 else ""
        how = " (chosen on the dev prompts; its held-out figures)" if split else ""
        out.append(f"best strategy{how}: {best['arm']} ({_cell(best, 'speedup_overall', '.3f', 'x')} overall, "
                   f"{_cell(best, 'speedup_tail', '.3f', 'x')} tail, {basis(summary)}{draws}); needs: "
                   + ("; ".join(best["needs"]) or "nothing beyond the request's own text"))
        one = next((r for r in rows if r.get("best_one_path")), None)
        if one is not None:
            out.append(f"best on one path (no tree verification: what vLLM runs today){how}: {one['arm']} "
                       f"({_cell(one, 'speedup_overall', '.3f', 'x')} overall, {_cell(one, 'speedup_tail', '.3f', 'x')} "
                       "tail); needs: " + ("; ".join(one["needs"]) or "nothing beyond the request's own text"))
    return out


def gate_lines(summary: dict[str, Any]) -> list[str]:
    """Where an engine-wide gate (enginecutoff) turned speculation off for good, in the first
    draw: the step, per instance with --dp; or that it never tripped."""
    out = []
    for lbl, m in summary["arms"].items():
        if "switch_off_after_step" not in m:
            continue
        trip = m["switch_off_after_step"]
        trips = trip if isinstance(trip, list) else [trip]
        said = ", ".join("never" if t is None else f"after step {t}" for t in trips)
        out.append(f"  {lbl}: speculation off for good {said}" + (" (per instance)" if isinstance(trip, list) else "")
                   + " (first draw)")
    return out
