"""The three answers a report opens with: 1. is SAM lossless on this stack (kernels from
op-equivalence, sampler audits, paired accuracy; each checked, failed or NOT checked, and why),
2. how much does it accept (tokens and drafted tokens per target step, default and best setting),
3. how much rollout time does it save (overall and tail; measured or modelled, by which step
model; step counts never shown as time). `answer_sets(report)` makes them, with provenance; the
HTML and Markdown renderers only lay them out, so both say the same thing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from samspec_bench.reports.fmt import accept_setting as _setting, fmt, pct, pts, x2
from samspec_bench.reports.metadata import model_of
from samspec_bench.reports.model import Report, Run
from samspec_bench.reports.pricing import config_line, extrapolated, extrapolation, hardware, pricing
from samspec_bench.reports.strategy_answer import best_strategy_text
from samspec_bench.reports.values import is_number, number as _num

# Statuses, for the badge colour: yes (green), no (red), partial (amber), unknown (grey).
YES, NO, PARTIAL, UNKNOWN = "yes", "no", "partial", "unknown"
# The accept suite's own defaults (its click options: --drafter sam, -k 3, --sources own):
# the setting a user gets without choosing. tests/reports/test_report_answers.py checks they still match.
DEFAULT_ACCEPT = {"drafter": "sam", "k": 3, "sources": "own"}
# Accuracy "no drop found" needs a check that could see a drop this large (80 % power): a few
# points, the size of a real regression; with fewer problems the check is inconclusive.
ACCURACY_MDD_BAR = 0.05
CAVEATS = {"kernels": "kernels equal only up to float rounding", "accuracy": "accuracy on some tasks only"}
SAM_DRAFTERS = ("sam", "sam-python", "sam-public", "sam-fixed")   # one algorithm (sam-fixed: SAM-Decoding's drafts)


@dataclass
class Check:
    """One line of an answer: a check (kernels, sampler, accuracy) or a setting; `ran`: False
    for a check with no run at all (NOT checked), as against one that ran and was inconclusive."""
    name: str
    status: str
    badge: str
    text: str
    source: str = ""
    ran: bool = True


@dataclass
class Answer:
    key: str                 # lossless | accept | rollout
    question: str
    status: str
    badge: str
    text: str
    checks: list[Check] = field(default_factory=list)
    source: str = ""


@dataclass
class AnswerSet:
    title: str
    answers: list[Answer]
    note: str = ""

    def data(self) -> dict:
        return asdict(self)


def _newest(runs: list[Run]) -> Run:
    """The newest run (by `created`; the later one given on a tie)."""
    return max(enumerate(runs), key=lambda ir: (str(ir[1].result.get("created") or ""), ir[0]))[1]


def _src(run: Run, *parts: Any) -> str:
    return "; ".join([f"{run.suite} run {run.name}"] + [str(p) for p in parts if p not in (None, "", [])])


def _not_checked(suite: str, state: dict | None, why_run: str) -> tuple[str, str]:
    """(badge, sentence) of a suite that has no run here: skipped / failed per run_state.json, or absent."""
    st = ((state or {}).get("steps") or {}).get(suite)
    if st is None:
        where = "this run (not among its --steps)" if state is not None else "the report's inputs"
        return "not checked", f"NOT checked: no {suite} run in {where}; {why_run}."
    status = st.get("status") or "unknown"
    reason = st.get("reason") or "; ".join(st.get("notes") or []) or "no reason recorded"
    what = {"failed": "failed", "skipped": "was skipped"}.get(status, f"is '{status}' with no result")
    return "failed" if status == "failed" else "not checked", f"NOT checked: the {suite} step {what} ({reason})."


# --- 1. lossless -------------------------------------------------------------------------------------------

def _is_control(key: str) -> bool:
    return "batch-invariant" in key or "fixed-order" in key


def kernels_check(run: Run) -> Check:
    """Decode vs verify: the op-equivalence rows (controls left out): worst |Δ logprob|, the
    share of exactly equal logprobs, argmax flips, greedy outputs; judged by the run's
    --tolerance gate when it has one."""
    r = run.result
    rows = [v for k, v in ((r.get("metrics") or {}).get("pairs") or {}).items()
            if isinstance(v, dict) and not _is_control(k)]
    cfg = r.get("config") or {}
    names = sorted({f"{v.get('level', '?')} {v.get('pair', '?')}" for v in rows})
    dtypes = sorted({str(v.get("dtype")) for v in rows if v.get("dtype")})
    what = ", ".join(names) + (f" ({', '.join(dtypes)})" if dtypes else "")
    model = cfg.get("model")
    source = _src(run, f"pairs {what}" if rows else None, f"k={cfg['k']}" if cfg.get("k") is not None else None,
                  f"model {model} on the {cfg.get('engine', 'reference')} engine ({cfg.get('device', 'cpu')})"
                  if model else "kernel level only (no --model)")
    if not rows:
        return Check("kernels", UNKNOWN, "no rows", "The op-equivalence run compared no decode/verify pair.", source)
    worst = lambda key: max((x for x in (_num(v.get(key)) for v in rows) if x is not None), default=None)
    dmax, flips = worst("logprob_diff_max"), worst("argmax_flip_rate")
    npos = sum(_num(v.get("positions")) or 0 for v in rows)
    zero = sum((_num(v.get("exact_zero_fraction")) or 0) * (_num(v.get("positions")) or 0) for v in rows)
    greedy = [g for g in (r.get("tables") or {}).get("greedy") or [] if isinstance(g, dict)]
    same = sum(1 for g in greedy if g.get("identical"))
    nums = (f"max |Δ logprob| {fmt(dmax)}" + (f", {pct(zero / npos)} of {int(npos):,} logprobs exactly equal"
                                              if npos else "")
            + (f", argmax flips {pct(flips)}" if flips else ", no argmax flip" if flips == 0 else "")
            + (f", greedy outputs identical with/without SAM {same}/{len(greedy)}" if greedy else ""))
    if bad := int(sum(_num(v.get("logprob_diff_non_finite")) or 0 for v in rows)):   # the max leaves them out
        return Check("kernels", NO, "not finite", f"{bad:,} logprob difference(s) are not finite (NaN or inf): {nums}.", source)
    gate = (r.get("metrics") or {}).get("gate")
    if isinstance(gate, dict) and isinstance(gate.get("passed"), bool):
        lim = f"{gate.get('metric')} <= {fmt(gate.get('tolerance'))}"
        failed = ", ".join(str(f.get("row")) for f in gate.get("failed") or [])
        return Check("kernels", YES, "within tolerance", f"Decode and verify paths agree within {lim}: {nums}.", source) \
            if gate["passed"] else Check("kernels", NO, "over tolerance", f"Over {lim} on {failed}: {nums}.", source)
    if (flips or 0) > 0 or same < len(greedy):
        return Check("kernels", NO, "differs", f"Decode and verify paths pick different tokens: {nums}.", source)
    if dmax == 0:
        return Check("kernels", YES, "bit-exact", f"Decode and verify paths are bit-exact: {nums}.", source)
    return Check("kernels", PARTIAL, "rounding only",
                 f"Same tokens, logprobs equal up to float rounding: {nums} (no --tolerance set, so not judged).",
                 source)


def sampler_check(run: Run) -> Check:
    """The sampler audits: each audited sampler's verdict (negative controls apart), the
    vocabularies and trials of the battery."""
    r = run.result
    audits = [a for a in r.get("audits") or [] if isinstance(a, dict)]
    if not audits:   # older results: the verdicts only
        audits = [{"name": k, "verdict": v, "negative_control": k.endswith("-demo")}
                  for k, v in ((r.get("metrics") or {}).get("verdicts") or {}).items()]
    real = [a for a in audits if not (a.get("negative_control") or str(a.get("name", "")).endswith("-demo"))]
    controls = [a for a in audits if a not in real]
    ran = [a for a in real if a.get("verdict") not in ("SKIPPED", None)]
    skipped = [a for a in real if a.get("verdict") == "SKIPPED"]
    cfg = r.get("config") or {}
    battery = [b for b in cfg.get("battery") or [] if isinstance(b, dict)]
    vocabs = [b["vocab"] for b in battery if is_number(b.get("vocab"))]
    trials = [b["trials"] for b in battery if is_number(b.get("trials"))]
    span = lambda xs: f"{min(xs):,}" if min(xs) == max(xs) else f"{min(xs):,}–{max(xs):,}"
    source = _src(run, f"vocabularies {span(vocabs)}" if vocabs else None,
                  f"{span(trials)} trials per case" if trials else None,
                  f"α {fmt(cfg.get('alpha'))} per sampler" if cfg.get("alpha") is not None else None,
                  f"device {cfg.get('device')}" if cfg.get("device") else None)
    listed = ", ".join(f"{a.get('name')} {a.get('verdict')}" + (f" ({a['tests']} tests)" if a.get("tests") else "")
                       for a in ran)
    extra = ""
    if skipped:
        extra += " Not audited: " + "; ".join(f"{a.get('name')} ({str(a.get('reason') or 'skipped').split(' (')[0]})"
                                              for a in skipped) + "."
    power = [a for a in controls if a.get("verdict") not in ("SKIPPED", None)]
    if power:
        flagged = all(a.get("verdict") == "LOSSY" for a in power)
        extra += (" Negative control " + ", ".join(f"{a.get('name')} {a.get('verdict')}" for a in power)
                  + (" (the battery has the power to catch a lossy sampler)." if flagged
                     else ": NOT flagged, so the battery could not tell lossy from exact here."))
    else:
        flagged = None
    if not ran:
        return Check("sampler", UNKNOWN, "not checked", "No sampler was audited." + extra, source)
    verdicts = {a.get("verdict") for a in ran}
    if "LOSSY" in verdicts:
        return Check("sampler", NO, "lossy", f"A sampler is lossy: {listed}.{extra}", source)
    if verdicts != {"EXACT"} or flagged is False:
        return Check("sampler", UNKNOWN, "inconclusive", f"Audits: {listed}.{extra}", source)
    return Check("sampler", YES, "exact", f"Output distribution exact: {listed}.{extra}", source)


def accuracy_check(run: Run) -> Check:
    """pass@1 without and with SAM per task, the paired difference's interval and verdict."""
    r = run.result
    cfg = r.get("config") or {}
    tasks = {k: v for k, v in (r.get("metrics") or {}).items() if isinstance(v, dict) and "diff" in v}
    eng = r.get("engine") if isinstance(r.get("engine"), dict) else {}
    source = _src(run, f"model {cfg.get('model') or model_of(r)} on the {cfg.get('engine') or eng.get('name') or '?'} "
                       f"engine", f"{cfg.get('drafter', 'sam')} k={cfg.get('num_spec_tokens')}",
                  f"temperature {fmt(cfg.get('temperature'))}" if cfg.get("temperature") is not None else None,
                  f"max {cfg['max_gen_toks']} tokens" if cfg.get("max_gen_toks") else None)
    if not tasks:
        return Check("accuracy", UNKNOWN, "no tasks", "The accuracy run scored no task.", source)
    parts, statuses = [], []
    for task, t in tasks.items():
        off, on = _num(t.get("pass@1_off", t.get("acc_off"))), _num(t.get("pass@1_on", t.get("acc_on")))
        d, p, mdd = _num(t.get("diff")), _num(t.get("p_value")), _num(t.get("mdd"))
        ci = t.get("ci95") if isinstance(t.get("ci95"), list) and len(t["ci95"]) == 2 else None
        alpha = _num(t.get("alpha")) or 0.05
        text = (f"{task} (n={t.get('n')}): pass@1 {pts(off)} % off vs {pts(on)} % on, difference {pts(d, '+')} points"
                + (f" [95 % CI {pts(_num(ci[0]), '+')}, {pts(_num(ci[1]), '+')}]" if ci else ""))
        if d is None or p is None:
            statuses.append(UNKNOWN)
            text += ", nothing to compare"
        elif p < alpha:
            statuses.append(NO)
            text += f", a detectable difference (p = {fmt(p)})"
        elif mdd is None or not mdd < 1.0:
            statuses.append(UNKNOWN)
            text += f", too few problems to detect any difference (p = {fmt(p)})"
        else:
            statuses.append(YES if mdd <= ACCURACY_MDD_BAR else UNKNOWN)
            text += (f", no detectable difference (p = {fmt(p)}); the smallest detectable is {pts(mdd)} points"
                     + ("" if mdd <= ACCURACY_MDD_BAR else f": too few problems to show a drop of "
                                                           f"{pts(ACCURACY_MDD_BAR)} points"))
        parts.append(text)
    st = NO if NO in statuses else YES if all(s == YES for s in statuses) else PARTIAL if YES in statuses else UNKNOWN
    badge = {NO: "differs", YES: "no drop found", PARTIAL: "partly", UNKNOWN: "too few problems"}[st]
    return Check("accuracy", st, badge, "; ".join(parts) + ".", source)


