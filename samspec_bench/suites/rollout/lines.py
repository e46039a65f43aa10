"""The rollout's terminal lines, every figure with its unit (`units`: seconds measured or
modelled by a named step model, or decode steps): what the numbers are, a line per arm (with
the acceptance and its cost: tokens, drafted tokens and verify tokens per step), extrapolation
warnings, the prediction error of measured runs, the data-parallel instances, the preset's
settings as the run had them (a value an option changed beside the preset's), its prediction
beside the published figures and the sensitivity table."""

from __future__ import annotations

from typing import Any

from samspec_bench.suites.rollout.heldout import split_lines
from samspec_bench.suites.rollout.length_order import drafting_line
from samspec_bench.suites.rollout.presets import comparison_lines
from samspec_bench.suites.rollout.sensitivity import table_lines
from samspec_bench.suites.rollout.spread import fmt, mapped, single
from samspec_bench.suites.rollout.turns import tool_line
from samspec_bench.suites.rollout.units import fmt_t, step_key, t, unit_tag
from samspec_bench.trace_formats.validation import validation_line


def _f(x, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def cost_text(m: dict[str, Any]) -> str:
    """'tokens/step 1.52, drafted/step 2.40, verify tokens/emitted 2.23' of an arm."""
    return (f"tokens/step {_f(m.get('tokens_per_step'), '.2f')}, drafted/step {_f(m.get('drafted_per_step'), '.2f')}, "
            f"verify tokens/emitted {_f(m.get('verify_tokens_per_token'), '.2f')}")


def fig(m: dict[str, Any], key: str) -> dict[str, Any] | None:
    """Figure `key` (its seconds name) of an arm as a spread over the draws, in whichever units
    the arm holds it; a one-draw spread of its own value when it has no `spread`."""
    sp = m.get("spread") or {}
    got = sp.get(key, sp.get(step_key(key)))
    if got is not None:
        return got
    v = t(m, key)
    return single(v) if v is not None else None


def arm_line(lbl: str, m: dict[str, Any], units: str, measured: bool) -> str:
    """An arm's times (or decode steps) and speedups, each median [min, max] over the draws."""
    tag = unit_tag(units, measured)
    if units == "steps":
        line = (f"{lbl:24s} total {fmt(fig(m, 'total_s'), '.0f')} steps (head {fmt(fig(m, 'head_s'), '.0f')}, tail "
                f"{fmt(fig(m, 'tail_s'), '.0f')}) decode steps, not time")
        if lbl != "off":
            line += (f"  step-count ratio overall {fmt(fig(m, 'speedup_overall'))} tail {fmt(fig(m, 'speedup_tail'))} "
                     "(not time)")
    else:
        line = (f"{lbl:24s} total {fmt(fig(m, 'total_s'))} s (head {fmt(fig(m, 'head_s'))}, tail "
                f"{fmt(fig(m, 'tail_s'))}) {tag}")
        if measured and m.get("simulated"):
            e = m.get("sim_error") or {}
            line += (f"; simulated {m['simulated']['total_s']:.3f} s ({_f(e.get('total'), '+.1%')}), "
                     f"tail {m['simulated']['tail_s']:.3f} s ({_f(e.get('tail'), '+.1%')})")
        if m.get("idle_s"):   # the engine waited for work: tool calls between turns, a shared queue
            line += f", idle {fmt(fig(m, 'idle_s'))} s with nothing to run"
        if lbl != "off":
            line += f"  speedup overall {fmt(fig(m, 'speedup_overall'))} tail {fmt(fig(m, 'speedup_tail'))} ({tag})"
    return line + f"  [{cost_text(m)}]"


def draws_line(summary: dict[str, Any]) -> list[str]:
    """What the medians are over (simulated runs with several draws)."""
    d = (summary.get("workload") or {}).get("draws") or {}
    if d.get("n", 1) <= 1:
        return []
    return [f"figures: median [min, max] over {d['n']} draws ({d['varies']}); per-instance lines, step tables and "
            f"figures: the draw with seed {d['shown_seed']}"]


def source_lines(summary: dict[str, Any]) -> list[str]:
    """How a simulated run's history and group draft sources were modelled (none without them)."""
    w = summary.get("workload") or {}
    hist = w.get("history") if isinstance(w.get("history"), dict) else {}
    return ([f"history source (modelled): {hist['steps']}"] if hist.get("steps") else []) + \
        ([f"group source (modelled): {w['group_profiles']}"] if w.get("group_profiles") else [])


def workload_lines(summary: dict[str, Any]) -> list[str]:
    """What the simulated requests replay: how many, from how many distinct trace responses, and
    what the traces held that no request replays or that was cut (none for a measured run); the
    verl validation generations among them and what was done with them."""
    w = summary.get("workload") or {}
    if "distinct_responses" not in w or "trace_responses" not in w:   # a measured run: only what it raised
        return [f"workload: {raised_text(w)}"] if w.get("requests_raised_to_min_len") else []
    reqs, distinct = w["requests"], w["distinct_responses"]
    parts = [f"workload: {reqs} requests ({w['prompts']} prompts x {w['group_size']}) replaying {distinct} distinct "
             f"of the traces' {w['trace_responses']} responses"]
    if reqs > distinct:
        parts.append(f"{reqs - distinct} requests repeat a response (more asked for than the traces hold)")
    if w.get("unused_responses"):
        parts.append(f"{w['unused_responses']} responses unused (--prompts / --group-size take fewer)")
    if w.get("empty_responses"):
        parts.append(f"{w['empty_responses']} empty responses skipped")
    if w.get("cut_at_max_response_len"):
        parts.append(f"{w['cut_at_max_response_len']} trace responses cut at --max-response-len {w['max_response_len']}")
    at_max = w.get("requests_at_max_response_len")
    if at_max:
        parts.append(f"{at_max} requests ({100 * at_max / max(reqs, 1):.1f} %) run to --max-response-len "
                     f"{w['max_response_len']} (lengths {w.get('lengths', '?')})")
    if w.get("requests_raised_to_min_len"):
        parts.append(raised_text(w))
    # verl validation generations: left out, replayed without steps or as steps (--history-includes-validation)
    extra = [x for x in (validation_line(w.get("validation")), tool_line(w.get("tool_output"))) if x]
    return ["; ".join(parts)] + extra


def raised_text(w: dict[str, Any]) -> str:
    """The requests whose drawn length fell below the shortest response the rollout runs (min_len)."""
    raised, reqs = w["requests_raised_to_min_len"], w.get("requests") or 1
    return (f"{raised} requests ({100 * raised / reqs:.1f} %) drawn shorter than {w.get('min_len')} tokens run "
            f"{w.get('min_len')} (the shortest response generated or simulated)")


def length_share_lines(summary: dict[str, Any]) -> list[str]:
    """How alike a prompt's response lengths are: in the traces (a replay) and as drawn
    (--length-group-share, length_share.py); a measured run's only when it draws them alike."""
    w = summary.get("workload") or {}
    used = w.get("length_group_share")
    drawn = (f"drawn with {used:.2f} (--length-group-share)" if isinstance(used, (int, float))
             else "the traces' own lengths replayed")
    if "length_group_share_traces" not in w:
        return [f"response lengths {drawn}: a prompt's responses share that much of their log-length variance"] \
            if isinstance(used, (int, float)) and used > 0 else []
    got, basis = w["length_group_share_traces"], w.get("length_group_share_traces_basis") or {}
    if got is None:
        return [f"responses of one prompt: too few trace groups with 2 or more responses to measure how alike their "
                f"lengths are; {drawn}"]
    return [f"responses of one prompt share {got:.2f} of their log-length variance in the traces "
            f"({basis.get('groups')} groups, {basis.get('responses')} responses, in {basis.get('unit', 'tokens')}); "
            f"{drawn}"]


def length_order_lines(summary: dict[str, Any]) -> list[str]:
    """How the best arm's drafting changes with a recorded response's length (length_order.py), on
    a replay with drawn lengths, where the draw decides which responses run long."""
    w = summary.get("workload") or {}
    if w.get("length_rank_share") is None:
        return []
    by_arm = w.get("drafting_by_length") or {}
    best = summary.get("best_setting")
    line = drafting_line(by_arm, best if best in by_arm else next(iter(by_arm), None), w["length_rank_share"])
    return [line] if line else []


def kv_lines(summary: dict[str, Any]) -> list[str]:
    """The simulated KV cache: capacity per instance and where it came from, a refusal note, and
    each arm's preemptions (median [min, max] over the draws)."""
    arms = {lbl: m for lbl, m in summary["arms"].items() if isinstance(m.get("kv"), dict)}
    if not arms:
        return []
    kv = next(iter(arms.values()))["kv"]
    cap = kv.get("capacity_tokens")
    out = ["KV cache (simulated, per instance): " + (f"{cap:,} tokens" if cap is not None else "unlimited")
           + f", from {kv.get('source') or '?'}"]
    if kv.get("note"):
        out.append(f"  {kv['note']}")
    out.append("  preemptions: " + "; ".join(
        f"{lbl} {fmt(m['kv'].get('preemptions_spread') or single(m['kv'].get('preemptions')), '.0f')}"
        for lbl, m in arms.items()))
    return out


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """Every line `rollout` prints before the results path."""
    units, measured = summary["units"], summary["measured"]
    lines = [summary["time_basis"]] + [f"note: {n}" for n in summary.get("notes") or []]
    lines += draws_line(summary) + workload_lines(summary) + length_share_lines(summary)
    lines += length_order_lines(summary)
    lines += source_lines(summary)
    lines += [arm_line(lbl, m, units, measured) for lbl, m in summary["arms"].items()]
    lines += kv_lines(summary)
    for lbl, e in (summary.get("extrapolation") or {}).items():
        lines.append(f"warning: {lbl}: the step model extrapolates: " + ", ".join(
            f"{f} up to {v['max']:g} (measured up to {v['valid_max']:g}; {100 * v['steps_beyond']:.0f} % of steps)"
            if isinstance(v, dict) else f"{f} {v}" for f, v in e.items()))
    pe = summary.get("prediction_error")
    if pe:
        lines.append(f"simulation vs measured (each arm priced by the engine's own profile): worst |error| total "
                     f"{_f(pe.get('max_abs_total'), '.1%')}, tail {_f(pe.get('max_abs_tail'), '.1%')} "
                     f"(goal {pe['goal']:.0%}: {'met' if pe.get('within_goal') else 'not met'})")
    lines.append(f"best setting ({summary['best_setting_by']}): {summary['best_setting']}"
                 + (" - no faster than off here: keep speculation off" if summary.get("best_setting_beats_off") is False
                    else ""))
    return lines + split_lines(summary.get("split")) + dp_lines(summary) + preset_lines(summary)


def dp_lines(summary: dict[str, Any]) -> list[str]:
    """Per-instance lines of a sharded run (--dp N), in the run's units: each arm's figures over
    the draws, its instances those of the shown draw."""
    dp = summary["workload"].get("dp")
    if not dp:
        return []
    units = summary["units"]
    tag = unit_tag(units, summary["measured"])
    ratio = "step-count ratio" if units == "steps" else "speedup"
    spec = ".0f" if units == "steps" else ".3f"
    unit = " steps" if units == "steps" else " s"
    shown = ((summary["workload"].get("draws") or {}).get("shown_seed"))
    # the rule's words hold for counts that divide; another is said beside it (suites/rollout/dp_rule.py)
    where = "where the count divides, " if dp.get("uneven") else ""
    out = [f"data-parallel: {dp['instances']} instances, rule {dp['rule']} ({where}{dp['rule_text']}); figures {tag}"]
    if dp.get("uneven"):
        out.append(f"  uneven: {dp['uneven']}")
    for lbl, m in summary["arms"].items():
        d = m["dp"]
        share = mapped(fig(m, "tail_share"), lambda x: 100.0 * x) or single(100 * (d["tail_share_pooled"] or 0))
        out.append(f"  {lbl}: rollout {fmt(fig(m, 'total_s'), spec, unit)}, mean instance "
                   f"{fmt(fig(m, 'mean_instance_s') or single(t(d, 'mean_instance_makespan_s')), spec, unit)}, "
                   f"tail share {fmt(share, '.1f', ' %')} pooled"
                   + (f"; {ratio} overall {fmt(fig(m, 'speedup_overall'))} mean-instance "
                      f"{fmt(fig(m, 'speedup_mean_instance'))} tail {fmt(fig(m, 'speedup_tail'))}" if lbl != "off"
                      else ""))
        out.append(f"    draw{'' if shown is None else f' with seed {shown}'}: slowest instance "
                   f"{d['slowest_instance']}, idle share {100 * (d['idle_share'] or 0):.1f} %")
        if m.get("divided"):   # one queue: an instance's requests are those it finished
            v = m["divided"]
            out.append(f"    divided rollout: {v['chunks_released']:,} chunks of {v['chunk_tokens']:,} tokens left an "
                       f"instance, {v['moved_between_instances']:,} went on on another, {v['kv_tokens_moved']:,} KV "
                       f"tokens through the shared pool (assumed: {v['assumed']}); an instance's requests below are "
                       "those it finished")
        for r in m["instances"]:
            so = t(r, "speedup_overall")
            out.append(f"    instance {r['instance']}: {r['requests']} requests, total {fmt_t(r, 'total_s', units)}, "
                       f"tail {fmt_t(r, 'tail_s', units)} ({100 * (r['tail_share'] or 0):.1f} %)"
                       + (f", {ratio} {so:.3f} (gain {100 * (so - 1):+.2f} %) tail {_f(t(r, 'speedup_tail'))}"
                          if so else "") + (f", {r['preemptions']} preempted" if r.get("preemptions") else "")
                       + (f", idle {fmt_t(r, 'idle_s', units)} with nothing to run" if r.get("idle_s") else ""))
    return out


# settings a preset fills that are no part of the published run (assumptions, how it is modelled)
UNPUBLISHED = ("length_dist", "step_model", "sources", "dp_shard")


def option(name: str) -> str:
    """The command-line option that sets a RolloutConfig field a preset fills."""
    return {"ks": "-k", "thresholds": "--spec-threshold", "strategies": "--strategy"}.get(
        name, "--" + name.replace("_", "-"))


def _text(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


class _Overrides:
    """The preset's settings that options changed (summary["preset"]["overridden"], Preset.overridden):
    each shown as the run had it with "(preset: X)" beside it; those shown are remembered."""

    def __init__(self, pre: dict[str, Any]):
        self.over = pre.get("overridden") or {}
        self.shown: set[str] = set()

    def ran(self, name: str, default: Any) -> Any:
        return self.over[name]["ran"] if name in self.over else default

    def show(self, name: str, default: Any = None) -> str:
        """Setting `name` as it ran ('default': the preset's, where no option changed it)."""
        self.shown.add(name)
        if name not in self.over:
            return _text(default)
        return f"{_text(self.over[name]['ran'])} (preset: {_text(self.over[name]['preset'])})"

    def left(self) -> list[str]:
        return [name for name in self.over if name not in self.shown]


def header_line(pre: dict[str, Any], over: _Overrides) -> str:
    """The preset's setting as the run had it: a value an option changed shown with the preset's."""
    dp = over.ran("dp", pre["dp"])
    devices = f"TP {pre['tp']} x DP {dp} = {pre['tp'] * dp} devices"
    if "dp" in over.over:
        over.shown.add("dp")
        devices += f" (preset: DP {pre['dp']} = {pre['dies']} devices)"
    strategies = over.ran("strategies", pre.get("strategies") or [])
    published = (f"strategies {', '.join(pre['strategies'])}" if pre.get("strategies") else
                 f"threshold {pre['threshold']}, k {pre['k']}")
    drafting = []
    if strategies:
        over.shown.add("strategies")
        drafting.append(f"strategies {', '.join(strategies)}")
    arms = over.ran("arms", ["off"] if pre.get("strategies") else ["off", "threshold"])   # Preset.config_values
    if not strategies or "threshold" in arms:
        drafting.append(f"threshold {over.show('thresholds', pre['threshold'])}, k {over.show('ks', pre['k'])}")
    if "strategies" in over.over:
        over.shown.add("strategies")
        drafting[0] += f" (preset: {published})"
    return (f"preset {pre['name']}: {over.show('model', pre['model'])} on {pre['hardware']} ({pre['mode']}), "
            f"{devices}; {over.show('prompts', pre['prompts'])} prompts x {over.show('group_size', pre['group_size'])}, "
            f"max_num_seqs {over.show('max_num_seqs', pre['max_num_seqs'])}, {'; '.join(drafting)}, max response "
            f"{over.show('max_response_len', pre['max_response_len'])}")


def preset_lines(summary: dict[str, Any]) -> list[str]:
    """The preset's inputs, its prediction beside the published figures, what the prediction
    rests on and the sensitivity table."""
    out = []
    pre = summary.get("preset")
    sens = summary.get("sensitivity")
    if pre:
        inp = pre["inputs"]
        kv = kv_lines(summary)
        over = _Overrides(pre)
        out += [header_line(pre, over), f"  source: {pre['source']}"] + [f"  note: {n}" for n in pre.get("notes") or []]
        out += [f"  inputs: lengths {over.show('length_dist', inp['length_dist'])} ({inp['length_evidence']})",
                f"          acceptance from {inp['traces']} (sources {over.show('sources', inp['sources'])}); "
                f"sharding {over.show('dp_shard', inp['dp_shard'])}",
                f"          {kv[0] if kv else 'KV cache ' + str(inp['kv_capacity_tokens'])}",
                f"          step model {inp['step_model']} (MODELLED times: {inp.get('priced_by_kind') or '?'})"]
        over.shown.add("step_model")   # said by the warning below
        if over.left():
            out.append("  options over the preset: " + ", ".join(f"{option(name)} {over.show(name)}" for name in over.left()))
        if pre.get("step_model") and inp.get("step_model") and inp["step_model"] != pre["step_model"]:
            # --step-model replaced the preset's: the published figures were measured on the preset's setting
            out.append(f"  WARNING: priced by {inp['step_model']}, not the preset's {pre['step_model']}: the comparison "
                       "below is with another model or hardware than the published run")
        if pre["comparison"]:
            changed = [name for name in over.over if name not in UNPUBLISHED]
            if changed:   # the published figures are of the preset's setting, not of the changed one
                out.append(f"  note: {', '.join(map(option, changed))} changed from the preset's: the published figures "
                           "below were measured with the preset's settings")
            out += comparison_lines(pre["comparison"])
        ro = (sens or {}).get("rests_on") or {}
        out.append(f"  the prediction rests on: {ro['tail_share']} (the tail share) and {ro['gain']} (the gain), the "
                   "assumptions whose values move them most (table below)" if ro.get("tail_share") else
                   "  what the prediction rests on: run with --sensitivity")
    if sens:
        out += table_lines(sens)
    return out
