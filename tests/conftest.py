"""Shared fixtures. Real data is read from ../shared/data (or SAMSPEC_DATA_DIR); tests that
need it skip with the reason when it is absent, and run in CI, where it is present.

Device markers: a test marked `cuda` runs only where torch sees a CUDA device, one marked `npu`
only where torch_npu sees an Ascend NPU; elsewhere they skip with the reason. They take their
device from the `accel_device` fixture. SAMSPEC_CUDA_TESTS_ON=cpu runs the `cuda` tests on the
CPU instead (a dry run of the test code, as `tools/gpu_check.sh --device cpu` does); the bounds
that only hold on a GPU skip there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from samspec_bench.devices import accelerator
from small_qwen3 import TOKENIZER_ENV, build as build_small_qwen3, tokenizer_dir

REPO = Path(__file__).resolve().parents[1]
CUDA_TESTS_ON = "SAMSPEC_CUDA_TESTS_ON"   # run the cuda-marked tests on this device instead (cpu: dry run)


def _shared_data() -> Path | None:
    env = os.environ.get("SAMSPEC_DATA_DIR")
    cand = Path(env) if env else REPO.parent / "shared" / "data"
    return cand if cand.is_dir() else None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    d = _shared_data()
    if d is None:
        pytest.skip("real data not found: put the shared data at ../shared/data or set SAMSPEC_DATA_DIR")
    return d


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir(shared_data) -> Path:
    return shared_data / "tokenizers" / "qwen3"


@pytest.fixture(scope="session")
def traces_dir(shared_data) -> Path:
    return shared_data / "traces"


@pytest.fixture(autouse=True, scope="session")
def _offline_hf(tmp_path_factory):
    # Nothing may reach a model hub; lm-eval and transformers caches go to a temp dir.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HOME", str(tmp_path_factory.mktemp("hf_home")))


# --- device markers ---------------------------------------------------------------------------

def _missing(kind: str) -> str | None:
    """Why a `kind` device test cannot run here, None when it can."""
    if kind == "cuda" and os.environ.get(CUDA_TESTS_ON):
        return None
    try:
        mod = accelerator(kind)
    except ImportError as e:
        return f"{e.name or 'torch'} is not installed"
    if mod is None:
        return "torch_npu is not installed (torch.npu is absent)"
    if not mod.is_available():
        return f"torch sees no {kind.upper()} device ({kind}.is_available() is False)"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # before the fixtures: a skipped device test builds no model
    for kind in ("cuda", "npu"):
        if item.get_closest_marker(kind) is not None:
            why = _missing(kind)
            if why:
                pytest.skip(f"marked {kind}: {why}")


@pytest.fixture(scope="session")
def accel_device() -> str:
    """The device of a `cuda` test: 'cuda', or $SAMSPEC_CUDA_TESTS_ON ('cpu': the dry run)."""
    return os.environ.get(CUDA_TESTS_ON) or "cuda"


@pytest.fixture(scope="session")
def accel_kind(accel_device) -> str:
    """accel_device without its index: what results record as the device type ('cuda', 'cpu')."""
    return accel_device.split(":")[0]


@pytest.fixture(scope="session")
def on_accelerator(accel_device) -> bool:
    """False in the dry run on the CPU: bounds that only hold on a GPU skip there."""
    return accel_device.startswith("cuda")


@pytest.fixture(scope="session")
def small_qwen3(tmp_path_factory) -> Path:
    """A random-weight Qwen3 (hidden 256, 2 layers, Qwen3's vocabulary) with the Qwen3 tokenizer."""
    tok = tokenizer_dir(_shared_data())
    if tok is None:
        pytest.skip(f"no Qwen3 tokenizer: put the shared data at ../shared/data or set {TOKENIZER_ENV}")
    return build_small_qwen3(tmp_path_factory.mktemp("small_qwen3") / "ckpt", tok)


@pytest.fixture(scope="session")
def needs_lm_eval():
    """lm-eval, or the test skips naming it (GPU images often lack it: FACTS, GPU measurements)."""
    return pytest.importorskip("lm_eval", reason="lm-eval is not installed here: pip install 'lm-eval>=0.4.13'")