LOSSLESS_CHECKS = (("op-equivalence", "kernels", kernels_check,
                    "run `samspec-bench op-equivalence --model MODEL` to compare the decode and verify paths"),
                   ("sampler", "sampler", sampler_check, "run `samspec-bench sampler` to audit the rejection sampler"),
                   ("accuracy", "accuracy", accuracy_check,
                    "run `samspec-bench accuracy --data-dir DATA` for pass@1 with SAM off vs on"))


def _and(names: list[str]) -> str:
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]


def lossless(by_suite: dict[str, Run], state: dict | None) -> Answer:
    checks = []
    for suite, name, fn, how in LOSSLESS_CHECKS:
        run = by_suite.get(suite)
        if run is None:
            checks.append(Check(name, UNKNOWN, *_not_checked(suite, state, how), ran=False))
        else:
            checks.append(fn(run))
    failed = [c.name for c in checks if c.status == NO]
    done = [c.name for c in checks if c.status in (YES, PARTIAL)]
    missing = [c.name for c in checks if not c.ran]
    vague = [c.name for c in checks if c.ran and c.status == UNKNOWN]
    if failed:
        status, badge = NO, "no"
        text = f"No: a loss was found by the {' and '.join(failed)} check{'s' if len(failed) > 1 else ''}."
    elif all(c.status == YES for c in checks):
        status, badge = YES, "yes"
        text = "Yes: kernels, sampler and accuracy were all checked and no loss was found."
    elif done:
        status, badge = PARTIAL, "partly checked" if missing or vague else "yes, with caveats"
        caveats = [CAVEATS[c.name] for c in checks if c.status == PARTIAL and c.name in CAVEATS]
        text = (f"No loss found by {_and(done)}" + (f"; {_and(vague)} inconclusive" if vague else "")
                + (f"; {_and(missing)} NOT checked" if missing else "")
                + (f" ({'; '.join(caveats)})" if caveats else "") + ".")
    else:
        status, badge = UNKNOWN, "not checked" if missing else "inconclusive"
        text = "Unknown: no check gave an answer" + (f" ({_and(missing)} NOT checked)." if missing else ".")
    return Answer("lossless", "Is SAM lossless on this stack?", status, badge, text, checks)


