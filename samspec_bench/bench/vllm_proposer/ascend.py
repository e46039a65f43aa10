"""SAM for vllm-ascend: a vLLM general plugin (entry point `vllm.general_plugins`, name
`samspec_sam`, declared in pyproject.toml), loaded by vLLM in every process it starts.

Without vllm-ascend `register()` does nothing. With it, it wraps vllm-ascend's proposer
factory `vllm_ascend.spec_decode.get_spec_decode_method(method, vllm_config, device, runner)`
so that the method `sam` (where the installed vLLM's config accepts that name, as in the
Ascend RL recipe's stack) and `custom_class` with `model=` any path of `SamProposer`
(options.CLASS_PATHS: its home and the older paths users wrote) build `AscendSamProposer`:
the same per-request SAM state as on vLLM (`SamProposer`, rows mapped to request ids through
the runner's input batch, automata freed when a request leaves the batch), behind the
interface vllm-ascend's NPU model runner calls. Every other method goes to vllm-ascend's own
factory.

How the NPU runner (`vllm_ascend/worker/model_runner_v1.py`) calls a CPU drafter, per release:
- v0.11 ... v0.14: `drafter.generate_token_ids(valid_sampled_token_ids, ...)`;
- v0.16 ... v0.23.0 (with vLLM 0.23.0): `propose(valid_sampled_token_ids)`, and only for a
  drafter that `isinstance(..., AscendNgramProposer)` (any other: "Unknown speculative
  decoding method"); the batch's buffers are read from the runner;
- v0.23.0 with another vLLM, v0.24 and later: `propose(num_spec_tokens_to_schedule,
  valid_sampled_token_ids, num_tokens_no_spec, token_ids_cpu)`, the same isinstance test;
- vLLM's custom_class call `propose(sampled, num_tokens_no_spec, token_ids_cpu,
  slot_mappings=...)` (vllm-ascend's open pull request for custom_class).
So the class built is a subclass of vllm-ascend's `AscendNgramProposer` where that class
exists (its `__init__` is not run: it warms numba up for n-gram matching SAM does not use),
and `propose` tells the forms apart by the arguments it receives. Each runs after the step's
bookkeeping wrote the sampled ids into the buffers, as on vLLM.

What was checked here (no NPU): the registration and the call forms against a stand-in
`vllm_ascend` package with the same factory, proposer class and runner dispatch
(tests/bench/vllm_proposer/test_vllm_ascend.py). Not checked: a real NPU run.
`describe()` of the built drafter and the start-up guard-rail name the class actually used.

Guard-rail: vllm-ascend v0.13.0rc2 ... v0.17.0rc1 switch on a "block verify" rejection path
for k >= 3 at temperature > 0 that is wrong for drafts without draft probabilities (SAM,
n-gram, suffix): vllm-ascend issue #7603. `guard_rail()` reports whether it can be active.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import numpy as np

from samspec_bench.bench.vllm_proposer.proposer_options import CLASS_PATH, CLASS_PATHS
from samspec_bench.bench.vllm_proposer.proposer import SamProposer

METHOD = "sam"
FACTORY_MODULE = "vllm_ascend.spec_decode"
FACTORY = "get_spec_decode_method"
BLOCK_VERIFY_FIRST = "0.13.0rc2"
BLOCK_VERIFY_LAST = "0.17.0rc1"
BLOCK_VERIFY_MIN_K = 3
NGRAM_MODULE = "vllm_ascend.spec_decode.ngram_proposer"
NGRAM_CLASS = "AscendNgramProposer"
ASCEND_CLASS_PATH = f"{__name__}.AscendSamProposer"   # what the start-up guard rail sees on vllm-ascend
_STATE: dict[str, Any] = {"registered": False, "original": None, "class": None}


def ascend_installed() -> bool:
    return importlib.util.find_spec("vllm_ascend") is not None


def register() -> bool:
    """The plugin entry point. Returns True when it patched vllm-ascend, False when there is
    nothing to do (no vllm-ascend, or already done). Never raises: a plugin that fails would
    stop vLLM from starting."""
    if _STATE["registered"]:
        return False
    try:
        if not ascend_installed():
            return False
        factory_mod = importlib.import_module(FACTORY_MODULE)
        original = getattr(factory_mod, FACTORY, None)
        if original is None:
            return False
    except Exception:  # noqa: BLE001
        return False

    def get_spec_decode_method(method, vllm_config, device, runner, *args, **kwargs):
        if _is_sam(method, vllm_config):
            return proposer_class()(vllm_config, device, runner)
        return original(method, vllm_config, device, runner, *args, **kwargs)

    get_spec_decode_method.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(factory_mod, FACTORY, get_spec_decode_method)
    # modules that already did `from vllm_ascend.spec_decode import get_spec_decode_method`
    for name, mod in list(sys.modules.items()):
        if name.startswith("vllm_ascend") and getattr(mod, FACTORY, None) is original:
            setattr(mod, FACTORY, get_spec_decode_method)
    _STATE.update(registered=True, original=original)
    return True


def _is_sam(method, vllm_config) -> bool:
    if method == METHOD:
        return True
    if method == "custom_class":
        spec = getattr(vllm_config, "speculative_config", None)
        return getattr(spec, "model", None) in CLASS_PATHS
    return False


def proposer_class() -> type:
    """The class built for SAM: AscendSamProposer under vllm-ascend's AscendNgramProposer
    (the NPU runner's dispatch tests isinstance), or AscendSamProposer alone where vllm-ascend
    has no such class (releases before v0.16)."""
    cls = _STATE["class"]
    if cls is None:
        try:
            base = getattr(importlib.import_module(NGRAM_MODULE), NGRAM_CLASS)
            cls = type("AscendSamProposer", (AscendSamProposer, base),
                       {"__module__": __name__, "__doc__": AscendSamProposer.__doc__})
        except Exception:  # noqa: BLE001 - no such class in this release
            cls = AscendSamProposer
        _STATE["class"] = cls
    return cls


def _is_count(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _ngram_kind():
    """vllm-ascend's enum value for n-gram-like CPU drafters, when it has one: its runner
    takes the CPU-token path for drafters of that kind."""
    try:
        from vllm_ascend.spec_decode.interface import SpecDcodeType  # type: ignore
        return SpecDcodeType.NGRAM
    except Exception:  # noqa: BLE001
        return "ngram"


class AscendSamProposer:
    """SamProposer behind vllm-ascend's proposer interfaces (the module docstring)."""

    def __init__(self, vllm_config, device=None, runner=None):
        # AscendNgramProposer.__init__ (a base where proposer_class() adds it) is not called on purpose
        self.sam = SamProposer(vllm_config, runner=runner)
        self.vllm_config = vllm_config
        self.device = device
        self.runner = runner
        self.name = _ngram_kind()
        self.k = self.sam.k
        self.max_model_len = self.sam.max_model_len

    def load_model(self, *args, **kwargs) -> None:
        pass

    def dummy_run(self, *args, **kwargs) -> None:
        pass

    def generate_token_ids(self, valid_sampled_token_ids, *args, **kwargs) -> list[list[int]]:
        batch = self.runner.input_batch
        return self.sam.propose(valid_sampled_token_ids, batch.num_tokens_no_spec, batch.token_ids_cpu)

    def propose(self, *args, **kwargs) -> list[list[int]]:
        """Any of the runner's call forms (the module docstring): a leading count is this
        step's k (v0.24+); then the sampled ids, and the buffers where given (else the
        runner's). slot_mappings is not read."""
        cap = kwargs.get("num_speculative_tokens")
        if args and _is_count(args[0]):
            cap, args = args[0], args[1:]
        sampled = args[0] if args else kwargs.get("sampled_token_ids", kwargs.get("valid_sampled_token_ids"))
        if len(args) >= 3:
            counts, tokens = args[1], args[2]
        elif kwargs.get("token_ids_cpu") is not None:
            counts, tokens = kwargs.get("num_tokens_no_spec"), kwargs["token_ids_cpu"]
        else:
            batch = self.runner.input_batch
            counts, tokens = batch.num_tokens_no_spec, batch.token_ids_cpu
        return self.sam.propose(sampled, counts, tokens, num_speculative_tokens=cap)

    def take_records(self, keys=None):
        return self.sam.take_records(keys)

    def describe(self) -> dict[str, Any]:
        return {**self.sam.describe(), "class": f"{type(self).__module__}.{type(self).__qualname__}",
                "wraps": CLASS_PATH, "platform": "vllm-ascend"}


def _version(text: str):
    from packaging.version import InvalidVersion, Version
    try:
        return Version(text)
    except InvalidVersion:
        return None


def block_verify_possible(ascend_version: str | None, k: int) -> bool | None:
    """Can vllm-ascend's block-verify rejection path be active (at temperature > 0)? None when
    the version does not parse."""
    if not ascend_version:
        return False
    v = _version(ascend_version)
    if v is None:
        return None
    return _version(BLOCK_VERIFY_FIRST) <= v <= _version(BLOCK_VERIFY_LAST) and k >= BLOCK_VERIFY_MIN_K


def guard_rail(ascend_version: str | None, k: int) -> dict[str, Any]:
    if not ascend_version:
        return {"vllm_ascend": None, "block_verify": "n/a (vllm-ascend not installed)", "plugin_registered": False}
    possible = block_verify_possible(ascend_version, k)
    if possible is None:
        text = f"unknown (version {ascend_version!r} does not parse)"
    elif possible:
        text = (f"CAN BE ACTIVE: vllm-ascend {ascend_version} with k={k} >= {BLOCK_VERIFY_MIN_K} uses block verify at "
                "temperature > 0, lossy for drafts without probabilities (vllm-ascend #7603)")
    else:
        text = f"inactive (vllm-ascend {ascend_version}, k={k})"
    return {"vllm_ascend": ascend_version, "block_verify": text, "block_verify_possible": possible,
            "plugin_registered": bool(_STATE["registered"])}
