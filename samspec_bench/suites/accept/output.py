"""The accept suite's output beside result.json: the figure (tokens_per_step and
acceptance_length by position at drafting time) and the tables printed at the end."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.table import Table

from samspec_bench.suites.accept.config import VERIFY_COST_ASSUMPTION, AcceptConfig

FIGURE_STEM = "acceptance_vs_position"
MIN_PLOT_STEPS = 20  # bins with fewer steps are not drawn (their numbers are in result.json)


def write_figure(run_path: Path, configs, binned: dict, bins, cfg: AcceptConfig) -> list[str]:
    import matplotlib  # slow to import: only when a figure is written

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for dc in configs:
        rows = [r for r in binned[dc.label] if r["counts"]["steps"] >= MIN_PLOT_STEPS]
        xs = [bins.center(r["bin"]) for r in rows]
        axes[0].plot(xs, [r["tokens_per_step"] for r in rows], marker="o", label=dc.label)
        al = [(x, r["acceptance_length"]) for x, r in zip(xs, rows) if r["acceptance_length"] is not None]
        axes[1].plot([a for a, _ in al], [b for _, b in al], marker="o", label=dc.label)
    basis = "sequence position (prompt + generated)" if cfg.position == "sequence" else "response position"
    for ax, name in zip(axes, ("tokens_per_step (all decode steps)", "acceptance_length (vLLM: steps with a draft)")):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}" if v < 1024 else f"{v / 1024:g}k"))
        ax.set_xlabel(f"{basis} at drafting time")
        ax.set_ylabel(name.split(" ")[0])
        ax.set_title(name, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].axhline(1.0, color="grey", lw=0.8, ls="--")
    axes[1].legend(fontsize=8, loc="best")
    fig.suptitle(f"samspec-bench accept ({cfg.engine}); bins with >= {MIN_PLOT_STEPS} steps", fontsize=10)
    fig.tight_layout()
    names = []
    for ext in ("png", "svg"):
        name = f"{FIGURE_STEM}.{ext}"
        fig.savefig(run_path / name, dpi=120)
        names.append(name)
    plt.close(fig)
    return names


def _fmt(x, digits=3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def print_binned(result: dict, labels: list[str], console) -> None:
    """tokens_per_step / acceptance_length per position bin (bins with enough steps)."""
    binned = result["tables"]["binned"]
    first = binned[labels[0]]
    shown = [b for b in range(len(first))
             if any(binned[lab][b]["counts"]["steps"] >= MIN_PLOT_STEPS for lab in labels)]
    if not shown:
        return
    t = Table(title=f"tokens_per_step / acceptance_length by {result['position_basis']} position at drafting time")
    t.add_column("configuration")
    for b in shown:
        t.add_column(first[b]["label"], justify="right")
    for lab in labels:
        rows = binned[lab]
        t.add_row(lab, *[f"{_fmt(rows[b]['tokens_per_step'], 2)} / {_fmt(rows[b]['acceptance_length'], 2)}"
                         if rows[b]["counts"]["steps"] >= MIN_PLOT_STEPS else "-" for b in shown])
    console.print(t)


def print_table(result: dict, console) -> None:
    t = Table(title=f"acceptance ({result['config']['engine']}, "
                    f"{result['inputs']['responses']} responses, {result['inputs']['skipped_lines']} lines skipped)")
    for col in ("configuration", "steps", "tokens_per_step", "acceptance_length", "draft_hit_rate",
                "acceptance_rate", "speedup_est"):
        t.add_column(col, justify="left" if col == "configuration" else "right")
    labels = result.get("configurations") or list(result["metrics"])
    for label in labels:
        m = result["metrics"][label]
        t.add_row(label, str(m["counts"]["steps"]), _fmt(m["tokens_per_step"]), _fmt(m["acceptance_length"]),
                  _fmt(m["draft_hit_rate"]), _fmt(m["acceptance_rate"]),
                  f"{_fmt(m['speedup_estimate'], 2)}x @{m['verify_cost_ratio']:g}")
    console.print(t)
    print_binned(result, labels, console)
    sources = {v["source"] for v in result["cost_model"]["verify_cost_ratio"].values()}
    if "assumption" in sources:
        console.print(f"speedup_est: {VERIFY_COST_ASSUMPTION}", highlight=False)
    fmts = Counter()
    for per_file in result["inputs"]["prompt_formats"].values():
        fmts.update(per_file)
    console.print("prompts: " + ", ".join(f"{n} {f}" for f, n in sorted(fmts.items())), highlight=False)
