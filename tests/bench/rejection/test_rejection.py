"""The rejection sampler (vectorised) against its loop reference and against the semantics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from samspec_bench.errors import UserError
from samspec_bench.bench.rejection import (PLACEHOLDER_TOKEN_ID, LogitsInputs, RejectionInputs, SamplerInputError,
                                           SamplingBatch, apply_top_k_top_p, block_layout, compute_probs,
                                           count_accepted, cu_num_tokens, draw_uniforms, expand_batch_to_tokens,
                                           inverse_cdf_sample, make_generators, parse_output, rejection_sample,
                                           samspec_logits_sampler, samspec_sampler, speculative_sample)
from samspec_bench.bench.rejection.draws import _block_layout
from samspec_bench.bench.rejection.loop import (apply_top_k_top_p_row, compute_probs_loop, expand_batch_to_tokens_loop,
                                                inverse_cdf_row, loop_logits_sampler, loop_sampler,
                                                rejection_sample_loop, speculative_sample_loop)


def _batch(V, nums, seed, with_q=False, greedy_frac=0.3, acc=0.6):
    g = torch.Generator().manual_seed(seed)
    N, B = sum(nums), len(nums)
    logits = torch.randn((N, V), generator=g) * 2
    tp = torch.softmax(logits, -1)
    am = tp.argmax(-1) if N else torch.zeros(0, dtype=torch.long)
    draft = torch.where(torch.rand(N, generator=g) < acc, am, torch.randint(0, V, (N,), generator=g))
    dp = torch.softmax(torch.randn((N, V), generator=g), -1) if with_q else None
    greedy = torch.rand(B, generator=g) < greedy_frac
    bonus = torch.randint(0, V, (B,), generator=g)
    bonus_probs = torch.softmax(torch.randn((B, V), generator=g), -1)
    return draft, tp, dp, greedy, bonus, bonus_probs


@pytest.mark.parametrize("V", [7, 1000, 32000])
@pytest.mark.parametrize("with_q", [False, True])
def test_vectorised_equals_loop_with_shared_uniforms(V, with_q):
    nums = [3, 0, 1, 5, 2, 3, 4, 1]
    for seed in range(3):
        draft, tp, dp, greedy, bonus, bonus_probs = _batch(V, nums, seed, with_q)
        gens = make_generators([11 if i % 3 == 0 else None for i in range(len(nums))])
        torch.manual_seed(seed)
        u = draw_uniforms(nums, greedy, gens)
        for kw in ({"bonus_token_ids": bonus}, {"bonus_probs": bonus_probs}):
            a = rejection_sample(draft, nums, tp, draft_probs=dp, is_greedy=greedy, uniforms=u, **kw)
            b = rejection_sample_loop(draft, nums, tp, draft_probs=dp, is_greedy=greedy, uniforms=u, **kw)
            c = rejection_sample(draft, nums, tp, draft_probs=dp, is_greedy=greedy, uniforms=u, recover="eager", **kw)
            d = rejection_sample_loop(draft, nums, tp, draft_probs=dp, is_greedy=greedy, uniforms=u,
                                      eager_recovered=False, **kw)
            assert torch.equal(a, b) and torch.equal(a, c) and torch.equal(a, d)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(nums=st.lists(st.integers(0, 5), min_size=1, max_size=6), V=st.integers(2, 40), seed=st.integers(0, 10_000),
       with_q=st.booleans(), max_extra=st.integers(0, 2))
def test_layout_and_loop_agreement_property(nums, V, seed, with_q, max_extra):
    draft, tp, dp, greedy, bonus, _ = _batch(V, nums, seed, with_q, acc=0.8)
    K = max(nums) + max_extra
    torch.manual_seed(seed)
    u = draw_uniforms(nums, greedy)
    out = rejection_sample(draft, nums, tp, max_spec_len=K, draft_probs=dp, bonus_token_ids=bonus,
                           is_greedy=greedy, uniforms=u)
    ref = rejection_sample_loop(draft, nums, tp, max_spec_len=K, draft_probs=dp, bonus_token_ids=bonus,
                                is_greedy=greedy, uniforms=u)
    assert torch.equal(out, ref)
    assert out.shape == (len(nums), K + 1)
    start = 0
    for i, n in enumerate(nums):
        row = out[i].tolist()
        L = sum(t != PLACEHOLDER_TOKEN_ID for t in row)
        assert 1 <= L <= n + 1 and all(t == PLACEHOLDER_TOKEN_ID for t in row[L:])
        assert row[:L - 1] == draft[start:start + L - 1].tolist()      # accepted prefix = drafts
        if L == n + 1:
            assert row[n] == int(bonus[i])
        else:
            t = start + L - 1
            if not greedy[i]:
                assert tp[t, row[L - 1]] > 0 or dp is not None
                if dp is None:
                    assert row[L - 1] != int(draft[t])                 # x is removed on rejection
        start += n


def _greedy_expected(draft, nums, tp, bonus):
    am = tp.argmax(-1).tolist()
    out, s = [], 0
    K = max(nums)
    for i, n in enumerate(nums):
        row = []
        for j in range(n):
            row.append(am[s + j])
            if int(draft[s + j]) != am[s + j]:
                break
        else:
            row.append(int(bonus[i]))
        out.append(row + [PLACEHOLDER_TOKEN_ID] * (K + 1 - len(row)))
        s += n
    return out


@pytest.mark.parametrize("V", [50, 151936])
def test_greedy_equals_argmax_path_exactly(V):
    nums = [4, 0, 2, 3, 1, 5]
    draft, tp, _, _, bonus, _ = _batch(V, nums, 3, acc=0.7)
    exp = _greedy_expected(draft, nums, tp, bonus)
    greedy = torch.ones(len(nums), dtype=torch.bool)
    assert rejection_sample(draft, nums, tp, bonus_token_ids=bonus, is_greedy=greedy).tolist() == exp
    assert rejection_sample_loop(draft, nums, tp, bonus_token_ids=bonus, is_greedy=greedy).tolist() == exp
    # Mixed batch: greedy rows unchanged by the random rows around them.
    mixed = torch.tensor([True, False, True, False, True, True])
    out = rejection_sample(draft, nums, tp, bonus_token_ids=bonus, is_greedy=mixed).tolist()
    for i in range(len(nums)):
        if mixed[i]:
            assert out[i] == exp[i]


def test_speculative_sample_greedy_uses_logits_argmax():
    V, nums = 300, [3, 2, 0, 4]
    g = torch.Generator().manual_seed(0)
    logits = torch.randn((sum(nums), V), generator=g)
    bonus_logits = torch.randn((len(nums), V), generator=g)
    draft = torch.where(torch.rand(sum(nums), generator=g) < 0.7, logits.argmax(-1), torch.zeros(sum(nums), dtype=torch.long))
    sb = SamplingBatch(temperature=[0.0, 0.0, 0.0, 0.0])
    exp = _greedy_expected(draft, nums, logits, bonus_logits.argmax(-1))
    res = speculative_sample(draft, nums, logits, bonus_logits, sb)
    assert res.token_ids.tolist() == exp
    assert speculative_sample_loop(draft, nums, logits, bonus_logits, sb).token_ids.tolist() == exp
    assert res.num_accepted.tolist() == [len(r) - 1 for r in parse_output(res.token_ids)]
    # A greedy request inside a random batch still follows argmax(logits).
    sb2 = SamplingBatch(temperature=[0.0, 1.0, 0.8, 0.0])
    res2 = speculative_sample(draft, nums, logits, bonus_logits, sb2)
    assert res2.token_ids[0].tolist() == exp[0] and res2.token_ids[3].tolist() == exp[3]


def test_deterministic_draft_edge_probabilities():
    V = 10
    tp = torch.zeros((3, V))
    tp[0, 4] = 1.0                      # p(x) = 1: can never be rejected
    tp[1, :5] = 0.2                     # x = 7 has p = 0: always rejected
    tp[2, 1] = 1.0
    draft = torch.tensor([4, 7, 1])
    for seed in range(50):
        torch.manual_seed(seed)
        out = rejection_sample(draft, [3], tp, bonus_token_ids=torch.tensor([9]))[0].tolist()
        assert out[0] == 4 and out[1] in range(5) and out[2:] == [-1, -1]


def test_residual_with_draft_probs_equal_target_never_rejects():
    V = 20
    g = torch.Generator().manual_seed(1)
    tp = torch.softmax(torch.randn((4, V), generator=g), -1)
    draft = torch.multinomial(tp, 1, generator=g).reshape(-1)
    for seed in range(20):
        torch.manual_seed(seed)
        out = rejection_sample(draft, [4], tp, draft_probs=tp.clone(), bonus_token_ids=torch.tensor([3]))
        assert out[0].tolist() == draft.tolist() + [3]


def test_seeded_requests_are_reproducible_whatever_the_batch():
    V = 40
    rows = []
    for other in range(3):
        nums = [3] + [other + 1] * (other + 1)
        g = torch.Generator().manual_seed(100 + other)
        tp = torch.softmax(torch.randn((sum(nums), V), generator=g), -1)
        tp[:3] = torch.softmax(torch.arange(3 * V, dtype=torch.float32).reshape(3, V).sin() * 3, -1)
        draft = torch.randint(0, V, (sum(nums),), generator=g)
        draft[:3] = torch.tensor([5, 6, 7])
        torch.manual_seed(other)  # a different default-generator state each time
        gens = make_generators([1234] + [None] * (len(nums) - 1))
        bonus_probs = torch.softmax(torch.randn((len(nums), V), generator=g), -1)
        bonus_probs[0] = torch.full((V,), 1.0 / V)
        out = rejection_sample(draft, nums, tp, bonus_probs=bonus_probs, generators=gens)
        rows.append(out[0].tolist())
    assert rows[0] == rows[1] == rows[2]


def test_expand_batch_to_tokens():
    x = torch.tensor([10.0, -1.0, 30.0])
    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    assert expand_batch_to_tokens(x, cu, 6).tolist() == [10, 10, -1, -1, -1, 30]
    assert expand_batch_to_tokens(x, cu, 6, replace_from=-1, replace_to=1).tolist() == [10, 10, 1, 1, 1, 30]
    cu0 = torch.tensor([2, 2, 3], dtype=torch.int32)  # a request without drafts
    assert torch.equal(expand_batch_to_tokens(x, cu0, 3), expand_batch_to_tokens_loop(x, cu0, 3))
    assert cu_num_tokens([2, 3, 1]).tolist() == [2, 5, 6]
    with pytest.raises(SamplerInputError):
        expand_batch_to_tokens(x, cu, 7)


def _np_processed(logits, T, k, p):
    x = logits.astype(np.float64) / T
    if 0 < k < x.size:
        x = np.where(x >= np.sort(x)[-k], x, -np.inf)
    e = np.exp(x - x.max())
    probs = e / e.sum()
    if p < 1:
        order = np.argsort(-probs, kind="stable")
        before = np.concatenate([[0.0], np.cumsum(probs[order])[:-1]])
        drop = before >= p
        drop[0] = False
        probs[order[drop]] = 0
        probs /= probs.sum()
    return probs


def test_compute_probs_per_request_parameters():
    V, nums = 64, [2, 3, 0, 2]
    g = torch.Generator().manual_seed(5)
    logits = torch.randn((sum(nums), V), generator=g) * 2
    sb = SamplingBatch(temperature=[0.7, 1.3, 1.0, 0.0], top_k=[0, 10, 5, 0], top_p=[0.8, 1.0, 0.9, 0.5])
    cu = cu_num_tokens(nums)
    vec = compute_probs(logits, cu, sb)
    ref = compute_probs_loop(logits, nums, sb)
    assert torch.allclose(vec, ref, atol=1e-6) and torch.equal(vec == 0, ref == 0)
    params = [(0.7, 0, 0.8)] * 2 + [(1.3, 10, 1.0)] * 3
    for t, (T, k, p) in enumerate(params):
        exp = _np_processed(logits[t].numpy(), T, k, p)
        assert np.array_equal(exp == 0, vec[t].numpy() == 0)
        assert np.allclose(exp, vec[t].numpy(), atol=1e-6)
    # The greedy request keeps its raw logits (argmax path bit for bit).
    assert torch.equal(vec[5:], logits[5:])


def test_apply_top_k_keeps_ties_and_top_p_keeps_one():
    logits = torch.tensor([[1.0, 3.0, 3.0, 2.0], [5.0, 0.0, 0.0, 0.0]])
    out = apply_top_k_top_p(logits, torch.tensor([1, 0]), torch.tensor([1.0, 0.01]))
    assert torch.isinf(out[0]).tolist() == [True, False, False, True]
    assert torch.isinf(out[1]).tolist() == [False, True, True, True]


def test_inverse_cdf_never_returns_zero_weight_and_falls_back():
    V = 1009  # prime: one block
    w = torch.zeros((2, V))
    w[0, [3, 500, 1008]] = torch.tensor([0.25, 0.5, 0.25])
    w[1, 17] = 1.0
    u = torch.tensor([0.0, 0.999999999999])
    rows = torch.tensor([0, 0])
    assert inverse_cdf_sample(w, rows, u).tolist() == [3, 1008]
    # Excluding the only positive token falls back to the row itself.
    assert inverse_cdf_sample(w, torch.tensor([1]), torch.tensor([0.3]), exclude=torch.tensor([17])).tolist() == [17]
    assert inverse_cdf_row(w[0], 0.6) == 500


def test_nan_target_probabilities_are_refused_not_turned_into_a_token():
    # a NaN in the row a rejected draft recovers from made up a token (7) without a word
    p = torch.softmax(torch.randn(3, 8, generator=torch.Generator().manual_seed(0)), -1)
    p[0, 0] = float("nan")
    kw = dict(bonus_token_ids=torch.tensor([4]), uniforms=(torch.ones(3, dtype=torch.float64), torch.full((1,), 0.5, dtype=torch.float64)))   # reject
    for sampler in (rejection_sample, rejection_sample_loop):
        with pytest.raises(SamplerInputError, match="not finite"):
            sampler(torch.tensor([1, 2, 3]), [3], p, **kw)
    with pytest.raises(SamplerInputError, match="not finite"):
        inverse_cdf_sample(torch.tensor([[0.5, float("inf")]]), torch.tensor([0]), torch.tensor([0.3]))


@pytest.mark.parametrize("V", [1000, 32000, 151936])
def test_blocked_inverse_cdf_is_the_inverse_cdf(V):
    """The two-level draw is the inverse CDF of the row up to float32 rounding: the drawn
    token's CDF interval (float64, over the whole row) contains u * total, within 1e-6."""
    nb, bs = _block_layout(V)
    assert nb * bs == V
    g = torch.Generator().manual_seed(V)
    w = torch.rand((3, V), generator=g) ** 8
    w[:, ::3] = 0
    u = torch.rand(300, dtype=torch.float64, generator=g)
    rows = torch.arange(300) % 3
    vec = inverse_cdf_sample(w, rows, u, exclude=torch.full((300,), 5))
    same = 0
    for j in range(300):
        ww = w[int(rows[j])].clone()
        ww[5] = 0
        cdf = torch.cumsum(ww.double(), 0)
        t, tok = float(u[j]) * float(cdf[-1]), int(vec[j])
        assert ww[tok] > 0
        lo = float(cdf[tok - 1]) if tok else 0.0
        assert lo - 1e-6 * float(cdf[-1]) <= t <= float(cdf[tok]) + 1e-6 * float(cdf[-1])
        same += tok == inverse_cdf_row(ww, float(u[j]))
    assert same >= 290


