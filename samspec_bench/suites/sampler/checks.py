"""Checks beside the battery: greedy rows reproduce the argmax path token for token, a seeded
request is reproducible whatever shares its batch, and the logits path (per-request
temperature / top-k / top-p inside one batch) emits the right laws."""

from __future__ import annotations

from typing import Callable

import numpy as np

from samspec_bench.suites.sampler.battery import pick
from samspec_bench.suites.sampler.stats import acceptance_test, complete, position_tests


def greedy_check(sampler: Callable, seed: int, device: str, large_vocab: int, max_vocab: int) -> dict:
    """Greedy requests (all-greedy batches and batches mixing greedy and random requests):
    the output must equal the argmax path token for token."""
    import torch  # imports torch

    from samspec_bench.sam.rejection import RejectionInputs  # imports torch

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
        bonus = rng.integers(0, V, size=B)
        greedy = np.ones(B, dtype=bool) if mode == "all" else rng.random(B) < 0.5
        tp = torch.softmax(torch.from_numpy(logits), -1) if N else torch.zeros((0, V))
        inputs = RejectionInputs(
            draft_token_ids=torch.from_numpy(d).to(device), num_draft_tokens=nums,
            cu_num_draft_tokens=torch.tensor(np.cumsum(nums), dtype=torch.int32, device=device),
            max_spec_len=K, draft_probs=None, target_probs=tp.contiguous().to(device),
            bonus_token_ids=torch.from_numpy(bonus).reshape(-1, 1).to(device),
            is_greedy=torch.from_numpy(greedy).to(device), generators={})
        torch.manual_seed(seed + bi)
        out = torch.as_tensor(sampler(inputs)).cpu().numpy()
        am_p = tp.argmax(-1).numpy() if N else np.zeros(0, dtype=np.int64)
        s = 0
        for b in range(B):
            n = nums[b]
            if greedy[b]:
                exp = []
                for j in range(n):
                    exp.append(int(am_p[s + j]))
                    if d[s + j] != am_p[s + j]:
                        break
                else:
                    exp.append(int(bonus[b]))
                exp += [-1] * (K + 1 - len(exp))
                rows_checked += 1
                if out[b].tolist() != exp:
                    mismatches += 1
                    if example is None:
                        example = {"vocab": V, "mode": mode, "expected": exp, "got": out[b].tolist()}
            s += n
    return {"kind": "greedy", "rows": rows_checked, "mismatches": mismatches, "passed": mismatches == 0,
            "example": example}


def reproducibility_check(sampler: Callable, seed: int, device: str) -> dict:
    """A seeded request gives the same output whatever else is in the batch (informational)."""
    import torch  # imports torch

    from samspec_bench.sam.rejection import RejectionInputs  # imports torch

    rng = np.random.default_rng(seed + 99)
    V, same, total = 50, 0, 0
    for trial in range(20):
        rows0 = rng.dirichlet(np.ones(V) * 0.3, size=3).astype(np.float32)
        d0 = rng.integers(0, V, size=3)
        outs = []
        for variant in range(2):
            nums = [3] + rng.integers(0, 4, size=3).tolist()
            N = sum(nums)
            rows = np.concatenate([rows0, rng.dirichlet(np.ones(V), size=N - 3).astype(np.float32)])
            d = np.concatenate([d0, rng.integers(0, V, size=N - 3)])
            g = torch.Generator(device=device)
            g.manual_seed(1000 + trial)
            inputs = RejectionInputs(
                draft_token_ids=torch.from_numpy(d.astype(np.int64)).to(device), num_draft_tokens=nums,
                cu_num_draft_tokens=torch.tensor(np.cumsum(nums), dtype=torch.int32, device=device),
                max_spec_len=3, draft_probs=None, target_probs=torch.from_numpy(rows).to(device),
                bonus_token_ids=torch.tensor([[7], [1], [2], [3]], device=device),
                is_greedy=torch.zeros(4, dtype=torch.bool, device=device), generators={0: g})
            torch.manual_seed(seed + 31 * trial + variant)
            outs.append(torch.as_tensor(sampler(inputs)).cpu()[0].tolist())
        total += 1
        same += outs[0] == outs[1]
    return {"kind": "seeded", "trials": total, "identical": same, "reproducible": same == total}


