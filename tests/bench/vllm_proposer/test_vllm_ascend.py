"""The vllm-ascend registration (vLLM general plugin), without an NPU: a no-op where
vllm-ascend is absent; against a stand-in `vllm_ascend` package with vllm-ascend's proposer
factory and interface, method `sam` (and custom_class with our class) builds the SAM
adapter, every other method goes to vllm-ascend's own factory. What a real NPU run would
show (the NPU runner calling the adapter) is not tested here: no NPU."""

from __future__ import annotations

import sys
import textwrap
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from samspec_bench.bench.vllm_proposer import ascend as ascend_plugin
from samspec_bench.bench.vllm_proposer.proposer_options import CLASS_PATH, EXTRA_KEY

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def clean_plugin(monkeypatch):
    monkeypatch.setitem(ascend_plugin._STATE, "registered", False)
    monkeypatch.setitem(ascend_plugin._STATE, "original", None)
    yield
    for name in [n for n in sys.modules if n == "vllm_ascend" or n.startswith("vllm_ascend.")]:
        del sys.modules[name]


@pytest.fixture
def fake_ascend(tmp_path, monkeypatch, clean_plugin):
    pkg = tmp_path / "vllm_ascend"
    (pkg / "spec_decode").mkdir(parents=True)
    (pkg / "worker").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "spec_decode" / "interface.py").write_text(textwrap.dedent("""
        import enum
        class SpecDcodeType(enum.Enum):
            NGRAM = 0
            EAGLE = 1
    """))
    (pkg / "spec_decode" / "__init__.py").write_text(textwrap.dedent("""
        class NgramProposer:
            def __init__(self, vllm_config, device, runner):
                self.kind = "stock-ngram"
        def get_spec_decode_method(method, vllm_config, device, runner):
            if method == "ngram":
                return NgramProposer(vllm_config, device, runner)
            raise ValueError(f"Unknown speculative decoding method: {method}")
    """))
    (pkg / "worker" / "__init__.py").write_text("")
    # a runner module that imported the factory by name before the plugin ran
    (pkg / "worker" / "model_runner_v1.py").write_text("from vllm_ascend.spec_decode import get_spec_decode_method\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import vllm_ascend.worker.model_runner_v1  # noqa: F401
    return pkg


def _config(method="sam", model=None, k=3):
    return SimpleNamespace(speculative_config=SimpleNamespace(method=method, model=model, num_speculative_tokens=k),
                           model_config=SimpleNamespace(max_model_len=4096))


class _Runner:
    speculative_config = None

    def __init__(self):
        self.requests = {}
        self.input_batch = SimpleNamespace(req_ids=[], req_id_to_index={}, num_prompt_tokens=np.zeros(8, np.int32),
                                           num_tokens_no_spec=np.zeros(8, np.int32),
                                           token_ids_cpu=np.zeros((8, 64), np.int32))

    def _update_states(self):
        pass


def test_noop_without_vllm_ascend(clean_plugin, monkeypatch):
    monkeypatch.setattr(ascend_plugin, "ascend_installed", lambda: False)
    assert ascend_plugin.register() is False
    assert ascend_plugin._STATE["registered"] is False


def test_sam_registered_with_fake_ascend(fake_ascend):
    import vllm_ascend.spec_decode as sd
    import vllm_ascend.worker.model_runner_v1 as mr

    assert ascend_plugin.register() is True
    assert ascend_plugin.register() is False          # idempotent
    runner = _Runner()
    d = sd.get_spec_decode_method("sam", _config(), "npu", runner)
    assert isinstance(d, ascend_plugin.AscendSamProposer)
    assert d.name.name == "NGRAM"                      # the runner's CPU-token path
    assert d.sam.runner is runner and d.sam.request_mapping == "request-id"
    # the runner module that imported the factory before registration sees it too
    assert isinstance(mr.get_spec_decode_method("sam", _config(), "npu", runner), ascend_plugin.AscendSamProposer)
    # custom_class with our class path also maps to the adapter; other methods are untouched
    assert isinstance(sd.get_spec_decode_method("custom_class", _config("custom_class", CLASS_PATH), "npu", runner),
                      ascend_plugin.AscendSamProposer)
    for old in ("samspec_bench.bench.engines.vllm.drafter.SamProposer", "samspec_bench.bench.vllm_drafter.SamProposer"):
        assert isinstance(sd.get_spec_decode_method("custom_class", _config("custom_class", old), "npu", runner),
                          ascend_plugin.AscendSamProposer), old   # the paths users wrote earlier
    assert sd.get_spec_decode_method("ngram", _config("ngram"), "npu", runner).kind == "stock-ngram"
    with pytest.raises(ValueError):
        sd.get_spec_decode_method("eagle", _config("eagle"), "npu", runner)


def test_adapter_drafts_through_the_npu_interface(fake_ascend):
    import vllm_ascend.spec_decode as sd

    ascend_plugin.register()
    runner = _Runner()
    d = sd.get_spec_decode_method("sam", _config(k=3), "npu", runner)
    b = runner.input_batch
    b.req_ids, b.req_id_to_index = ["a"], {"a": 0}
    b.num_prompt_tokens[0] = 8
    runner.requests["a"] = SimpleNamespace(sampling_params=SimpleNamespace(extra_args={EXTRA_KEY: {"key": "a"}}))
    b.token_ids_cpu[0, :9] = [4, 5, 6, 7, 4, 5, 6, 7, 4]
    b.num_tokens_no_spec[0] = 9
    assert d.generate_token_ids([[4]]) == [[5, 6, 7]]
    assert d.propose([[4]], b.num_tokens_no_spec, b.token_ids_cpu) == [[5, 6, 7]]   # vLLM's signature
    # the request leaves the batch: its automaton is freed
    b.req_ids, b.req_id_to_index = [], {}
    assert d.generate_token_ids([]) == []
    assert d.sam.describe()["active_requests"] == 0
    assert d.describe()["platform"] == "vllm-ascend"


@pytest.mark.parametrize("version,k,expected", [
    ("0.13.0rc1", 3, False), ("0.13.0rc2", 3, True), ("0.15.0", 4, True), ("0.17.0rc1", 3, True),
    ("0.17.0", 3, False), ("0.15.0", 2, False), (None, 3, False),
])
def test_block_verify_window(version, k, expected):
    assert ascend_plugin.block_verify_possible(version, k) is expected
    g = ascend_plugin.guard_rail(version, k)
    if version is None:
        assert g["block_verify"].startswith("n/a")
    else:
        assert g["block_verify"].startswith("CAN BE ACTIVE" if expected else "inactive")


def test_entry_point_declared():
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    eps = data["project"]["entry-points"]["vllm.general_plugins"]
    assert eps == {"samspec_sam": "samspec_bench.bench.vllm_proposer.ascend:register"}
    mod, _, fn = eps["samspec_sam"].partition(":")
    assert callable(getattr(__import__(mod, fromlist=[fn]), fn))
