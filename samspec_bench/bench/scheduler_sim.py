"""Rollout simulation: the reference engine's continuous-batching rules replayed without a
model, with per-request acceptance from real token sequences and step times from a fitted
`StepTimeModel`.

Scheduling (the same rules as `reference_engine.ReferenceEngine._step`, without KV-cache
preemption: the simulated cache is assumed large enough):
- before each step the policy sees StepState(step, running, waiting, decoding) and decides
  whether the step speculates;
- token budget `max_num_batched_tokens`; running requests first, oldest first: each takes its
  pending tokens (the rest of a chunked prefill, or 1 when decoding) plus, when speculating and
  decoding, min(k, its draft length, max_tokens - output - 1, budget - 1) draft tokens; then
  waiting requests are admitted first come first served while budget > 0 and fewer than
  `max_num_seqs` run, each with min(prompt, budget) prefill tokens;
- a request whose prefill completes samples its first token; a decoding request emits its
  accepted drafts plus one token; it finishes when its response length is reached.

Acceptance: `acceptance_profile` drafts at EVERY response position with a real drafter (own
prompt + prefix; state at position p is the same whether p was reached with or without
speculation, because the drafter is always extended with the same tokens) and records the
draft length and the accepted length (the longest prefix matching the recorded tokens). That
is exact for greedy decoding, and also for sampled decoding with a deterministic drafter
(a draft token is accepted iff the sampled token equals it, since rejection re-samples with
the draft token removed). Walking the profile with pos += accepted + 1 reproduces
`replay.replay_response` step for step (checked in tests).

Long stretches without speculation, admissions or prefills are fast-forwarded in closed form
(every request emits one token a step until the next one finishes), so 1536 x 16 requests of
tens of thousands of tokens simulate in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from samspec_bench.bench.engine import NeverSpeculate, SpecPolicy, StepState
from samspec_bench.bench.step_model import StepTimeModel

STEP_COLUMNS = ("step", "time_s", "clock_s", "num_running", "num_waiting", "num_scheduled_tokens",
                "num_prefill_tokens", "num_decode_reqs", "context_tokens", "num_drafted", "num_accepted",
                "num_emitted", "speculative", "num_finished")


class ThresholdPolicy(SpecPolicy):
    """Speculate when the number of running requests is at most `threshold` (the seed's
    adaptive switch). Decided on the state before the step (running = admitted, unfinished)."""

    name = "threshold"
    counts_only = True

    def __init__(self, threshold: int):
        if threshold < 0:
            raise ValueError(f"spec threshold {threshold}: must be >= 0")
        self.threshold = int(threshold)

    def __call__(self, state: StepState) -> bool:
        return state.num_running <= self.threshold

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "threshold": self.threshold}


class AlwaysPolicy(SpecPolicy):
    name = "always"
    counts_only = True


class OffPolicy(NeverSpeculate):
    counts_only = True


def make_policy(arm: str, threshold: int | None = None) -> SpecPolicy:
    if arm == "off":
        return OffPolicy()
    if arm == "always":
        return AlwaysPolicy()
    if arm == "threshold":
        if threshold is None:
            raise ValueError("the threshold arm needs a threshold")
        return ThresholdPolicy(threshold)
    raise ValueError(f"arm {arm!r}: use off, always or threshold")


# ---------- acceptance from real token sequences ----------

def acceptance_profile(drafter, prompt_ids, response_ids, k: int, req_id=0, group=None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(drafted[p], accepted[p]) for every response position p (p = 0 is the prefill's token:
    0, 0). The draft at p is the drafter's proposal of up to k tokens after resp[:p]."""
    resp = [int(t) for t in response_ids]
    n = len(resp)
    drafted = np.zeros(n, dtype=np.int16)
    accepted = np.zeros(n, dtype=np.int16)
    drafter.start(req_id, prompt_ids, group=group)
    try:
        if n:
            drafter.extend(req_id, resp[:1])
        for p in range(1, n):
            d = drafter.propose(req_id, k)
            a = 0
            end = min(len(d), n - p)
            while a < end and d[a] == resp[p + a]:
                a += 1
            drafted[p] = len(d)
            accepted[p] = a
            drafter.extend(req_id, resp[p:p + 1])
    finally:
        drafter.stop(req_id)
    return drafted, accepted


