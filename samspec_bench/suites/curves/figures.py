"""curves' figures: per learning metric the overlaid curves (raw and smoothed) beside the
per-step difference with its interval band and the margin; the speed metrics overlaid with
their ratio; and the verdict table as a picture (the same rows as result.json's tables)."""

from __future__ import annotations

from pathlib import Path

from samspec_bench.evals.curve_stats import align, ema
from samspec_bench.evals.training_logs import TrainingRun
from samspec_bench.evals.training_logs.series import diverged_kinds

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
VERDICT_COLORS = {"EQUIVALENT": "#cdeccd", "DIFFERENT": "#f6c6c6", "INCONCLUSIVE": "#f3e6b3"}
# A sparse curve (validation every few steps) is drawn as points, unsmoothed: an EMA over a
# handful of points lags behind a curve's real shape.
MIN_POINTS_TO_SMOOTH = 30


def _plt():
    import matplotlib  # heavy: only when drawing
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _fmt(v, spec="{:.3g}") -> str:
    return "" if v is None else spec.format(v)


def _overlay(ax, runs: list[TrainingRun], tags: dict, smooth: float, unit: str, scale: dict | None = None) -> None:
    """Each run's curve; `scale`: label -> factor (per-GPU throughput x the run's GPUs)."""
    for i, run in enumerate(runs):
        tag = tags.get(run.label)
        if not tag:
            continue
        s = run.series.get(tag)
        if s is not None:
            k = (scale or {}).get(run.label, 1)
            _line(ax, s.steps, s.values * k, COLORS[i % len(COLORS)], smooth,
                  run.label + ("" if i else " (baseline)") + (f" x {k:g} GPUs" if k != 1 else ""))
        bad = run.non_finite_steps.get(tag)
        if bad is not None and bad.size:   # NaN/inf/huge steps: crosses along the bottom edge
            ax.plot(bad, [0.02] * bad.size, ls="none", marker="x", ms=4, color=COLORS[i % len(COLORS)],
                    transform=ax.get_xaxis_transform(),
                    label=f"{run.label}: {diverged_kinds(run.non_finite.get(tag))} ({bad.size} steps)")
    ax.set_ylabel(unit or "value", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.25)


def _line(ax, x, y, color, smooth: float, label: str, width: float = 1.6) -> None:
    """Raw (thin) and smoothed (thick) line; a sparse curve as points joined by a line."""
    if len(x) < MIN_POINTS_TO_SMOOTH:
        ax.plot(x, y, color=color, lw=width * 0.8, marker="o", ms=2.5, label=label)
        return
    ax.plot(x, y, color=color, lw=0.7, alpha=0.35)
    ax.plot(x, ema(y, smooth), color=color, lw=width, label=label)


