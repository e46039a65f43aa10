"""The accept suite's output beside result.json: the figure (tokens_per_step and
acceptance_length by position at drafting time) and the tables printed at the end."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.table import Table

from samspec_bench.suites.accept.config import VERIFY_COST_ASSUMPTION, AcceptConfig
from samspec_bench.suites.accept.heldout import split_lines
from samspec_bench.trace_formats import validation_line

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
    return _save(fig, run_path, FIGURE_STEM)


PARETO_STEM = "tokens_vs_drafted"


def write_pareto_figure(run_path: Path, configs, metrics: dict, cfg: AcceptConfig) -> list[str]:
    """tokens_per_step against drafted_per_step, one point per configuration (drafter, k,
    sources): up and to the left is better; a point dominates those below and right of it."""
    import matplotlib  # slow to import: only when a figure is written

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    markers = {}
    for dc in configs:
        m = metrics.get(dc.label, {})
        x, y = m.get("drafted_per_step"), m.get("tokens_per_step")
        if x is None or y is None:
            continue
        mk = markers.setdefault(dc.sources, "osD^vP*X"[len(markers) % 8])
        ax.scatter([x], [y], marker=mk, s=40, label=dc.label)
        ax.annotate(f"{dc.drafter} k={dc.k}", (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("drafted tokens per decode step (verify cost; counts, not time)")
    ax.set_ylabel("tokens per decode step (counts, not time)")
    ax.set_title(f"samspec-bench accept ({cfg.engine}): tokens per step vs drafted tokens per step", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return _save(fig, run_path, PARETO_STEM)


def _save(fig, run_path: Path, stem: str) -> list[str]:
    """Write `fig` as stem.png and stem.svg beside result.json, close it; the names written."""
    import matplotlib.pyplot as plt  # the callers imported it already (Agg backend)

    fig.tight_layout()
    names = []
    for ext in ("png", "svg"):
        name = f"{stem}.{ext}"
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
    for col in ("configuration", "steps", "tokens_per_step", "drafted_per_step", "verify_tok/token",
                "acceptance_length", "draft_hit_rate", "acceptance_rate", "speedup_est"):
        t.add_column(col, justify="left" if col == "configuration" else "right")
    labels = result.get("configurations") or list(result["metrics"])
    for label in labels:
        m = result["metrics"][label]
        t.add_row(label, str(m["counts"]["steps"]), _fmt(m["tokens_per_step"]), _fmt(m.get("drafted_per_step")),
                  _fmt(m.get("verify_tokens_per_token")), _fmt(m["acceptance_length"]),
                  _fmt(m["draft_hit_rate"]), _fmt(m["acceptance_rate"]),
                  f"{_fmt(m['speedup_estimate'], 2)}x @{m['verify_cost_ratio']:g}")
    console.print(t)
    for line in split_lines(result.get("split")):
        console.print(line, highlight=False)
    print_binned(result, labels, console)
    print_sources(result, console)
    if (result.get("group_source") or {}).get("note"):
        console.print(f"note: {result['group_source']['note']}", highlight=False)
    print_steps(result, console)
    print_tool_output(result, console)
    print_validation(result, console)
    sources = {v["source"] for v in result["cost_model"]["verify_cost_ratio"].values()}
    if "assumption" in sources:
        console.print(f"speedup_est: {VERIFY_COST_ASSUMPTION}", highlight=False)
    fmts = Counter()
    for per_file in result["inputs"]["prompt_formats"].values():
        fmts.update(per_file)
    console.print("prompts: " + ", ".join(f"{n} {f}" for f, n in sorted(fmts.items())), highlight=False)
    builtin = result["inputs"].get("builtin_prompts")
    if builtin:
        console.print(f"prompts from the built-in {builtin['benchmark']} set (first {builtin['prompts']}), "
                      f"{builtin['max_tokens']} tokens each, generated by {result['config']['model']}", highlight=False)
    trace_fmt = result["inputs"].get("trace_formats", {})
    kinds = Counter(trace_fmt.values())
    per_file = result["inputs"]["prompt_formats"]
    responses = Counter({k: 0 for k in kinds})
    for f, k in trace_fmt.items():
        responses[k] += sum(per_file.get(f, {}).values())
    if kinds:   # every file of a folder is read: say how much each format gave
        console.print("trace formats: " + ", ".join(f"{k} {n} file(s), {responses[k]} response(s)"
                                                    for k, n in sorted(kinds.items())), highlight=False)
    models = (result["inputs"].get("models") or {}).get("models") or {}
    names = sorted({m for ms in models.values() for m in ms})
    unstated = (result["inputs"].get("models") or {}).get("unstated") or []
    if names or unstated:
        console.print("traces written by: " + ", ".join(names + ([f"unstated ({len(unstated)} file(s))"]
                                                                 if unstated else [])), highlight=False)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def print_steps(result: dict, console) -> None:
    """Per RL step, a table per configuration: responses, generated tokens (and the tool tokens
    prefilled between turns, where there are any), drafted and accepted tokens, acceptance %
    (accepted / drafted) and tokens per decode step."""
    by_step = result["tables"].get("by_step") or {}
    tool = (result["inputs"].get("tool_output") or {}).get("tool_tokens_by_step") or {}
    for label in result.get("configurations") or list(by_step):
        rows = by_step.get(label)
        if not rows:
            continue
        t = Table(title=f"per RL step: {label}")
        for col in ("step", "responses", "tokens", *(("tool tokens",) if tool else ()), "drafted", "accepted",
                    "acceptance %", "tokens/step"):
            t.add_column(col, justify="right")
        for r in rows:
            c = r["counts"]
            t.add_row("-" if r["step"] is None else str(r["step"]), str(r.get("responses", "-")),
                      str(r.get("response_tokens", "-")), *((str(tool.get(str(r["step"]), 0)),) if tool else ()),
                      str(c["drafted"]), str(c["accepted"]), _pct(r["acceptance_rate"]), _fmt(r["tokens_per_step"], 2))
        console.print(t)


def print_tool_output(result: dict, console) -> None:
    """How much of the responses is tool output, and how it was replayed."""
    tool = result["inputs"].get("tool_output")
    if not tool:
        return
    shapes = ", ".join(f"{s['spans']:,} {s['what']}" for s in tool["shapes"].values())
    share = 100 * tool["tool_tokens"] / max(1, tool["response_tokens"])
    console.print(f"tool output: {tool['tool_tokens']:,} of {tool['response_tokens']:,} response tokens ({share:.1f} %) "
                  f"in {tool['responses']:,} response(s) ({shapes}); generated: {tool['generated_tokens']:,}; "
                  f"{tool['handling']}", highlight=False)
    if tool.get("later_turns"):
        console.print(f"model turns: {tool['requests']:,} requests, {tool['later_turns']:,} of them later turns "
                      f"({tool['later_turn_tokens']:,} generated tokens); {tool['sources_note']}", highlight=False)


def print_validation(result: dict, console) -> None:
    """verl validation generations found among the traces, and what was done with them."""
    line = validation_line(result["inputs"].get("validation"))
    if line:
        console.print(line, highlight=False)


def print_sources(result: dict, console) -> None:
    """own / group / history / group+history side by side (tokens_per_step / acceptance_length),
    and what the history store held."""
    rows = result["tables"].get("sources") or []
    if not rows:
        return
    cols = ("own", "own+group", "own+history", "own+group+history")
    t = Table(title="draft sources side by side: tokens_per_step / acceptance_length (counts, not time)")
    t.add_column("drafter, k")
    for c in cols:
        t.add_column(c.removeprefix("own+") if c != "own" else c, justify="right")
    for r in rows:
        t.add_row(f"{r['drafter']} k={r['k']}", *[("-" if r[c] is None else
                                                   f"{_fmt(r[c]['tokens_per_step'], 2)} / "
                                                   f"{_fmt(r[c]['acceptance_length'], 2)}") for c in cols])
    console.print(t)
    steps = result["inputs"].get("steps")
    if steps:
        console.print(f"steps: {steps}", highlight=False)
    hist = ((result.get("engine") or {}).get("history") or {}).get("by_configuration") or {}
    for label, h in hist.items():
        console.print(f"history ({label}): {h['replayed_with_history']}/{h['replayed_responses']} responses had "
                      f"earlier responses to their prompt; window {h['window_responses_per_prompt']} per prompt, "
                      f"peak {h['peak_stored_bytes'] / 2**20:.1f} MiB of {h['budget_bytes'] / 2**20:.0f} MiB, "
                      f"{h['evicted_by_budget']} evicted by the budget", highlight=False)