# --- 2. acceptance -----------------------------------------------------------------------------------------

def _held_out_best(result: dict) -> Check | None:
    """The configuration an `accept --dev-split` run chose on its dev groups, its held-out figures (or None)."""
    split = result.get("split") if isinstance(result.get("split"), dict) else {}
    label = split.get("best")
    m, held = (result.get("metrics") or {}).get(label), (split.get("heldout") or {}).get(label)
    if not (isinstance(m, dict) and isinstance(held, dict) and is_number(held.get("tokens_per_step"))):
        return None
    groups = split.get("groups") or {}
    return Check("best (held out)", YES, f"{x2(held['tokens_per_step'])} tok/step",
                 f"{label}, chosen on {groups.get('dev', '?')} dev trace groups by {split.get('chosen_by', '?')}: "
                 f"{x2(held['tokens_per_step'])} tokens per target step, {x2(held.get('drafted_per_step'))} drafted "
                 f"per step on the {groups.get('heldout', '?')} held-out groups.")


def _per_step(m: dict) -> tuple[float | None, float | None]:
    """(tokens per target step, drafted tokens per target step) of one accept configuration."""
    steps, drafted = _num((m.get("counts") or {}).get("steps")), _num((m.get("counts") or {}).get("drafted"))
    return _num(m.get("tokens_per_step")), (drafted / steps if steps and drafted is not None else None)


