"""op-equivalence's model level on either engine, without a model: a stand-in for the vLLM engine
with known outputs goes through the same `run_model_level` as the reference engine (which
test_op_equivalence.py runs on the tiny Qwen3), and the prompts' encoding."""

from __future__ import annotations

import json

import pytest

from samspec_bench.bench.engines.base import Engine, GenerationResult, RequestOutput
from samspec_bench.bench.engines.oracle import OracleDrafter
from samspec_bench.bench.engines.vllm.adapter import VllmEngine
from samspec_bench.errors import UserError
from samspec_bench.metrics import ResponseSteps
from samspec_bench.suites.op_equivalence import BUILTIN_PROMPTS, OpEqConfig, load_prompts, run, run_model_level
from samspec_bench.suites.op_equivalence import model_level

# per prompt: plain greedy tokens and their logprobs; what the oracle-verified and the SAM runs change
BASE = {0: ([1, 2, 3, 4], [-0.5, -0.1, -0.2, -0.3]), 1: ([5, 6, 7, 8, 9], [-1.0, -1.0, -1.0, -1.0, -1.0])}
ORACLE_LP0 = [-0.5, -0.1, -0.199, -0.3]     # prompt 0 verified: one logprob off by 1e-3
ORACLE_TOK1 = [5, 6, 7, 0, 9]               # prompt 1 verified: the argmax flips at position 3
SPEC_TOK1 = [5, 6, 0, 8, 9]                 # prompt 1 with SAM: diverges at position 2


class Tok:
    chat_template = None

    def __call__(self, text):
        return {"input_ids": [len(w) for w in text.split()]}


class FakeVllm(Engine):
    """Answers generate() as vLLM would for the three runs of the model level."""

    name = "vllm"
    capabilities = VllmEngine.capabilities   # no teacher forcing: the verify path is oracle-drafted

    def __init__(self):
        self.tokenizer = Tok()
        self.calls: list[dict] = []
        self.closed = False

    def describe(self):
        return {"name": "vllm", "fake": True}

    def close(self):
        self.closed = True

    def generate(self, requests, *, drafter=None, num_spec_tokens=3, **kw):
        oracle = drafter.continuations if isinstance(drafter, OracleDrafter) else None
        if oracle is not None:
            drafter = None
        self.calls.append({"drafter": drafter, "k": num_spec_tokens, "oracle": oracle})
        outs = []
        for r in requests:
            toks, lps = (list(x) for x in BASE[r.req_id])
            steps = ResponseSteps(str(r.req_id), len(r.prompt_ids), len(toks), [1], [0], [0], [1])
            if oracle is not None:
                if r.req_id == 0:
                    lps = ORACLE_LP0
                else:
                    toks = ORACLE_TOK1
                # one verify step: k drafted, accepted so that the step emits the rest
                steps = ResponseSteps(str(r.req_id), len(r.prompt_ids), len(toks), [1], [3], [len(toks) - 2],
                                      [len(toks) - 1])
            if drafter is not None and r.req_id == 1:
                toks = SPEC_TOK1
            top = [[(t, lp), (t + 1, lp - 0.25)] for t, lp in zip(toks, lps)]
            outs.append(RequestOutput(r.req_id, list(r.prompt_ids), toks, lps, "length", steps, top))
        return GenerationResult(outs, [None] * 3, 1.0)


class Bar:
    def add_task(self, *a, **k):
        return 0

    def advance(self, *a, **k):
        pass


@pytest.fixture
def fake_vllm(monkeypatch):
    eng = FakeVllm()
    asked = {}

    def shared_engine(name, model, **kw):
        asked.update(name=name, model=model, **kw)
        return eng

    monkeypatch.setattr(model_level, "shared_engine", shared_engine)
    eng.asked = asked
    return eng


def _prompts(tmp_path):
    p = tmp_path / "prompts.txt"
    p.write_text("What is 2 + 2?\nName three primes.\n")
    return str(p)


