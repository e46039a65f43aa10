"""Samplers of known verdict: the audit's controls.

Negative controls are lossy on purpose; the default run audits some of them (they must come
out LOSSY, which shows the battery's power) and the tests audit them all, on several seeds.
Exact references of a different construction must come out EXACT. Users reach every one of
them as `--audit samspec_bench.suites.sampler.controls:<name>` (the first two also under their
older spelling, `samspec_bench.suites.sampler:<name>`).

Every control except the first two is written here from the math, independently of this
project's sampler: `token_rule` is the per-token rule (Leviathan et al. 2023) position by
position over the whole batch, with hooks that plant a loss, and `block_rule` is block
verification (Sun et al. 2024, arXiv:2403.10444). Each request uses n + 1 uniforms (n accept
tests or block draws, one final draw), from its own generator when it has one.

Exact references: `token_rule_sampler`, `block_verification` (accepts as much as the per-token
rule on deterministic drafts, more with draft probabilities), `token_rule_logits_sampler`
(LogitsInputs: `compute_probs`, then the per-token rule).
Lossy, on the probability contract (RejectionInputs):
  planted_loss(mode, position, tv): a loss of exactly `tv` in total variation at one draft
      position (deterministic drafts): "over" accepts p(x) + tv, "under" p(x) - tv, "leak"
      emits the draft token instead of the recovered one with probability tv / (1 - p(x));
  smoothed_draft_demo: treats the draft as q = 0.98 one-hot + 0.02 uniform (accept
      min(1, p/q), recover from max(0, p - q));
  overaccept_1pct_demo / underaccept_1pct_demo / leak_1pct_demo: planted_loss at position 2;
  scaled_acceptance(position, factor): acceptance multiplied by factor (0.97) at one position
      (scaled_acceptance_demo: position 1);
  block_verification_token_residual_demo: block verification's acceptance with the per-token
      residual max(0, p - q) instead of max(0, p_tau p - q);
  seeded_reuse_demo / seeded_scaled_demo: exact for unseeded requests; a seeded request
      draws its recovered token with the rejected position's accept uniform, or accepts with
      0.97 times the right probability.
Lossy on the logits contract (LogitsInputs), exact at temperature 1:
  temperature_residual_demo (recovers from the untempered law), temperature_bonus_demo (the
  bonus token at temperature 1), top_p_before_temperature_demo (top-k / top-p on the
  untempered logits).
"""

from __future__ import annotations

import functools

import torch

from samspec_bench.bench.rejection import (GREEDY_EPS, PLACEHOLDER_TOKEN_ID, LogitsInputs, SamplingBatch,
                                           compute_probs, cu_num_tokens, draw_uniforms, inverse_cdf_sample,
                                           rejection_sample, samspec_sampler)


def block_verify_demo(inputs):
    """NEGATIVE CONTROL, lossy on purpose. Block verification as vllm-ascend first shipped it
    for k >= 3 (v0.13.0rc2 .. v0.17.0rc1), applied to drafts without probabilities (q taken as
    1): accept the longest prefix j with min(1, prod_{i<=j} p_i/q_i) >= prod_{i<=j} u_i, then
    recover at the next position from the per-token residual. For deterministic drafts that
    over-accepts early positions. For k < 3 it falls back to per-token verification."""
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
    acc_u, fin_u = draw_uniforms(inputs.num_draft_tokens, inputs.is_greedy, inputs.generators,
                                 inputs.target_probs.device)
    out = rejection_sample(inputs.draft_token_ids, inputs.num_draft_tokens, inputs.target_probs,
                           max_spec_len=inputs.max_spec_len, draft_probs=inputs.draft_probs,
                           bonus_token_ids=inputs.bonus_token_ids, is_greedy=inputs.is_greedy,
                           uniforms=(acc_u, fin_u))
    nums = list(inputs.num_draft_tokens)
    n_emit = (out != -1).sum(1) - 1
    starts = [sum(nums[:i]) for i in range(len(nums))]   # host-side offsets (read one by one)
    greedy = inputs.is_greedy.cpu()
    rej = [b for b in range(len(nums)) if not greedy[b] and int(n_emit[b]) < nums[b]]
    if rej:
        rows = torch.tensor([int(starts[b] + n_emit[b]) for b in rej], device=inputs.target_probs.device)
        toks = inverse_cdf_sample(inputs.target_probs, rows, fin_u[torch.tensor(rej, device=fin_u.device)])
        for b, t in zip(rej, toks.tolist()):
            out[b, int(n_emit[b])] = t
    return out


