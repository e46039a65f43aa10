"""The simulated KV cache: a fixed number of blocks of `block_size` tokens; a request holds
ceil(KV tokens / block_size) of them. Scheduling with preemption when a step's new blocks do
not all fit (the reference engine's rule); the capacity itself (`kv_capacity`: given, or from
device memory)."""

from __future__ import annotations

from typing import Any

import numpy as np

from samspec_bench.errors import UserError


class KvBlocks:
    def __init__(self, capacity_tokens: int, block_size: int, worst_request_tokens: np.ndarray, what: str = "given"):
        """worst_request_tokens: each request's largest KV footprint (prompt + response + k);
        one that could never fit is a user error here (refused, as an engine refuses a request
        longer than its cache), not a scheduler that stalls later. `what`: where the capacity
        came from ("given": --kv-capacity-tokens; else the device memory rule)."""
        bs = int(block_size)
        if bs < 1 or capacity_tokens < bs:
            raise UserError(f"--kv-capacity-tokens {capacity_tokens} with --block-size {block_size}: "
                            "the cache needs at least one block; raise the capacity")
        self.block_size = bs
        self.num_blocks = int(capacity_tokens) // bs
        if len(worst_request_tokens):
            worst = int(np.max(worst_request_tokens))
            if self.blocks(worst) > self.num_blocks:
                i = int(np.argmax(worst_request_tokens))
                head = (f"--kv-capacity-tokens {capacity_tokens}" if what == "given"
                        else f"KV capacity {capacity_tokens} tokens from {what}")
                raise UserError(f"{head}: request {i} needs up to {worst} KV tokens ({self.blocks(worst)} blocks of "
                                f"{bs}: its prompt and its longest response together), refused; raise the capacity (or tp), "
                                "or lower --max-response-len, or leave out the prompts longer than the cache")

    def blocks(self, tokens):
        """Blocks that hold `tokens` KV tokens (scalar or array)."""
        return -(-tokens // self.block_size)

    def fits(self, tokens: np.ndarray) -> bool:
        """Whether requests holding `tokens` KV tokens each fit in the cache together."""
        return int(self.blocks(tokens).sum()) <= self.num_blocks


def schedule_with_preemption(kv: KvBlocks, run_list: list[int], pending, decoding, drafts, computed,
                             budget: int, free: int):
    """The running requests' part of a step when their new KV blocks do not all fit: the
    reference engine's rule, request by request, oldest first. A request whose tokens (its
    pending ones plus drafts) need more blocks than are free after the requests before it
    preempts the latest admitted running request (freeing its blocks, recomputed later),
    repeatedly, itself last. Blocks are reserved as requests are scheduled (vLLM's
    allocate-as-you-go). Returns (running after preemption, tokens and drafts per request,
    budget left, blocks reserved, free blocks, victims in preemption order)."""
    blocks = lambda x: kv.blocks(int(x))  # noqa: E731
    info = {j: (int(p), bool(c), int(x)) for j, p, c, x in zip(run_list, pending, decoding, drafts)}
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


def kv_capacity(capacity_tokens: int | None, step_model, block_size: int) -> tuple[int | None, dict[str, Any]]:
    """The KV cache's capacity in tokens and where it came from: the given kv_capacity_tokens;
    else a step model that knows device memory (the roofline: memory x utilisation - weights per
    rank); else unlimited. Weights that leave no room are noted (not capped: the engine would not
    start, and the prediction says so)."""
    if capacity_tokens is not None:
        return int(capacity_tokens), {"capacity_tokens": int(capacity_tokens), "source": "given"}
    mem = getattr(step_model, "memory", None)
    info = mem() if callable(mem) else {}
    cap = info.get("kv_capacity_tokens")
    if cap is None:
        return None, {"capacity_tokens": None, "source": "unlimited (no capacity given, device memory unknown)"}
    where = f"device memory ({info.get('rule', '')})"
    if not info.get("fits_weights") or cap < block_size:
        return None, {"capacity_tokens": None, "source": where,
                      "note": f"REFUSED by memory: the weights ({info['weight_bytes'] / 2 ** 30:.1f} GiB per rank) "
                              f"leave no room for KV in {info['memory_bytes'] / 2 ** 30:.1f} GiB; an engine would not "
                              "start; simulated with an unlimited KV cache"}
    return int(cap), {"capacity_tokens": int(cap), "source": where}