def acceptance(by_suite: dict[str, Run], state: dict | None) -> Answer:
    q = "How much does it accept?"
    run = by_suite.get("accept")
    if run is None:
        badge, text = _not_checked("accept", state, "run `samspec-bench accept` on your traces")
        return Answer("accept", q, UNKNOWN, badge, text)
    r = run.result
    every = [m for m in (r.get("metrics") or {}).values() if isinstance(m, dict)]
    rows = [m for m in every if is_number(m.get("tokens_per_step"))]
    sam = [m for m in rows if m.get("drafter") in SAM_DRAFTERS]
    n_lost = sum(1 for m in every if m.get("drafter") in SAM_DRAFTERS) - len(sam)   # NaN / Infinity: null
    cfg, inputs = r.get("config") or {}, r.get("inputs") or {}
    eng = r.get("engine") if isinstance(r.get("engine"), dict) else {}
    traces = [Path(str(t.get("file") if isinstance(t, dict) else t)).name for t in inputs.get("traces") or []] \
        or [Path(str(t)).name for t in cfg.get("traces") or []]
    how = ("exact greedy acceptance replayed from the traces (no model)" if eng.get("name", cfg.get("engine")) == "replay"
           else f"model {cfg.get('model')} generating on the {cfg.get('engine')} engine")
    source = _src(run, f"traces {', '.join(traces)}" if traces else None,
                  f"{inputs['responses']:,} responses, {inputs.get('response_tokens', 0):,} tokens"
                  if is_number(inputs.get("responses")) else None,
                  cfg.get("limit_groups") and f"--limit-groups {cfg['limit_groups']}"
                  + (f" ({inputs['limit'].get('rule')})" if isinstance(inputs.get("limit"), dict) else ""), how)
    lost = f"{n_lost} SAM configuration(s) without a finite tokens_per_step in result.json (NaN / Infinity: null)"
    if not sam:
        return Answer("accept", q, UNKNOWN, "unknown" if n_lost else "no SAM run", f"{lost}; nothing to answer with."
                      if n_lost else "The accept run measured no SAM drafter.", [], source)
    default = next((m for m in sam if m.get("drafter") == DEFAULT_ACCEPT["drafter"] and m.get("k") == DEFAULT_ACCEPT["k"]
                    and str(m.get("sources")) == DEFAULT_ACCEPT["sources"]), None)
    best = max(sam, key=lambda m: m["tokens_per_step"])
    held = _held_out_best(r)
    checks = []
    for label, m in (("default", default), ("best", best)):
        if m is None or (label == "best" and (m is default or held is not None)):
            continue
        tps, dps = _per_step(m)
        rate = pct(m["acceptance_rate"]) if is_number(m.get("acceptance_rate")) else "–"
        checks.append(Check(label, YES, f"{x2(tps)} tok/step", f"{_setting(m)}: {x2(tps)} tokens per target step, "
                                                                f"{x2(dps)} drafted per step, {rate} of drafted accepted."
                                                                + (" Best of this run on the same responses (in-sample): "
                                                                   "accept --dev-split F reports a held-out figure."
                                                                   if label == "best" else "")))
    if held is not None:
        checks.append(held)
    others = [m for m in rows if m.get("drafter") not in SAM_DRAFTERS]
    if others:
        o = max(others, key=lambda m: m["tokens_per_step"])
        checks.append(Check("other drafter", UNKNOWN, f"{x2(o['tokens_per_step'])} tok/step",
                            f"for comparison, the best other: {_setting(o)}, {x2(o['tokens_per_step'])} tokens per step."))
    tps, dps = _per_step(best)
    if default is None:
        head = f"{x2(tps)} tokens per target step at best ({_setting(best)}; {x2(dps)} drafted per step)"
    elif default is best:
        head = f"{x2(tps)} tokens per target step with the default setting, also the best ({x2(dps)} drafted per step)"
    else:
        head = (f"{x2(_per_step(default)[0])} tokens per target step with the default setting, {x2(tps)} at best "
                f"({_setting(best)}; {x2(dps)} drafted per step)")
    if held is not None:
        head += f" in this run; chosen on dev trace groups and measured on held-out ones: {held.text.rstrip('.')}"
    head += ". 1.00 = no gain; not a time speedup (a verify step costs more than a decode step)." + \
        (f" Left out: {lost}." if n_lost else "")
    return Answer("accept", q, YES, f"{x2(tps)} tok/step", head, checks, source)


