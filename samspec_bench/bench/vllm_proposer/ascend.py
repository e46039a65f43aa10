"""SAM for vllm-ascend: a vLLM general plugin (entry point `vllm.general_plugins`, name
`samspec_sam`, declared in pyproject.toml), loaded by vLLM in every process it starts.

Without vllm-ascend `register()` does nothing. With it, it wraps vllm-ascend's proposer
factory `vllm_ascend.spec_decode.get_spec_decode_method(method, vllm_config, device, runner)`
so that the method `sam` (where the installed vLLM's config accepts that name, as in the
Ascend RL recipe's stack) and `custom_class` with `model=` any path of `SamProposer`
(options.CLASS_PATHS: its home and the older paths users wrote) build `AscendSamProposer`:
the same per-request SAM state as on vLLM (`SamProposer`, rows mapped to request ids through
the runner's input batch, automata freed when a request leaves the batch), behind the interface vllm-ascend's NPU model runner calls
(`generate_token_ids(valid_sampled_token_ids, ...)` in the releases read for this module,
vLLM's `propose(...)` otherwise). Every other method goes to vllm-ascend's own factory.

What was checked here (no NPU): the registration and the adapter against a stand-in
`vllm_ascend` package with the same factory and interface (tests/bench/vllm_proposer/test_vllm_ascend.py).
Not checked: a real NPU run. vllm-ascend's proposer interface changes between releases;
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

from samspec_bench.bench.vllm_proposer.proposer_options import CLASS_PATH, CLASS_PATHS
from samspec_bench.bench.vllm_proposer.proposer import SamProposer

METHOD = "sam"
FACTORY_MODULE = "vllm_ascend.spec_decode"
FACTORY = "get_spec_decode_method"
BLOCK_VERIFY_FIRST = "0.13.0rc2"
BLOCK_VERIFY_LAST = "0.17.0rc1"
BLOCK_VERIFY_MIN_K = 3
_STATE: dict[str, Any] = {"registered": False, "original": None}


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
            return AscendSamProposer(vllm_config, device, runner)
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


def _ngram_kind():
    """vllm-ascend's enum value for n-gram-like CPU drafters, when it has one: its runner
    takes the CPU-token path for drafters of that kind."""
    try:
        from vllm_ascend.spec_decode.interface import SpecDcodeType  # type: ignore
        return SpecDcodeType.NGRAM
    except Exception:  # noqa: BLE001
        return "ngram"


class AscendSamProposer:
    """SamProposer behind vllm-ascend's proposer interface."""

    def __init__(self, vllm_config, device=None, runner=None):
        self.sam = SamProposer(vllm_config, runner=runner)
        self.vllm_config = vllm_config
        self.device = device
        self.runner = runner
        self.name = _ngram_kind()

    def load_model(self, *args, **kwargs) -> None:
        pass

    def dummy_run(self, *args, **kwargs) -> None:
        pass

    def generate_token_ids(self, valid_sampled_token_ids, *args, **kwargs) -> list[list[int]]:
        batch = self.runner.input_batch
        return self.sam.propose(valid_sampled_token_ids, batch.num_tokens_no_spec, batch.token_ids_cpu)

    def propose(self, *args, **kwargs) -> list[list[int]]:
        """vLLM's custom_class signature (sampled, num_tokens_no_spec, token_ids_cpu, ...), or
        vllm-ascend's generate_token_ids signature when called with the sampled ids only."""
        if len(args) >= 3:
            return self.sam.propose(*args[:3], **{k: v for k, v in kwargs.items() if k == "slot_mappings"})
        sampled = args[0] if args else kwargs.get("valid_sampled_token_ids", kwargs.get("sampled_token_ids"))
        return self.generate_token_ids(sampled)

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
