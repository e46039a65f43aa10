"""Seer's divided rollout (arXiv 2511.14617, "divided rollout", read from the paper; no code
of it is public): the engine instances of a rollout pull from ONE waiting queue instead of
each holding a fixed shard (dp.py), and a running request leaves its instance after every
`chunk_tokens` response tokens and waits in that queue again, its KV cache kept in a pool the
instances share, so whichever instance has a free slot next continues it. Long responses then
spread over the instances as the rollout drains, instead of piling up on the instance that
happened to hold them.

How it is simulated: one `RolloutSimulation` per instance over every request of the rollout,
all sharing the per-request state, the acceptance profiles and the queue (`SharedRollout`);
the instance whose clock is earliest takes the next step. Of the closed-form blocks
(scheduler.py) only decoding without speculation in a full batch applies, and it stops one
step short of the first finish or chunk end: those are what the other instances see (a chunk
in the queue, a length the context order learns), so that step waits its turn like any other.
An instance with a free slot, or at the speculative end, is stepped one by one (a chunk may
come back to the queue at any time). Each instance keeps its own running batch, token budget,
max_num_seqs, KV cache, preemptions and switch (`policy` is a factory, one object per
instance).

Assumptions, stated with every result that uses it:
- moving a chunk costs nothing: its KV comes along (from the shared pool) without a prefill
  and without transfer time; the readmitted request decodes one token in its first step back
  (no drafts: it was just admitted), as every admission does. Seer loads it from its global
  KV pool (Mooncake); a slow pool would make this optimistic;
- a busy instance may admit a chunk that rejoined the queue, or read a finish, up to one of its
  steps early (its step began before the other instance's step ended); an idle instance waits
  for the chunk;
- `chunk_tokens` 0: one queue, no chunks (requests pulled as slots free up, then kept).
The queue's order (`admission`) is first come first served in request order (a GRPO group's
members consecutive, as verl submits them), chunks rejoining at the back, or Seer's
context-aware order (admission.py) over the whole rollout.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from samspec_bench.bench.simulation.dp import DPResult
from samspec_bench.bench.simulation.profile_table import ProfileTable, tree_table
from samspec_bench.bench.simulation.scheduler import RolloutSimulation, SimConfig, SimRequest
from samspec_bench.bench.simulation.waiting_queue import WaitingQueue


DIVIDED_ASSUMED = ("every instance pulls from one queue (the baseline keeps verl's fixed shards); a chunk moves to "
                   "another instance at no cost (its KV from a shared pool, no prefill, no transfer time)")


class ChunkQueue(WaitingQueue):
    """The shared queue, also noting where each request's current chunk began and which
    instance took it (and finished it)."""

    def __init__(self, admission: str, groups: Sequence, lengths: np.ndarray, pos: np.ndarray,
                 computed: np.ndarray):
        super().__init__(admission, groups, lengths)
        self.pos, self.computed = pos, computed
        self.chunk_start = np.zeros(len(lengths), dtype=np.int64)   # response position at (re)admission
        self.taken_by = np.full(len(lengths), -1, dtype=np.int64)
        self.finished_on = np.full(len(lengths), -1, dtype=np.int64)
        self.instance = 0          # the instance taking the step now (the driver sets it)
        self.moved = 0             # chunks continued on another instance than the one they left
        self.kv_moved = 0          # their KV tokens (what the shared pool carried)

    def take(self, i: int) -> None:
        super().take(i)
        if self.taken_by[i] >= 0 and self.taken_by[i] != self.instance:
            self.moved += 1
            self.kv_moved += int(self.computed[i])
        self.taken_by[i] = self.instance
        self.chunk_start[i] = self.pos[i]

    def finished(self, idx: np.ndarray) -> None:
        super().finished(idx)
        self.finished_on[idx] = self.instance


@dataclass
class SharedRollout:
    """What the instances of one divided rollout share (RolloutSimulation's `shared`)."""

    queue: ChunkQueue
    pos: np.ndarray
    computed: np.ndarray
    finish: np.ndarray
    first: np.ndarray
    profiles: Any
    trees: Any
    chunk_tokens: int = 0
    released: int = 0          # chunks that left an instance

    def steps_to_release(self, run: np.ndarray) -> int:
        """Decode steps (one token each) until the first of these requests ends its chunk."""
        if not self.chunk_tokens or not run.size:
            return np.iinfo(np.int64).max
        return int(np.min(self.queue.chunk_start[run] + self.chunk_tokens - self.pos[run]))


def _shared_state(requests: Sequence[SimRequest], config: SimConfig, chunk_tokens: int) -> SharedRollout:
    L = np.array([r.response_len for r in requests], dtype=np.int64)
    n = len(requests)
    pos, computed = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    profiles = ProfileTable(requests, L)
    trees = tree_table(requests, L, profiles) if config.tree_running else profiles
    queue = ChunkQueue(config.admission, [r.group for r in requests], L, pos, computed)
    return SharedRollout(queue, pos, computed, np.full(n, np.nan), np.full(n, np.nan), profiles, trees, chunk_tokens)


def _release_chunks(sim: RolloutSimulation, shared: SharedRollout, chunk_tokens: int) -> None:
    """Running requests that emitted a whole chunk since their admission leave the instance
    (their KV blocks free here) and wait in the shared queue again."""
    run = sim.running
    done_chunk = shared.pos[run] - shared.queue.chunk_start[run] >= chunk_tokens
    if not done_chunk.any():
        return
    sim.running = run[~done_chunk]
    for i in run[done_chunk]:
        shared.queue.push(int(i), sim.clock)
    shared.released += int(done_chunk.sum())


def _next_instance(sims: list[RolloutSimulation], queue: ChunkQueue) -> tuple[int, float]:
    """The instance that steps next and the clock it steps from: the earliest among the busy
    ones and, while requests wait, the idle ones (an idle instance cannot start the queue's
    head before that request joined the queue)."""
    best, best_clock = -1, np.inf
    head_ready = float(queue.ready_s[queue.peek()]) if len(queue) else np.inf
    for j, s in enumerate(sims):
        busy = bool(s.running.size or s.requeue)
        clock = s.clock if busy else max(s.clock, head_ready)
        if clock < best_clock:
            best, best_clock = j, clock
    return best, best_clock


def simulate_shared(requests: Sequence[SimRequest], dp: int, *, chunk_tokens: int,
                    policy: Callable[[], Any] | None = None, admission: str = "fcfs",
                    **simulate_kwargs) -> DPResult:
    """A rollout on `dp` instances pulling from one queue, requests moving every `chunk_tokens`
    response tokens (0: never). `simulate_kwargs`: `scheduler.simulate`'s engine keywords
    (k, step_model, max_num_seqs, ...), per instance. Returns a DPResult whose shards are the
    requests each instance finished; `moves` counts the chunks."""
    if dp < 1:
        raise ValueError(f"dp {dp}: need at least one instance")
    if chunk_tokens < 0:
        raise ValueError(f"chunk_tokens {chunk_tokens}: a number of response tokens >= 0 (0: no chunks)")
    config = SimConfig(policy=None, admission=admission, **simulate_kwargs)
    shared = _shared_state(requests, config, chunk_tokens)
    queue = shared.queue
    sims = [RolloutSimulation(requests, replace(config, policy=policy() if policy else None), shared=shared)
            for _ in range(dp)]
    while len(queue) or any(s.running.size or s.requeue for s in sims):
        j, clock = _next_instance(sims, queue)
        sim = sims[j]
        sim.clock = clock
        queue.instance = j
        sim.advance()
        if chunk_tokens:
            _release_chunks(sim, shared, chunk_tokens)
    where = queue.finished_on
    results = [s.result(finish=shared.finish[where == j], first=shared.first[where == j])
               for j, s in enumerate(sims)]
    shards = [np.flatnonzero(where == j) for j in range(dp)]
    moves = {"chunk_tokens": int(chunk_tokens), "chunks_released": shared.released,
             "moved_between_instances": queue.moved, "kv_tokens_moved": queue.kv_moved}
    return DPResult(results, shards, shared.finish.copy(), shared.first.copy(), moves=moves)
