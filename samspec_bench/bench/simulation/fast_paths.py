"""Stretches of a simulated rollout computed in closed form instead of step by step (the
scheduler's module docstring says when each applies). Both return the block of steps as
`STEP_COLUMNS` arrays; clocks are sequential sums, as stepping one by one adds them.

The speculative end is walked band by band of running counts: a band is a (k, profile table,
tree) triple shared by consecutive counts, from a per-step k policy or from tree steps (at
most `tree_running` requests run, nobody waits: each request verifies a multi-path draft tree
of up to tree_k tokens read from its tree profile; the scheduler's docstring says why)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from samspec_bench.bench.simulation.kv_blocks import KvBlocks
from samspec_bench.bench.simulation.profile_table import ProfileTable, accepted_at, drafts_at
from samspec_bench.bench.simulation.step_log import TailAcceptance
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel


def speculative_walks(idx: np.ndarray, pos: np.ndarray, L: np.ndarray, M: np.ndarray, k: int, profiles: ProfileTable,
                      tree: bool = False):
    """Requests `idx` (at positions `pos`, all decoding; response lengths L, the engine's limits
    M) each walking its own profile,
    speculating every step: drafts `profile_table.drafts_at` (linear, or a tree's node count),
    emits accepted + 1. Returns per request-step (request slot, step j, position, drafted,
    accepted) arrays and each request's number of steps."""
    slot, jj, pp, dd, aa, nsteps = [], [], [], [], [], []
    for r, (i, p0) in enumerate(zip(idx.tolist(), pos.tolist())):
        ps = np.arange(p0, int(L[i]), dtype=np.int64)
        one = np.full(len(ps), i)
        d = drafts_at(profiles, one, ps, M[i], k, tree)
        a = accepted_at(profiles, one, ps, L[i], d)
        inc = (a + 1).tolist()
        q, n, visit = 0, len(inc), []
        while q < n:
            visit.append(q)
            q += inc[q]
        v = np.array(visit, dtype=np.int64)
        slot.append(np.full(len(v), r, dtype=np.int64))
        jj.append(np.arange(len(v), dtype=np.int64))
        pp.append(ps[v])
        dd.append(d[v])
        aa.append(a[v])
        nsteps.append(len(v))
    cat = np.concatenate
    return cat(slot), cat(jj), cat(pp), cat(dd), cat(aa), np.array(nsteps, dtype=np.int64)


def speculative_end(running: np.ndarray, pos: np.ndarray, P: np.ndarray, L: np.ndarray, M: np.ndarray, band_at: Sequence,
                    step_model: StepTimeModel, clock: float, step: int,
                    tail: TailAcceptance) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The rest of the rollout once the running requests no longer interact: their steps'
    columns and each running request's finish time. Adds the tail's steps to `tail`.
    `band_at[r]`: the step's (k, profile table, tree) at r running requests (r = 1 .. running;
    a per-step k policy's k, and the tree steps' tree_k and tree table at the lowest counts).
    The running count only falls from here, so the end is walked band by band: the requests
    walk with the band's k and table until fewer run than the band's lowest count, then the next."""
    idx, p = running, pos[running]
    finish = np.full(len(running), np.nan)
    where = np.arange(len(running))   # each still-running request's slot in `running`
    parts = []
    while idx.size:
        n = int(idx.size)
        lo = n
        while lo > 1 and band_at[lo - 1] == band_at[n]:
            lo -= 1
        cols, done, fin, p_next = _segment(idx, p, P, L, M, band_at[n], step_model, clock, step, tail, lo)
        parts.append(cols)
        finish[where[done]] = fin
        clock, step = float(cols["clock_s"][-1]), step + len(cols["step"])
        idx, p, where = idx[~done], p_next[~done], where[~done]
    cols = {c: np.concatenate([x[c] for x in parts]) for c in parts[0]}
    return cols, finish


def _segment(idx: np.ndarray, p0: np.ndarray, P: np.ndarray, L: np.ndarray, M: np.ndarray, band: tuple,
             step_model: StepTimeModel, clock: float, step: int, tail: TailAcceptance, lo: int):
    """Requests `idx` at positions `p0` walking with band (k, table, tree) until fewer than
    `lo` run: (the steps' columns, which requests finished, their finish times, every
    request's position after the segment)."""
    k, profiles, tree = band
    slot, jj, pp, dd, aa, nst = speculative_walks(idx, p0, L, M, k, profiles, tree)
    r_all = np.bincount(jj)
    below = np.nonzero(r_all < lo)[0]
    m = int(below[0]) if below.size else len(r_all)
    p_next = p0.copy()
    at_m = jj == m
    p_next[slot[at_m]] = pp[at_m]
    done = nst <= m
    keep = jj < m
    slot, jj, pp, dd, aa = slot[keep], jj[keep], pp[keep], dd[keep], aa[keep]
    cnt = lambda w=None: np.bincount(jj, weights=w, minlength=m)  # noqa: E731
    r_j = np.bincount(jj, minlength=m).astype(np.int64)
    d_j = cnt(dd).astype(np.int64)
    a_j = cnt(aa).astype(np.int64)
    ctx = cnt(P[idx][slot] + pp - 1).astype(np.int64)
    fin = np.bincount(nst[done] - 1, minlength=m).astype(np.int64)
    zero = np.zeros(m, dtype=np.int64)
    verifies = (d_j > 0).astype(np.int64)   # a step whose drafts were all empty runs as a decode step
    t = np.asarray(step_model.predict(running=r_j, prefill_tokens=zero, decode_tokens=r_j, draft_tokens=d_j,
                                      context_tokens=ctx, spec_requests=r_j * verifies, speculative=verifies),
                   dtype=float)
    t = np.broadcast_to(t, (m,)).astype(float)
    clk = np.cumsum(np.concatenate([[clock], t]))[1:]
    if tail.active:
        tl = r_j[jj] <= tail.threshold
        tail.add(pp[tl], dd[tl], aa[tl])
    cols = dict(step=step + np.arange(m), time_s=t, clock_s=clk, num_running=r_j, num_waiting=zero,
                num_scheduled_tokens=r_j + d_j, num_prefill_tokens=zero, num_decode_reqs=r_j, context_tokens=ctx,
                num_drafted=d_j, num_accepted=a_j, num_emitted=a_j + r_j, speculative=np.ones(m, dtype=bool),
                num_finished=fin, num_preempted=zero, tree=np.full(m, bool(tree)))
    return cols, done, clk[nst[done] - 1], p_next


def decode_run_length(remaining: np.ndarray, computed: np.ndarray, kv: KvBlocks | None) -> int:
    """Steps the running requests decode one token each before the first finishes, or, with a
    KV cache, before the step whose new blocks would not fit (found by bisection)."""
    m = int(remaining.min())
    if kv is None or m < 2:
        return m
    fits = lambda j: kv.fits(computed + j + 1)  # noqa: E731
    if fits(m - 1):
        return m
    if not fits(0):
        return 0
    lo, hi = 0, m - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return hi


def decode_block(num_running: int, context_tokens: int, m: int, num_waiting: int, num_finished: int,
                 step_model: StepTimeModel, clock: float, step: int) -> dict[str, np.ndarray]:
    """m decode steps of `num_running` requests, one token each, without speculation; the last
    step finishes `num_finished` of them."""
    R = num_running
    j = np.arange(m, dtype=np.int64)
    ctx = context_tokens + j * R
    t = step_model.predict(running=np.full(m, R), decode_tokens=np.full(m, R), context_tokens=ctx)
    t = np.asarray(t, dtype=float)
    clk = np.cumsum(np.concatenate([[clock], t]))[1:]
    fin = np.zeros(m, dtype=np.int64)
    fin[-1] = num_finished
    zero = np.zeros(m, dtype=np.int64)
    return dict(step=step + j, time_s=t, clock_s=clk, num_running=np.full(m, R), num_waiting=np.full(m, num_waiting),
                num_scheduled_tokens=np.full(m, R), num_prefill_tokens=zero, num_decode_reqs=np.full(m, R),
                context_tokens=ctx, num_drafted=zero, num_accepted=zero, num_emitted=np.full(m, R),
                speculative=np.zeros(m, dtype=bool), num_finished=fin, num_preempted=zero,
                tree=np.zeros(m, dtype=bool))
