"""The one acceptance engine over the model engines (`engines/acceptance.py`): which drafter
configurations each engine runs (the checks written once), what it records about itself,
and refusing an engine that cannot run here before anything is written. The generation
itself: test_accept_suite.py (reference, slow) and test_vllm_engine.py (vLLM)."""

from __future__ import annotations

import pytest

from samspec_bench.bench.engines.acceptance import ModelAcceptanceEngine
from samspec_bench.bench.draft_config import DraftConfig
from samspec_bench.bench.engines.vllm.platform import vllm_available
from samspec_bench.errors import UserError
from samspec_bench.sam.drafters import NgramDrafter, SamDrafter, arctic_available


def test_reference_engine_configurations():
    eng = ModelAcceptanceEngine("reference", "builtin:tiny-qwen3")
    assert eng.unsupported(DraftConfig("sam", 3)) is None
    assert eng.unsupported(DraftConfig("ngram", 3)) is None
    assert eng.unsupported(DraftConfig("sam", 3, group=True)) is None
    assert "per-group sharing" in eng.unsupported(DraftConfig("ngram", 3, group=True))
    assert "concurrently" in eng.unsupported(DraftConfig("sam", 3, group=True, order="sequential"))
    assert "--engine replay" in eng.unsupported(DraftConfig("sam", 3, corpus=True))
    assert "--engine replay" in eng.unsupported(DraftConfig("sam", 3, history=True))   # no earlier steps recorded
    if not arctic_available():
        assert "not available" in eng.unsupported(DraftConfig("suffix", 3))
    # our drafters run in this process, options attached
    d = eng.drafter(DraftConfig("ngram", 3, options=(("max_n", 4), ("min_n", 2))))
    assert isinstance(d, NgramDrafter)
    assert isinstance(eng.drafter(DraftConfig("sam", 3, group=True)), SamDrafter)
    # nothing built yet: the description says what will be
    assert eng.describe() == {"name": "reference", "model": "builtin:tiny-qwen3", "dtype": "float32", "device": "cpu",
                              "exact": False, "responses": eng.describe()["responses"]}
    assert eng.options == {"max_num_seqs": 32, "device": "cpu"}
    eng.close()
    # the engine is built on the suite's device (resolved by engine_device; not built here)
    on_gpu = ModelAcceptanceEngine("reference", "builtin:tiny-qwen3", device="cuda:1")
    assert on_gpu.options["device"] == "cuda:1" and on_gpu.describe()["device"] == "cuda:1"


def test_vllm_engine_configurations(monkeypatch):
    import samspec_bench.bench.engines.acceptance as acceptance

    monkeypatch.setattr(acceptance, "require_engine", lambda name: None)   # the checks need no vLLM
    eng = ModelAcceptanceEngine("vllm", "builtin:tiny-qwen3", engine_args={"max_num_seqs": 8}, device="cuda")
    assert eng.options == {"max_model_len": 4096, "engine_args": {"max_num_seqs": 8}}   # vLLM places itself
    assert "sam-python" in eng.unsupported(DraftConfig("sam-python", 3))
    assert eng.unsupported(DraftConfig("ngram", 3)) is None
    assert "inside vllm" in eng.unsupported(DraftConfig("ngram", 3, group=True))
    assert "inside vllm" in eng.unsupported(DraftConfig("sam", 3, group=True, order="sequential"))
    assert "vllm engine" in eng.unsupported(DraftConfig("sam", 3, corpus=True))
    assert "--engine replay" in eng.unsupported(DraftConfig("sam", 3, history=True))
    if not arctic_available():
        assert "arctic-inference" in eng.unsupported(DraftConfig("suffix", 3))
    # SAM through our proposer (group sharing, min match); vLLM's own methods by name
    sam = eng.drafter(DraftConfig("sam", 3, group=True, options=(("l_threshold", 2),)))
    assert isinstance(sam, SamDrafter) and sam.group_sharing and sam.l_threshold == 2
    assert eng.drafter(DraftConfig("ngram", 3)) == "ngram"


@pytest.mark.skipif(vllm_available() is None, reason="vLLM imports here")
def test_vllm_refused_at_once_where_it_does_not_import():
    with pytest.raises(UserError, match="vLLM"):
        ModelAcceptanceEngine("vllm")


def test_unknown_engine():
    with pytest.raises(UserError, match="--engine"):
        ModelAcceptanceEngine("replay")
