"""Outputs of `samspec-bench rollout`: the per-step tables (Parquet, and CSV up to a size) and
the figures (running requests vs time with the tail shaded, step time vs batch, the CCDF).
pandas and matplotlib are imported when the outputs are written (slow imports, not needed
by the rest of the suite)."""

from __future__ import annotations

from typing import Any

import numpy as np

from samspec_bench.suites.rollout.phases import tail_mask

CSV_MAX_ROWS = 1_000_000   # above this the CSV (hundreds of MB at RL scale) is left out: use the Parquet


def write_steps(run, tables: dict[str, tuple[str, dict]]) -> dict[str, Any]:
    """The per-step table of every arm as steps.parquet and, up to CSV_MAX_ROWS rows, steps.csv
    (same rows and columns)."""
    df = steps_frame(tables)
    df.to_parquet(run.file("steps.parquet"), index=False, engine="pyarrow")
    files = ["steps.parquet"]
    if len(df) <= CSV_MAX_ROWS:
        df.to_csv(run.file("steps.csv"), index=False)
        files.insert(0, "steps.csv")
    return {"files": files, "rows": int(len(df)),
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
    fig.savefig(run.file(name), dpi=110)
    plt.close(fig)
    return name


def make_figures(run, out: dict[str, Any], best: str | None) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figs = []
    tables = out["tables"]
    thr = [lbl for lbl, m in out["metrics"].items() if lbl.startswith("threshold")]
    best_thr = min(thr, key=lambda lbl: out["metrics"][lbl]["total_s"]) if thr else None
    show = list(dict.fromkeys(lbl for lbl in ("off", best_thr, best) if lbl))  # the seed's figure: off vs threshold
    fig, ax = plt.subplots(figsize=(8, 4))
    for lbl in show:
        src, st = tables[lbl]
        T = out["metrics"][lbl]["tail_threshold"]
        x = np.concatenate([[0.0], st["clock_s"]])
        y = np.concatenate([st["num_running"][:1], st["num_running"]])
        line, = ax.step(x, y, where="pre", label=f"{lbl} ({src})")
        tail = tail_mask(st, T)
        if tail.any():
            first = int(np.argmax(tail))
            start = float(st["clock_s"][first - 1]) if first > 0 else 0.0
            ax.axvspan(start, float(st["clock_s"][-1]), color=line.get_color(), alpha=0.12)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("running requests")
    ax.set_title("Running requests vs time (shaded: long tail, running <= threshold)")
    ax.legend()
    figs.append(_save(fig, run, "running_vs_time.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for lbl in show:
        src, st = tables[lbl]
        ax.scatter(st["num_running"], st["time_s"] * 1e3, s=6, alpha=0.4, label=f"{lbl} ({src})")
        if lbl + " [sim]" in tables:   # the step-time model's prediction of the same steps
            sst = tables[lbl + " [sim]"][1]
            ax.scatter(sst["num_running"], sst["time_s"] * 1e3, s=10, marker="x", alpha=0.5,
                       label=f"{lbl} (step model)")
    ax.set_yscale("log")   # prefill steps are orders of magnitude longer than decode steps
    ax.set_xlabel("batch size (requests in the step)")
    ax.set_ylabel("step time (ms)")
    ax.legend()
    figs.append(_save(fig, run, "step_time_vs_batch.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for lbl in show:
        f = np.sort(np.asarray(out["finish"][lbl], dtype=float))
        f = f[np.isfinite(f)]
        if f.size:
            ax.step(f, 1 - np.arange(1, f.size + 1) / f.size, where="post", label=lbl)
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_xlabel("completion time (s)")
    ax.set_ylabel("P(completion > t)")
    ax.legend()
    figs.append(_save(fig, run, "ccdf.png"))
    return figs