# --- 3. rollout time ---------------------------------------------------------------------------------------

def _arm_line(a: dict, base: dict, units: str) -> tuple[str, float | None, float | None]:
    """(sentence, overall ratio, tail ratio) of one arm against the off baseline; with step
    counts the ratios are recomputed from the counts (whatever the result called them)."""
    so, st = _num(a.get("speedup_overall")), _num(a.get("speedup_tail"))
    bp = a.get("baseline_phases") or {}
    dp = a.get("dp") or {}
    pooled = "tail_s_pooled" in dp or "tail_steps_pooled" in dp   # sharded: the tail ratio is of pooled tails
    if units == "s":
        tot, btot = _num(a.get("total_s")), _num(bp.get("total_s", base.get("total_s")))
        tail, btail = ((_num(dp.get("tail_s_pooled")), _num(bp.get("tail_s_pooled"))) if pooled else
                       (_num(a.get("tail_s")), _num(bp.get("tail_s", base.get("tail_s")))))
        u, what = " s", "rollout time"
    else:   # step counts: the steps themselves, never a time
        tot, btot = _num(a.get("steps")), _num(base.get("steps"))
        tail, btail = ((_num(dp.get("tail_steps_pooled")), _num(bp.get("tail_steps_pooled"))) if pooled else
                       (_num(a.get("tail_steps")), _num(bp.get("tail_steps", base.get("tail_steps")))))
        u, what = " steps", "engine steps"
        so, st = (btot / tot if btot and tot else None), (btail / tail if btail and tail else None)
    if btail == 0:   # no tail in the baseline: a ratio to it (0 / x) would claim a tail speed-up of 0
        st = None
    saved, more = (1 - 1 / so if so else None), "fewer" if units == "steps" else "less"
    t = (f"{pct(abs(saved)) if saved is not None else '–'} {more if (saved or 0) >= 0 else 'more'} "
         f"{what} ({fmt(btot)} → {fmt(tot)}{u}, {x2(so)}x)")
    thr = a.get("tail_threshold")
    if st is not None:
        t += (f"; {x2(st)}x in the long tail" + (f" (≤{thr} running" if thr is not None else " (")
              + (f", each of {dp.get('instances')} instances' own tail, summed" if pooled else "")
              + (f": {fmt(btail)} → {fmt(tail)}{u})" if btail is not None else ")"))
    elif btail == 0:
        t += (f"; no long-tail phase in this workload (the off arm never ran with ≤{thr} requests and none "
              "waiting), so nothing is said about the tail" if thr is not None else
              "; no long-tail phase in this workload, so nothing is said about the tail")
    if extrapolation(a):
        t += "; " + extrapolated(a)
    err = a.get("sim_error") if isinstance(a.get("sim_error"), dict) else {}
    errs = [f"{name} {100 * err[k]:+.1f} %" for k, name in (("total", "total time"), ("tail", "tail time"),
            ("speedup_overall", "speedup"), ("speedup_tail", "tail speedup")) if is_number(err.get(k))]
    return t + ("; simulation error vs measured: " + ", ".join(errs) if errs else ""), so, st


