"""The vllm-ascend registration (vLLM general plugin), without an NPU: a no-op where
vllm-ascend is absent; against a stand-in `vllm_ascend` package with vllm-ascend's proposer
factory, its n-gram class and its NPU runner's dispatch (v0.23.0 and v0.24+ call forms),
method `sam` (and custom_class with our class) builds the SAM adapter, which the runner's
isinstance dispatch reaches, every other method goes to vllm-ascend's own factory. A real
NPU run is not tested here: no NPU."""

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
from samspec_bench.sam.drafters import SamDrafter

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def clean_plugin(monkeypatch):
    for key in ("registered", "original", "class"):
        monkeypatch.setitem(ascend_plugin._STATE, key, False if key == "registered" else None)
    yield
    for name in [n for n in sys.modules if n == "vllm_ascend" or n.startswith("vllm_ascend.")]:
        del sys.modules[name]


# A stand-in of vllm-ascend v0.23.0 / v0.24+ (vllm_ascend/spec_decode/__init__.py,
# spec_decode/ngram_proposer.py, worker/model_runner_v1.py): the factory, the n-gram class the
# runner's dispatch tests with isinstance, and that dispatch with both call forms.
FAKE = {
    "__init__.py": "",
    "utils.py": """
        VLLM_VERSION = "0.23.0"
        def vllm_version_is(version):
            return version == VLLM_VERSION
    """,
    "spec_decode/interface.py": """
        import enum
        class SpecDcodeType(enum.Enum):
            NGRAM = 0
            EAGLE = 1
    """,
    "spec_decode/ngram_proposer.py": """
        WARMED_UP = []
        class NgramProposer:          # vLLM's: its __init__ compiles numba kernels by running them
            def __init__(self, vllm_config):
                WARMED_UP.append(self)
                self.k = vllm_config.speculative_config.num_speculative_tokens
        class AscendNgramProposer(NgramProposer):
            def __init__(self, vllm_config, runner):
                self.runner = runner
                super().__init__(vllm_config)
            def load_model(self, *args, **kwargs):
                pass
            def dummy_run(self, num_tokens, with_prefill=None, in_graph_capturing=None, num_reqs=None,
                          num_tokens_across_dp=None, aclgraph_runtime_mode=None, batch_descriptor=None,
                          dummy_compute_logits=lambda hidden_states: None, is_profile=False):
                pass
            def propose(self, *args, **kwargs):
                raise AssertionError("vllm-ascend's n-gram propose ran, not SAM's")
    """,
    "spec_decode/__init__.py": """
        from vllm_ascend.spec_decode.ngram_proposer import AscendNgramProposer
        def get_spec_decode_method(method, vllm_config, device, runner):
            if method == "ngram":
                return AscendNgramProposer(vllm_config, runner)
            raise ValueError(f"Unknown speculative decoding method: {method}")
    """,
    "worker/__init__.py": "",
    # imported before the plugin registers: it holds the factory by name
    "worker/model_runner_v1.py": """
        from vllm_ascend.spec_decode import get_spec_decode_method
        from vllm_ascend.spec_decode.ngram_proposer import AscendNgramProposer
        from vllm_ascend.utils import vllm_version_is

        class NPUModelRunner:
            def __init__(self, vllm_config, device, input_batch):
                self.vllm_config = vllm_config
                self.speculative_config = vllm_config.speculative_config
                self.drafter = get_spec_decode_method(self.speculative_config.method, vllm_config, device, self)
                self.requests = {}
                self.input_batch = input_batch

            def _update_states(self, scheduler_output):
                pass

            def load_model(self):
                self.drafter.load_model("model")

            def dummy_run(self, num_tokens):
                self.drafter.dummy_run(num_tokens=num_tokens, with_prefill=False, num_reqs=1,
                                       num_tokens_across_dp=None, aclgraph_runtime_mode=None,
                                       batch_descriptor=None, dummy_compute_logits=lambda h: None,
                                       in_graph_capturing=False, is_profile=True)

            def sample_tokens(self, valid_sampled_token_ids, num_spec_tokens_to_schedule):
                b = self.input_batch
                for i, ids in enumerate(valid_sampled_token_ids):   # _bookkeeping_sync, before the drafter
                    n = b.num_tokens_no_spec[i]
                    b.token_ids_cpu[i, n: n + len(ids)] = ids
                    b.num_tokens_no_spec[i] = n + len(ids)
                if isinstance(self.drafter, AscendNgramProposer):
                    if vllm_version_is("0.23.0"):
                        return self.drafter.propose(valid_sampled_token_ids)
                    return self.drafter.propose(num_spec_tokens_to_schedule, valid_sampled_token_ids,
                                                b.num_tokens_no_spec, b.token_ids_cpu)
                raise ValueError(f"Unknown speculative decoding method: {self.speculative_config.method}")
    """,
}


