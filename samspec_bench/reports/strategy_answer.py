"""The third answer's sentence about drafting strategies: the best strategy of a `rollout
--strategy` run's table with its range, draws, split and needs, and where it drafts trees, the
best one that verifies one path per request (what vLLM runs today)."""

from __future__ import annotations

from samspec_bench.reports.fmt import x2
from samspec_bench.reports.values import is_number


def best_strategy_text(m: dict, how: str) -> str:
    """' Best strategy: NAME (a x overall [lo, hi], b x tail, modelled); it needs ...' from the
    run's strategy table (`rollout --strategy`), '' without one. The table marks its best row
    (`best_in_draws`: the shortest median total, or the dev prompts' choice in a --dev-split run,
    whose figures are the held-out prompts')."""
    rows = [r for r in ((m.get("strategy_table") or {}).get("rows") or [])
            if isinstance(r, dict) and r.get("strategy") and is_number(r.get("total"))]
    if not rows:
        return ""
    b = next((r for r in rows if isinstance(r.get("best_in_draws"), dict)), None) or min(rows, key=lambda r: r["total"])
    sp = ((b.get("spread") or {}).get("speedup_overall") or {})
    rng = f" [{x2(sp['min'])}, {x2(sp['max'])}]" if is_number(sp.get("min")) and is_number(sp.get("max")) else ""
    wins = b.get("best_in_draws") or {}
    won = f", fastest in {wins['best']} of {wins['draws']} draws" if wins.get("draws", 0) > 1 else ""
    split = ("; chosen on the dev prompts, figures from the held-out ones" if b.get("split") == "held-out"
             else "; in-sample: chosen on the prompts it is measured on (rollout --dev-split F holds some out)")
    text = (f" Best strategy: {b['arm']} ({x2(b.get('speedup_overall'))}x{rng} overall, {_tail_text(b)}, "
            f"{how}{won}{split}); it needs: {_needs_text(b)}.")
    one = next((r for r in rows if r.get("best_one_path")), None)   # the best drafts trees: what runs on one path
    if one is not None:
        text += (f" On one path (no tree verification, as vLLM verifies today): {one['arm']} "
                 f"({x2(one.get('speedup_overall'))}x overall, {_tail_text(one)}); it needs: {_needs_text(one)}.")
    return text


def _needs_text(row: dict) -> str:
    return "; ".join(row.get("needs") or []) or "nothing beyond the request's own text"


def _tail_text(row: dict) -> str:
    st = row.get("speedup_tail")   # 0 or none: the baseline had no tail to compare with
    text = f"{x2(st)}x in the tail" if is_number(st) and st > 0 else "no tail"
    last = row.get("speedup_last10")   # Seer's reading: the last 10 % of requests to finish
    return text + (f", {x2(last)}x over the last 10 % of requests" if is_number(last) and last > 0 else "")
