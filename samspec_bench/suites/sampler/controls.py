"""Negative controls: samplers that are lossy on purpose. The default run audits one of them
(it must come out LOSSY, which shows the battery's power); the tests audit both. Users reach
them as `--audit samspec_bench.suites.sampler:<name>` (the package re-exports them)."""

from __future__ import annotations


def block_verify_demo(inputs):
    """NEGATIVE CONTROL, lossy on purpose. Block verification as vllm-ascend first shipped it
    for k >= 3 (v0.13.0rc2 .. v0.17.0rc1), applied to drafts without probabilities (q taken as
    1): accept the longest prefix j with min(1, prod_{i<=j} p_i/q_i) >= prod_{i<=j} u_i, then
    recover at the next position from the per-token residual. For deterministic drafts that
    over-accepts early positions. For k < 3 it falls back to per-token verification."""
    import torch  # imports torch

    from samspec_bench.sam.rejection import (PLACEHOLDER_TOKEN_ID, inverse_cdf_sample,  # imports torch
                                             samspec_sampler)

    out = samspec_sampler(inputs)
    N, K = inputs.num_tokens, inputs.max_spec_len
    if K < 3 or inputs.all_greedy or N == 0:
        return out
    dev = inputs.target_probs.device
    B = inputs.batch_size
    n_t = torch.tensor(list(inputs.num_draft_tokens), dtype=torch.long, device=dev)
    starts = torch.cumsum(n_t, 0) - n_t
    req = torch.repeat_interleave(torch.arange(B, device=dev), n_t)
    pos = torch.arange(N, device=dev) - starts[req]
    u = torch.rand(N, dtype=torch.float64, device=dev)
    u_fin = torch.rand(B, dtype=torch.float64, device=dev)
    draft = inputs.draft_token_ids.to(torch.long)
    ar = torch.arange(N, device=dev)
    p_x = inputs.target_probs[ar, draft].double()
    q_x = torch.ones_like(p_x) if inputs.draft_probs is None else inputs.draft_probs[ar, draft].double()
    ratio = torch.ones((B, K), dtype=torch.float64, device=dev)
    ratio[req, pos] = p_x / q_x.clamp_min(1e-30)
    U = torch.ones((B, K), dtype=torch.float64, device=dev)
    U[req, pos] = u
    pi = torch.empty_like(ratio)
    run = torch.ones(B, dtype=torch.float64, device=dev)
    for j in range(K):
        run = torch.clamp(run * ratio[:, j], max=1.0)
        pi[:, j] = run
    cols = torch.arange(K, device=dev).unsqueeze(0)
    ok = (pi >= torch.cumprod(U, 1)) & (cols < n_t.unsqueeze(1))
    num_acc = torch.where(ok.any(1), K - torch.flip(ok, [1]).to(torch.int8).argmax(1), torch.zeros_like(n_t))
    dmat = torch.full((B, K), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=dev)
    dmat[req, pos] = draft
    new = torch.full((B, K + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=dev)
    new[:, :K] = torch.where(cols < num_acc.unsqueeze(1), dmat, dmat.new_full((), PLACEHOLDER_TOKEN_ID))
    final = inputs.bonus_token_ids.reshape(-1).to(torch.long).clone()
    rej = torch.nonzero(num_acc < n_t).reshape(-1)
    if rej.numel():
        rows = starts[rej] + num_acc[rej]
        final[rej] = inverse_cdf_sample(inputs.target_probs, rows, u_fin[rej],
                                        exclude=draft[rows] if inputs.draft_probs is None else None,
                                        sub=inputs.draft_probs)
    new[torch.arange(B, device=dev), num_acc] = final
    return torch.where(inputs.is_greedy.to(dev).unsqueeze(1), out, new)


def no_exclusion_demo(inputs):
    """NEGATIVE CONTROL, lossy on purpose: accepts x with probability p(x) but on rejection
    draws from p itself instead of p with x removed (so x is over-emitted)."""
    import torch  # imports torch

    from samspec_bench.sam.rejection import draw_uniforms, inverse_cdf_sample, rejection_sample  # imports torch

    acc_u, fin_u = draw_uniforms(inputs.num_draft_tokens, inputs.is_greedy, inputs.generators,
                                 inputs.target_probs.device)
    out = rejection_sample(inputs.draft_token_ids, inputs.num_draft_tokens, inputs.target_probs,
                           max_spec_len=inputs.max_spec_len, draft_probs=inputs.draft_probs,
                           bonus_token_ids=inputs.bonus_token_ids, is_greedy=inputs.is_greedy,
                           uniforms=(acc_u, fin_u))
    nums = list(inputs.num_draft_tokens)
    n_emit = (out != -1).sum(1) - 1
    starts = torch.tensor([sum(nums[:i]) for i in range(len(nums))], dtype=torch.long)
    greedy = inputs.is_greedy.cpu()
    rej = [b for b in range(len(nums)) if not greedy[b] and int(n_emit[b]) < nums[b]]
    if rej:
        rows = torch.tensor([int(starts[b] + n_emit[b]) for b in rej], device=inputs.target_probs.device)
        toks = inverse_cdf_sample(inputs.target_probs, rows, fin_u[torch.tensor(rej, device=fin_u.device)])
        for b, t in zip(rej, toks.tolist()):
            out[b, int(n_emit[b])] = t
    return out