def _no_tail(a: dict, base: dict) -> bool:
    """Whether the off baseline, split at this arm's tail threshold, had no tail at all."""
    bp = a.get("baseline_phases") or {}
    return any(_num(bp.get(k, base.get(k))) == 0 for k in ("tail_s", "tail_steps"))


def rollout_time(by_suite: dict[str, Run], state: dict | None) -> Answer:
    q = "How much rollout time does it save?"
    run = by_suite.get("rollout")
    if run is None:
        badge, text = _not_checked("rollout", state, "run `samspec-bench rollout --step-model PROFILE` "
                                                     "(or roofline:hardware=...,model=...)")
        return Answer("rollout", q, UNKNOWN, badge, text)
    r, m = run.result, run.result.get("metrics") or {}
    arms = {k: v for k, v in (m.get("arms") or {}).items() if isinstance(v, dict)}
    base = arms.get("off") or {}
    p = pricing(r)
    priced = {"fitted-profile": "a fitted step-time profile", "roofline": "the roofline model",
              "constant-steps": "none (constant 1 per step)"}.get(p["kind"], str(p["kind"]))
    source = _src(run, config_line(r),
                  f"step model: {priced}" + (f" ({p['source']})" if p["source"] and p["kind"] != "roofline" else ""))
    lines = {lab: _arm_line(a, base, p["units"]) for lab, a in arms.items() if lab != "off"}
    if not lines:
        return Answer("rollout", q, UNKNOWN, "no SAM arm", "The rollout run has no arm with SAM on.", [], source)
    best = m.get("best_setting") if m.get("best_setting") in lines and p["units"] == "s" else \
        max(lines, key=lambda lab: lines[lab][1] or -1.0)
    checks = [Check(lab, UNKNOWN if p["units"] == "steps" else YES if (so or 0) > 1 else NO,
                    f"{x2(so)}x", text + ".") for lab, (text, so, _) in lines.items()]
    a = arms[best]
    _, so, st = lines[best]
    tail = f", {x2(st)}x in the long tail" if st is not None else (
        ", no long-tail phase to speak of (the off arm has none)" if _no_tail(a, base) else "")
    if p["units"] == "steps":
        return Answer("rollout", q, UNKNOWN, "not priced: step counts",
                      f"Not answered in time: only engine steps were counted (no step model). Fewest steps: {best}, "
                      f"{x2(so)}x fewer overall{tail}. Fewer steps is not less time (a verify step costs more than a "
                      "decode step): give --step-model (a `rollout profile` JSON, or roofline:hardware=...).",
                      checks, source)
    how = "measured" if p["measured"] else "modelled"
    where = hardware(r, p)
    pe = m.get("prediction_error") if isinstance(m.get("prediction_error"), dict) else {}
    if is_number(pe.get("max_abs_total")):
        where += (f"; the simulation, priced by the engine's own profile, predicts the measured arms within "
                  f"{pct(pe['max_abs_total'])} (total)"
                  + (f" and {pct(pe['max_abs_tail'])} (tail)" if is_number(pe.get("max_abs_tail")) else ""))
    if extrapolation(a):
        how, where = how + ", extrapolated", where + "; " + extrapolated(a)
    so, sotext, tail = over_draws(a, so, st, tail)
    if so is not None and so > 1:
        return Answer("rollout", q, PARTIAL if extrapolation(a) else YES,
                      f"saves {pct(1 - 1 / so)} ({how})",
                      f"{best} saves {pct(1 - 1 / so)} of rollout time ({sotext}){tail}; {where}."
                      + best_strategy_text(m, how), checks, source)
    return Answer("rollout", q, NO, f"no saving ({how})",
                  f"No: every SAM setting is slower or equal; the best, {best}, runs at {sotext}{tail}; {where}."
                  + best_strategy_text(m, how), checks, source)