def draw_learning(result: dict, runs: list[TrainingRun], path: Path, smooth: float) -> bool:
    """Rows: learning metrics; left: the curves, right: B - A per step with the mean and its
    interval (whole range and final window) and the margin. False when nothing to draw."""
    base = runs[0]
    names = [m["name"] for m in result["metrics"] if m["kind"] == "learning"
             and any(m["name"] in c["learning"] for c in result["comparisons"].values())]
    if not names:
        return False
    plt = _plt()
    tags_of = {m["name"]: m["tags"] for m in result["metrics"]}
    fig, axes = plt.subplots(len(names), 2, figsize=(12.5, 2.9 * len(names)), squeeze=False)
    for row, name in enumerate(names):
        comps = {lab: c["learning"][name] for lab, c in result["comparisons"].items() if name in c["learning"]}
        first = next(iter(comps.values()))
        unit = first["unit"]
        ax = axes[row][0]
        _overlay(ax, runs, tags_of[name], smooth, unit)
        verdicts = ", ".join(f"{lab}: {c['verdict']}" for lab, c in comps.items())
        tag = first["tag_a"] if all(c["tag_a"] == c["tag_b"] for c in comps.values()) else \
            f"{first['tag_a']} | {first['tag_b']}"
        ax.set_title(f"{tag} ({name})\n{verdicts}" if tag != name else f"{tag}\n{verdicts}", fontsize=8)
        if row == 0 and ax.get_legend_handles_labels()[0]:   # none where no run has a finite step
            ax.legend(fontsize=7, loc="best")
        ax = axes[row][1]
        ax.axhline(0, color="black", lw=0.6)
        for i, run in enumerate(runs[1:], start=1):
            c = comps.get(run.label)
            if c is None:
                continue
            color = COLORS[i % len(COLORS)]
            a, b = base.series.get(c["tag_a"]), run.series.get(c["tag_b"])
            if a is None or b is None:   # a run with no finite step there
                continue
            al = align(a.steps, a.values, b.steps, b.values)
            w = c["whole"]
            if w.get("first_step") is not None:
                keep = (al.steps >= w["first_step"]) & (al.steps <= w["last_step"])
                d = (al.b - al.a)[keep]
                st = al.steps[keep]
                _line(ax, st, d, color, smooth, f"{run.label} - {base.label}", width=1.3)
            for win, ls in ((w, "-"), (c.get("final"), "-")):
                if not win or win.get("ci_tost") is None or win.get("first_step") is None:
                    continue
                x0, x1 = win["first_step"], win["last_step"]
                lo, hi = win["ci_tost"]
                ax.fill_between([x0, x1], [lo, lo], [hi, hi], color=color, alpha=0.22, lw=0)
                ax.plot([x0, x1], [win["diff"]] * 2, color=color, lw=1.8, ls=ls)
                if win.get("margin"):
                    for sgn in (1, -1):
                        ax.plot([x0, x1], [sgn * win["margin"]] * 2, color="#555555", lw=0.9, ls="--")
        level = int(round(first["whole"].get("tost_level", 0.9) * 100))
        ax.set_title(f"{tag}: B - A per step; bands: mean with its {level}% interval\n(whole range, final window); "
                     f"dashed: margin {first['margin']}", fontsize=8)
        ax.set_ylabel(f"B - A ({unit})" if unit else "B - A", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.25)
        if row == 0 and ax.get_legend_handles_labels()[0]:   # none where no run has a finite step
            ax.legend(fontsize=7, loc="best")
    for ax in axes[-1]:
        ax.set_xlabel("training step", fontsize=8)
    fig.suptitle(f"Learning curves against the baseline {base.label} (thin: raw; thick: EMA {smooth:g}; "
                 f"fewer than {MIN_POINTS_TO_SMOOTH} points: unsmoothed)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (2.9 * len(names))))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def draw_speed(result: dict, runs: list[TrainingRun], path: Path, smooth: float) -> bool:
    names = [m["name"] for m in result["metrics"] if m["kind"] == "speed"
             and any(m["name"] in c["speed"] for c in result["comparisons"].values())]
    if not names:
        return False
    plt = _plt()
    tags_of = {m["name"]: m["tags"] for m in result["metrics"]}
    ncol = min(3, len(names))
    nrow = -(-len(names) // ncol)
    ncomp = len(result["comparisons"])
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.6 * ncol, (3.0 + 0.18 * ncomp) * nrow), squeeze=False)
    for ax, name in zip(axes.flat, names):
        comps = {lab: c["speed"][name] for lab, c in result["comparisons"].items() if name in c["speed"]}
        first = next(iter(comps.values()))
        scale = _gpu_scale(result, comps)
        unit = first["unit"] if scale or "gpus_a" not in first else "tokens/s/GPU, as logged"
        unit += " (measured)" if str(first.get("source", "")).startswith("measured") else ""
        _overlay(ax, runs, tags_of[name], smooth, unit, scale)
        lines = [f"{lab}: {_fmt(c.get('ratio'))} [{_fmt((c.get('ci') or [None])[0])}, "
                 f"{_fmt((c.get('ci') or [None, None])[1])}] {c.get('change')}" for lab, c in comps.items()]
        tag = first["metric"]
        ax.set_title(f"{tag}" + (f" ({name})" if name != tag else "") + f" [{first['unit']}], ratio B/A:\n"
                     + "\n".join(lines), fontsize=8)
        ax.set_xlabel("training step", fontsize=8)
    if axes.flat[0].get_legend_handles_labels()[0]:
        axes.flat[0].legend(fontsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    level = int(round((1 - result.get("alpha", 0.05)) * 100))
    fig.suptitle(f"Speed against the baseline {result['baseline']}: ratio B/A of the per-step means with its {level}% "
                 "interval (timings: wall seconds measured by the trainer; perf/throughput: of all GPUs, total "
                 "tokens over total time where logged)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / ((3.0 + 0.18 * ncomp) * nrow)))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _gpu_scale(result: dict, comps: dict) -> dict | None:
    """label -> GPUs for a per-GPU throughput drawn as the runs' total, where every count is
    known; else None (drawn per GPU, as logged)."""
    first = next(iter(comps.values()))
    out = {result["baseline"]: first.get("gpus_a")}
    out.update({lab: c.get("gpus_b") for lab, c in comps.items()})
    return out if "gpus_a" in first and all(out.values()) else None


def draw_verdicts(result: dict, path: Path) -> bool:
    """The verdict table (learning rows, then speed rows) as a picture."""
    vrows = result["tables"]["verdicts"]
    srows = result["tables"]["speed"]
    if not vrows and not srows:
        return False
    plt = _plt()
    head = ["run vs " + result["baseline"], "metric (verl tag)", "steps", "mean diff B-A [90% CI]", "margin",
            "final window diff",
            "verdict"]
    cells, colors = [], []
    for r in vrows:
        ci = f"{_fmt(r['diff'])} [{_fmt(r['ci_lo'])}, {_fmt(r['ci_hi'])}]"
        fin = f"{_fmt(r['final_diff'])} [{_fmt(r['final_ci_lo'])}, {_fmt(r['final_ci_hi'])}]" \
            if r.get("final_diff") is not None else "-"
        unit = f" {r['unit']}" if r["unit"] else ""
        steps = f"{r['steps']} ({r['first_step']}-{r['last_step']})" if r.get("first_step") is not None else \
            str(r["steps"] or 0)
        cells.append([r["run"], r["metric"], steps, ci + unit,
                      f"±{_fmt(r['margin'])}", fin, r["verdict"]])
        colors.append(["white"] * 6 + [VERDICT_COLORS.get(r["verdict"], "white")])
    for r in srows:
        ci = f"{_fmt(r['ratio_b_over_a'])} [{_fmt(r['ci_lo'])}, {_fmt(r['ci_hi'])}]"
        cells.append([r["run"], r["metric"], str(r["steps"]), f"ratio B/A {ci}" + (f" ({r['unit']})" if r["unit"] else ""), "-", "-", r["change"]])
        colors.append(["white"] * 6 + ["#dde8f6"])
    fig_h = 0.6 + 0.28 * (len(cells) + 1)
    fig, ax = plt.subplots(figsize=(13, fig_h))
    ax.axis("off")
    table = ax.table(cellText=cells, colLabels=head, cellColours=colors, loc="center", cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(7.5)
    table.auto_set_column_width(list(range(len(head))))
    table.scale(1, 1.25)
    ax.set_title(f"curves: overall {result['verdict']} (learning metrics: TOST against the margin; speed: ratio of "
                 "means, wall seconds measured by the trainer)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
