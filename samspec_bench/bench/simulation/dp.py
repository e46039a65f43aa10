"""Data-parallel rollout: the requests of one rollout sharded over N engine instances (verl's
rollout data-parallel ranks, each a vLLM engine on TP devices), every instance simulated on
its own by `scheduler.simulate` (its own max_num_seqs and KV cache, the same step model),
the rollout ending when the slowest instance finishes.

How verl shards a rollout (read in volcengine/verl, tags v0.5.0 - v0.7.0, the synchronous
SPMD rollout the seed's recipe uses, verl v0.6.0):
- `RayPPOTrainer.fit` (verl/trainer/ppo/ray_trainer.py; `RayDAPOTrainer.fit` in
  recipe/dapo/dapo_ray_trainer.py alike) repeats the generation batch n times with
  `DataProto.repeat(repeat_times=rollout.n, interleave=True)`: row order p0 x n, p1 x n, ...
  (verl/protocol.py), so a GRPO group's n rows are consecutive;
- `actor_rollout_wg.generate_sequences` is registered with
  `make_nd_compute_dataproto_dispatch_fn(mesh_name="rollout")`
  (verl/single_controller/base/decorator.py: `dispatch_lazy_compute_data_proto` ->
  `dispatch_nd_compute_dataproto` -> `_split_args_kwargs_data_proto(dp_size, ...)` ->
  `DataProto.chunk(dp_size)`): the rows are cut into dp_size equal CONTIGUOUS chunks, chunk i
  to rollout DP rank i (every TP rank of that instance gets the same chunk; verl asserts
  that the rows divide evenly unless padding is on). v0.4 did the same with
  `Dispatch.DP_COMPUTE_PROTO` over all ranks plus a TP all-gather
  (`FSDPVLLMShardingManager.preprocess_data`), vLLM then sampling n per prompt.
  So with prompts divisible by dp, instance i gets prompts [i P/dp, (i+1) P/dp) with all
  their n responses: a group stays on one instance. Rule "group" below.
  A count that does not divide (suites/rollout/dp_rule.py says what verl does, with every run it
  concerns): verl refuses rows that do not divide unless auto-padding is on, and then v0.6+'s
  dispatch still pads nothing (the chunks come out uneven); it cuts rows, not prompts, so
  prompts that do not divide split a group over two instances. The
  simulation pads nothing and keeps whole groups, split as evenly as possible (np.array_split
  over prompts).
- The seed's recipe (hicann/cann-recipes-train llm_rl/qwen3, patches
  verl/0004-verl-feature-data_rebalance.patch and 0014-verl-feature-dapo_data_rebalance.patch)
  changes this: `data_rebalance` (on unless the config sets it) repeats WITHOUT interleave
  (row order: copy 0 of every prompt, copy 1 of every prompt, ...) before the same
  contiguous chunking, and reorders the outputs back afterwards; each instance then holds
  n/dp members of every prompt (or one member of P/dp-sized prompt slices). Rule
  "rebalance" below.
- verl's asynchronous agent loop (`rollout.mode: async`, the default since the synchronous mode
  was deprecated; every multi-turn rollout runs in it): `AgentLoopManager.generate_sequences`
  (verl/experimental/agent_loop/agent_loop.py) cuts the same prompt-major rows into
  `rollout.agent.num_workers` contiguous chunks (default 8), and each worker's
  `AsyncLLMServerManager._choose_server` sends every new sample to the server it has sent the
  fewest samples so far (a heap of counts, all 0 at first, ties in an order fixed per worker:
  the servers shuffled at random, then their hash), and every later turn of that sample to the
  same server (sticky, for the prefix cache). So within a worker's chunk the rows go round the
  servers in turn, and a group's members land on different servers. Rule "agent-loop[:W]" below
  (W workers, default 8): row j of worker w's chunk goes to instance (j + w) mod dp (verl's
  per-worker order is random; starting worker w at instance w spreads the chunks' remainders as
  a random order does on average). The workers send at once, so an instance admits its rows by
  their place in their chunk, then by worker.

Each instance admits its requests in that row order (first come, first served), so the
order is part of the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from samspec_bench.bench.simulation.scheduler import SimRequest, SimResult, simulate
from samspec_bench.errors import UserError

SHARD_RULES = ("group", "rebalance", "agent-loop")
AGENT_WORKERS = 8   # verl's rollout.agent.num_workers default
SHARD_RULE_TEXT = {
    "group": "verl: rows repeated n times interleaved (a prompt's n responses consecutive), cut into dp "
             "contiguous chunks (DataProto.chunk via dispatch_nd_compute_dataproto); a GRPO group stays on one "
             "instance",
    "rebalance": "the seed's verl patch data_rebalance: rows repeated n times without interleave (copy-major), "
                 "cut into dp contiguous chunks; each instance holds members of many groups",
    "agent-loop": "verl's async agent loop: rows (a prompt's n responses consecutive) cut into W agent-loop worker "
                  "chunks, each worker sending its samples round the instances in turn (least requests so far, "
                  "every turn of a sample to the same instance); a group's members run on different instances",
}


def parse_shard_rule(rule: str) -> tuple[str, int]:
    """(rule, agent-loop workers) of a --dp-shard value: group, rebalance or agent-loop[:W]."""
    name, _, workers = str(rule).partition(":")
    if name not in SHARD_RULES or (workers and name != "agent-loop"):
        raise UserError(f"--dp-shard {rule!r}: use group, rebalance or agent-loop[:WORKERS]")
    if not workers:
        return name, AGENT_WORKERS
    if not workers.isdigit() or int(workers) < 1:
        raise UserError(f"--dp-shard {rule!r}: WORKERS is verl's rollout.agent.num_workers, an integer >= 1")
    return name, int(workers)


def rule_text(rule: str) -> str:
    """What a --dp-shard value does, in words (agent-loop with its worker count)."""
    name, workers = parse_shard_rule(rule)
    return SHARD_RULE_TEXT[name].replace("W agent-loop", f"{workers} agent-loop") if name == "agent-loop" \
        else SHARD_RULE_TEXT[name]


def agent_loop_shards(n: int, dp: int, workers: int) -> list[np.ndarray]:
    """Rows 0..n-1 per instance under verl's agent loop (the module docstring), in admission order."""
    place, inst = [], []
    for w, chunk in enumerate(np.array_split(np.arange(n), min(workers, n))):
        j = np.arange(len(chunk))
        place.append(np.stack([j, np.full(len(chunk), w), chunk], axis=1))
        inst.append((j + w) % dp)
    rows, inst = np.concatenate(place), np.concatenate(inst)
    order = np.lexsort((rows[:, 1], rows[:, 0]))   # by place in the chunk, then by worker
    return [rows[order][inst[order] == i, 2] for i in range(dp)]


