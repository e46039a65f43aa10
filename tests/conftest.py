"""Shared fixtures. Real data is read from ../shared/data (or SAMSPEC_DATA_DIR); tests that
need it skip with the reason when it is absent, and run in CI, where it is present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
