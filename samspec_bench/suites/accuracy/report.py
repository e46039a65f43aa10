"""accuracy's printed report: the table of both arms per task, the verdicts, greedy agreement, where
lm-eval's own files are."""

from __future__ import annotations

import math

from rich.table import Table


def print_report(result: dict, console) -> None:
    def pct(x):
        return "" if x is None else f"{100 * x:.1f}"

    def with_se(x, se):
        ok = isinstance(se, (int, float)) and math.isfinite(se)
        return pct(x) + (f" ± {100 * se:.1f}" if ok else "")

    t = Table(title=f"accuracy: {result['config']['model']} ({result['config']['engine']}), pass@1 "
                    f"over {result['config']['num_samples']} sample(s)")
    for col in ("dataset", "n", "without SAM", "with SAM", "difference (95% CI)", "p-value", "identical"):
        t.add_column(col, justify="left" if col == "dataset" else "right")
    for r in result["tables"]["accuracy"]:
        m = result["metrics"][r["dataset"]]
        diff = "" if r["diff"] is None else (f"{100 * r['diff']:+.1f} [{100 * r['ci95_low']:+.1f}, "
                                             f"{100 * r['ci95_high']:+.1f}]")
        p = "" if r["p_value"] is None else f"{r['p_value']:.3g} ({r['test']})"
        off = with_se(r["without_sam"], m.get("stderr_off"))
        on = with_se(r["with_sam"], m.get("stderr_on"))
        ident = "" if r["identical_fraction"] is None else f"{100 * r['identical_fraction']:.0f}%"
        t.add_row(r["dataset"], str(r["n"]), off, on, diff, p, ident)
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
    console.print(f"run directory: {result.get('run_dir')}")
    files = result.get("lm_eval_files") or {}
    if files.get("run") and result.get("run_dir"):
        where = f"{result['run_dir']}/lm_eval"
        if files.get("output_path"):
            where += f" and {files['output_path']}" + ("" if files.get("log_samples") else " (results only)")
        console.print(f"lm-eval's files (results_*.json, samples_<task>_*.jsonl per arm: sam_off/, sam_on/): {where}")
