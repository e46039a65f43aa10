"""Rollout simulation: the reference engine's continuous-batching rules replayed without a
model, with per-request acceptance from real token sequences and step times from a fitted
`StepTimeModel`.

Scheduling (the same rules as `bench.engines.reference.ReferenceEngine._step`):
- before each step the policy sees StepState(step, running, waiting, decoding) and decides
  whether the step speculates and, for a per-step k policy (`step_k`, bench/policies.py), at
  most how many draft tokens a request verifies this step (capped by the arm's k);
- token budget `max_num_batched_tokens`; running requests first, oldest first: each takes its
  pending tokens (the rest of a chunked prefill, or 1 when decoding) plus, when speculating and
  decoding, min(the step's k, its draft length, max_tokens - output - 1, budget - 1) draft tokens (max_tokens:
  the engine's limit, which an EOS end lies before: the engine drafts past an end it cannot see); then
  waiting requests are admitted first come first served while budget > 0 and fewer than
  `max_num_seqs` run, each with min(prompt, budget) prefill tokens (`admission`: another
  order, admission.py: Seer's context-aware order);
- a request whose prefill completes samples its first token; a decoding request emits its
  accepted drafts plus one token; it finishes when its response length is reached;
- KV cache (`kv_capacity_tokens`, blocks of `block_size`; default unlimited): a request holds
  ceil(KV tokens / block_size) blocks; a running request whose step needs more blocks than
  are free preempts the latest admitted running request (its blocks freed, its prompt and
  output recomputed as a prefill when it is readmitted, ahead of new requests), itself last;
  a waiting request is admitted only when its chunk's blocks are free. Blocks are reserved as
  the step is scheduled (vLLM's allocate-as-you-go), so a step never over-commits the cache.

Acceptance: per response position, what a real drafter proposes and how much the recorded
response confirms (`profiles.acceptance_profile`, where it says why that is exact for greedy
decoding and for sampling with deterministic drafts); profiles shorter or longer than the
simulated response (`SimRequest.stretch`) are read through `profiles.stretch_positions`, and a
`late` profile from `late.from_pos` on (profile_table.LateProfile).

Tree steps (`tree_running`, `tree_k`): in the tail few requests run and a step is bound by
reading the weights, so verifying more tokens is nearly free. A step verifies multi-path draft
trees when the policy speculates, nobody waits and at most `tree_running` requests run: each
decoding request drafts min(tree_k, tree_drafted[pos]) tree tokens (a node count: several
candidates sharing prefixes, one forward pass with tree attention; not capped by the tokens
left, but none at the last token) and keeps min(tree_accepted[pos], drafted, tokens left - 1),
the longest candidate the recorded tokens follow (exact for greedy, and for sampling with
deterministic drafts: the emitted tokens are the target's own samples); a request without a
tree profile reads its linear one. The token budget counts tree tokens as it counts drafts.

Long stretches without speculation, admissions or prefills are fast-forwarded in closed form
(fast_paths.py: every request emits one token a step until the next one finishes or the next
KV block would not fit), and so is the speculative end once the requests no longer interact
(nobody waits, the budget and the KV cache hold every request's rest, the policy speculates
at every running count down to 1: each request walks its own profile, band by band of running
counts sharing one k and profile table). Both need a policy whose decision depends on the
counts alone (`counts_only`); a history-dependent one (`observe_step`) is stepped one by one
until its decision is fixed, and so is a rollout while a multi-turn request has a turn left.

Multi-turn requests (`SimRequest.turns`, tool_turns.py): a request leaves the engine at the
end of a turn, comes back after its tool ran, and prefills the tool text as one chunk.

`RolloutSimulation` holds one arm's configuration (`SimConfig`) and state; each `advance` is
a closed-form block (fast_paths.py) or one step: `schedule` (running requests within the
budget, preemption on a full KV cache (kv_blocks.py), admissions), then `execute` (verify the
drafts against the profiles (profile_table.py), price the step, emit, retire finished
requests, log it (step_log.py)). `simulate` is the public entry point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from samspec_bench.bench.policies import AlwaysPolicy, OffPolicy, StepState
from samspec_bench.bench.simulation import fast_paths
from samspec_bench.bench.simulation.kv_blocks import KvBlocks, kv_capacity, schedule_with_preemption
from samspec_bench.bench.simulation.profile_table import (LateProfile, ProfileTable, accepted_at, drafts_at,
                                                          tree_table)
from samspec_bench.bench.simulation.step_log import STEP_COLUMNS, StepLog, TailAcceptance
from samspec_bench.bench.simulation.tool_turns import ToolTurns
from samspec_bench.bench.simulation.waiting_queue import WaitingQueue
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel

__all__ = ["STEP_COLUMNS", "RolloutSimulation", "SimConfig", "SimRequest", "SimResult", "simulate"]


@dataclass
class SimRequest:
    prompt_len: int
    response_len: int
    drafted: np.ndarray | None = None    # per position; None = never drafts anything
    accepted: np.ndarray | None = None
    group: Any = None
    stretch: bool = False   # profile shorter/longer than the response: read it through profiles.stretch_positions
    tree_drafted: np.ndarray | None = None   # per position, a draft tree's tokens (tree steps); None: the linear profile
    tree_accepted: np.ndarray | None = None  # the longest candidate the recorded response confirms
    late: LateProfile | None = None          # read from late.from_pos on (a group's, after the siblings finished)
    turns: Sequence | None = None            # tool spans [start, end) in response positions (tool_turns.py)
    max_tokens: int | None = None   # the engine's limit (drafts capped by it); None: response_len, the end known


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
    kv: dict[str, Any] = field(default_factory=dict)        # KV capacity, where it came from, preemptions
    turns: dict[str, Any] = field(default_factory=dict)     # tool calls and tool tokens (multi-turn requests)

    def table(self):
        import pandas as pd  # only for this view; the simulation itself needs numpy alone
        return pd.DataFrame(self.steps)


@dataclass(frozen=True)
class SimConfig:
    """One rollout arm's engine settings (`simulate`'s keywords).
    kv_capacity_tokens: KV cache size (None = unlimited), in blocks of `block_size` tokens.
    tail_threshold: steps with running <= it and nobody waiting count as the tail for
    `tail_acceptance` (bins by token position at drafting time, edges `position_edges`).
    fast_forward: compute the stretches the module docstring names in closed form (False:
    step one by one; the results are the same).
    tree_running: a speculating step with nobody waiting and at most this many running verifies
    draft trees of at most `tree_k` tokens a request (the module docstring; 0: never).
    admission: the order waiting requests are admitted in (admission.py: 'fcfs' or 'context',
    Seer's context-aware order, which reads every request's `group`).
    tool_latency_s: how long a multi-turn request's tool runs between its turns (tool_turns.py)."""

    k: int
    policy: Callable[[StepState], bool] | None
    step_model: StepTimeModel
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    tail_threshold: int | None = None
    position_edges: Sequence[int] = ()
    fast_forward: bool = True
    kv_capacity_tokens: int | None = None
    block_size: int = 16
    tree_running: int = 0
    tree_k: int = 0
    admission: str = "fcfs"
    tool_latency_s: float = 0.0