def processed_probs_np(logits: np.ndarray, T: float, k: int, p: float) -> tuple[np.ndarray, float]:
    """Independent float64 temperature/top-k/top-p (same rule as rejection.apply_top_k_top_p);
    also the smallest distance of a cumulative mass to top_p (to avoid rounding-edge cases)."""
    x = logits.astype(np.float64) / T
    V = x.size
    if 0 < k < V:
        kth = np.sort(x)[-k]
        x = np.where(x >= kth, x, -np.inf)
    e = np.exp(x - x.max())
    probs = e / e.sum()
    margin = 1.0
    if p < 1:
        order = np.argsort(-probs, kind="stable")
        csum = np.cumsum(probs[order])
        before = np.concatenate([[0.0], csum[:-1]])
        drop = before >= p
        drop[0] = False
        margin = float(np.min(np.abs(before[1:] - p))) if V > 1 else 1.0
        probs[order[drop]] = 0.0
        probs /= probs.sum()
    return probs, margin


def logits_battery(logits_fn: Callable, seed: int, n_trials: int, alpha_t_fn, device: str,
                   progress_cb=None) -> list[dict]:
    """Per-request temperature/top-k/top-p inside one batch (expand_batch_to_tokens), bonus
    sampled by the sampler from bonus logits; emitted laws against an independent computation."""
    import torch  # imports torch

    from samspec_bench.sam.rejection import SamplingBatch  # imports torch

    rng = np.random.default_rng(seed + 4242)
    V = 64
    params = [(0.7, 0, 1.0), (1.3, 10, 1.0), (1.0, 0, 0.8), (0.5, 20, 0.9)]
    templates = []
    for (T, k, p) in params:
        while True:
            logits = (rng.standard_normal((4, V)) * 2).astype(np.float32)
            rows, margins = zip(*[processed_probs_np(l, T, k, p) for l in logits])
            if min(margins) > 1e-4:
                break
        rows = np.stack(rows)
        drafts = np.array([pick(rows[0], "argmax", rng), pick(rows[1], "mid", rng),
                           pick(rows[2], "zero", rng) if (rows[2] == 0).any() else pick(rows[2], "second", rng)])
        templates.append(((T, k, p), logits, rows, drafts))
    Tn = len(templates)
    per_t = max(1, n_trials // Tn)
    n_total = per_t * Tn
    outs = np.zeros((n_total, 4), dtype=np.int64)
    chunk = 1024
    done, call = 0, 0
    while done < n_total:
        R = min(chunk, n_total - done)
        tis = np.arange(done, done + R) % Tn
        tl = torch.from_numpy(np.concatenate([templates[ti][1][:3] for ti in tis])).to(device)
        bl = torch.from_numpy(np.stack([templates[ti][1][3] for ti in tis])).to(device)
        d = torch.from_numpy(np.concatenate([templates[ti][3] for ti in tis]).astype(np.int64)).to(device)
        sb = SamplingBatch(temperature=[templates[ti][0][0] for ti in tis], top_k=[templates[ti][0][1] for ti in tis],
                           top_p=[templates[ti][0][2] for ti in tis])
        torch.manual_seed(seed * 7919 + call)
        res = logits_fn(d, [3] * R, tl, bl, sb)
        outs[done:done + R] = torch.as_tensor(getattr(res, "token_ids", res)).cpu().numpy()
        done += R
        call += 1
        if progress_cb:
            progress_cb(R)
    tests = []
    tis_all = np.arange(n_total) % Tn
    crng = np.random.default_rng(seed + 4343)
    for ti, ((T, k, p), logits, rows, drafts) in enumerate(templates):
        o = outs[tis_all == ti]
        A = (o != -1).sum(1) - 1
        label = {"case": "logits-path-v64", "template": f"T={T},top_k={k},top_p={p}"}
        tests.append(acceptance_test(A, rows[np.arange(3), drafts], alpha_t_fn(), label))
        Y = complete(o, A, rows, crng)
        tests += position_tests(Y, np.broadcast_to(drafts, (o.shape[0], 3)), rows, alpha_t_fn(), label)
    return tests
