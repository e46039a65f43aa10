"""Outputs of `samspec-bench rollout`: the units and labels of its figures (`priced_by`,
`time_basis`, `to_step_units`), the per-step tables (Parquet, and CSV up to a size) and the
figures (running requests vs time with the tail shaded, step time vs batch, the CCDF).
pandas and matplotlib are imported when the outputs are written (slow imports, not needed
by the rest of the suite).

Units: a rollout priced by a step model reports seconds (modelled, or measured on an engine);
one without a step model reports decode steps, and every key that would say time says steps
(`total_steps`, `head_steps`, `tail_steps`, `step_ratio_overall`, ...; `to_step_units`)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from samspec_bench.suites.rollout.phases import tail_mask

CSV_MAX_ROWS = 1_000_000   # above this the CSV (hundreds of MB at RL scale) is left out: use the Parquet
STEP_RATIO = "step-count ratio, not time"


# ---------- units and labels ----------

def model_kind(model: Any) -> str:
    """A step model's kind ("fitted-profile", "roofline", "constant-steps"): its describe()'s
    when it names one, else read off the model (a constant step count, or a fit)."""
    d = model.describe() if hasattr(model, "describe") else {}
    if d.get("kind"):
        return str(d["kind"])
    fit = getattr(model, "fit", None) or {}
    return "constant-steps" if fit.get("source") == "constant" else "fitted-profile"


def priced_by(model: Any, source: str, profile: dict[str, Any] | None = None) -> dict[str, Any]:
    """What priced a rollout's steps: the step model's kind and source (a profile path, a
    roofline spec, 'measured in this run'), the profiled engine and date, the fit's residuals
    and the ranges the model holds over."""
    fit = getattr(model, "fit", None) or {}
    d = model.describe() if hasattr(model, "describe") else {}
    out: dict[str, Any] = {"kind": model_kind(model), "source": source}
    if profile:
        out.update({k: profile.get(k) for k in ("engine", "date", "note") if profile.get(k) is not None})
    if fit:
        out["fit"] = {k: fit.get(k) for k in ("n_steps", "r2", "median_rel_error", "max_rel_error", "total_error")
                      if k in fit}
        vr = fit.get("valid_range") or fit.get("ranges")
        if vr:
            out["valid_range"] = vr
        if "verify_widths" in fit:
            out["verify_widths"] = fit["verify_widths"]
    for k in ("assumptions", "hardware", "units"):
        if k in d:
            out[k] = d[k]
    return out


def priced_label(priced: dict[str, Any] | None) -> str:
    """'modelled (priced by fitted-profile: step_profile.json)' or the steps' label."""
    if not priced:
        return "decode steps (no step model: not time)"
    note = f"; {priced['note']}" if priced.get("note") else ""
    return f"modelled (priced by {priced.get('kind')}: {priced.get('source')}{note})"


def time_basis(units: str, measured: bool, priced: dict[str, Any] | None, engine: str) -> str:
    """One line saying what the rollout's numbers are."""
    if units == "steps":
        return ("decode steps: no --step-model was given, so no time is reported; ratios of step counts "
                f"({STEP_RATIO}). Price them with `--step-model` (a `rollout profile` JSON)")
    if measured:
        return (f"seconds measured on the {engine} engine (arms); the simulation's prediction beside them is "
                + priced_label(priced))
    return "seconds, " + priced_label(priced)