# ------------------------------------------------------------------------- the rules, from the math


class _Batch:
    """The tensors both rules walk through: per request its draft rows, uniforms, flags."""

    def __init__(self, draft, nums, K, target, draft_probs, greedy, generators):
        self.dev = target.device
        self.nums = torch.tensor(list(nums), dtype=torch.long, device=self.dev)
        self.B, self.K = len(nums), int(K)
        self.starts = torch.cumsum(self.nums, 0) - self.nums
        self.draft = torch.as_tensor(draft, device=self.dev).reshape(-1).to(torch.long)
        self.target, self.q = target, draft_probs
        self.greedy = torch.as_tensor(greedy, device=self.dev).reshape(-1).to(torch.bool)
        self.seeded = torch.zeros(self.B, dtype=torch.bool, device=self.dev)
        u = torch.rand((self.B, self.K + 1), dtype=torch.float64, device=self.dev)
        for i, g in (generators or {}).items():
            n = int(self.nums[i])
            r = torch.rand(n + 1, dtype=torch.float64, generator=g, device=g.device).to(self.dev)
            u[i, :n], u[i, self.K] = r[:n], r[n]
            self.seeded[i] = True
        self.u, self.u_fin = u[:, : self.K], u[:, self.K]

    def rows(self, idx, j):
        """Flattened row of position j for requests idx; their draft tokens."""
        r = self.starts[idx] + j
        return r, self.draft[r]

    def p(self, r):
        return self.target[r].double()

    def q_rows(self, r, x):
        """Draft probabilities of rows r (one-hot at x for deterministic drafts)."""
        if self.q is not None:
            return self.q[r].double()
        q = torch.zeros((r.numel(), self.target.shape[1]), dtype=torch.float64, device=self.dev)
        q[torch.arange(r.numel(), device=self.dev), x] = 1.0
        return q


def _draw(w, u):
    """Inverse-CDF draw per row of non-negative float64 weights (rows of positive total)."""
    c = torch.cumsum(w, -1)
    j = torch.searchsorted(c, (u * c[:, -1]).unsqueeze(1), right=True).squeeze(1)
    over = torch.nonzero(j >= w.shape[1]).reshape(-1)   # u * total rounded up to the total
    if over.numel():
        j[over] = (w.shape[1] - 1) - torch.flip(w[over] > 0, [1]).to(torch.int8).argmax(1)
    return j


def _residual(p, q):
    """max(0, p - q); p where that is empty (a rejection of probability 0)."""
    return _or_p((p - q).clamp_min_(0), p)


def _or_p(w, p):
    """Weights w, or p in the rows where w sums to 0."""
    empty = (w.sum(1) <= 0).nonzero().reshape(-1)
    if empty.numel():
        w[empty] = p[empty]
    return w


def _finish(bt, out, done, bonus_ids, bonus_probs):
    idx = torch.nonzero(~done).reshape(-1)
    if idx.numel():
        if bonus_ids is not None:
            tok = torch.as_tensor(bonus_ids, device=bt.dev).reshape(-1).to(torch.long)[idx]
        else:
            bp = bonus_probs[idx].double()
            tok = torch.where(bt.greedy[idx], bp.argmax(1), _draw(bp.clamp_min(0), bt.u_fin[idx]))
        out[idx, bt.nums[idx]] = tok
    return out