def walk_profile(drafted: np.ndarray, accepted: np.ndarray, k: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """Always-speculating decode of one response from its profile: (position, drafted, accepted,
    emitted) per decode step, with replay.py's end rule (no bonus token past the last token)."""
    n = len(drafted)
    pos, out = 1, ([], [], [], [])
    while pos < n:
        d = min(int(drafted[pos]), k)
        a = min(int(accepted[pos]), d)
        e = a + 1 if pos + a < n else a
        for lst, v in zip(out, (pos, d, a, e)):
            lst.append(v)
        pos += e
    return out


@dataclass
class SimRequest:
    prompt_len: int
    response_len: int
    drafted: np.ndarray | None = None    # per position; None = never drafts anything
    accepted: np.ndarray | None = None
    group: Any = None


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
        import pandas as pd
        return pd.DataFrame(self.steps)


# ---------- the simulation ----------

def simulate(requests: Sequence[SimRequest], *, k: int, policy: Callable[[StepState], bool] | None,
             step_model: StepTimeModel, max_num_seqs: int = 64, max_num_batched_tokens: int = 2048,
             tail_threshold: int | None = None, position_edges: Sequence[int] = (),
             fast_forward: bool = True) -> SimResult:
    """Simulate one rollout arm. k = 0 or policy None-like OffPolicy: no speculation.
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
    chunks_d, chunks_a, starts = [np.zeros(1, dtype=np.int16)], [np.zeros(1, dtype=np.int16)], [0]
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
    D = np.concatenate(chunks_d).astype(np.int64) if total < 50_000_000 else np.concatenate(chunks_d)
    A = np.concatenate(chunks_a).astype(np.int64) if total < 50_000_000 else np.concatenate(chunks_a)

    def prof_index(idx, p):
        """Index into D/A of position p of requests idx (0 = no draft)."""
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
    next_wait = 0
    clock = 0.0
    step = 0
    cols: dict[str, list] = {c: [] for c in STEP_COLUMNS}

    def record(**kv):
        for c in STEP_COLUMNS:
            cols[c].append(kv[c])

    B = int(max_num_batched_tokens)
    while next_wait < N or running.size:
        n_wait = N - next_wait
        pending = P[running] + pos[running] - computed[running]
        decoding = pending == 1
        n_dec = int(decoding.sum())
        st = StepState(step, int(running.size), n_wait, n_dec)
        spec = bool(k) and bool(policy(st))
        # --- fast-forward: all decoding, no admissions possible, no speculation, policy fixed
        if (fast_forward and not spec and counts_only and running.size and n_dec == running.size
                and (n_wait == 0 or running.size >= max_num_seqs) and running.size <= B):
            rem = L[running] - pos[running]
            m = int(rem.min())
            if m >= 2:
                R = int(running.size)
                j = np.arange(m, dtype=np.int64)
                ctx = int(computed[running].sum()) + j * R
                t = step_model.predict(np.full(m, R), np.full(m, R), ctx, np.zeros(m))
                t = np.asarray(t, dtype=float)
                clk = clock + np.cumsum(t)
                fin = np.zeros(m, dtype=np.int64)
                fin[-1] = int((rem == m).sum())
                for c, v in (("step", step + j), ("time_s", t), ("clock_s", clk), ("num_running", np.full(m, R)),
                             ("num_waiting", np.full(m, n_wait)), ("num_scheduled_tokens", np.full(m, R)),
                             ("num_prefill_tokens", np.zeros(m, dtype=np.int64)),
                             ("num_decode_reqs", np.full(m, R)), ("context_tokens", ctx),
                             ("num_drafted", np.zeros(m, dtype=np.int64)), ("num_accepted", np.zeros(m, dtype=np.int64)),
                             ("num_emitted", np.full(m, R)), ("speculative", np.zeros(m, dtype=bool)),
                             ("num_finished", fin)):
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
        # --- admissions
        admitted = []
        while next_wait < N and budget > 0 and R + len(admitted) < max_num_seqs:
            i = next_wait
            n = min(int(P[i]), budget)
            admitted.append((i, n))
            budget -= n
            next_wait += 1
        s_idx = np.concatenate([running[in_sched], np.array([i for i, _ in admitted], dtype=np.int64)])
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
        t = float(step_model.predict(int(s_idx.size), n_sched_tokens, ctx_tokens, int(spec)))
        clock += t
        if tail_threshold is not None and spec and nb and running.size <= tail_threshold and n_wait == 0:
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
        run_all = np.concatenate([running, np.array([i for i, _ in admitted], dtype=np.int64)])
        running = run_all[pos[run_all] < L[run_all]]
        record(step=step, time_s=t, clock_s=clock, num_running=int(s_idx.size), num_waiting=N - next_wait,
               num_scheduled_tokens=n_sched_tokens, num_prefill_tokens=prefill_tokens,
               num_decode_reqs=int(dec_step.sum()), context_tokens=ctx_tokens, num_drafted=int(s_d.sum()),
               num_accepted=int(acc.sum()), num_emitted=int(emit.sum()), speculative=spec,
               num_finished=int(done_mask.sum()))
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
