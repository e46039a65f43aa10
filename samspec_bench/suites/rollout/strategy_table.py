"""One answer per strategy: a row per arm of `rollout --strategy` (and the source arms beside
them): tokens per step, drafted tokens per step, verify tokens per emitted token, overall and
tail time with speed-ups over the off baseline, and what the strategy needs. Time is modelled
by the run's step model (a roofline or a measured profile), decode steps without one; the
rows say which (`basis`). The best strategy is the one with the shortest total."""

from __future__ import annotations

from typing import Any

from samspec_bench.suites.rollout.units import t

COLUMNS = ("tokens/step", "drafted/step", "verify/emitted", "total", "tail", "speed-up", "tail speed-up")


def strategy_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """A row per non-off arm (strategies first), None where a figure is missing."""
    strategies = (summary.get("workload") or {}).get("strategies") or {}
    arms = summary["arms"]
    order = [lbl for lbl in arms if lbl in strategies] + [lbl for lbl in arms if lbl not in strategies and lbl != "off"]
    rows = []
    for lbl in order:
        m, st = arms[lbl], strategies.get(lbl) or {}
        rows.append({"arm": lbl, "strategy": bool(st), "sources": st.get("sources"), "k": st.get("k"),
                     "switch": st.get("switch"), "tokens_per_step": m.get("tokens_per_step"),
                     "drafted_per_step": m.get("drafted_per_step"),
                     "verify_tokens_per_token": m.get("verify_tokens_per_token"),
                     "total": t(m, "total_s"), "tail": t(m, "tail_s"), "speedup_overall": t(m, "speedup_overall"),
                     "speedup_tail": t(m, "speedup_tail"), "needs": st.get("needs", []),
                     "follows": st.get("follows")})
    return rows


def best_strategy(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The strategy row with the shortest total (None without strategy rows)."""
    cands = [r for r in rows if r["strategy"] and r["total"] is not None]
    return min(cands, key=lambda r: r["total"]) if cands else None


def basis(summary: dict[str, Any]) -> str:
    if summary["units"] != "s":
        return "decode steps (no --step-model: not time)"
    kind = (summary.get("priced_by") or {}).get("kind", "step model")
    return "measured" if summary.get("measured") else f"modelled by the {kind} step model"


def _f(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def strategy_lines(summary: dict[str, Any]) -> list[str]:
    """The terminal table and the best strategy's line."""
    rows = strategy_rows(summary)
    if not any(r["strategy"] for r in rows):
        return []
    unit = "s" if summary["units"] == "s" else "steps"
    out = [f"strategies ({basis(summary)}; total and tail in {unit}, speed-ups over off):",
           f"  {'arm':28s} " + " ".join(f"{c:>14s}" for c in COLUMNS)]
    for r in rows:
        vals = (_f(r["tokens_per_step"]), _f(r["drafted_per_step"]), _f(r["verify_tokens_per_token"]),
                _f(r["total"], ".4g"), _f(r["tail"], ".4g"), _f(r["speedup_overall"], ".3f") + "x",
                _f(r["speedup_tail"], ".3f") + "x")
        out.append(f"  {r['arm'][:28]:28s} " + " ".join(f"{v:>14s}" for v in vals))
    best = best_strategy(rows)
    if best is not None:
        out.append(f"best strategy: {best['arm']} ({_f(best['speedup_overall'], '.3f')}x overall, "
                   f"{_f(best['speedup_tail'], '.3f')}x tail, {basis(summary)}); needs: "
                   + ("; ".join(best["needs"]) or "nothing beyond the request's own text"))
    return out