def test_count_and_parse_output():
    out = torch.tensor([[4, 5, -1], [7, -1, -1]])
    assert count_accepted(out).tolist() == [1, 0]
    assert parse_output(out) == [[4, 5], [7]]


def test_bad_inputs_raise_one_line_errors():
    tp = torch.softmax(torch.randn(3, 10), -1)
    d = torch.tensor([1, 2, 3])
    b = torch.tensor([0, 0])
    cases = [
        dict(draft_token_ids=d, num_draft_tokens=[2, 2], target_probs=tp, bonus_token_ids=b),       # counts
        dict(draft_token_ids=d, num_draft_tokens=[2, 1], target_probs=tp[:2], bonus_token_ids=b),   # rows
        dict(draft_token_ids=torch.tensor([1, 2, 10]), num_draft_tokens=[2, 1], target_probs=tp, bonus_token_ids=b),
        dict(draft_token_ids=d, num_draft_tokens=[2, 1], target_probs=tp),                         # no bonus
        dict(draft_token_ids=d, num_draft_tokens=[2, 1], target_probs=tp, bonus_token_ids=b, max_spec_len=1),
        dict(draft_token_ids=d, num_draft_tokens=[2, 1], target_probs=tp, bonus_token_ids=b,
             cu_num_draft_tokens=torch.tensor([2, 4])),
        dict(draft_token_ids=d, num_draft_tokens=[2, 1], target_probs=tp, bonus_token_ids=b,
             draft_probs=torch.ones(3, 9)),
        dict(draft_token_ids=d, num_draft_tokens=[2, 1], target_probs=tp, bonus_token_ids=b, recover="sometimes"),
        dict(draft_token_ids=d, num_draft_tokens=[2, -1, 2], target_probs=tp, bonus_token_ids=torch.zeros(3)),
    ]
    for kw in cases:
        for fn in (rejection_sample, rejection_sample_loop):
            if fn is rejection_sample_loop and "recover" in kw:
                continue
            args = dict(kw)
            with pytest.raises(SamplerInputError) as ei:
                fn(args.pop("draft_token_ids"), args.pop("num_draft_tokens"), args.pop("target_probs"), **args)
            assert isinstance(ei.value, UserError) and isinstance(ei.value, ValueError)
            assert "\n" not in str(ei.value)
    with pytest.raises(SamplerInputError):
        draw_uniforms([1, 2], generators={5: torch.Generator()})
    with pytest.raises(SamplerInputError):
        speculative_sample(d, [2, 1], torch.randn(3, 10), torch.randn(2, 10), SamplingBatch(temperature=[1.0]))


