"""The rollout's terminal lines, every figure with its unit (`units`: seconds measured or
modelled by a named step model, or decode steps): what the numbers are, a line per arm (with
the acceptance and its cost: tokens, drafted tokens and verify tokens per step), extrapolation
warnings, the prediction error of measured runs, the data-parallel instances, the preset's
prediction beside the published figures and the sensitivity table."""

from __future__ import annotations

from typing import Any

from samspec_bench.suites.rollout.presets import comparison_lines
from samspec_bench.suites.rollout.sensitivity import table_lines
from samspec_bench.suites.rollout.units import fmt_t, t, unit_tag


def _f(x, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def cost_text(m: dict[str, Any]) -> str:
    """'tokens/step 1.52, drafted/step 2.40, verify tokens/emitted 2.23' of an arm."""
    return (f"tokens/step {_f(m.get('tokens_per_step'), '.2f')}, drafted/step {_f(m.get('drafted_per_step'), '.2f')}, "
            f"verify tokens/emitted {_f(m.get('verify_tokens_per_token'), '.2f')}")


def arm_line(lbl: str, m: dict[str, Any], units: str, measured: bool) -> str:
    tag = unit_tag(units, measured)
    if units == "steps":
        line = (f"{lbl:24s} total {t(m, 'total_s')} steps (head {t(m, 'head_s')}, tail {t(m, 'tail_s')}) "
                "decode steps, not time")
        if lbl != "off":
            line += (f"  step-count ratio overall {_f(t(m, 'speedup_overall'))} tail {_f(t(m, 'speedup_tail'))} "
                     "(not time)")
    else:
        line = f"{lbl:24s} total {m['total_s']:.3f} s (head {m['head_s']:.3f}, tail {m['tail_s']:.3f}) {tag}"
        if measured and m.get("simulated"):
            e = m.get("sim_error") or {}
            line += (f"; simulated {m['simulated']['total_s']:.3f} s ({_f(e.get('total'), '+.1%')}), "
                     f"tail {m['simulated']['tail_s']:.3f} s ({_f(e.get('tail'), '+.1%')})")
        if lbl != "off":
            line += f"  speedup overall {_f(m.get('speedup_overall'))} tail {_f(m.get('speedup_tail'))} ({tag})"
    return line + f"  [{cost_text(m)}]"


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """Every line `rollout` prints before the results path."""
    units, measured = summary["units"], summary["measured"]
    lines = [summary["time_basis"]]
    lines += [arm_line(lbl, m, units, measured) for lbl, m in summary["arms"].items()]
    for lbl, e in (summary.get("extrapolation") or {}).items():
        lines.append(f"warning: {lbl}: the step model extrapolates: " + ", ".join(
            f"{f} up to {v['max']:g} (measured up to {v['valid_max']:g}; {100 * v['steps_beyond']:.0f} % of steps)"
            if isinstance(v, dict) else f"{f} {v}" for f, v in e.items()))
    pe = summary.get("prediction_error")
    if pe:
        lines.append(f"simulation vs measured (each arm priced by the engine's own profile): worst |error| total "
                     f"{_f(pe.get('max_abs_total'), '.1%')}, tail {_f(pe.get('max_abs_tail'), '.1%')} "
                     f"(goal {pe['goal']:.0%}: {'met' if pe.get('within_goal') else 'not met'})")
    lines.append(f"best setting ({summary['best_setting_by']}): {summary['best_setting']}")
    return lines + dp_lines(summary) + preset_lines(summary)


def dp_lines(summary: dict[str, Any]) -> list[str]:
    """Per-instance lines of a sharded run (--dp N), in the run's units."""
    dp = summary["workload"].get("dp")
    if not dp:
        return []
    units = summary["units"]
    tag = unit_tag(units, summary["measured"])
    ratio = "step-count ratio" if units == "steps" else "speedup"
    out = [f"data-parallel: {dp['instances']} instances, rule {dp['rule']} ({dp['rule_text']}); figures {tag}"]
    for lbl, m in summary["arms"].items():
        d = m["dp"]
        out.append(f"  {lbl}: rollout {fmt_t(m, 'total_s', units)} (slowest instance {d['slowest_instance']}), mean "
                   f"instance {fmt_t(d, 'mean_instance_makespan_s', units)}, idle share {100 * (d['idle_share'] or 0):.1f} "
                   f"%, tail share {100 * (d['tail_share_pooled'] or 0):.1f} % pooled"
                   + (f"; {ratio} overall {_f(t(m, 'speedup_overall'))} mean-instance "
                      f"{_f(t(m, 'speedup_mean_instance'))} tail {_f(t(m, 'speedup_tail'))}" if lbl != "off" else ""))
        for r in m["instances"]:
            so = t(r, "speedup_overall")
            out.append(f"    instance {r['instance']}: {r['requests']} requests, total {fmt_t(r, 'total_s', units)}, "
                       f"tail {fmt_t(r, 'tail_s', units)} ({100 * (r['tail_share'] or 0):.1f} %)"
                       + (f", {ratio} {so:.3f} (gain {100 * (so - 1):+.2f} %) tail {_f(t(r, 'speedup_tail'))}"
                          if so else ""))
    return out


def preset_lines(summary: dict[str, Any]) -> list[str]:
    """The preset's inputs, its prediction beside the published figures, and the sensitivity table."""
    out = []
    pre = summary.get("preset")
    if pre:
        inp = pre["inputs"]
        out += [f"preset {pre['name']}: {pre['model']} on {pre['hardware']} ({pre['mode']}), TP {pre['tp']} x DP "
                f"{pre['dp']} = {pre['dies']} dies; {pre['prompts']} prompts x {pre['group_size']}, max_num_seqs "
                f"{pre['max_num_seqs']}, threshold {pre['threshold']}, k {pre['k']}, max response "
                f"{pre['max_response_len']}",
                f"  inputs: lengths {inp['length_dist']} ({inp['length_evidence']})",
                f"          acceptance from {inp['traces']} (sources {inp['sources']}); sharding {inp['dp_shard']}; "
                f"KV cache {inp['kv_capacity_tokens']}",
                f"          step model {inp['step_model']} (MODELLED times: {inp.get('priced_by_kind') or '?'})"]
        if pre["comparison"]:
            out += comparison_lines(pre["comparison"])
    if summary.get("sensitivity"):
        out += table_lines(summary["sensitivity"])
    return out
