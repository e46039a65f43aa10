"""Checks beside the battery: greedy rows reproduce the argmax path token for token, and a
seeded request is reproducible whatever shares its batch. Both run through either adapter
shape ("probs": RejectionInputs, "logits": LogitsInputs, where greedy requests have
temperature 0 and the bonus is the argmax of the bonus logits)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from samspec_bench.bench.rejection import LogitsInputs, RejectionInputs, SamplingBatch
from samspec_bench.suites.sampler.output_check import checked_tokens


def _inputs(shape: str, device: str, *, drafts, nums, K, logits, bonus_logits, bonus_ids, greedy, generators,
            temperature=1.0):
    """One call's inputs from numpy logits [N, V] (probabilities: their softmax)."""
    common = dict(draft_token_ids=torch.from_numpy(np.asarray(drafts, dtype=np.int64)).to(device),
                  num_draft_tokens=list(nums),
                  cu_num_draft_tokens=torch.tensor(np.cumsum(nums), dtype=torch.int32, device=device),
                  max_spec_len=K, draft_probs=None)
    tl = torch.from_numpy(np.ascontiguousarray(logits, dtype=np.float32)).to(device)
    if shape == "logits":
        temps = [0.0 if g else temperature for g in greedy]
        return LogitsInputs(target_logits=tl, bonus_logits=torch.from_numpy(bonus_logits.astype(np.float32)).to(device),
                            sampling=SamplingBatch(temps, generators=generators), **common)
    return RejectionInputs(target_probs=torch.softmax(tl, -1).contiguous(), bonus_token_ids=torch.from_numpy(
        np.asarray(bonus_ids, dtype=np.int64)).reshape(-1, 1).to(device),
        is_greedy=torch.from_numpy(np.asarray(greedy, dtype=bool)).to(device), generators=generators, **common)


def greedy_check(sampler: Callable, shape: str, seed: int, device: str, large_vocab: int, max_vocab: int) -> dict:
    """Greedy requests (all-greedy batches and batches mixing greedy and random requests):
    the output must equal the argmax path token for token."""
    rng = np.random.default_rng(seed + 777)
    mismatches, rows_checked, example = 0, 0, None
    configs = [(1000, 32, "all"), (1000, 32, "mixed"), (37, 64, "all")]
    if large_vocab <= max_vocab:
        configs.append((large_vocab, 8, "mixed"))
    for bi, (V, B, mode) in enumerate(configs * 3):
        nums = rng.integers(0, 6, size=B).tolist()
        N = sum(nums)
        K = max(nums + [1])
        logits = rng.standard_normal((N, V)).astype(np.float32) * 3
        am = logits.argmax(1) if N else np.zeros(0, dtype=np.int64)
        d = np.where(rng.random(N) < 0.8, am, rng.integers(0, V, size=N)).astype(np.int64)
        bonus_logits = rng.standard_normal((B, V)).astype(np.float32) * 3
        bonus = bonus_logits.argmax(1) if shape == "logits" else rng.integers(0, V, size=B)
        greedy = np.ones(B, dtype=bool) if mode == "all" else rng.random(B) < 0.5
        inputs = _inputs(shape, device, drafts=d, nums=nums, K=K, logits=logits.reshape(N, V),
                         bonus_logits=bonus_logits, bonus_ids=bonus, greedy=greedy, generators={})
        rows = inputs.target_logits if shape == "logits" else inputs.target_probs
        am = rows.argmax(-1).cpu().numpy() if N else am     # what the sampler sees (probabilities may tie)
        torch.manual_seed(seed + bi)
        out = checked_tokens(sampler(inputs), B, K + 1, V, f"greedy check ({shape}, vocab {V}), call {bi + 1}").numpy()
        s = 0
        for b in range(B):
            n = nums[b]
            if greedy[b]:
                exp = []
                for j in range(n):
                    exp.append(int(am[s + j]))
                    if d[s + j] != am[s + j]:
                        break
                else:
                    exp.append(int(bonus[b]))
                exp += [-1] * (K + 1 - len(exp))
                rows_checked += 1
                if out[b].tolist() != exp:
                    mismatches += 1
                    if example is None:
                        example = {"vocab": V, "mode": mode, "shape": shape, "expected": exp, "got": out[b].tolist()}
            s += n
    return {"kind": "greedy", "shape": shape, "rows": rows_checked, "mismatches": mismatches,
            "passed": mismatches == 0, "example": example}


def reproducibility_check(sampler: Callable, shape: str, seed: int, device: str) -> dict:
    """A seeded request gives the same output whatever else is in the batch (informational:
    the seeded-request battery judges its law)."""
    rng = np.random.default_rng(seed + 99)
    V, same, total = 50, 0, 0
    for trial in range(20):
        rows0 = np.log(rng.dirichlet(np.ones(V) * 0.3, size=3) + 1e-12).astype(np.float32)
        d0 = rng.integers(0, V, size=3)
        bonus0 = rng.standard_normal(V).astype(np.float32)
        outs = []
        for variant in range(2):
            nums = [3] + rng.integers(0, 4, size=3).tolist()
            N = sum(nums)
            rows = np.concatenate([rows0, np.log(rng.dirichlet(np.ones(V), size=N - 3) + 1e-12).astype(np.float32)])
            d = np.concatenate([d0, rng.integers(0, V, size=N - 3)])
            g = torch.Generator(device=device)
            g.manual_seed(1000 + trial)
            inputs = _inputs(shape, device, drafts=d, nums=nums, K=3, logits=rows,
                             bonus_logits=np.concatenate([bonus0[None],
                                                          rng.standard_normal((3, V)).astype(np.float32)]),
                             bonus_ids=[7, 1, 2, 3], greedy=[False] * 4, generators={0: g})
            torch.manual_seed(seed + 31 * trial + variant)
            out = checked_tokens(sampler(inputs), len(nums), 4, V,
                                 f"seeded reproducibility check, call {2 * trial + variant + 1}")
            outs.append(out[0].tolist())
        total += 1
        same += outs[0] == outs[1]
    return {"kind": "seeded", "trials": total, "identical": same, "reproducible": same == total}
