"""Outputs of `samspec-bench rollout`: the per-step tables (Parquet, and CSV up to a size) and
the figures (running requests vs time with the tail shaded, step time vs batch, the CCDF; with
--dp, running requests per instance; with a sensitivity table, its rows' ranges), their axes in the
run's units (`units`: seconds, measured or modelled by a named step model, or decode steps).
pandas and matplotlib are imported when the outputs are written (slow imports, not needed
by the rest of the suite)."""

from __future__ import annotations

from typing import Any

import numpy as np

from samspec_bench.suites.rollout.phases import tail_mask

CSV_MAX_ROWS = 1_000_000   # above this the CSV (hundreds of MB at RL scale) is left out: use the Parquet
SCATTER_MAX = 50_000       # points per arm in the step-time scatter


def write_steps(run, tables: dict[str, tuple[str, dict]], units: str = "s") -> dict[str, Any]:
    """The per-step table of every arm as steps.parquet and, up to CSV_MAX_ROWS rows, steps.csv
    (same rows and columns). In step units the tables hold no time: `clock_steps` (steps so far)
    instead of time_s / clock_s."""
    df = steps_frame(tables)
    if units == "steps":
        df = df.drop(columns=["time_s"]).rename(columns={"clock_s": "clock_steps"})
    df.to_parquet(run.file("steps.parquet"), index=False, engine="pyarrow")
    files = ["steps.parquet"]
    if len(df) <= CSV_MAX_ROWS:
        df.to_csv(run.file("steps.csv"), index=False)
        files.insert(0, "steps.csv")
    return {"files": files, "rows": int(len(df)), "units": units,
            "csv": None if len(df) <= CSV_MAX_ROWS else f"left out: {len(df)} rows > {CSV_MAX_ROWS}; read steps.parquet"}


def steps_frame(tables: dict[str, tuple[str, dict]]):
    import pandas as pd
    frames = []
    for label, (source, st) in tables.items():
        df = pd.DataFrame({k: np.asarray(v) for k, v in st.items()})
        df.insert(0, "source", source)
        df.insert(0, "arm", label)
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def _save(fig, run, name: str) -> str:
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(run.file(name), dpi=110, bbox_inches="tight")   # long subtitles are not cut at the edge
    plt.close(fig)
    return name


def _short(text: str, n: int = 110) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def main_table(out: dict[str, Any], label: str) -> dict:
    """An arm's step table for the one-timeline figures: with --dp, its slowest instance's."""
    if "instance_tables" in out:
        return out["instance_tables"][label][out["slowest"][label]]
    return out["tables"][label][1]


