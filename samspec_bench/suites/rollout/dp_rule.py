"""What verl does with a `--dp` count it cannot cut evenly, and what the simulation does instead
(result.json's workload.dp, the rule line's `uneven:` line). Read in volcengine/verl, tags v0.5.0
- v0.7.0 (`bench/simulation/dp.py` has the rules for counts that divide):

- rows = prompts x n (`DataProto.repeat`). The config check (`validate_config`,
  verl/utils/config.py; ray_trainer.py in v0.5) asserts that train_batch_size x rollout.n divides
  by the GPU count, a multiple of the rollout's dp, unless actor.use_dynamic_bsz is set.
- The synchronous rollout's dispatch (v0.6+: `dispatch_nd_compute_dataproto`) calls
  `DataProto.chunk(dp)`, which asserts equal chunks unless auto-padding is on (VERL_AUTO_PADDING
  or the batch's meta_info). With it on nothing is padded there: tensordict's chunk cuts
  ceil(rows / dp) rows per chunk, the last ones short, and a count that leaves fewer chunks than
  instances fails chunk's own check. (v0.4 - v0.5's DP_COMPUTE_PROTO dispatch padded instead:
  copies of the last row, generated and dropped.) The agent loop cuts the rows into
  rollout.agent.num_workers chunks with the same `DataProto.chunk`.
- `pad_dataproto_to_divisor` (copies of the first rows, generated, then dropped) pads only
  validation batches (`RayPPOTrainer._validate`) and main_generation, not the training rollout.
- Rows that divide over prompts that do not (rule group): equal contiguous row chunks, so a
  group's rows can run on two instances.
"""

from __future__ import annotations

from samspec_bench.bench.simulation.dp import parse_shard_rule


def torch_chunks(rows: int, parts: int) -> list[int]:
    """Chunk sizes as tensordict's (torch's) chunk cuts `rows` into `parts`: ceil(rows / parts)
    each, the last ones short; fewer than `parts` where the rows run out first."""
    size = -(-rows // parts)
    return [min(size, rows - start) for start in range(0, rows, size)]


def _chunk_refusal(rows: int, parts: int, what: str) -> str:
    sizes = torch_chunks(rows, parts)
    cut = (f"cuts {', '.join(map(str, sizes))} rows, nothing padded" if len(sizes) == parts
           else f"leaves {len(sizes)} chunks for {parts} and fails")
    return f"DataProto.chunk into {parts} {what} (it asserts equal chunks; with VERL_AUTO_PADDING it {cut})"


def uneven_dp(n_prompts: int, group_size: int, dp: int, rule: str, sizes: list[int]) -> dict:
    """workload.dp's account of a count that does not divide: `uneven` (the line: what verl does,
    what the simulation did, `sizes` its requests per instance), `verl` ('refused', 'groups
    split' or None) and `verl_requests_per_instance` (where verl runs the batch). All None when
    the count divides, or with one instance."""
    name, workers = parse_shard_rule(rule)
    rows = n_prompts * group_size
    none = {"uneven": None, "verl": None, "verl_requests_per_instance": None}
    if dp <= 1:
        return none
    sim = ("this simulation pads nothing and "
           + {"group": "splits whole groups as evenly as it can", "rebalance": "splits the rows as evenly as it can",
              "agent-loop": "deals the rows as its agent-loop rule does"}[name]
           + f": {min(sizes)} to {max(sizes)} requests per instance")
    refusals = []
    if rows % dp:
        refusals.append("its config check (train_batch_size x rollout.n divisible by the GPU count, a multiple of "
                        "--dp; skipped with actor.use_dynamic_bsz)")
    parts, what = (workers, "agent-loop workers") if name == "agent-loop" else (dp, "instances")
    if rows % parts:
        refusals.append(_chunk_refusal(rows, parts, what))
    if refusals:
        text = (f"{rows} rows ({n_prompts} prompts x {group_size}) do not divide by "
                + (f"--dp {dp}" if rows % dp else f"the {parts} {what}") + ": verl refuses them in "
                + " and in ".join(refusals) + "; it pads only validation batches (pad_dataproto_to_divisor: copies of "
                "the first rows, dropped after generation); " + sim)
        return {"uneven": text, "verl": "refused", "verl_requests_per_instance": None}
    if name == "group" and n_prompts % dp:
        chunk = rows // dp
        split = {b // group_size for b in range(chunk, rows, chunk) if b % group_size}
        text = (f"{n_prompts} prompts do not divide by --dp {dp}: verl's DataProto.chunk cuts the {rows} rows into {dp} "
                f"contiguous chunks of {chunk}, so {len(split)} group(s) run on two instances; {sim}")
        return {"uneven": text, "verl": "groups split", "verl_requests_per_instance": [chunk] * dp}
    return none