@dataclass
class _Batch:
    """What one step runs: requests, their scheduled (prefill or decode) tokens and drafts."""

    idx: np.ndarray
    tokens: np.ndarray
    drafts: np.ndarray
    admitted: np.ndarray   # the step's admissions (the tail of idx)
    tree: bool = False     # a tree step: drafts are tree tokens, read from the tree table


class RolloutSimulation:
    """One arm's rollout, advanced step by step (or a closed-form block of steps at a time)
    until every request has finished. Holds the configuration and the per-request state:
    KV tokens computed, response tokens emitted, finish and first-token times, the running
    requests in admission order and the waiting queue. `shared` (shared_queue.SharedRollout):
    the per-request state, profiles and waiting queue of a rollout whose instances pull from one
    queue, used in place of this instance's own (it then holds every request of the rollout)."""

    def __init__(self, requests: Sequence[SimRequest], config: SimConfig, shared=None):
        if config.max_num_seqs < 1 or config.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        self.N = N = len(requests)
        self.P = np.array([r.prompt_len for r in requests], dtype=np.int64)
        self.L = np.array([r.response_len for r in requests], dtype=np.int64)
        self.M = np.array([r.max_tokens or r.response_len for r in requests], dtype=np.int64)   # an EOS end: M > L
        if N and (self.P.min() < 1 or self.L.min() < 1 or bool((self.M < self.L).any())):
            raise ValueError("every request needs a prompt and a response of 1 to max_tokens tokens")
        self.profiles = ProfileTable(requests, self.L) if shared is None else shared.profiles
        self.k = k = int(config.k)
        self.tree_running, self.tree_k = int(config.tree_running), int(config.tree_k)
        if self.tree_running < 0 or (self.tree_running and self.tree_k < 1):
            raise ValueError(f"tree_running {self.tree_running} with tree_k {self.tree_k}: tree steps need "
                             "tree_running >= 1 and tree_k >= 1 (tree_running 0: none)")
        self.trees = (shared.trees if shared is not None else
                      tree_table(requests, self.L, self.profiles) if self.tree_running else self.profiles)
        self.kv_extra = max(k, self.tree_k if self.tree_running else 0)   # most KV tokens beyond P + L
        self.policy = config.policy if config.policy is not None else (AlwaysPolicy() if k else OffPolicy())
        self.observe = getattr(self.policy, "observe_step", None)   # a history-dependent policy's feedback
        self.step_model = config.step_model
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = int(config.max_num_batched_tokens)
        self.fast_forward = config.fast_forward
        self.tail = TailAcceptance(config.tail_threshold, config.position_edges)
        cap, self.kv_info = kv_capacity(config.kv_capacity_tokens, config.step_model, config.block_size)
        self.kv = None if cap is None else KvBlocks(cap, config.block_size, self.P + self.L + self.kv_extra,
                                                    what=self.kv_info["source"])
        self.shared = shared
        self.turns = ToolTurns([r.turns for r in requests], self.L, config.tool_latency_s)
        if shared is not None and self.turns.any:
            raise ValueError("multi-turn requests (tool turns) cannot run on a shared queue")
        if shared is None:
            self.computed = np.zeros(N, dtype=np.int64)   # KV tokens
            self.pos = np.zeros(N, dtype=np.int64)        # response tokens emitted
            self.finish = np.full(N, np.nan)
            self.first = np.full(N, np.nan)
            self.queue = WaitingQueue(config.admission, [r.group for r in requests], self.L)
        else:
            self.computed, self.pos, self.finish, self.first, self.queue = (
                shared.computed, shared.pos, shared.finish, shared.first, shared.queue)
        self.running = np.zeros(0, dtype=np.int64)    # admission order
        self.requeue: list[int] = []                  # preempted requests, at the front of the waiting queue
        self.clock = 0.0
        self.step = 0
        self.log = StepLog()

    def run(self) -> SimResult:
        while len(self.queue) or self.running.size or self.requeue or self.turns.away:
            self.advance()
        return self.result()

    def result(self, finish: np.ndarray | None = None, first: np.ndarray | None = None) -> SimResult:
        """What ran so far (`finish` / `first`: the per-request times to report, default all)."""
        policy = self.policy.describe() if hasattr(self.policy, "describe") else {}
        steps = self.log.arrays()
        kv = {**self.kv_info, "preemptions": int(np.sum(steps.get("num_preempted", 0)))}
        return SimResult(steps=steps, finish_time_s=self.finish if finish is None else finish,
                         first_token_time_s=self.first if first is None else first,
                         makespan_s=self.clock, num_steps=self.step, policy=policy, k=self.k,
                         tail_acceptance=self.tail.result(), kv=kv,
                         turns=self.turns.describe() if self.turns.any else {})

    def num_waiting(self) -> int:
        return len(self.queue) + len(self.requeue)

    def advance(self) -> None:
        """One step, or a block of steps in closed form where one applies."""
        if self.turns.away:   # tools that returned: their requests wait again (an idle engine waits for them)
            self.clock = self.turns.rejoin(self.queue, self.clock, bool(self.running.size or self.num_waiting()))
        run = self.running
        n_wait = self.num_waiting()
        pending = self.P[run] + self.pos[run] - self.computed[run]
        decoding = pending == 1
        n_dec = int(decoding.sum())
        state = StepState(self.step, int(run.size), n_wait, n_dec)
        k_now = self.step_k(state)
        spec = k_now > 0 and bool(self.policy(state))
        # counts_only is read every step: a history-dependent policy (observe_step) turns it on once
        # its decision is fixed, and the closed forms apply from there
        counts_only = bool(getattr(self.policy, "counts_only", False))
        if self.fast_forward and counts_only and run.size and n_dec == run.size and int(self.pos[run].min()) >= 1:
            # every running request decodes (pending 1 at position 0 is a prefill's last token)
            bands = self._end_bands(n_wait) if spec else None
            if bands is not None:
                self._finish_speculatively(bands)
                return
            if not spec and self._no_change_ahead(n_wait) and self._decode_without_speculation(n_wait):
                return
        tree = spec and n_wait == 0 and 0 < run.size <= self.tree_running
        batch, preempted = self.schedule(spec, pending, decoding, self.tree_k if tree else k_now, tree)
        self.execute(batch, spec, preempted)

    def step_k(self, state: StepState) -> int:
        """The step's most draft tokens per request: the arm's k, or a per-step k policy's
        (`step_k`) capped by it."""
        f = getattr(self.policy, "step_k", None) if self.k else None
        return self.k if f is None else max(0, min(self.k, int(f(state))))

    # ---------- closed forms ----------

    def _end_bands(self, n_wait: int) -> list | None:
        """The speculative end's (k, profile table, tree) at each running count 1 .. running
        (index 0 unused), where the requests no longer interact: nobody waits, the token budget
        and the KV cache hold every running request's whole speculative rest, and the policy
        speculates at every running count down to 1. None where they could interact."""
        run, n = self.running, int(self.running.size)
        if n_wait or self.shared is not None or self.turns.more_turns(run) or (
                self.kv is not None and not self.kv.fits(self.P[run] + self.L[run] + self.kv_extra)):
            return None
        states = [StepState(self.step, r, 0, r) for r in range(1, n + 1)]
        ks = [self.step_k(s) for s in states]
        bands = [None] + [(self.tree_k, self.trees, True) if r <= self.tree_running else (k, self.profiles, False)
                          for r, k in zip(range(1, n + 1), ks)]
        fit = all(r * (bands[r][0] + 1) <= self.max_num_batched_tokens for r in range(1, n + 1))
        return bands if fit and all(k > 0 and self.policy(s) for k, s in zip(ks, states)) else None

    def _finish_speculatively(self, bands: list) -> None:
        run = self.running
        cols, finish = fast_paths.speculative_end(run, self.pos, self.P, self.L, self.M, bands, self.step_model,
                                                  self.clock, self.step, self.tail)
        self.log.add(**cols)
        self.finish[run] = finish
        self.pos[run] = self.L[run]
        self.computed[run] = self.P[run] + self.L[run] - 1
        self.clock = float(cols["clock_s"][-1])
        self.step += len(cols["step"])
        self.running = run[:0]

    def _no_change_ahead(self, n_wait: int) -> bool:
        """No admission can happen and one token a request fits the budget."""
        run = self.running
        if run.size > self.max_num_batched_tokens:
            return False
        if self.shared is not None:   # other instances may return chunks to the queue: only a full batch is sure
            return run.size >= self.max_num_seqs
        return n_wait == 0 or run.size >= self.max_num_seqs or self._head_blocked_by_kv()

    def _head_blocked_by_kv(self) -> bool:
        """The next waiting request's prefill chunk needs more KV blocks than are free now. While
        the running requests decode and none finishes, free blocks only shrink, so it stays out
        (admission takes the head first, nobody behind it goes first, and the admission order's
        head changes only when a request finishes) until the block ends."""
        if self.kv is None:
            return False
        run = self.running
        budget = self.max_num_batched_tokens - int(run.size)
        i = self._next_waiting()
        n = min(self._pending(i), budget)
        free = self.kv.num_blocks - int(self.kv.blocks(self.computed[run]).sum())
        return budget <= 0 or int(self.kv.blocks(int(self.computed[i]) + n)) > free

    def _decode_without_speculation(self, n_wait: int) -> bool:
        """Decode without speculation until the first request finishes (or the KV cache would
        overflow); False where that is under two steps (stepped one by one instead)."""
        run = self.running
        rem = self.turns.end[run] - self.pos[run]   # to the turn's end: the response's without turns
        m = fast_paths.decode_run_length(rem, self.computed[run], self.kv)
        if self.shared is not None:   # and short of the step where a chunk ends or a request finishes: that
            m = min(m, self.shared.steps_to_release(run)) - 1   # one other instances see, so it waits its turn

        def block(m):
            return fast_paths.decode_block(int(run.size), int(self.computed[run].sum()), m, n_wait,
                                           int(((rem == m) & (self.turns.end[run] == self.L[run])).sum()),
                                           self.step_model, self.clock, self.step)
        cols = block(m) if m >= 2 else None
        if cols is not None and self.turns.away:   # up to the step a tool returns in: it waits from there
            m = min(m, int(np.searchsorted(cols["clock_s"], self.turns.next_back_s())) + 1)
            cols = block(m) if m >= 2 else None
        if cols is None:
            return False
        self.log.add(**cols)
        self.clock = float(cols["clock_s"][-1])
        self.step += m
        self.pos[run] += m
        self.computed[run] += m
        done = self.pos[run] >= self.L[run]
        self.finish[run[done]] = self.clock
        self._finished(run[done])
        away = self.turns.leave(run, self.pos, self.clock)
        self.running = run[~done & ~np.isin(run, away)]
        return True

    # ---------- one step ----------

    def schedule(self, spec: bool, pending: np.ndarray, decoding: np.ndarray,
                 k: int | None = None, tree: bool = False) -> tuple[_Batch, int]:
        """The step's batch: running requests first (preempting where the KV cache is short),
        then admissions; drafts of at most `k` tokens (default: the arm's k; tree tokens in a
        tree step). Returns it and the number of requests preempted."""
        sched_n, sched_d, drafts, budget = self._schedule_running(spec, pending, decoding,
                                                                  self.k if k is None else k, tree)
        in_sched = sched_n > 0
        preempted = room = 0
        if self.kv is not None:
            run = self.running
            free = self.kv.num_blocks - int(self.kv.blocks(self.computed[run]).sum())
            new_blocks = self.kv.blocks(self.computed[run] + sched_n + sched_d) - self.kv.blocks(self.computed[run])
            reserved = int(new_blocks[in_sched].sum())
            if reserved > free:   # preemption: the engine's rule, one request at a time
                sched_n, sched_d, budget, reserved, free, preempted = self._preempt(pending, decoding, drafts, free)
                in_sched = sched_n > 0
            room = free - reserved
        adm, adm_n = self._admit(budget, room)
        batch = _Batch(idx=np.concatenate([self.running[in_sched], adm]),
                       tokens=np.concatenate([sched_n[in_sched], adm_n]),
                       drafts=np.concatenate([sched_d[in_sched], np.zeros(len(adm), dtype=np.int64)]),
                       admitted=adm, tree=tree)
        return batch, preempted

    def _schedule_running(self, spec: bool, pending: np.ndarray, decoding: np.ndarray, k: int, tree: bool):
        """Running requests, oldest first, within the token budget: each its pending tokens plus,
        when speculating and decoding, its drafts; the first that does not fit whole gets what is
        left (drafts capped at budget - 1), nobody after it. Returns (tokens, drafts as
        scheduled, drafts wanted, budget left)."""
        run, B = self.running, self.max_num_batched_tokens
        n_tok = np.minimum(pending, B)
        d = np.zeros(run.size, dtype=np.int64)
        if spec and run.size:
            table = self.trees if tree else self.profiles
            d = np.where(decoding, drafts_at(table, run, self.pos[run], self.M[run], k, tree), 0)
        cs = np.cumsum(n_tok + d)
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
        return sched_n, sched_d, d, budget

    def _preempt(self, pending: np.ndarray, decoding: np.ndarray, drafts: np.ndarray, free: int):
        """Reschedule the running requests with the engine's preemption rule; victims (the latest
        admitted first) lose their KV and go to the front of the waiting queue."""
        run_list, sched_n, sched_d, budget, reserved, free, victims = schedule_with_preemption(
            self.kv, self.running.tolist(), pending, decoding, drafts, self.computed,
            self.max_num_batched_tokens, free)
        for v in victims:
            self.computed[v] = 0
            self.requeue.insert(0, v)
        self.running = np.array(run_list, dtype=np.int64)
        return sched_n, sched_d, budget, reserved, free, len(victims)

    def _next_waiting(self) -> int:
        """The waiting request admitted next: a preempted one first, then the queue's head in
        the arm's admission order (admission.py; first come first served by default)."""
        return self.requeue[0] if self.requeue else self.queue.peek()

    def _pending(self, i: int) -> int:
        """Tokens request i must compute before it samples: its prompt (and output, when
        preempted) as a prefill, or 1 for a divided rollout's chunk whose KV it brings along."""
        return int(self.P[i] + self.pos[i] - self.computed[i])

    def _finished(self, idx: np.ndarray) -> None:
        """Requests that just finished (an admission order that learns from them hears of it)."""
        self.queue.finished(idx)

    def _admit(self, budget: int, room: int) -> tuple[np.ndarray, np.ndarray]:
        """Waiting requests (preempted ones first, then in the admission order) while budget is
        left, fewer than max_num_seqs run and, with a KV cache, their prefill's blocks fit in
        `room`. Returns (requests, prefill tokens)."""
        admitted = []
        while ((self.requeue or len(self.queue)) and budget > 0
               and self.running.size + len(admitted) < self.max_num_seqs):
            i = self._next_waiting()
            n = min(self._pending(i), budget)
            if self.kv is not None:   # a chunk's KV comes along whole
                need = int(self.kv.blocks(int(self.computed[i]) + n))
                if need > room:
                    break
                room -= need
            admitted.append((i, n))
            budget -= n
            if self.requeue:
                self.requeue.pop(0)
            else:
                self.queue.take(i)
        return (np.array([i for i, _ in admitted], dtype=np.int64),
                np.array([n for _, n in admitted], dtype=np.int64))

    def execute(self, batch: _Batch, spec: bool, preempted: int) -> None:
        """Run the batch: verify drafts against the profiles, price the step, emit, retire."""
        idx, s_n, s_d = batch.idx, batch.tokens, batch.drafts
        if not idx.size:
            raise RuntimeError("the simulated scheduler made no progress")
        ctx_tokens = int(self.computed[idx].sum())
        s_pos = self.pos[idx]
        samples = self.computed[idx] + s_n == self.P[idx] + s_pos
        # a chunk of several tokens that samples (a recompute, a turn's tool text) is a prefill
        dec_step = samples & (s_pos > 0) & (s_n == 1)
        table = self.trees if batch.tree else self.profiles
        acc = np.where(dec_step, accepted_at(table, idx, s_pos, self.turns.end[idx], s_d), 0)
        emit = np.where(samples, np.where(dec_step, np.where(s_pos + acc < self.L[idx], acc + 1, acc), 1), 0)
        prefill_tokens = int(s_n[~dec_step].sum())
        drafted = int(s_d.sum())
        t = float(self.step_model.predict(running=int(idx.size), prefill_tokens=prefill_tokens,
                                          decode_tokens=int(s_n[dec_step].sum()), draft_tokens=drafted,
                                          context_tokens=ctx_tokens, spec_requests=int(dec_step.sum()) * int(drafted > 0),
                                          speculative=int(drafted > 0)))   # as step_model.step_features
        self.clock += t
        n_wait_after = self.num_waiting()
        # the tail as the rollout suite defines it (suites/rollout/phases.py): nobody waiting after
        # the step, at most T in it
        if self.tail.active and spec and idx.size <= self.tail.threshold and n_wait_after == 0:
            self.tail.add(s_pos[dec_step], s_d[dec_step], acc[dec_step])
        self.computed[idx] += s_n + np.where(samples, acc, 0)
        self.first[idx[samples & (s_pos == 0)]] = self.clock
        self.pos[idx] += emit
        done = self.pos[idx] >= self.L[idx]
        self.finish[idx[done]] = self.clock
        self._finished(idx[done])
        self._retire(batch.admitted, self.turns.leave(idx, self.pos, self.clock))
        self.log.add(step=self.step, time_s=t, clock_s=self.clock, num_running=int(idx.size), num_waiting=n_wait_after,
                     num_scheduled_tokens=int(s_n.sum() + s_d.sum()), num_prefill_tokens=prefill_tokens,
                     num_decode_reqs=int(dec_step.sum()), context_tokens=ctx_tokens, num_drafted=drafted,
                     num_accepted=int(acc.sum()), num_emitted=int(emit.sum()), speculative=spec,
                     num_finished=int(done.sum()), num_preempted=preempted, tree=batch.tree)
        if self.observe is not None:
            self.observe(self.step, drafted, int(acc.sum()))
        self.step += 1

    def _retire(self, admitted: np.ndarray, away: np.ndarray) -> None:
        """The running set after a step: the running requests and the step's admissions, in
        admission order, less those that finished or left for a tool."""
        run_all = np.concatenate([self.running, admitted])
        keep = self.pos[run_all] < self.L[run_all]
        self.running = run_all[keep & ~np.isin(run_all, away)] if away.size else run_all[keep]


def simulate(requests: Sequence[SimRequest], **options) -> SimResult:
    """Simulate one rollout arm; `options` are SimConfig's fields (k, policy and step_model
    required; k = 0 or an off policy: no speculation)."""
    return RolloutSimulation(requests, SimConfig(**options)).run()