def make_figures(run, out: dict[str, Any], best: str | None, units: str = "s", basis: str = "") -> list[str]:
    """The figures, their axes in the rollout's units: seconds (measured or modelled, `basis`
    says which, in the titles) or decode steps (no step-time figure then: every step counts 1)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figs = []
    tables = out["tables"]
    steps = units == "steps"
    xlab = "decode steps (not time: no step model)" if steps else "time (s)"
    sub = "" if steps else f"\n{_short(basis)}"
    thr = [lbl for lbl, m in out["metrics"].items() if lbl.startswith("threshold")]
    best_thr = min(thr, key=lambda lbl: out["metrics"][lbl]["total_s"]) if thr else None
    show = list(dict.fromkeys(lbl for lbl in ("off", best_thr, best) if lbl))  # the seed's figure: off vs threshold
    fig, ax = plt.subplots(figsize=(8, 4.4))
    for lbl in show:
        src, st = tables[lbl][0], main_table(out, lbl)
        T = out["metrics"][lbl]["tail_threshold"]
        x = np.concatenate([[0.0], st["clock_s"]])
        y = np.concatenate([st["num_running"][:1], st["num_running"]])
        line, = ax.step(x, y, where="pre", label=f"{lbl} ({src})")
        tail = tail_mask(st, T)
        if tail.any():
            first = int(np.argmax(tail))
            start = float(st["clock_s"][first - 1]) if first > 0 else 0.0
            ax.axvspan(start, float(st["clock_s"][-1]), color=line.get_color(), alpha=0.12)
    ax.set_xlabel(xlab)
    ax.set_ylabel("running requests")
    ax.set_title(f"Running requests vs {'step' if steps else 'time'} (shaded: long tail, running <= threshold)"
                 + (" - slowest instance" if "instance_tables" in out else "") + sub, fontsize=9)
    ax.legend(loc="upper right")
    figs.append(_save(fig, run, "running_vs_time.png"))
    if "instance_tables" in out:
        figs.append(dp_figure(run, out, list(dict.fromkeys(lbl for lbl in ("off", best_thr or best) if lbl)),
                              units, basis))
    if out.get("sensitivity"):
        figs.append(sensitivity_figure(run, out["sensitivity"]))

    if not steps:
        fig, ax = plt.subplots(figsize=(6, 4.4))
        for lbl in show:
            src, st = tables[lbl]
            every = max(1, len(st["time_s"]) // SCATTER_MAX)   # RL-scale tables: every n-th step is enough to see
            ax.scatter(st["num_running"][::every], st["time_s"][::every] * 1e3, s=6, alpha=0.4,
                       label=f"{lbl} ({src})" + (f", every {every}th step" if every > 1 else ""))
            if lbl + " [sim]" in tables:   # the step-time model's prediction of the same steps
                sst = tables[lbl + " [sim]"][1]
                ax.scatter(sst["num_running"], sst["time_s"] * 1e3, s=10, marker="x", alpha=0.5,
                           label=f"{lbl} (step model)")
        ax.set_yscale("log")   # prefill steps are orders of magnitude longer than decode steps
        ax.set_xlabel("batch size (requests in the step)")
        ax.set_ylabel("step time (ms)")
        ax.set_title("Step time vs batch" + sub, fontsize=9)
        ax.legend(loc="upper left")
        figs.append(_save(fig, run, "step_time_vs_batch.png"))

    fig, ax = plt.subplots(figsize=(6, 4.4))
    for lbl in show:
        f = np.sort(np.asarray(out["finish"][lbl], dtype=float))
        f = f[np.isfinite(f)]
        if f.size:
            ax.step(f, 1 - np.arange(1, f.size + 1) / f.size, where="post", label=lbl)
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_xlabel("completion step (not time)" if steps else "completion time (s)")
    ax.set_ylabel("P(completion > t)")
    if sub:
        ax.set_title(sub.strip(), fontsize=9)
    ax.legend(loc="lower left")
    figs.append(_save(fig, run, "ccdf.png"))
    return figs


def dp_figure(run, out: dict[str, Any], labels: list[str], units: str = "s", basis: str = "") -> str:
    """Running requests per instance over time (or decode steps without a step model), one panel
    per arm (off and the threshold arm), one line per instance."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(labels), 1, figsize=(9, 3.2 * len(labels)), sharex=True, squeeze=False)
    n = len(out["instance_tables"][labels[0]])
    cmap = plt.get_cmap("viridis")
    for ax, lbl in zip(axes[:, 0], labels):
        for i, st in enumerate(out["instance_tables"][lbl]):
            x = np.concatenate([[0.0], st["clock_s"]])
            y = np.concatenate([st["num_running"][:1], st["num_running"]])
            ax.step(x, y, where="pre", lw=0.9, color=cmap(i / max(n - 1, 1)), label=f"instance {i}" if n <= 8 else None)
        T = out["metrics"][lbl]["tail_threshold"]
        ax.axhline(T, color="grey", ls=":", lw=0.8)
        ax.set_ylabel("running requests")
        ax.set_title(f"{lbl}: {n} instances, simulated (dotted: threshold {T})", fontsize=9)
        if n <= 8:
            ax.legend(fontsize=7, ncol=4, loc="upper right")
    axes[-1, 0].set_xlabel("decode steps (not time: no step model)" if units == "steps"
                           else "time (s), " + _short(basis, 90))
    return _save(fig, run, "dp_running_vs_time.png")


def sensitivity_figure(run, block: dict[str, Any]) -> str:
    """The sensitivity table as two panels, one row per assumption and value: the off rollout's
    tail share and the per-step gain, each its median (dot) and [min, max] over the draws (bar);
    the published figures as dashed lines where a preset gives them. Of modelled time, or of
    decode steps when no step model priced the run (the titles say which)."""
    import matplotlib.pyplot as plt
    rows = block["rows"]
    labels = [f"{r['assumption']}: {r['value']}"[:60] for r in rows]
    y = np.arange(len(rows))[::-1]
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.32 * len(rows) + 1.6), sharey=True)
    for ax, key, title in ((axes[0], "tail_share_pct", "tail share of the off rollout (%)"),
                           (axes[1], "gain_pct", "per-step gain off / on - 1 (%)")):
        for yi, r in zip(y, rows):
            sp = r[key]
            if sp["median"] is None:
                continue
            color = "black" if r.get("modelled") else "tab:blue"
            ax.plot([sp["min"], sp["max"]], [yi, yi], color=color, lw=2, alpha=0.6)
            ax.plot([sp["median"]], [yi], "o", color=color, ms=4)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    for ax, key in ((axes[0], "published_tail_share_pct"), (axes[1], "published_gain_pct")):
        if block.get(key) is not None:
            ax.axvline(block[key], color="tab:red", ls="--", lw=1, label="published")
            ax.legend(fontsize=7, loc="lower right")
    axes[0].set_yticks(y, labels, fontsize=7)
    steps = block.get("units") == "steps"
    fig.suptitle(("DECODE STEPS, not time (no step model)" if steps else "MODELLED") + f", arm {block['arm']}: median "
                 f"(dot) and [min, max] over the draws, one assumption changed at a time", fontsize=9)
    return _save(fig, run, "sensitivity.png")