def token_rule(bt: _Batch, *, bonus_ids=None, bonus_probs=None, accept=None, residual=None,
               reuse_seeded: bool = False):
    """The per-token rule over the batch: at each position, request by request, accept x with
    probability accept(p_x, q_x, j, seeded) (default min(1, p(x)/q(x))), else emit a draw from
    residual(p, q, x, j, seeded, rows) weights (default max(0, p - q)) and stop; greedy
    requests accept while x is the argmax and emit it otherwise. reuse_seeded: seeded
    requests draw the recovered token with the accept uniform (lossy). Returns [B, K + 1]."""
    out = torch.full((bt.B, bt.K + 1), -1, dtype=torch.long, device=bt.dev)
    done = torch.zeros(bt.B, dtype=torch.bool, device=bt.dev)
    for j in range(bt.K):
        idx = torch.nonzero(~done & (bt.nums > j)).reshape(-1)
        if not idx.numel():
            continue
        r, x = bt.rows(idx, j)
        p_x = bt.target[r, x].double()
        q_x = torch.ones_like(p_x) if bt.q is None else bt.q[r, x].double()
        seeded, g, u = bt.seeded[idx], bt.greedy[idx], bt.u[idx, j]
        a = _plain(p_x, q_x) if accept is None else accept(p_x, q_x, j, seeded)
        tok = x.clone()
        gi = torch.nonzero(g).reshape(-1)
        ok = u < a.clamp(0.0, 1.0)
        if gi.numel():                                  # greedy: the argmax path
            am = bt.target[r[gi]].argmax(1)
            ok[gi] = x[gi] == am
            tok[gi] = am
        ri = torch.nonzero(~ok & ~g).reshape(-1)        # rejected random requests
        if ri.numel():
            rr, xr = r[ri], x[ri]
            p = bt.p(rr)
            if residual is None and bt.q is None:       # p without the draft token
                w = p.clone()
                w[torch.arange(ri.numel(), device=bt.dev), xr] = 0.0
                w = _or_p(w, p)
            else:
                q = bt.q_rows(rr, xr)
                w = _residual(p, q) if residual is None else residual(p, q, xr, j, seeded[ri], rr)
            u_rec = torch.where(seeded[ri], u[ri], bt.u_fin[idx[ri]]) if reuse_seeded else bt.u_fin[idx[ri]]
            tok[ri] = _draw(w, u_rec)
        out[idx, j] = tok
        done[idx[~ok]] = True
    return _finish(bt, out, done, bonus_ids, bonus_probs)


def block_rule(bt: _Batch, *, bonus_ids=None, bonus_probs=None, token_residual: bool = False):
    """Block verification (Sun et al. 2024, Algorithm 2) over the batch: weights
    w_i = min(1, w_{i-1} p_i(x_i) / q_i(x_i)), w_0 = 1; the block of i drafts is kept with
    h_i = Z_i / (Z_i + 1 - w_i), Z_i = sum max(0, w_i p_{i+1} - q_{i+1}) (h_n = w_n); the
    longest kept block tau is emitted, then the bonus (tau = n) or a draw from
    max(0, w_tau p - q) at position tau (token_residual=True drops w_tau: lossy). Greedy
    requests follow the argmax rule."""
    out = torch.full((bt.B, bt.K + 1), -1, dtype=torch.long, device=bt.dev)
    w = torch.ones((bt.B, bt.K + 1), dtype=torch.float64, device=bt.dev)
    h = torch.zeros((bt.B, bt.K + 1), dtype=torch.float64, device=bt.dev)
    for j in range(bt.K):                       # w_{j+1}
        idx = torch.nonzero(bt.nums > j).reshape(-1)
        r, x = bt.rows(idx, j)
        p_x = bt.target[r, x].double()
        q_x = torch.ones_like(p_x) if bt.q is None else bt.q[r, x].double()
        w[idx, j + 1] = (w[idx, j] * p_x / q_x.clamp_min(1e-300)).clamp(max=1.0)
    for j in range(1, bt.K + 1):                # h_j
        idx = torch.nonzero(bt.nums >= j).reshape(-1)
        last = bt.nums[idx] == j
        h[idx[last], j] = w[idx[last], j]
        mid = idx[~last]
        if mid.numel():
            r, x = bt.rows(mid, j)
            if bt.q is None:    # q one-hot at x: Z = w (1 - p(x)) + max(0, w p(x) - 1) = w (1 - p(x))
                Z = w[mid, j] * (1 - bt.target[r, x].double())
            else:
                Z = (w[mid, j].unsqueeze(1) * bt.p(r) - bt.q_rows(r, x)).clamp_min(0).sum(1)
            den = Z + 1 - w[mid, j]
            h[mid, j] = torch.where(den > 0, Z / den.clamp_min(1e-300), torch.ones_like(Z))
    cols = torch.arange(1, bt.K + 1, device=bt.dev).unsqueeze(0)
    kept = (bt.u <= h[:, 1:]) & (cols <= bt.nums.unsqueeze(1))
    tau = torch.where(kept.any(1), bt.K - torch.flip(kept, [1]).to(torch.int8).argmax(1), torch.zeros_like(bt.nums))
    for j in range(bt.K):
        idx = torch.nonzero(tau > j).reshape(-1)
        out[idx, j] = bt.draft[bt.starts[idx] + j]
    done = tau < bt.nums
    rej = torch.nonzero(done).reshape(-1)
    if rej.numel():
        r, x = bt.rows(rej, tau[rej])
        scale = torch.ones_like(w[rej, 0]) if token_residual else w[rej, tau[rej]]
        out[rej, tau[rej]] = _draw(_residual(scale.unsqueeze(1) * bt.p(r), bt.q_rows(r, x)), bt.u_fin[rej])
    new = _finish(bt, out, done, bonus_ids, bonus_probs)
    if bool(bt.greedy.any()):
        new = torch.where(bt.greedy.unsqueeze(1), token_rule(bt, bonus_ids=bonus_ids, bonus_probs=bonus_probs), new)
    return new


