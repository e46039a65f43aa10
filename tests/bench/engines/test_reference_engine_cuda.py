"""The reference engine on a CUDA device (`ReferenceEngine(ckpt, device=..., dtype=...)`): its
forward against the Hugging Face model on the same device, greedy decoding with and without SAM
(equal in float32), the verify path fully accepted with the oracle drafter, and bfloat16."""

from __future__ import annotations

import math

import pytest
import torch

from device_cli import PROMPTS
from tree_fixtures import KnowingDrafter, knowing_tree_size, knowing_trees  # noqa: F401 (a fixture)
from samspec_bench.bench.engines.base import SamplingParams, make_requests
from samspec_bench.bench.engines.oracle import OracleDrafter
from samspec_bench.bench.engines.reference_engine import ReferenceEngine
from samspec_bench.devices import device_kind

pytestmark = pytest.mark.cuda

MAX_TOKENS = 24


def engine(ckpt, device, dtype, **kw):
    return ReferenceEngine(str(ckpt), device=device, dtype=dtype, max_num_seqs=4, max_model_len=512,
                           block_size=16, num_blocks=64, **kw)


@pytest.fixture(scope="module")
def fp32(small_qwen3, accel_device):
    eng = engine(small_qwen3, accel_device, "float32")
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompt_ids(fp32):
    # each prompt three times over: SAM finds its drafts in the repeats
    return [fp32.tokenizer(p)["input_ids"] * 3 for p in PROMPTS]


def test_the_engine_and_its_kv_cache_live_on_the_device(fp32, accel_kind):
    assert device_kind(str(fp32.device)) == accel_kind and fp32.describe()["device"].startswith(accel_kind)
    assert device_kind(str(fp32.cache.key_caches[0].device)) == accel_kind
    assert fp32.hf_model.lm_head.weight.device.type == accel_kind


def test_forward_matches_the_hf_model_on_the_device(fp32, prompt_ids):
    ids = prompt_ids[0]
    with torch.no_grad():
        ref = fp32.hf_model(torch.tensor([ids], device=fp32.device)).logits[0].float().cpu()
    for chunk in (None, 1, 5):
        ours = fp32.forward_logits(ids, chunk_size=chunk).float().cpu()
        assert ours.shape == ref.shape
        assert torch.allclose(ours, ref, atol=1e-4, rtol=0), (chunk, (ours - ref).abs().max())
    assert fp32.cache.num_free_blocks == fp32.cache.num_blocks


def test_float32_greedy_is_the_same_with_and_without_sam(fp32, prompt_ids):
    reqs = make_requests(prompt_ids, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    base = fp32.generate(reqs)
    spec = fp32.generate(reqs, drafter="sam", num_spec_tokens=3)
    assert [o.token_ids for o in spec.outputs] == [o.token_ids for o in base.outputs]
    assert all(len(o.token_ids) == MAX_TOKENS for o in base.outputs)
    assert sum(s.num_drafted for s in spec.steps) > 0   # the verify path ran on the device
    assert base.metrics()["tokens_per_step"] == 1.0


def test_the_oracle_drafts_of_the_greedy_continuation_are_all_accepted(fp32, prompt_ids):
    reqs = make_requests(prompt_ids, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    base = fp32.generate(reqs)
    full = fp32.generate(reqs, drafter=OracleDrafter({o.req_id: o.token_ids for o in base.outputs}),
                         num_spec_tokens=3)
    assert [o.token_ids for o in full.outputs] == [o.token_ids for o in base.outputs]
    m = full.metrics()
    assert m["acceptance_rate"] == 1.0 and m["tokens_per_step"] > 2.0, m
    assert len(full.steps) < len(base.steps)


def test_batch_invariant_mode_gives_the_tokens_of_each_request_alone(small_qwen3, accel_device, prompt_ids):
    eng = engine(small_qwen3, accel_device, "float32", batch_invariant=True)
    try:
        params = SamplingParams(max_tokens=12, ignore_eos=True)
        batched = eng.generate(make_requests(prompt_ids, params), drafter="sam", num_spec_tokens=3)
        alone = [eng.generate(make_requests([p], params)).outputs[0].token_ids for p in prompt_ids]
        assert [o.token_ids for o in batched.outputs] == alone
    finally:
        eng.close()


def test_bfloat16_generates_with_sam_on_the_device(small_qwen3, accel_device, prompt_ids):
    eng = engine(small_qwen3, accel_device, "bfloat16")
    try:
        assert eng.dtype == torch.bfloat16 and eng.cache.key_caches[0].dtype == torch.bfloat16
        params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=1)
        spec = eng.generate(make_requests(prompt_ids, params), drafter="sam", num_spec_tokens=3)
        vocab = eng.describe()["vocab_size"]
        for o in spec.outputs:
            assert len(o.token_ids) == MAX_TOKENS and all(0 <= t < vocab for t in o.token_ids)
            assert all(math.isfinite(lp) and lp <= 0 for lp in o.logprobs)
        assert sum(s.num_drafted for s in spec.steps) > 0
        assert eng.cache.num_free_blocks == eng.cache.num_blocks
    finally:
        eng.close()


def test_float32_greedy_with_draft_trees_is_the_plain_output_on_the_device(fp32, prompt_ids, knowing_trees):
    """Tree verification on the device (tree mask, depth positions, the kept path's KV moved):
    with the true continuation on the third of three paths, every tree step keeps its whole room
    and the tokens are plain greedy decoding's."""
    reqs = make_requests(prompt_ids, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    base = fp32.generate(reqs)
    drafter = KnowingDrafter({o.req_id: o.token_ids for o in base.outputs}, fp32.decoder.vocab_size)
    tree = fp32.generate(reqs, drafter=drafter, num_spec_tokens=4, tree_paths=3)
    assert [o.token_ids for o in tree.outputs] == [o.token_ids for o in base.outputs]
    full = [(d, a) for o in tree.outputs for p, d, a in zip(o.steps.position, o.steps.drafted, o.steps.accepted)
            if MAX_TOKENS - p - 1 >= 4]
    assert full and all(d == knowing_tree_size(4) and a == 4 for d, a in full)
    assert fp32.cache.num_free_blocks == fp32.cache.num_blocks