def test_empty_batch_and_no_drafts():
    tp = torch.zeros((0, 5))
    assert rejection_sample(torch.zeros(0, dtype=torch.long), [], tp, bonus_token_ids=torch.zeros(0)).shape == (0, 1)
    out = rejection_sample(torch.zeros(0, dtype=torch.long), [0, 0], tp, bonus_token_ids=torch.tensor([3, 4]))
    assert out.tolist() == [[3], [4]]
    bp = torch.zeros((2, 5))
    bp[:, 2] = 1
    out = rejection_sample(torch.zeros(0, dtype=torch.long), [0, 0], tp, bonus_probs=bp)
    assert out.tolist() == [[2], [2]]


def test_non_contiguous_inputs():
    V, nums = 2000, [3, 2]
    draft, tp, dp, greedy, bonus, bonus_probs = _batch(V, nums, 9, with_q=True, greedy_frac=0.0)
    wide = torch.zeros((tp.shape[0], 2 * V))
    wide[:, ::2] = tp                       # a strided view holding the same values
    torch.manual_seed(0)
    u = draw_uniforms(nums)
    a = rejection_sample(draft, nums, wide[:, ::2], bonus_probs=bonus_probs.t().contiguous().t(), uniforms=u)
    b = rejection_sample(draft, nums, tp, bonus_probs=bonus_probs, uniforms=u)
    assert torch.equal(a, b)