def _f(x, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The rollout's terminal lines: what the numbers are, a line per arm in the run's units
    (measured arms with the simulation's prediction and its error), extrapolation warnings, the
    prediction error over the arms and the best setting."""
    units, measured = summary["units"], summary["measured"]
    lines = [summary["time_basis"]]
    for lbl, m in summary["arms"].items():
        if units == "steps":
            line = (f"{lbl:24s} total {m['total_steps']} steps (head {m['head_steps']}, tail {m['tail_steps']})")
            if lbl != "off":
                line += (f"  step-count ratio overall {_f(m.get('step_ratio_overall'))} "
                         f"tail {_f(m.get('step_ratio_tail'))} (not time)")
        else:
            tag = "measured" if measured else "modelled"
            line = f"{lbl:24s} total {m['total_s']:.3f} s (head {m['head_s']:.3f}, tail {m['tail_s']:.3f}) {tag}"
            if measured and m.get("simulated"):
                e = m.get("sim_error") or {}
                line += (f"; simulated {m['simulated']['total_s']:.3f} s ({_f(e.get('total'), '+.1%')}), "
                         f"tail {m['simulated']['tail_s']:.3f} s ({_f(e.get('tail'), '+.1%')})")
            if lbl != "off":
                line += f"  speedup overall {_f(m.get('speedup_overall'))} tail {_f(m.get('speedup_tail'))} ({tag})"
        lines.append(line)
    for lbl, e in (summary.get("extrapolation") or {}).items():
        lines.append(f"warning: {lbl}: the step model extrapolates: " + ", ".join(
            f"{f} up to {v['max']:g} (measured up to {v['valid_max']:g}; {100 * v['steps_beyond']:.0f} % of steps)"
            for f, v in e.items()))
    pe = summary.get("prediction_error")
    if pe:
        lines.append(f"simulation vs measured (priced by the engine's own profile): worst |error| total "
                     f"{_f(pe.get('max_abs_total'), '.1%')}, tail {_f(pe.get('max_abs_tail'), '.1%')} "
                     f"(goal {pe['goal']:.0%}: {'met' if pe.get('within_goal') else 'not met'})")
    lines.append(f"best setting ({summary['best_setting_by']}): {summary['best_setting']}")
    return lines


_RENAME = {"time_saved_fraction": "steps_saved_fraction"}


def to_step_units(obj: Any) -> Any:
    """A copy of rollout metrics in decode-step units: keys ending in `_s` end in `_steps`
    (an existing `_steps` key of the same name wins), `speedup_*` become `step_ratio_*`,
    `time_saved_fraction` `steps_saved_fraction`."""
    if isinstance(obj, list):
        return [to_step_units(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    for k, v in obj.items():
        v = to_step_units(v)
        if not isinstance(k, str):
            out[k] = v
            continue
        if k in _RENAME:
            out[_RENAME[k]] = v
        elif k.startswith("speedup_"):
            out["step_ratio_" + k[len("speedup_"):]] = v
        elif re.fullmatch(r"\w+_s", k):
            new = k[:-2] + "_steps"
            if new not in obj:
                out[new] = int(v) if isinstance(v, float) and v.is_integer() else v
        else:
            out[k] = v
    return out


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


def make_figures(run, out: dict[str, Any], best: str | None, units: str = "s", basis: str = "") -> list[str]:
    """The figures, their axes in the rollout's units: seconds (measured or modelled, `basis`
    says which) or decode steps (no step-time figure then: every step counts 1)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figs = []
    tables = out["tables"]
    steps = units == "steps"
    xlab = "decode steps (not time: no step model)" if steps else "time (s)"
    sub = "" if steps else f"\n{basis}"
    thr = [lbl for lbl, m in out["metrics"].items() if lbl.startswith("threshold")]
    best_thr = min(thr, key=lambda lbl: out["metrics"][lbl]["total_s"]) if thr else None
    show = list(dict.fromkeys(lbl for lbl in ("off", best_thr, best) if lbl))  # the seed's figure: off vs threshold
    fig, ax = plt.subplots(figsize=(8, 4.4))
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
    ax.set_xlabel(xlab)
    ax.set_ylabel("running requests")
    ax.set_title(f"Running requests vs {'step' if steps else 'time'} (shaded: long tail, running <= threshold)"
                 + _short(sub), fontsize=9)
    ax.legend()
    figs.append(_save(fig, run, "running_vs_time.png"))

    if not steps:
        fig, ax = plt.subplots(figsize=(6, 4.4))
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
        ax.set_title("Step time vs batch" + _short(sub), fontsize=9)
        ax.legend()
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
        ax.set_title(_short(sub).strip(), fontsize=9)
    ax.legend()
    figs.append(_save(fig, run, "ccdf.png"))
    return figs


def _short(text: str, n: int = 110) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