def shard_requests(n_prompts: int, group_size: int, dp: int, rule: str = "group") -> list[np.ndarray]:
    """Request indices per instance, in each instance's admission order. Requests are numbered
    prompt-major (request q = prompt q // group_size, member q % group_size)."""
    if dp < 1:
        raise UserError(f"--dp {dp}: give the number of data-parallel engine instances, an integer >= 1")
    rule, workers = parse_shard_rule(rule)
    if n_prompts < 1 or group_size < 1:
        raise ValueError("sharding needs at least one prompt and one response per prompt")
    n = n_prompts * group_size
    if rule == "group":
        if dp > n_prompts:
            raise UserError(f"--dp {dp} with {n_prompts} prompts: every instance needs at least one prompt's group; "
                            "lower --dp or raise --prompts")
        return [(p[:, None] * group_size + np.arange(group_size)).reshape(-1)
                for p in np.array_split(np.arange(n_prompts), dp)]
    if dp > n:
        raise UserError(f"--dp {dp} with {n} requests: every instance needs at least one request; lower --dp")
    if rule == "agent-loop":
        return agent_loop_shards(n, dp, workers)
    rows = (np.arange(group_size)[:, None] + np.arange(n_prompts)[None, :] * group_size).reshape(-1)  # copy-major
    return list(np.array_split(rows, dp))


@dataclass
class DPResult:
    instances: list[SimResult]       # per instance, its own clock from 0
    shards: list[np.ndarray]         # global request indices per instance (admission order)
    finish_time_s: np.ndarray        # per request, global order (every instance starts at 0)
    first_token_time_s: np.ndarray
    moves: dict = field(default_factory=dict)   # a divided rollout's chunks (shared_queue.py); {}: fixed shards

    @property
    def instance_makespan_s(self) -> np.ndarray:
        return np.array([r.makespan_s for r in self.instances], dtype=float)

    @property
    def makespan_s(self) -> float:
        """The rollout's time: its slowest instance's."""
        return float(self.instance_makespan_s.max()) if self.instances else 0.0

    @property
    def slowest(self) -> int:
        return int(np.argmax(self.instance_makespan_s))


def simulate_dp(requests: Sequence[SimRequest], shards: Sequence[np.ndarray], *,
                policy: Callable[[], Any] | None = None, **simulate_kwargs) -> DPResult:
    """Every instance of a sharded rollout simulated independently (`scheduler.simulate` with
    `simulate_kwargs`: k, step_model, max_num_seqs, tree_running, tree_k, ... per instance; an
    instance's tree steps follow its own running and waiting counts). `policy` is a factory:
    each instance gets its own policy object (an engine's speculation switch sees its own
    running batch). One shard holding every request in order is exactly `simulate`."""
    n = len(requests)
    seen = np.concatenate([np.asarray(s, dtype=np.int64) for s in shards]) if shards else np.zeros(0, np.int64)
    if len(seen) != n or not np.array_equal(np.sort(seen), np.arange(n)):
        raise ValueError("the shards must hold every request exactly once")
    finish = np.full(n, np.nan)
    first = np.full(n, np.nan)
    results = []
    for s in shards:
        s = np.asarray(s, dtype=np.int64)
        r = simulate([requests[i] for i in s], policy=policy() if policy is not None else None, **simulate_kwargs)
        finish[s] = r.finish_time_s
        first[s] = r.first_token_time_s
        results.append(r)
    return DPResult(results, [np.asarray(s, dtype=np.int64) for s in shards], finish, first)


def instance_steps(result: DPResult) -> dict[str, np.ndarray]:
    """Every instance's step table stacked, with an `instance` column (each instance's
    `clock_s` runs from 0)."""
    tabs = [r.steps for r in result.instances]
    out = {c: np.concatenate([np.asarray(t[c]) for t in tabs]) for c in tabs[0]} if tabs else {}
    out["instance"] = np.concatenate([np.full(len(t["time_s"]), i, dtype=np.int64) for i, t in enumerate(tabs)]) \
        if tabs else np.zeros(0, np.int64)
    return out
