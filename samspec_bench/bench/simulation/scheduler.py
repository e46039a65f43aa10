"""Rollout simulation: the reference engine's continuous-batching rules replayed without a
model, with per-request acceptance from real token sequences and step times from a fitted
`StepTimeModel`.

Scheduling (the same rules as `bench.engines.reference.ReferenceEngine._step`):
- before each step the policy sees StepState(step, running, waiting, decoding) and decides
  whether the step speculates;
- token budget `max_num_batched_tokens`; running requests first, oldest first: each takes its
  pending tokens (the rest of a chunked prefill, or 1 when decoding) plus, when speculating and
  decoding, min(k, its draft length, max_tokens - output - 1, budget - 1) draft tokens; then
  waiting requests are admitted first come first served while budget > 0 and fewer than
  `max_num_seqs` run, each with min(prompt, budget) prefill tokens;
- a request whose prefill completes samples its first token; a decoding request emits its
  accepted drafts plus one token; it finishes when its response length is reached;
- KV cache (`kv_capacity_tokens`, blocks of `block_size`; default unlimited): a request holds
  ceil(KV tokens / block_size) blocks; a running request whose step needs more blocks than
  are free preempts the latest admitted running request (its blocks freed, its prompt and
  output recomputed as a prefill when it is readmitted, ahead of new requests), itself last;
  a waiting request is admitted only when its chunk's blocks are free. Blocks are reserved as
  the step is scheduled (vLLM's allocate-as-you-go), so a step never over-commits the cache.

Acceptance: `profiles.acceptance_profile` drafts at EVERY response position with a real
drafter (own prompt + prefix; state at position p is the same whether p was reached with or
without speculation, because the drafter is always extended with the same tokens) and records
the draft length and the accepted length (the longest prefix matching the recorded tokens).
That is exact for greedy decoding, and also for sampled decoding with a deterministic drafter
(a draft token is accepted iff the sampled token equals it, since rejection re-samples with
the draft token removed). Walking the profile with pos += accepted + 1 reproduces
`bench.engines.replay.replay_response` step for step (checked in tests).

Profiles may be shorter or longer than the simulated response (`SimRequest.stretch`): they
are then read through `profiles.stretch_positions` (block resampling; see there why).

Long stretches without speculation, admissions or prefills are fast-forwarded in closed form
(every request emits one token a step until the next one finishes, or, with a KV capacity,
until the next block would not fit). The speculative end of a rollout is too
(`_speculative_end`): once nobody waits, every running request decodes, the policy
speculates at every running count from here down to 1, the token budget holds k + 1 tokens
of every request and the KV cache holds every request's full length, the requests no longer
interact: each walks its own profile (drafts min(k, draft, tokens left - 1), emits accepted +
1) and a step's features are sums over the requests still running. So 1536 x 16 requests of
tens of thousands of tokens simulate in seconds with the threshold switch; an always-on arm
steps one by one until its last admission.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from samspec_bench.bench.policies import AlwaysPolicy, OffPolicy, StepState
from samspec_bench.bench.simulation.profiles import stretch_positions
from samspec_bench.bench.simulation.step_model import StepTimeModel
from samspec_bench.errors import UserError

STEP_COLUMNS = ("step", "time_s", "clock_s", "num_running", "num_waiting", "num_scheduled_tokens",
                "num_prefill_tokens", "num_decode_reqs", "context_tokens", "num_drafted", "num_accepted",
                "num_emitted", "speculative", "num_finished", "num_preempted")


@dataclass
class SimRequest:
    prompt_len: int
    response_len: int
    drafted: np.ndarray | None = None    # per position; None = never drafts anything
    accepted: np.ndarray | None = None
    group: Any = None
    stretch: bool = False   # profile shorter/longer than the response: read it through profiles.stretch_positions


@dataclass
class SimResult:
    steps: dict[str, np.ndarray]          # STEP_COLUMNS
    finish_time_s: np.ndarray             # per request
    first_token_time_s: np.ndarray
    makespan_s: float
    num_steps: int
    policy: dict[str, Any] = field(default_factory=dict)
    k: int = 0
    tail_acceptance: dict[str, np.ndarray] | None = None   # by position bin: drafted, accepted, steps

    def table(self):
        import pandas as pd  # only for this view; the simulation itself needs numpy alone
        return pd.DataFrame(self.steps)


def _schedule_kv(run_list: list[int], pending, decoding, d, computed, budget: int, free: int, bs: int):
    """The running requests' part of a step when their new KV blocks do not all fit: the
    reference engine's rule, request by request, oldest first. A request whose tokens (its
    pending ones plus drafts) need more blocks than are free after the requests before it
    preempts the latest admitted running request (freeing its blocks, recomputed later),
    repeatedly, itself last. Blocks are reserved as requests are scheduled (vLLM's
    allocate-as-you-go). Returns (running after preemption, tokens and drafts per request,
    budget left, blocks reserved, free blocks, victims in preemption order)."""
    blocks = lambda x: -(-int(x) // bs)  # noqa: E731
    info = {j: (int(p), bool(c), int(x)) for j, p, c, x in zip(run_list, pending, decoding, d)}
    run, sched, victims, reserved, i = list(run_list), {}, [], 0, 0
    while i < len(run) and budget > 0:
        j = run[i]
        pend, dec, dj = info[j]
        n = min(pend, budget)
        dj = max(min(dj, budget - 1), 0) if dec else 0
        need = blocks(computed[j] + n + dj) - blocks(computed[j])
        preempted_self = False
        while need > free - reserved:
            v = run.pop()
            victims.append(v)
            free += blocks(computed[v])
            if v == j:
                preempted_self = True
                break
        if preempted_self:
            continue
        sched[j] = (n, dj)
        reserved += need
        budget -= n + dj
        i += 1
    sched_n = np.array([sched.get(j, (0, 0))[0] for j in run], dtype=np.int64)
    sched_d = np.array([sched.get(j, (0, 0))[1] for j in run], dtype=np.int64)
    return run, sched_n, sched_d, budget, reserved, free, victims


def _speculative_end(idx, pos, P, L, k, draft_at, accept_at):
    """The rest of a rollout whose running requests `idx` (positions `pos`, all decoding) walk
    their profiles independently, speculating every step (see the module docstring). Returns
    per request-step (request slot, step j, position, drafted, accepted) arrays and each
    request's number of steps."""
    slot, jj, pp, dd, aa, nsteps = [], [], [], [], [], []
    for r, (i, p0) in enumerate(zip(idx.tolist(), pos.tolist())):
        ps = np.arange(p0, int(L[i]), dtype=np.int64)
        d = np.minimum(np.minimum(draft_at(i, ps), k), L[i] - 1 - ps)
        d = np.maximum(d, 0)
        a = np.minimum(accept_at(i, ps), d)
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