def _batch(inputs) -> _Batch:
    return _Batch(inputs.draft_token_ids, inputs.num_draft_tokens, inputs.max_spec_len, inputs.target_probs,
                  inputs.draft_probs, inputs.is_greedy, inputs.generators)


# ------------------------------------------------------------------------- exact references


def token_rule_sampler(inputs):
    """EXACT reference: the per-token rule written out here (RejectionInputs)."""
    return token_rule(_batch(inputs), bonus_ids=inputs.bonus_token_ids)


def block_verification(inputs):
    """EXACT reference: block verification (RejectionInputs)."""
    return block_rule(_batch(inputs), bonus_ids=inputs.bonus_token_ids)


def token_rule_logits_sampler(inputs: LogitsInputs):
    """EXACT reference on the logits contract (LogitsInputs): the inputs' own temperature,
    top-k and top-p (`compute_probs`), then the per-token rule; the bonus drawn here."""
    return _logits_rule(inputs)


# ------------------------------------------------------------------------- lossy on purpose


def _plain(p_x, q_x):
    return (p_x / q_x.clamp_min(1e-300)).clamp(max=1.0)


def _shifted(tv, j0, p_x, q_x, j, seeded):
    return _plain(p_x, q_x) + tv if j == j0 else _plain(p_x, q_x)


def _leak(tv, j0, p, q, x, j, seeded, rows):
    w = _residual(p, q)
    if j != j0:
        return w
    ar = torch.arange(x.numel(), device=x.device)
    eps = (tv / (1.0 - p[ar, x]).clamp_min(1e-300)).clamp(max=1.0)
    w = (1 - eps).unsqueeze(1) * w / w.sum(1, keepdim=True)
    w[ar, x] += eps
    return w


def planted_loss(mode: str, position: int, tv: float = 0.01):
    """A sampler (RejectionInputs) with a loss of `tv` in total variation at draft position
    `position` of every request (deterministic drafts; see the module doc)."""
    if mode not in ("over", "under", "leak"):
        raise ValueError(f"planted_loss mode {mode!r}: over, under or leak")
    kw = ({"residual": functools.partial(_leak, tv, position)} if mode == "leak" else
          {"accept": functools.partial(_shifted, tv if mode == "over" else -tv, position)})

    def sampler(inputs):
        return token_rule(_batch(inputs), bonus_ids=inputs.bonus_token_ids, **kw)

    sampler.__name__ = sampler.__qualname__ = f"planted_loss_{mode}_{position}"
    return sampler


def smoothed_draft_demo(inputs):
    """LOSSY: the draft distribution smoothed to 0.98 q + 0.02 uniform (q one-hot for
    deterministic drafts) in both the acceptance and the residual."""
    V = inputs.vocab_size

    def accept(p_x, q_x, j, seeded):
        return (p_x / (0.98 * q_x + 0.02 / V)).clamp(max=1.0)

    return token_rule(_batch(inputs), bonus_ids=inputs.bonus_token_ids, accept=accept,
                      residual=lambda p, q, x, j, seeded, rows: _residual(p, 0.98 * q + 0.02 / V))