# ------------------------------------------------------------------------- the two adapter shapes


def test_adapter_shapes_give_the_engine_level_results():
    V, nums = 48, [3, 0, 2, 4, 1]
    g = torch.Generator().manual_seed(21)
    N, B = sum(nums), len(nums)
    logits = torch.randn((N, V), generator=g) * 2
    bonus_logits = torch.randn((B, V), generator=g) * 2
    draft = torch.randint(0, V, (N,), generator=g)
    sb = SamplingBatch(temperature=[0.0, 0.8, 1.0, 1.4, 0.6], top_k=[0, 5, 0, 12, 0], top_p=[1.0, 1.0, 0.7, 0.9, 1.0],
                       generators=make_generators([None, 5, None, None, 9]))
    cu = cu_num_tokens(nums)
    inp = LogitsInputs(draft, nums, cu, 4, None, logits, bonus_logits, sb)
    assert (inp.batch_size, inp.num_tokens, inp.vocab_size) == (B, N, V)
    torch.manual_seed(3)
    ref = speculative_sample(draft, nums, logits, bonus_logits, sb, max_spec_len=4).token_ids
    for fn in (samspec_logits_sampler, loop_logits_sampler):
        torch.manual_seed(3)
        sb.generators = make_generators([None, 5, None, None, 9])   # fresh generators: the same numbers
        assert torch.equal(fn(LogitsInputs(draft, nums, cu, 4, None, logits, bonus_logits, sb)), ref)
    probs = compute_probs(logits, cu, sb)
    rin = RejectionInputs(draft, nums, cu, 4, None, probs, bonus_logits.argmax(-1).reshape(-1, 1), sb.is_greedy(), {})
    torch.manual_seed(4)
    a = samspec_sampler(rin)
    torch.manual_seed(4)
    assert torch.equal(a, loop_sampler(rin))          # the loop reference draws lazily: same tokens


def test_block_layout_is_public_and_one_block_below_1024():
    assert block_layout(1000) == (1, 1000) == _block_layout(1000)
    nb, bs = block_layout(151936)
    assert nb * bs == 151936 and nb > 1 and 100 < bs < 2000


def test_top_p_of_the_loop_row_equals_the_vectorised_masking():
    g = torch.Generator().manual_seed(8)
    logits = torch.randn((200, 30), generator=g) * 3
    ks = torch.randint(0, 31, (200,), generator=g)
    ps = torch.rand(200, generator=g).clamp(0.05, 1.0)
    ps[::7] = 1.0
    vec = apply_top_k_top_p(logits, ks, ps)
    for r in range(200):
        row = apply_top_k_top_p_row(logits[r], int(ks[r]), float(ps[r]))
        assert torch.equal(torch.isinf(row), torch.isinf(vec[r])), r
