"""accuracy's printed report: the table of both arms per task, the verdicts, greedy agreement, where
lm-eval's own files are."""

from __future__ import annotations

import math

from rich.table import Table


def _per_arm(counts: dict | None, m: dict | None = None) -> str:
    """'off / on' counts; with m 'without SAM n of N, with SAM ...'; '' for a result that has none."""
    if not isinstance(counts, dict):
        return ""
    if m is None:
        return f"{counts.get('off')} / {counts.get('on')}"
    total = m.get("responses") or {}
    return ", ".join(f"{label} {counts.get(a)}" + (f" of {total[a]}" if a in total else "")
                     for a, label in (("off", "without SAM"), ("on", "with SAM")))


def failed_arms(result: dict) -> list[str]:
    """'task: with SAM, 2 of 2 samples failed' for each arm of a task whose samples all failed
    (nothing of it was measured: the run must not pass)."""
    out = []
    for task, m in (result.get("metrics") or {}).items():
        errors, total = m.get("errors") or {}, m.get("responses") or {}
        for arm, label in (("off", "without SAM"), ("on", "with SAM")):
            if total.get(arm) and errors.get(arm) == total[arm]:
                out.append(f"{task}: {label}, {errors[arm]} of {total[arm]} samples failed")
    return out


def print_report(result: dict, console) -> None:
    def pct(x):
        return "" if x is None else f"{100 * x:.1f}"

    def with_se(x, se):
        ok = isinstance(se, (int, float)) and math.isfinite(se)
        return pct(x) + (f" ± {100 * se:.1f}" if ok else "")

    t = Table(title=f"accuracy: {result['config']['model']} ({result['config']['engine']}), pass@1 "
                    f"over {result['config']['num_samples']} sample(s)")
    for col in ("dataset", "n", "without SAM", "with SAM", "difference (95% CI)", "p-value", "identical",
                "cut at limit (off / on)"):
        t.add_column(col, justify="left" if col == "dataset" else "right")
    for r in result["tables"]["accuracy"]:
        m = result["metrics"][r["dataset"]]
        diff = "" if r["diff"] is None else (f"{100 * r['diff']:+.1f} [{100 * r['ci95_low']:+.1f}, "
                                             f"{100 * r['ci95_high']:+.1f}]")
        p = "" if r["p_value"] is None else f"{r['p_value']:.3g} ({r['test']})"
        off = with_se(r["without_sam"], m.get("stderr_off"))
        on = with_se(r["with_sam"], m.get("stderr_on"))
        ident = "" if r["identical_fraction"] is None else f"{100 * r['identical_fraction']:.0f}%"
        t.add_row(r["dataset"], str(r["n"]), off, on, diff, p, ident, _per_arm(m.get("truncated")))
    console.print(t)
    for r in result["tables"]["accuracy"]:
        m = result["metrics"][r["dataset"]]
        console.print(f"{r['dataset']} ({m['metric']}, {m['filter']}): {r['verdict']}")
        ag = m.get("agreement")
        if ag and ag["first_divergence"]:
            console.print(f"  greedy: {ag['identical']}/{ag['n']} identical; first divergence at tokens "
                          f"{ag['first_divergence'][:10]}{' ...' if len(ag['first_divergence']) > 10 else ''}")
        if any(m["errors"].values()):
            console.print(f"  failed samples (recorded, excluded from the pairing): {m['errors']}")
        if any((m.get("truncated") or {}).values()):
            console.print(f"  responses cut at the token limit (--max-gen-toks {result['config'].get('max_gen_toks')}; "
                          f"unfinished answers are scored as they stand): {_per_arm(m['truncated'], m)}")
    console.print(f"run directory: {result.get('run_dir')}")
    files = result.get("lm_eval_files") or {}
    if files.get("run") and result.get("run_dir"):
        where = f"{result['run_dir']}/lm_eval"
        if files.get("output_path"):
            where += f" and {files['output_path']}" + ("" if files.get("log_samples") else " (results only)")
        console.print(f"lm-eval's files (results_*.json, samples_<task>_*.jsonl per arm: sam_off/, sam_on/): {where}")
