"""The drafter benchmark's output: headline metrics (ratios against baselines measured in the
same run), the figure and the terminal tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from samspec_bench.suites.drafters.config import LIBRARY, PYTHON_BASELINES, DraftersConfig

NOISE = "< noise"   # a drafting cost the timing could not resolve (ns_per_draft None)


def summarize(rows: list[dict], sweep_rows: list[dict], cfg: DraftersConfig) -> dict:
    """Headline figures: SAM's ratios against the baselines measured in this run, and the
    growth of each drafter's per-step cost from the shortest to the longest context."""
    by = {r["drafter"]: r for r in rows}
    m: dict = {"k": cfg.k}
    lib = LIBRARY if LIBRARY in by else "sam"
    sam = by.get(lib)
    if sam:
        m["sam_library_drafter"] = lib
        m["sam_ns_per_token"] = sam["ns_per_token"]
        m["sam_ns_per_draft"] = sam["ns_per_draft"]
        if sam["ns_per_draft"] is None and sam.get("ns_per_draft_at_most") is not None:
            m["sam_ns_per_draft_at_most"] = sam["ns_per_draft_at_most"]   # below the timing noise: a bound
        m["sam_bytes_per_token"] = sam["bytes_per_token"]
        for base in PYTHON_BASELINES:
            if base in by:
                m[f"append_speedup_vs_{base.replace('-', '_')}"] = by[base]["ns_per_token"] / sam["ns_per_token"]
                m[f"append_stream_speedup_vs_{base.replace('-', '_')}"] = (
                    by[base]["ns_per_token_stream"] / sam["ns_per_token_stream"])
                m[f"draft_speedup_vs_{base.replace('-', '_')}"] = (
                    by[base]["ns_per_draft"] / sam["ns_per_draft"]
                    if sam["ns_per_draft"] and by[base]["ns_per_draft"] is not None else None)
    ev = by.get("sam")
    if ev and lib != "sam":   # the evidence policy's own cost, beside the library's
        m["evidence_ns_per_draft"] = ev["ns_per_draft"]
        m["evidence_bytes_per_token"] = ev["bytes_per_token"]
        m["evidence_policy_path"] = ev.get("policy_path")
        if sam["ns_per_draft"] and ev["ns_per_draft"] is not None:   # the policy's cost on top of the fixed lookup
            m["evidence_draft_cost_vs_fixed_lookup"] = ev["ns_per_draft"] / sam["ns_per_draft"]
    ref = by.get("sam-evidence-py")
    if ref:   # the policy chosen by its Python specification, measured in the same run
        m["evidence_python_ns_per_draft"] = ref["ns_per_draft"]
        if ev and ev["ns_per_draft"] and ref["ns_per_draft"] is not None:
            m["evidence_draft_speedup_vs_python_policy"] = ref["ns_per_draft"] / ev["ns_per_draft"]
    if sweep_rows and sam:
        # building a long context in one call (a long prompt, or a response thousands of tokens
        # long): per-token cost at each swept length, against the same tokens in the baselines
        build = {(r["drafter"], r["context_tokens"]): r["ns_per_token_build"] for r in sweep_rows}
        for base in PYTHON_BASELINES:
            ratios = {str(L): build[(base, L)] / build[(lib, L)] for L in cfg.sweep
                      if (base, L) in build and (lib, L) in build and build[(lib, L)] > 0}
            if ratios:
                m[f"build_speedup_vs_{base.replace('-', '_')}_by_context"] = ratios
    if sweep_rows:
        lo, hi = min(cfg.sweep), max(cfg.sweep)
        growth = {}
        for name in by:
            pts = {r["context_tokens"]: r["ns_per_step"] for r in sweep_rows if r["drafter"] == name}
            if lo in pts and hi in pts and lo != hi:
                growth[name] = pts[hi] / pts[lo]
        m["step_cost_growth_longest_vs_shortest_context"] = growth
    return m


def plot(rows: list[dict], sweep_rows: list[dict], path: Path) -> Path:
    import matplotlib  # lazy (not ours, slow to import): only the figure needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [r["drafter"] for r in rows]
    y = np.arange(len(rows))
    ax1.barh(y - 0.27, [r["ns_per_token"] for r in rows], 0.27, label="append, bulk (ns/token)")
    ax1.barh(y, [r["ns_per_token_stream"] for r in rows], 0.27, label="append, 1 per call (ns/token)")
    ax1.barh(y + 0.27, [np.nan if r["ns_per_draft"] is None else max(r["ns_per_draft"], 1e-3) for r in rows], 0.27,
             label="draft k (ns/draft; none: below the timing noise)")
    ax1.set_yticks(y, names)
    ax1.set_xscale("log")
    ax1.invert_yaxis()
    ax1.set_xlabel("nanoseconds (log)")
    ax1.set_title("Trace replay: cost per token and per draft")
    ax1.legend(fontsize=8)
    for name in names:
        pts = sorted((r["context_tokens"], r["ns_per_step"]) for r in sweep_rows if r["drafter"] == name)
        if pts:
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("context length (tokens)")
    ax2.set_ylabel("ns per decode step (append 1 + draft k)")
    ax2.set_title("Per-step cost versus context length")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _ns_per_draft(row: dict) -> str:
    if row["ns_per_draft"] is not None:
        return f"{row['ns_per_draft']:.0f}"
    bound = row.get("ns_per_draft_at_most")
    return NOISE if bound is None else f"{NOISE} (<= {bound:.0f})"