def _spread(a: dict, key: str) -> dict | None:
    """An arm's figure over the draws of its lengths ({median, min, max, n}); None for one draw."""
    sp = (a.get("spread") or {}).get(key)
    ok = (isinstance(sp, dict) and (_num(sp.get("n")) or 0) > 1
          and all(is_number(sp.get(k)) for k in ("median", "min", "max")))
    return sp if ok else None


def over_draws(a: dict, so: float | None, st: float | None, tail: str) -> tuple[float | None, str, str]:
    """(overall ratio, its text, the tail clause) of the best arm: with lengths drawn several
    times, the medians with their [min, max] over the draws and the baseline's tail share (the
    rollout's own terminal figures); else the one run's ratios, as given."""
    sp_o, sp_t, share = (_spread(a, k) for k in ("speedup_overall", "speedup_tail", "baseline_tail_share"))
    if sp_o is None:
        return so, f"{x2(so)}x", tail
    so = sp_o["median"]
    text = f"{x2(so)}x [{x2(sp_o['min'])}, {x2(sp_o['max'])}] over {int(sp_o['n'])} draws of the lengths"
    if st is not None and sp_t is not None and (share is None or share["min"] > 0):
        tail = f", {x2(sp_t['median'])}x [{x2(sp_t['min'])}, {x2(sp_t['max'])}] in the long tail"
    if share is not None and share["max"] > 0 and tail:
        tail += (f" (the off arm spends {pct(share['median'])} [{pct(share['min'])}, {pct(share['max'])}] of its "
                 "time there)")
    return so, text, tail