def scaled_acceptance(position: int = 1, factor: float = 0.97):
    """A sampler (RejectionInputs) whose acceptance at one draft position is multiplied by factor."""
    def accept(p_x, q_x, j, seeded):
        return _plain(p_x, q_x) * (factor if j == position else 1.0)

    def sampler(inputs):
        return token_rule(_batch(inputs), bonus_ids=inputs.bonus_token_ids, accept=accept)

    sampler.__name__ = sampler.__qualname__ = f"scaled_acceptance_{position}"
    return sampler


scaled_acceptance_demo = scaled_acceptance(1, 0.97)
overaccept_1pct_demo = planted_loss("over", 2)
underaccept_1pct_demo = planted_loss("under", 2)
leak_1pct_demo = planted_loss("leak", 2)


def block_verification_token_residual_demo(inputs):
    """LOSSY: block verification with the per-token residual max(0, p - q)."""
    return block_rule(_batch(inputs), bonus_ids=inputs.bonus_token_ids, token_residual=True)


def seeded_reuse_demo(inputs):
    """LOSSY for seeded requests only: the recovered token is drawn with the accept uniform of
    the rejected position (which lies above p(x)/q(x)) instead of a fresh one."""
    return token_rule(_batch(inputs), bonus_ids=inputs.bonus_token_ids, reuse_seeded=True)


def seeded_scaled_demo(inputs):
    """LOSSY for seeded requests only: their acceptance multiplied by 0.97."""
    def accept(p_x, q_x, j, seeded):
        return _plain(p_x, q_x) * (1 - 0.03 * seeded.to(p_x.dtype))

    return token_rule(_batch(inputs), bonus_ids=inputs.bonus_token_ids, accept=accept)


# ------------------------------------------------------------------------- logits level


def _untempered(s):
    """The same sampling parameters at temperature 1 (greedy requests stay greedy)."""
    temps = [t if t <= GREEDY_EPS else 1.0 for t in s.temperature_tensor().tolist()]
    return SamplingBatch(temps, s.top_k, s.top_p, s.generators)


def _top_first(logits, cu, s):
    """Top-k / top-p chosen on the untempered logits, then the temperature (the wrong order)."""
    kept = compute_probs(logits, cu, _untempered(s)) > 0
    plain = compute_probs(logits, cu, SamplingBatch(s.temperature, None, None, s.generators))
    w = plain * kept
    greedy_rows = w.sum(1, keepdim=True) <= 0
    return (w / w.sum(1, keepdim=True).clamp_min(1e-30)).where(~greedy_rows, plain)


def _logits_rule(inputs, *, residual_untempered=False, bonus_untempered=False, top_first=False):
    """The per-token rule on LogitsInputs, with one of the temperature-only bugs if asked."""
    s, cu = inputs.sampling, inputs.cu_num_draft_tokens
    cu1 = cu_num_tokens([1] * inputs.batch_size, device=inputs.bonus_logits.device)
    if top_first:
        probs, bonus = _top_first(inputs.target_logits, cu, s), _top_first(inputs.bonus_logits, cu1, s)
    else:
        probs = compute_probs(inputs.target_logits, cu, s)
        bonus = compute_probs(inputs.bonus_logits, cu1, _untempered(s) if bonus_untempered else s)
    bt = _Batch(inputs.draft_token_ids, inputs.num_draft_tokens, inputs.max_spec_len, probs, inputs.draft_probs,
                s.is_greedy(probs.device), s.generators)
    plain = compute_probs(inputs.target_logits, cu, _untempered(s)) if residual_untempered else None

    def untempered_residual(p, q, x, j, seeded, rows):
        return _residual(plain[rows].double(), q)

    return token_rule(bt, bonus_probs=bonus, residual=untempered_residual if residual_untempered else None)


def temperature_residual_demo(inputs: LogitsInputs):
    """LOSSY at temperature != 1 (LogitsInputs): accepts with the tempered law, recovers from
    the untempered one."""
    return _logits_rule(inputs, residual_untempered=True)


def temperature_bonus_demo(inputs: LogitsInputs):
    """LOSSY at temperature != 1 (LogitsInputs): samples the bonus token at temperature 1."""
    return _logits_rule(inputs, bonus_untempered=True)


def top_p_before_temperature_demo(inputs: LogitsInputs):
    """LOSSY at temperature != 1 with top-p (LogitsInputs): the kept set chosen before the
    temperature is applied."""
    return _logits_rule(inputs, top_first=True)