@pytest.fixture
def fake_ascend(tmp_path, monkeypatch, clean_plugin):
    pkg = tmp_path / "vllm_ascend"
    for rel, text in FAKE.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    import vllm_ascend.worker.model_runner_v1  # noqa: F401
    return pkg


def _config(method="sam", model=None, k=3):
    return SimpleNamespace(speculative_config=SimpleNamespace(method=method, model=model, num_speculative_tokens=k),
                           model_config=SimpleNamespace(max_model_len=64),
                           scheduler_config=SimpleNamespace(async_scheduling=False))


def _batch():
    return SimpleNamespace(req_ids=[], req_id_to_index={}, num_prompt_tokens=np.zeros(8, np.int32),
                           num_tokens_no_spec=np.zeros(8, np.int32), token_ids_cpu=np.zeros((8, 64), np.int32))


class _Runner:
    speculative_config = None

    def __init__(self):
        self.requests = {}
        self.input_batch = _batch()

    def _update_states(self):
        pass


def test_noop_without_vllm_ascend(clean_plugin, monkeypatch):
    monkeypatch.setattr(ascend_plugin, "ascend_installed", lambda: False)
    assert ascend_plugin.register() is False
    assert ascend_plugin._STATE["registered"] is False


def test_sam_registered_with_fake_ascend(fake_ascend):
    import vllm_ascend.spec_decode as sd
    import vllm_ascend.spec_decode.ngram_proposer as ng
    import vllm_ascend.worker.model_runner_v1 as mr

    assert ascend_plugin.register() is True
    assert ascend_plugin.register() is False          # idempotent
    runner = _Runner()
    d = sd.get_spec_decode_method("sam", _config(), "npu", runner)
    assert isinstance(d, ascend_plugin.AscendSamProposer) and isinstance(d, ng.AscendNgramProposer)
    assert ng.WARMED_UP == []                          # vllm-ascend's n-gram __init__ (numba warm-up) not run
    assert d.name.name == "NGRAM" and d.k == 3
    assert f"{type(d).__module__}.{type(d).__qualname__}" == ascend_plugin.ASCEND_CLASS_PATH   # the guard rail's name
    assert d.sam.runner is runner and d.sam.request_mapping == "request-id"
    # the runner module that imported the factory before registration sees it too
    assert isinstance(mr.get_spec_decode_method("sam", _config(), "npu", runner), ascend_plugin.AscendSamProposer)
    # custom_class with our class path also maps to the adapter; other methods are untouched
    assert isinstance(sd.get_spec_decode_method("custom_class", _config("custom_class", CLASS_PATH), "npu", runner),
                      ascend_plugin.AscendSamProposer)
    for old in ("samspec_bench.bench.engines.vllm.drafter.SamProposer", "samspec_bench.bench.vllm_drafter.SamProposer"):
        assert isinstance(sd.get_spec_decode_method("custom_class", _config("custom_class", old), "npu", runner),
                          ascend_plugin.AscendSamProposer), old   # the paths users wrote earlier
    ngram = sd.get_spec_decode_method("ngram", _config("ngram"), "npu", runner)
    assert type(ngram) is ng.AscendNgramProposer and len(ng.WARMED_UP) == 1
    with pytest.raises(ValueError):
        sd.get_spec_decode_method("eagle", _config("eagle"), "npu", runner)