def test_vllm_model_level_known_answer(tmp_path, fake_vllm):
    cfg = OpEqConfig(model="m", engine="vllm", levels=["model"], k=2, num_prompts=2, max_tokens=5,
                     prompts_file=_prompts(tmp_path), drafter="ngram")
    rows, table, info = run_model_level(cfg, "float32", Bar())
    assert fake_vllm.asked == {"name": "vllm", "model": "m", "dtype": "float32", "num_spec_tokens": 3}   # k >= 3 for the shared engine
    plain, verify, spec = fake_vllm.calls
    assert plain == {"drafter": None, "k": 3, "oracle": None}
    assert verify["oracle"] == {0: BASE[0][0], 1: BASE[1][0]} and verify["k"] == 2      # the plain continuation
    assert spec["drafter"] == "sam" and spec["k"] == 2     # the vLLM level drafts with SAM whatever --drafter says
    assert not fake_vllm.closed                            # the shared engine stays open
    assert list(rows) == ["model/vllm/float32"]
    r = rows["model/vllm/float32"]
    # prompt 0: positions 1..3, one diff of 1e-3; prompt 1: positions 1..2 before the flip at 3
    assert r["positions"] == 5 and r["logprob_diff_non_finite"] == 0
    assert r["logprob_diff_max"] == pytest.approx(1e-3)
    assert r["exact_zero_fraction"] == pytest.approx(4 / 5)
    assert r["argmax_flip_rate"] == pytest.approx(1 / 6)   # 1 flip in 3 + 2 positions + the flipped one
    assert r["kl_mean"] is None and r["kl_max"] is None and "top-n" in r["not_available"]
    assert r["oracle_tokens_per_step"] == pytest.approx((3 + 4) / 2)
    assert r["oracle_acceptance_rate"] == pytest.approx((2 + 3) / 6)
    assert r["model"] == "m" and r["pair"] == "vllm" and "k+1=3" in r["b"]
    assert set(r) == {"level", "pair", "dtype", "model", "a", "b", "description", "positions", "logprob_diff_max",
                      "logprob_diff_mean", "logprob_diff_p99", "exact_zero_fraction", "logprob_diff_non_finite",
                      "argmax_flip_rate",
                      "rollout_probs_diff_max", "rollout_probs_diff_mean", "rollout_actor_probs_pearson_corr",
                      "kl_mean", "kl_max", "not_available", "histogram", "oracle_tokens_per_step",
                      "oracle_acceptance_rate", "greedy"}
    g = r["greedy"]
    assert (g["prompts"], g["identical"], g["match_rate"], g["first_divergence"]) == (2, 1, 0.5, [2])
    assert g["margin_at_divergence"] == [pytest.approx(0.25)] and g["drafter"] == "sam" and g["k"] == 2
    assert [t["identical"] for t in table] == [True, False]
    assert table[1]["tokens_at_divergence"] == [7, 0] and table[1]["margin_spec"] == pytest.approx(0.25)
    assert all(t["engine"] == "vllm" and t["dtype"] == "float32" for t in table)
    assert all("logprob_diff_max_before_divergence" not in t for t in table)
    assert set(info) == {"prompts", "timings", "engine"} and info["engine"] == {"name": "vllm", "fake": True}
    assert set(info["timings"]) == {"engine_s", "generate_no_spec_s", "generate_oracle_s", "generate_spec_s"}
    assert info["prompts"]["num_prompts"] == 2 and info["prompts"]["chat_template"] is False


def test_vllm_model_level_through_run_writes_the_run_folder(tmp_path, fake_vllm):
    cfg = OpEqConfig(model="m", engine="vllm", levels=["model"], k=3, num_prompts=2, max_tokens=5,
                     prompts_file=_prompts(tmp_path), tolerance=1e-2)
    result, run_dir = run(cfg, str(tmp_path / "results"), progress=False)
    assert set(result["metrics"]["pairs"]) == {"model/vllm/float32"}
    assert result["metrics"]["gate"]["passed"]
    assert result["figures"] == ["logprob_diff_hist.png"] and (run_dir / "logprob_diff_hist.png").is_file()
    greedy = [json.loads(x) for x in (run_dir / "greedy.jsonl").read_text().splitlines()]
    assert greedy == result["tables"]["greedy"] and len(greedy) == 2
    assert set(result["model_level"]["float32"]) == {"prompts", "timings", "engine", "seconds"}
    assert result["config"]["engine"] == "vllm" and "progress" not in result["config"]


# --- the prompts ---------------------------------------------------------------------------------

class ChatTok(Tok):
    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert add_generation_prompt and tokenize
        return {"input_ids": [99] + [len(w) for m in messages for w in m["content"].split()] + [98]}


def test_prompts_through_the_chat_template_or_raw(tmp_path):
    cfg = OpEqConfig(prompts_file=_prompts(tmp_path), num_prompts=1)
    ids, src = load_prompts(cfg, ChatTok())
    assert ids == [[99, 4, 2, 1, 1, 2, 98]] and src["chat_template"] is True and src["num_prompts"] == 1
    ids, src = load_prompts(OpEqConfig(prompts_file=cfg.prompts_file, chat_template="never"), ChatTok())
    assert ids == [[4, 2, 1, 1, 2], [4, 5, 7]] and src["chat_template"] is False
    ids, src = load_prompts(OpEqConfig(prompts_file=cfg.prompts_file), Tok())          # auto, no template: raw
    assert ids[0] == [4, 2, 1, 1, 2] and src["chat_template"] is False


def test_prompts_from_jsonl_and_the_builtin_fallback(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"question": "a b"}\n\n{"problem": "ccc"}\n')
    ids, src = load_prompts(OpEqConfig(prompts_file=str(p), num_prompts=5), Tok())
    assert ids == [[1, 1], [3]] and src["prompts"] == str(p)
    assert src["note"] == "--num-prompts 5: the source holds 2 prompt(s), all of them run"   # fewer than asked: said
    assert "note" not in load_prompts(OpEqConfig(prompts_file=str(p), num_prompts=2), Tok())[1]
    p.write_text('{"answer": 1}\n')
    with pytest.raises(UserError, match="p.jsonl:1"):
        load_prompts(OpEqConfig(prompts_file=str(p)), Tok())
    with pytest.raises(UserError, match="no such file"):
        load_prompts(OpEqConfig(prompts_file=str(tmp_path / "none.txt")), Tok())
    ids, src = load_prompts(OpEqConfig(data_dir=str(tmp_path / "nodata"), num_prompts=3), Tok())
    assert len(ids) == 3 and src["builtin_prompts"] is True
    assert ids[0] == [len(w) for w in BUILTIN_PROMPTS[0].split()]