# ---------- the simulation ----------

def simulate(requests: Sequence[SimRequest], *, k: int, policy: Callable[[StepState], bool] | None,
             step_model: StepTimeModel, max_num_seqs: int = 64, max_num_batched_tokens: int = 2048,
             tail_threshold: int | None = None, position_edges: Sequence[int] = (),
             fast_forward: bool = True, kv_capacity_tokens: int | None = None,
             block_size: int = 16) -> SimResult:
    """Simulate one rollout arm. k = 0 or policy None-like OffPolicy: no speculation.
    kv_capacity_tokens: KV cache size (None = unlimited), in blocks of `block_size` tokens.
    tail_threshold: steps with running <= it and nobody waiting count as the tail for
    `tail_acceptance` (bins by token position at drafting time, edges `position_edges`)."""
    if max_num_seqs < 1 or max_num_batched_tokens < 1:
        raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
    N = len(requests)
    P = np.array([r.prompt_len for r in requests], dtype=np.int64)
    L = np.array([r.response_len for r in requests], dtype=np.int64)
    if N and (P.min() < 1 or L.min() < 1):
        raise ValueError("every request needs a prompt and a response of at least one token")
    # acceptance profiles, stored once per distinct array (tiled workloads share them)
    pid: dict[int, int] = {}
    chunks_d, chunks_a = [np.zeros(1, dtype=np.int16)], [np.zeros(1, dtype=np.int16)]
    total = 1
    offs = np.zeros(N, dtype=np.int64)   # start of request i's profile in D/A (0 = the shared empty one)
    cap = np.zeros(N, dtype=np.int64)    # profile length (positions beyond it draft nothing)
    for i, r in enumerate(requests):
        if r.drafted is None:
            continue
        if r.accepted is None or len(r.accepted) != len(r.drafted):
            raise ValueError(f"request {i}: drafted and accepted profiles differ in length")
        key = id(r.drafted)
        if key not in pid:
            pid[key] = total
            chunks_d.append(np.asarray(r.drafted, dtype=np.int16))
            chunks_a.append(np.minimum(np.asarray(r.accepted, dtype=np.int16), chunks_d[-1]))
            total += len(r.drafted)
        offs[i] = pid[key]
        cap[i] = len(r.drafted)
    stretch = np.array([bool(r.stretch) and r.drafted is not None for r in requests], dtype=bool)
    any_stretch = bool(stretch.any())
    D = np.concatenate(chunks_d).astype(np.int64) if total < 50_000_000 else np.concatenate(chunks_d)
    A = np.concatenate(chunks_a).astype(np.int64) if total < 50_000_000 else np.concatenate(chunks_a)

    def prof_index(idx, p):
        """Index into D/A of position p of requests idx (0 = no draft)."""
        if any_stretch:
            p = np.where(stretch[idx], stretch_positions(p, np.maximum(cap[idx], 1), L[idx]), p)
        return np.where(p < cap[idx], offs[idx] + p, 0)

    k = int(k)
    if policy is None:
        policy = AlwaysPolicy() if k else OffPolicy()
    counts_only = bool(getattr(policy, "counts_only", False))
    edges = np.asarray(list(position_edges), dtype=np.int64)
    nb = len(edges) + 1
    tail_d = np.zeros(nb, dtype=np.int64)
    tail_a = np.zeros(nb, dtype=np.int64)
    tail_n = np.zeros(nb, dtype=np.int64)

    computed = np.zeros(N, dtype=np.int64)   # KV tokens
    pos = np.zeros(N, dtype=np.int64)        # response tokens emitted
    finish = np.full(N, np.nan)
    first = np.full(N, np.nan)
    running = np.zeros(0, dtype=np.int64)    # admission order
    requeue: list[int] = []                  # preempted requests, at the front of the waiting queue
    next_wait = 0
    clock = 0.0
    step = 0
    cols: dict[str, list] = {c: [] for c in STEP_COLUMNS}
    kv = kv_capacity_tokens is not None
    bs = int(block_size)
    if kv:
        if bs < 1 or kv_capacity_tokens < bs:
            raise UserError(f"--kv-capacity-tokens {kv_capacity_tokens} with --block-size {block_size}: "
                            "the cache needs at least one block; raise the capacity")
        num_blocks = int(kv_capacity_tokens) // bs
        worst = int(np.max(P + L)) + k if N else 0
        if N and -(-worst // bs) > num_blocks:
            i = int(np.argmax(P + L))
            raise UserError(f"--kv-capacity-tokens {kv_capacity_tokens}: request {i} needs up to {worst} KV tokens "
                            f"({-(-worst // bs)} blocks of {bs}); raise the capacity or lower --max-response-len")

    def record(**kv_):
        for c in STEP_COLUMNS:
            cols[c].append(kv_[c])

    def blocks(x):
        return -(-x // bs)

    B = int(max_num_batched_tokens)
    while next_wait < N or running.size or requeue:
        n_wait = N - next_wait + len(requeue)
        pending = P[running] + pos[running] - computed[running]
        decoding = pending == 1
        n_dec = int(decoding.sum())
        st = StepState(step, int(running.size), n_wait, n_dec)
        spec = bool(k) and bool(policy(st))
        # --- the speculative end in closed form: nobody waiting, all decoding, independent walks
        if (fast_forward and spec and counts_only and running.size and n_wait == 0 and n_dec == running.size
                and int(pos[running].min()) >= 1 and running.size * (k + 1) <= B
                and (not kv or int(blocks(P[running] + L[running] + k).sum()) <= num_blocks)
                and all(policy(StepState(step, r, 0, r)) for r in range(1, int(running.size) + 1))):
            slot, jj, pp, dd, aa, nst = _speculative_end(
                running, pos[running], P, L, k, lambda i, ps: D[prof_index(np.full(len(ps), i), ps)],
                lambda i, ps: A[prof_index(np.full(len(ps), i), ps)])
            m = int(nst.max())
            cnt = lambda w=None: np.bincount(jj, weights=w, minlength=m)  # noqa: E731
            r_j = np.bincount(jj, minlength=m).astype(np.int64)
            d_j = cnt(dd).astype(np.int64)
            a_j = cnt(aa).astype(np.int64)
            ctx = cnt(P[running][slot] + pp - 1).astype(np.int64)
            fin = np.bincount(nst - 1, minlength=m).astype(np.int64)
            zero = np.zeros(m, dtype=np.int64)
            verifies = (d_j > 0).astype(np.int64)   # a step whose drafts were all empty runs as a decode step
            t = np.asarray(step_model.predict(running=r_j, prefill_tokens=zero, decode_tokens=r_j, draft_tokens=d_j,
                                              context_tokens=ctx, spec_requests=r_j * verifies, speculative=verifies),
                           dtype=float)
            t = np.broadcast_to(t, (m,)).astype(float)
            clk = np.cumsum(np.concatenate([[clock], t]))[1:]   # sequential sums, as step by step
            if tail_threshold is not None and nb:
                tl = r_j[jj] <= tail_threshold
                bins = np.searchsorted(edges, pp[tl], side="right")
                np.add.at(tail_d, bins, dd[tl])
                np.add.at(tail_a, bins, aa[tl])
                np.add.at(tail_n, bins, (dd[tl] > 0).astype(np.int64))
            for c, v in (("step", step + np.arange(m)), ("time_s", t), ("clock_s", clk), ("num_running", r_j),
                         ("num_waiting", zero), ("num_scheduled_tokens", r_j + d_j), ("num_prefill_tokens", zero),
                         ("num_decode_reqs", r_j), ("context_tokens", ctx), ("num_drafted", d_j),
                         ("num_accepted", a_j), ("num_emitted", a_j + r_j), ("speculative", np.ones(m, dtype=bool)),
                         ("num_finished", fin), ("num_preempted", zero)):
                cols[c].append(v)
            finish[running] = clk[nst - 1]
            pos[running] = L[running]
            computed[running] = P[running] + L[running] - 1
            clock = float(clk[-1])
            step += m
            running = running[:0]
            continue
        # --- fast-forward: all decoding, no admissions possible, no speculation, policy fixed
        if (fast_forward and not spec and counts_only and running.size and n_dec == running.size
                and int(pos[running].min()) >= 1   # pending 1 at position 0 is a prefill's last token
                and (n_wait == 0 or running.size >= max_num_seqs) and running.size <= B):
            rem = L[running] - pos[running]
            m = int(rem.min())
            if kv and m >= 2:   # stop before the step whose new blocks would not fit
                c0 = computed[running]
                fits = lambda j: int(blocks(c0 + j + 1).sum()) <= num_blocks  # noqa: E731
                if not fits(m - 1):
                    lo, hi = 0, m - 1          # fits(lo) is unknown only for lo = 0
                    if not fits(0):
                        m = 0
                    else:
                        while hi - lo > 1:
                            mid = (lo + hi) // 2
                            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
                        m = hi
            if m >= 2:
                R = int(running.size)
                j = np.arange(m, dtype=np.int64)
                ctx = int(computed[running].sum()) + j * R
                t = step_model.predict(running=np.full(m, R), decode_tokens=np.full(m, R), context_tokens=ctx)
                t = np.asarray(t, dtype=float)
                clk = np.cumsum(np.concatenate([[clock], t]))[1:]   # sequential sums, as step by step
                fin = np.zeros(m, dtype=np.int64)
                fin[-1] = int((rem == m).sum())
                zero = np.zeros(m, dtype=np.int64)
                for c, v in (("step", step + j), ("time_s", t), ("clock_s", clk), ("num_running", np.full(m, R)),
                             ("num_waiting", np.full(m, n_wait)), ("num_scheduled_tokens", np.full(m, R)),
                             ("num_prefill_tokens", zero), ("num_decode_reqs", np.full(m, R)), ("context_tokens", ctx),
                             ("num_drafted", zero), ("num_accepted", zero), ("num_emitted", np.full(m, R)),
                             ("speculative", np.zeros(m, dtype=bool)), ("num_finished", fin), ("num_preempted", zero)):
                    cols[c].append(v)
                clock = float(clk[-1])
                step += m
                pos[running] += m
                computed[running] += m
                done = pos[running] >= L[running]
                finish[running[done]] = clock
                running = running[~done]
                continue
        # --- running requests, oldest first
        R = running.size
        n_tok = np.minimum(pending, B)
        d = np.zeros(R, dtype=np.int64)
        if spec and R:
            room = np.minimum(k, L[running] - pos[running] - 1)
            dd = D[prof_index(running, pos[running])]
            d = np.where(decoding, np.maximum(np.minimum(dd, room), 0), 0)
        need = n_tok + d
        cs = np.cumsum(need)
        full = cs <= B
        sched_n = np.where(full, n_tok, 0)
        sched_d = np.where(full, d, 0)
        budget = B - (int(cs[full][-1]) if full.any() else 0)
        if not full.all():
            j0 = int(np.argmin(full))   # first request that does not fit whole
            if budget > 0:
                sched_n[j0] = min(int(pending[j0]), budget)
                if decoding[j0]:
                    sched_d[j0] = max(min(int(d[j0]), budget - 1), 0)
                budget -= int(sched_n[j0] + sched_d[j0])
            budget = min(budget, 0) if budget <= 0 else 0  # nothing after a request that did not fit
        in_sched = sched_n > 0
        preempted = 0
        free = reserved = 0
        if kv:
            free = num_blocks - int(blocks(computed[running]).sum())
            new_blocks = blocks(computed[running] + sched_n + sched_d) - blocks(computed[running])
            reserved = int(new_blocks[in_sched].sum())
            if reserved > free:   # preemption: the engine's rule, one request at a time
                run_list, sched_n, sched_d, budget, reserved, free, victims = _schedule_kv(
                    running.tolist(), pending, decoding, d, computed, B, free, bs)
                for v in victims:   # the latest admitted first; each goes to the front of the queue
                    computed[v] = 0
                    requeue.insert(0, v)
                preempted = len(victims)
                running = np.array(run_list, dtype=np.int64)
                in_sched = sched_n > 0
        # --- admissions (preempted requests first, then first come first served)
        admitted = []
        while (requeue or next_wait < N) and budget > 0 and running.size + len(admitted) < max_num_seqs:
            i = requeue[0] if requeue else next_wait
            n = min(int(P[i] + pos[i]), budget)
            if kv:
                if int(blocks(n)) > free - reserved:
                    break
                reserved += int(blocks(n))
            admitted.append((i, n))
            budget -= n
            if requeue:
                requeue.pop(0)
            else:
                next_wait += 1
        adm = np.array([i for i, _ in admitted], dtype=np.int64)
        s_idx = np.concatenate([running[in_sched], adm])
        s_n = np.concatenate([sched_n[in_sched], np.array([n for _, n in admitted], dtype=np.int64)])
        s_d = np.concatenate([sched_d[in_sched], np.zeros(len(admitted), dtype=np.int64)])
        if not s_idx.size:
            raise RuntimeError("the simulated scheduler made no progress")
        ctx_tokens = int(computed[s_idx].sum())
        n_sched_tokens = int(s_n.sum() + s_d.sum())
        s_pos = pos[s_idx]
        samples = computed[s_idx] + s_n == P[s_idx] + s_pos
        dec_step = samples & (s_pos > 0)
        acc = np.where(dec_step, np.minimum(A[prof_index(s_idx, s_pos)], s_d), 0)
        emit = np.where(samples, np.where(dec_step, np.where(s_pos + acc < L[s_idx], acc + 1, acc), 1), 0)
        prefill_tokens = int(s_n[~dec_step].sum())
        t = float(step_model.predict(running=int(s_idx.size), prefill_tokens=prefill_tokens,
                                     decode_tokens=int(s_n[dec_step].sum()), draft_tokens=int(s_d.sum()),
                                     context_tokens=ctx_tokens, spec_requests=int(dec_step.sum()) * int(s_d.sum() > 0),
                                     speculative=int(s_d.sum() > 0)))   # as step_model.step_features
        clock += t
        n_wait_after = N - next_wait + len(requeue)
        # the tail as the rollout suite defines it (suites/rollout/phases.py): nobody waiting after
        # the step, at most T in it
        if tail_threshold is not None and spec and nb and s_idx.size <= tail_threshold and n_wait_after == 0:
            bins = np.searchsorted(edges, s_pos[dec_step], side="right")
            np.add.at(tail_d, bins, s_d[dec_step])
            np.add.at(tail_a, bins, acc[dec_step])
            np.add.at(tail_n, bins, (s_d[dec_step] > 0).astype(np.int64))
        computed[s_idx] += s_n + np.where(samples, acc, 0)
        newly_first = samples & (s_pos == 0)
        first[s_idx[newly_first]] = clock
        pos[s_idx] += emit
        done_mask = pos[s_idx] >= L[s_idx]
        finish[s_idx[done_mask]] = clock
        run_all = np.concatenate([running, adm])
        running = run_all[pos[run_all] < L[run_all]]
        record(step=step, time_s=t, clock_s=clock, num_running=int(s_idx.size), num_waiting=n_wait_after,
               num_scheduled_tokens=n_sched_tokens, num_prefill_tokens=prefill_tokens,
               num_decode_reqs=int(dec_step.sum()), context_tokens=ctx_tokens, num_drafted=int(s_d.sum()),
               num_accepted=int(acc.sum()), num_emitted=int(emit.sum()), speculative=spec,
               num_finished=int(done_mask.sum()), num_preempted=preempted)
        step += 1
    steps = {}
    for c in STEP_COLUMNS:
        parts = [np.atleast_1d(np.asarray(v)) for v in cols[c]]
        steps[c] = np.concatenate(parts) if parts else np.zeros(0)
    steps["speculative"] = steps["speculative"].astype(bool)
    ta = None
    if tail_threshold is not None and nb:
        ta = {"edges": edges, "drafted": tail_d, "accepted": tail_a, "draft_steps": tail_n}
    return SimResult(steps=steps, finish_time_s=finish, first_token_time_s=first, makespan_s=clock, num_steps=step,
                     policy=policy.describe() if hasattr(policy, "describe") else {}, k=k, tail_acceptance=ta)


def reprice(result: SimResult, step_model: StepTimeModel) -> SimResult:
    """The same schedule timed with another step-time model. Schedules do not depend on step
    times, so one simulation with `StepTimeModel.constant(1.0)` (clock = step count) can be
    priced with any model; `result` must come from such a run."""
    t = step_model.predict_steps(result.steps)
    clock = np.cumsum(t)
    steps = dict(result.steps, time_s=t, clock_s=clock)

    def at(step_clock):
        f = np.asarray(step_clock, dtype=float)
        out = np.full(f.shape, np.nan)
        ok = np.isfinite(f)
        out[ok] = clock[np.round(f[ok]).astype(np.int64) - 1]
        return out

    if result.num_steps and not np.isclose(result.makespan_s, result.num_steps):
        raise ValueError("reprice needs a simulation run with StepTimeModel.constant(1.0)")
    return replace(result, steps=steps, finish_time_s=at(result.finish_time_s),
                   first_token_time_s=at(result.first_token_time_s),
                   makespan_s=float(clock[-1]) if clock.size else 0.0)