def _decode(runner, steps: int, k_to_schedule: int, rng) -> tuple[list, list]:
    """Two requests through the stand-in runner's sample_tokens: greedy verification of the
    drafts against each one's continuation; returns SAM's drafts and the reference's."""
    b, ref = runner.input_batch, SamDrafter(length="fixed")
    conts = {}
    for i, rid in enumerate(("a", "b")):
        motif = rng.integers(0, 9, size=3 + i).tolist()
        prompt, conts[rid] = motif * 3, motif * 12
        b.req_ids.append(rid)
        b.req_id_to_index[rid] = i
        b.token_ids_cpu[i, :len(prompt)], b.num_tokens_no_spec[i] = prompt, len(prompt)
        b.token_ids_cpu[i, len(prompt):] = 7   # junk past the row
        b.num_prompt_tokens[i] = len(prompt)
        runner.requests[rid] = SimpleNamespace(sampling_params=SimpleNamespace(
            max_tokens=len(conts[rid]), extra_args={EXTRA_KEY: {"key": rid, "length": "fixed"}}))
        ref.start(rid, prompt)
    got, want, drafts, out = [], [], [[], []], {"a": [], "b": []}
    for _ in range(steps):
        sampled = []
        for i, rid in enumerate(("a", "b")):
            pos, a = len(out[rid]), 0
            while a < len(drafts[i]) and drafts[i][a] == conts[rid][pos + a]:
                a += 1
            sampled.append(conts[rid][pos: pos + a + 1])
            out[rid] += sampled[-1]
            ref.extend(rid, sampled[-1])
        drafts = runner.sample_tokens(sampled, k_to_schedule)
        got.append(drafts)
        want.append([ref.propose(rid, min(k_to_schedule, len(conts[rid]) - len(out[rid]) - 1)) for rid in out])
    return got, want


@pytest.mark.parametrize("vllm_version,k_to_schedule", [("0.23.0", 3), ("0.24.0", 3), ("0.24.0", 2)])
def test_npu_runner_reaches_sam_in_both_call_forms(fake_ascend, vllm_version, k_to_schedule):
    """vllm-ascend's runner dispatch (isinstance AscendNgramProposer): propose(sampled) with
    vLLM 0.23.0, propose(k_to_schedule, sampled, num_tokens_no_spec, token_ids_cpu) after; SAM
    drafts each request's own continuation in both, capped by this step's k."""
    import vllm_ascend.utils as au
    import vllm_ascend.worker.model_runner_v1 as mr

    ascend_plugin.register()
    au.VLLM_VERSION = vllm_version
    runner = mr.NPUModelRunner(_config(k=3), "npu", _batch())
    runner.load_model()
    runner.dummy_run(16)
    got, want = _decode(runner, 8, k_to_schedule, np.random.default_rng(0))
    assert got == want
    assert max(len(d) for step in got for d in step) == k_to_schedule
    assert all(type(t) is int for step in got for d in step for t in d)


def test_older_and_custom_class_forms(fake_ascend):
    """generate_token_ids (vllm-ascend v0.11 ... v0.14) and vLLM's custom_class call
    (sampled, num_tokens_no_spec, token_ids_cpu, slot_mappings=) draft alike."""
    import vllm_ascend.spec_decode as sd

    ascend_plugin.register()
    out = []
    for form in ("generate_token_ids", "custom_class"):
        runner = _Runner()
        d = sd.get_spec_decode_method("sam", _config(k=3), "npu", runner)
        b = runner.input_batch
        b.req_ids, b.req_id_to_index = ["a"], {"a": 0}
        b.num_prompt_tokens[0] = 8
        runner.requests["a"] = SimpleNamespace(sampling_params=SimpleNamespace(extra_args={EXTRA_KEY: {"key": "a"}}))
        b.token_ids_cpu[0, :9] = [4, 5, 6, 7, 4, 5, 6, 7, 4]
        b.num_tokens_no_spec[0] = 9
        if form == "generate_token_ids":
            out.append(d.generate_token_ids([[4]], None, None))
        else:
            out.append(d.propose([[4]], b.num_tokens_no_spec, b.token_ids_cpu, slot_mappings=object()))
    assert out == [[[5, 6, 7]], [[5, 6, 7]]]
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