# --- assembly ----------------------------------------------------------------------------------------------

def answers_for(runs: list[Run], state: dict | None) -> list[Answer]:
    by_suite = {suite: _newest([r for r in runs if r.suite == suite]) for suite in {r.suite for r in runs}}
    return [lossless(by_suite, state), acceptance(by_suite, state), rollout_time(by_suite, state)]


def _under(run: Run, root: str) -> bool:
    rp, root_p = Path(run.path), Path(root)
    return rp == root_p or root_p in rp.parents


def answer_sets(report: Report) -> list[AnswerSet]:
    """One column per `samspec-bench run` folder when the report holds two or more (runs side by
    side: each folder is one configuration a user compares), else one column for the whole report.
    Within a column each suite answers from its newest run; its other runs, and every run of a
    comparison, stay in the evidence below (a single answer cannot average runs made with
    different settings, and the newest is the one a user most likely means)."""
    states = report.run_states
    if len(states) >= 2:
        return [AnswerSet(str(rs["path"]), answers_for([r for r in report.runs if _under(r, rs["path"])], rs["state"]))
                for rs in states]
    state = states[0]["state"] if states else None
    multi = sorted({r.suite for r in report.runs if sum(x.suite == r.suite for x in report.runs) > 1})
    note = (f"Several runs of {', '.join(multi)}: each answer uses the newest; all are compared below."
            if multi else "")
    return [AnswerSet(str(states[0]["path"]) if states else ", ".join(report.inputs), answers_for(report.runs, state),
                      note)]