def print_table(result: dict) -> None:
    dev = (result.get("environment") or {}).get("device") or {}
    on = f", measured on {dev.get('device')} ({dev.get('name')}), wall clock, one thread" if dev.get("device") else ""
    t = Table(title=f"Drafters (k={result['config']['k']}){on}")
    for col in ("drafter", "tokens", "ns/token (bulk)", "ns/token (1 per call)", "ns/draft", "bytes/token", "policy path"):
        t.add_column(col, justify="right" if col != "drafter" else "left")
    for r in result["tables"]["replay"]:
        bpt = r["bytes_per_token"]
        t.add_row(r["drafter"], f"{r['tokens']:,}", f"{r['ns_per_token']:.0f}", f"{r['ns_per_token_stream']:.0f}",
                  _ns_per_draft(r), f"{bpt:.1f}" if bpt else "-",
                  r.get("policy_path") or "-")
    s = Table(title="Per-step cost (ns) versus context length")
    lengths = sorted({r["context_tokens"] for r in result["tables"]["context_sweep"]})
    s.add_column("drafter")
    for n in lengths:
        s.add_column(f"{n:,}", justify="right")
    for name in dict.fromkeys(r["drafter"] for r in result["tables"]["context_sweep"]):
        pts = {r["context_tokens"]: r["ns_per_step"] for r in result["tables"]["context_sweep"] if r["drafter"] == name}
        s.add_row(name, *[f"{pts[n]:,.0f}" if n in pts else "-" for n in lengths])
    console = Console()
    console.print(t)
    budget_lines(result.get("token_budget"), console)
    if any(r["ns_per_draft"] is None for r in result["tables"]["replay"]):
        console.print(f"ns/draft {NOISE}: the pass that drafts after every token was not slower than the one that does "
                      "not (its cost is below the timing noise); raise --max-tokens or --repeats")
    console.print(s)
    m = result["metrics"]
    for key, val in m.items():
        if key.startswith(("append_speedup", "append_stream_speedup", "draft_speedup")) and val:
            console.print(f"{key}: {val:.0f}x" if val >= 10 else f"{key}: {val:.2g}x")   # 0.33x is not 0x
    if m.get("evidence_ns_per_draft") is not None:
        line = (f"evidence policy ('sam', {m.get('evidence_policy_path') or '?'} path): "
                f"{m['evidence_ns_per_draft']:.0f} ns/draft, {m.get('evidence_bytes_per_token') or 0:.1f} bytes/token")
        if m.get("evidence_draft_cost_vs_fixed_lookup"):
            line += f"; {m['evidence_draft_cost_vs_fixed_lookup']:.2f}x the fixed lookup's ns/draft"
        if m.get("evidence_draft_speedup_vs_python_policy"):
            line += (f"; {m['evidence_draft_speedup_vs_python_policy']:.1f}x faster than the Python policy "
                     f"({m['evidence_python_ns_per_draft']:.0f} ns/draft, same run)")
        console.print(line)
    for name, reason in result.get("unavailable_drafters", {}).items():
        console.print(f"[yellow]not run: {name}: {reason}[/yellow]")
    if result.get("sessions_note"):   # a resumed run: its rounds mix two machine states
        console.print(f"[yellow]{result['sessions_note']}[/yellow]", soft_wrap=True)


def budget_lines(budget: dict | None, console) -> None:
    """What the replay used against --max-tokens: its tokens, each file's share, the responses cut
    at a share, the files that gave none, and the context sweep's own tokens where it read past it."""
    if not budget:
        return
    cut = budget["responses_cut"]
    console.print(f"replayed {budget['tokens']:,} tokens of --max-tokens {budget['max_tokens']:,} "
                  f"({budget['share_per_file']:,} per trace file, prompts and responses counted"
                  + (f"; {cut} response(s) cut at their file's share)" if cut else ")"), soft_wrap=True)
    sweep = budget.get("sweep") or {}
    if sweep.get("beyond_max_tokens"):
        given = "; ".join(f"{f['file']} {f['tokens']:,}" for f in sweep.get("files", []))
        console.print(f"context sweep: its own stream of {sweep['stream_tokens']:,} trace tokens, beyond --max-tokens "
                      f"(it caps the replay; the longest --sweep context and --sweep-steps need "
                      f"{sweep['tokens_needed']:,})" + (f"; tokens per trace file: {given}" if given else ""),
                      soft_wrap=True)
    if budget["files_without_tokens"]:
        console.print(f"[yellow]no tokens from {len(budget['files_without_tokens'])} trace file(s) (its share holds "
                      f"not its first prompt and one response token; raise --max-tokens): "
                      f"{', '.join(budget['files_without_tokens'][:3])}[/yellow]", soft_wrap=True)
