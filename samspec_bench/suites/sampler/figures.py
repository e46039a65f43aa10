"""Figures of `samspec-bench sampler` (PNG). Drawn on `matplotlib.figure.Figure` objects
without pyplot: no backend is chosen and no global figure state is touched."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from matplotlib.figure import Figure


def plot_tv_curves(records: list[dict], path: Path) -> Optional[Path]:
    """One panel per audited sampler: total-variation distance of its worst test (largest
    TV / bound at the full sample count) against the number of samples, with the test's
    bound. An exact sampler stays under its bound as n grows; a lossy one levels off at its
    bias while the bound keeps shrinking like 1/sqrt(n)."""
    recs = [r for r in records if r.get("curve") and r["curve"].get("n")]
    if not recs:
        return None
    n = len(recs)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(4.6 * cols, 3.6 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    colors = {"EXACT": "tab:green", "LOSSY": "tab:red", "ERROR": "tab:purple"}
    for ax, r in zip(axes.flat, recs):
        c = r["curve"]
        ax.loglog(c["n"], c["tv"], "o-", color=colors.get(r["verdict"], "tab:blue"), ms=3, label="TV (empirical)")
        ax.loglog(c["n"], c["bound"], "--", color="black", label="bound (alpha/test)")
        ax.set_title(f"{r['name']}: {r['verdict']}", fontsize=10)
        ax.set_xlabel("samples reaching the position")
        ax.set_ylabel("total-variation distance")
        ax.text(0.02, 0.02, c.get("label", ""), transform=ax.transAxes, fontsize=7, va="bottom")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("Sampler exactness: worst test per sampler, TV vs sample count against the bound", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return Path(path)


def plot_speed(rows: list[dict], path: Path) -> Optional[Path]:
    """Speed ratios against batch size, one panel per vocabulary size, one colour per k:
    over the eager loop reference (solid), over the lazy one (dashed) and, where vLLM ran,
    vLLM's rejection_sample over the vectorised sampler from the same logits (dotted).
    Titled with the rows' device and timer (device time on an accelerator, CPU time on the CPU)."""
    if not rows:
        return None
    vocabs = sorted({r["vocab"] for r in rows})
    fig = Figure(figsize=(5 * len(vocabs), 3.8))
    axes = fig.subplots(1, len(vocabs), squeeze=False)
    series = (("ratio", "-", "eager loop"), ("ratio_vs_loop_lazy", "--", "lazy loop"), ("ratio_vs_vllm", ":", "vLLM"))
    for ax, V in zip(axes.flat, vocabs):
        for ci, k in enumerate(sorted({r["k"] for r in rows if r["vocab"] == V})):
            for key, ls, what in series:
                pts = sorted((r["batch"], r[key]) for r in rows if r["vocab"] == V and r["k"] == k
                             and r.get(key) is not None)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ls=ls, ms=3, color=f"C{ci}",
                            label=f"k={k}, / {what}")
        ax.axhline(1, color="gray", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel("reference ms / vectorised ms (measured)")
        ax.set_title(f"vocab {V}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(f"Rejection sampler: speed-up of the vectorised version over each reference\n"
                 f"on {rows[0].get('device', 'cpu')}, ms = {rows[0].get('timer', 'CPU time')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return Path(path)
