"""Running the battery against one sampler, and its verdict.

Trials are requests of one batch; a sampler is called on many such batches (vLLM layout,
requests with different draft counts, seeded and unseeded requests, and for the logits
battery different sampling parameters, mixed). A sampler with the probability shape
(RejectionInputs) gets the probability cases; one with the logits shape (LogitsInputs) gets
them as log-probabilities at temperature 1, samples their bonus tokens itself, and also gets
the logits cases (`battery`). Besides the distribution tests of `stats` (every position,
over-acceptance, the acceptance counts), each run checks the output layout (accepted drafts,
one recovered/bonus token, then -1 placeholders; no id outside the vocabulary), greedy rows
(the argmax path, token for token, through every shape the sampler has) and seeded
reproducibility (`checks`).

The verdict is EXACT when every exactness test passes, LOSSY otherwise (with the failing
position or over-acceptance level, TV, bound and p-value as evidence), ERROR when the sampler
raised or returned something that is not the contract's token ids (`output_check`: a wrong
shape, a non-finite or non-integer value, an id outside the vocabulary), with one line naming
the case and what happened (`audit_worker` adds a time limit per call). The exactness tests
are the per-position laws, the over-acceptance bounds, the layout and the greedy rows; alpha
is split (Bonferroni) over the criteria of the tests the sampler runs. The acceptance counts'
law is reported separately ("acceptance: per-token / differs"): block verification accepts
more by design without being lossy; this project's samplers must match it. Every test
records the smallest deviation it detects with 80 % power (`mdd`), and the record's `power`
lists them. Seeds are fixed, so a run is reproducible.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from typing import Callable, Optional

import numpy as np
import torch

from samspec_bench.bench.rejection import LogitsInputs, RejectionInputs, SamplingBatch
from samspec_bench.devices import resolve_device
from samspec_bench.errors import one_line
from samspec_bench.suites.sampler.adapters import Audited
from samspec_bench.suites.sampler.battery import Case
from samspec_bench.suites.sampler.checks import greedy_check, reproducibility_check
from samspec_bench.suites.sampler.config import NEGATIVE_CONTROLS, SamplerConfig
from samspec_bench.suites.sampler.exactness_stats import (acceptance_test, complete, overacceptance_bounds,
                                                overacceptance_test, position_tests, tv_curve)
from samspec_bench.suites.sampler.output_check import SamplerOutputError, checked_tokens
from samspec_bench.suites.sampler.vllm import platform_check


def _chunk_requests(case: Case, max_requests: int = 4096, budget_floats: int = 1 << 24) -> int:
    """Requests per sampler call: about budget_floats floats of target (and draft) rows."""
    mean_rows = max(1.0, sum(max(t.k, 1) for t in case.templates) / len(case.templates))
    per = int(budget_floats // (case.vocab * mean_rows * (2 if case.with_probs else 1)))
    return max(1, min(max_requests, per))


def criteria(case: Case) -> int:
    """Criteria that share alpha in one case: three per position test, one per
    over-acceptance test."""
    return sum(3 * (t.k + 1) + (1 if t.k else 0) for t in case.templates)


@dataclasses.dataclass
class CaseRun:
    """Outputs of one sampler on one case: per template, [trials, K+1] tokens, the drafts and
    bonus ids each trial got (bonus_from_sampler: the sampler drew the bonus itself)."""
    outputs: dict
    drafts: dict
    bonus: dict
    mutated: bool = False
    bonus_from_sampler: bool = False


def _seed_of(seed: int, ti: int, trial: int) -> int:
    return (seed * 1_000_003 + ti * 100_003 + trial * 7 + 1) % (2 ** 63)


def run_case(sampler: Callable, case: Case, n_trials: int, seed: int, device: str,
             progress_cb: Optional[Callable[[int], None]] = None, shape: str = "probs") -> CaseRun:
    """Run the case's trials through sampler (shape "probs": RejectionInputs, "logits":
    LogitsInputs); templates alternate inside every batch."""
    if case.needs_logits and shape != "logits":
        raise ValueError(f"case {case.name} needs a logits-level sampler")
    rng = np.random.default_rng(seed)
    T = len(case.templates)
    K = case.max_k
    per_t = max(1, n_trials // T)
    n_total = per_t * T
    # Pre-draw the per-trial drafts (probability drafts) and bonus tokens.
    drafts, bonus = {}, {}
    for ti, t in enumerate(case.templates):
        if t.q is None:
            drafts[ti] = np.broadcast_to(t.drafts, (per_t, t.k))
        else:
            drafts[ti] = (np.stack([rng.choice(case.vocab, size=per_t, p=t.q[j]) for j in range(t.k)], axis=1)
                          if t.k else np.zeros((per_t, 0), dtype=np.int64))
        bonus[ti] = rng.choice(case.vocab, size=per_t, p=t.target[t.k])
    empty = [np.zeros((0, case.vocab))]
    if shape == "logits":   # raw logits, or log p of a probability template (softmax(log p) = p)
        rows_of = [t.logits if t.logits is not None else np.log(np.asarray(t.target, np.float32))
                   for t in case.templates]
        table = torch.tensor(np.concatenate([r[: t.k] for r, t in zip(rows_of, case.templates)] + empty),
                             dtype=torch.float32, device=device)
        btable = torch.tensor(np.stack([r[t.k] for r, t in zip(rows_of, case.templates)]), dtype=torch.float32,
                              device=device)
    else:
        table = torch.tensor(np.concatenate([t.target[: t.k] for t in case.templates] + empty), dtype=torch.float32,
                             device=device)
    qtable = (torch.tensor(np.concatenate([t.q[: t.k] for t in case.templates] + empty), dtype=torch.float32,
                           device=device) if case.with_probs else None)
    offsets = np.cumsum([0] + [t.k for t in case.templates])
    outputs = {ti: np.full((per_t, K + 1), -2, dtype=np.int64) for ti in range(T)}
    chunk = _chunk_requests(case)
    mutated = False
    done = 0
    call_no = 0
    tbuf = qbuf = None
    while done < n_total:
        R = min(chunk, n_total - done)
        gidx = np.arange(done, done + R)
        tis, trial = gidx % T, gidx // T
        nums = [case.templates[ti].k for ti in tis]
        row_idx = np.concatenate([np.arange(offsets[ti], offsets[ti] + case.templates[ti].k) for ti in tis]
                                 + [np.zeros(0, dtype=np.int64)]).astype(np.int64)
        d_ids = np.concatenate([drafts[ti][tr] for ti, tr in zip(tis, trial)] + [np.zeros(0, dtype=np.int64)])
        ridx = torch.from_numpy(row_idx).to(device)
        # Rebuild the inputs in buffers reused across calls: fresh [rows, V] allocations cost
        # page faults that dwarf the samplers' own work at large vocabularies.
        if tbuf is None or tbuf.shape[0] < ridx.numel():
            tbuf = torch.empty((ridx.numel(), case.vocab), dtype=torch.float32, device=device)
            qbuf = None if qtable is None else torch.empty_like(tbuf)
        tp = torch.index_select(table, 0, ridx, out=tbuf[: ridx.numel()])
        dp = None if qtable is None else torch.index_select(qtable, 0, ridx, out=qbuf[: ridx.numel()])
        gens = {}
        for i, (ti, tr) in enumerate(zip(tis, trial)):
            if case.templates[ti].seeded:
                gens[i] = torch.Generator(device=device)
                gens[i].manual_seed(_seed_of(seed, int(ti), int(tr)))
        common = dict(draft_token_ids=torch.from_numpy(d_ids.astype(np.int64)).to(device), num_draft_tokens=nums,
                      cu_num_draft_tokens=torch.tensor(np.cumsum(nums), dtype=torch.int32, device=device),
                      max_spec_len=K, draft_probs=dp)
        if shape == "logits":
            temps = [case.templates[ti].temperature for ti in tis]
            ks = [case.templates[ti].top_k for ti in tis]
            ps = [case.templates[ti].top_p for ti in tis]
            sb = SamplingBatch(temperature=temps, top_k=ks if any(ks) else None,
                               top_p=ps if min(ps) < 1.0 else None, generators=gens)
            bl = btable[torch.from_numpy(tis.astype(np.int64)).to(device)]
            inputs = LogitsInputs(target_logits=tp, bonus_logits=bl, sampling=sb, **common)
            watched = [tp, bl]
        else:
            b_ids = np.array([bonus[ti][tr] for ti, tr in zip(tis, trial)], dtype=np.int64)
            inputs = RejectionInputs(target_probs=tp, bonus_token_ids=torch.from_numpy(b_ids).reshape(-1, 1).to(device),
                                     is_greedy=torch.zeros(R, dtype=torch.bool, device=device), generators=gens,
                                     **common)
            watched = [tp]
        watched += [inputs.draft_token_ids] + ([dp] if dp is not None else [])
        snapshot = [w.clone() for w in watched] if call_no == 0 else None
        torch.manual_seed((seed * 1_000_003 + call_no) % (2 ** 63))
        out = checked_tokens(sampler(inputs), R, K + 1, case.vocab, f"case {case.name}, call {call_no + 1}")
        if snapshot is not None:
            mutated = not all(torch.equal(a, b) for a, b in zip(snapshot, watched))
        o = out.numpy()
        for ti in range(T):
            sel = np.nonzero(tis == ti)[0]
            outputs[ti][trial[sel]] = o[sel]
        done += R
        call_no += 1
        if progress_cb:
            progress_cb(R)
    return CaseRun(outputs, {ti: np.asarray(drafts[ti]) for ti in drafts}, bonus, mutated,
                   bonus_from_sampler=shape == "logits")


def analyse_case(case: Case, run: CaseRun, alpha_t: float, seed: int = 0) -> list[dict]:
    """Layout, per-position (exactness), over-acceptance and acceptance-count tests of one case run."""
    tests = []
    V = case.vocab
    rng = np.random.default_rng(seed + 5)
    for ti, t in enumerate(case.templates):
        out = run.outputs[ti]
        n = out.shape[0]
        K1 = out.shape[1]
        valid = out != -1
        A = valid.sum(1) - 1
        label = {"case": case.name, "template": t.label}
        # Layout: tokens form a prefix, length in 1..k+1, accepted positions equal the drafts,
        # the bonus sits at position k when all were accepted.
        prefix_ok = np.all(valid == (np.arange(K1)[None, :] <= A[:, None]), axis=1)
        len_ok = (A >= 0) & (A <= t.k)
        drafts = run.drafts[ti]
        acc_ok = np.ones(n, dtype=bool)
        for j in range(t.k):
            m = A > j
            acc_ok[m] &= out[m, j] == drafts[m, j]
        bonus_ok = np.ones(n, dtype=bool)
        allacc = A == t.k
        if not run.bonus_from_sampler:
            bonus_ok[allacc] = out[allacc, t.k] == run.bonus[ti][allacc]
        range_ok = np.all((out == -1) | ((out >= 0) & (out < V)), axis=1)
        bad = ~(prefix_ok & len_ok & acc_ok & bonus_ok & range_ok)
        lay = dict(label, kind="layout", position=None, n=int(n), violations=int(bad.sum()), passed=bool(not bad.any()))
        if bad.any():
            i = int(np.nonzero(bad)[0][0])
            lay["example"] = {"row": out[i].tolist(), "drafts": drafts[i].tolist(), "bonus": int(run.bonus[ti][i])}
        tests.append(lay)
        good = ~bad
        if t.k:
            tests.append(overacceptance_test(A[good], overacceptance_bounds(t.target, t.drafts, t.q), alpha_t, label))
        tests.append(acceptance_test(A[good], t.acceptance_probs(), alpha_t, label))
        Y = complete(out[good], A[good], t.target, rng)
        tests += position_tests(Y, drafts[good], t.target, alpha_t, label)
    return tests


def plan_cases(a: Audited, cases: list[Case]) -> tuple[list[tuple[Case, Callable, str]], list[str]]:
    """(case, callable, shape) for each case the sampler can run, and why the others cannot."""
    runs, skipped = [], []
    for case in cases:
        if case.needs_logits:
            if a.logits_fn is not None:
                runs.append((case, a.logits_fn, "logits"))
            else:
                skipped.append(f"{case.name}: the probability shape receives processed probabilities "
                               "(temperature / top-k / top-p are the caller's)")
        elif a.fn is not None:
            runs.append((case, a.fn, "probs"))
        else:
            runs.append((case, a.logits_fn, "logits"))
    return runs, skipped


def audit(a: Audited, cfg: SamplerConfig, cases: list[Case], progress=None,
          on_phase: Optional[Callable[[str], None]] = None) -> dict:
    """Run the whole battery against one sampler; returns the JSON-able record. on_phase is told
    each phase ("case <name>", "greedy check (<shape>)", ...) before its calls. Runs with one
    intra-op thread: the work is many small operations, for which a thread pool costs more
    than it saves (up to 5x more wall time on a busy 2-core machine); the previous setting
    is restored. Every tensor lives on cfg.device (`auto` resolved here when the caller did not)."""
    cfg = dataclasses.replace(cfg, device=resolve_device(cfg.device))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _audit(a, cfg, cases, progress, on_phase or (lambda phase: None))
    finally:
        torch.set_num_threads(threads)


def _audit(a: Audited, cfg: SamplerConfig, cases: list[Case], progress, on_phase: Callable[[str], None]) -> dict:
    t0 = time.perf_counter()
    rec = {"name": a.name, "target": a.target, "description": a.description, "style": a.style, "shape": a.shape,
           "negative_control": a.name in NEGATIVE_CONTROLS}
    if a.skipped:
        rec.update(verdict="SKIPPED", reason=a.skipped)
        return rec
    if a.name == "vllm":   # a known platform defect, named next to whatever the battery finds
        rec["platform_check"] = platform_check()
    runs, not_applicable = plan_cases(a, cases)
    n_criteria = sum(criteria(c) for c, _, _ in runs)
    alpha_t = cfg.alpha / max(1, n_criteria)
    rec.update(alpha=cfg.alpha, criteria=n_criteria, alpha_per_test=alpha_t, not_applicable=not_applicable,
               shapes=[s for s, f in (("probs", a.fn), ("logits", a.logits_fn)) if f is not None])
    tests: list[dict] = []
    mutated = []
    task = None
    if progress is not None:
        task = progress.add_task(f"audit {a.name}", total=sum(c.trials(cfg) for c, _, _ in runs))
    cb = (lambda n: progress.advance(task, n)) if progress is not None else None
    phase = "loading"
    try:
        for ci, (case, fn, shape) in enumerate(runs):
            on_phase(phase := f"case {case.name}")
            run = run_case(fn, case, case.trials(cfg), cfg.seed * 1000 + ci, cfg.device, cb, shape=shape)
            if run.mutated:
                mutated.append(case.name)
            tests += analyse_case(case, run, alpha_t, cfg.seed * 1000 + ci)
        greedy = []
        for s, f in (("probs", a.fn), ("logits", a.logits_fn)):
            if f is not None:
                on_phase(phase := f"greedy check ({s})")
                greedy.append(greedy_check(f, s, cfg.seed, cfg.device, cfg.large_vocab, cfg.max_vocab))
        primary = ("probs", a.fn) if a.fn is not None else ("logits", a.logits_fn)
        on_phase(phase := "seeded reproducibility check")
        seeded = reproducibility_check(primary[1], primary[0], cfg.seed, cfg.device)
    except Exception as e:  # noqa: BLE001 - a crashing third-party sampler is a finding
        rec.update(verdict="ERROR", error=_error_line(e, phase), seconds=time.perf_counter() - t0)
        if progress is not None and task is not None:
            progress.update(task, visible=False)
        return rec
    if progress is not None and task is not None:
        progress.update(task, visible=False)
    failed = [t for t in tests if not t.get("passed", True) and not t.get("informational")]
    failed += [g for g in greedy if not g["passed"]]
    acc_failed = [t for t in tests if not t.get("passed", True) and t.get("informational")]
    verdict = "LOSSY" if failed else "EXACT"
    dist_tests = [t for t in tests if "tv" in t and not t.get("informational")]
    # Worst test: the largest TV / bound (the one a figure shows).
    worst = max(dist_tests, key=lambda t: (t["tv"] / t["bound"], -t["p_value"]), default=None)
    rec.update(
        verdict=verdict, tests=len(tests) + len(greedy), failed=len(failed),
        greedy={"rows": sum(g["rows"] for g in greedy), "mismatches": sum(g["mismatches"] for g in greedy),
                "passed": all(g["passed"] for g in greedy), "by_shape": greedy},
        seeded=seeded, mutated_inputs=mutated,
        acceptance_matches_token_rule=not acc_failed,
        acceptance_evidence=[public(t) for t in sorted(acc_failed, key=lambda t: t.get("p_value", 0.0))[:5]],
        evidence=[public(t) for t in sorted(failed, key=lambda t: t.get("p_value", 0.0))[:8]],
        worst=public(worst) if worst else None,
        power=observed_power(tests),
        table=[public(t) for t in tests],
        curve=dict(tv_curve(worst["_samples"], worst["_expected"], alpha_t), label=where(worst)) if worst else None,
        seconds=time.perf_counter() - t0,
    )
    return rec


def _error_line(e: Exception, phase: str) -> str:
    """One line: where the audit was and what the sampler raised (an output error names its call)."""
    if isinstance(e, SamplerOutputError):
        return one_line(e)
    return f"{phase}: {one_line(''.join(traceback.format_exception_only(type(e), e)))}"


def observed_power(tests: list[dict]) -> list[dict]:
    """Per position and over-acceptance test: the n it had and the smallest deviation it
    detects with 80 % power (None: fewer than 20 samples reached it)."""
    out = []
    for t in tests:
        if t["kind"] in ("token", "bonus"):
            out.append({"case": t["case"], "template": t["template"], "kind": t["kind"], "position": t["position"],
                        "n": t["n"], "mdd": t.get("mdd")})
        elif t["kind"] == "over-acceptance" and not t.get("skipped"):
            out.append({"case": t["case"], "template": t["template"], "kind": t["kind"], "position": None,
                        "n": t["n"], "mdd": t.get("mdd")})
    return out


def where(t: dict) -> str:
    """case/template/kind[@position] of a test."""
    pos = t.get("position")
    if t.get("kind") == "over-acceptance" and t.get("worst_level"):
        return f"{t['case']}/{t['template']}/over-acceptance@A>={t['worst_level']}"
    return f"{t['case']}/{t['template']}/{t['kind']}" + ("" if pos is None else f"@{pos}")


def public(t: dict) -> dict:
    """A test record without its private fields (samples kept for the curve)."""
    return {k: v for k, v in t.items() if not k.startswith("_")}
