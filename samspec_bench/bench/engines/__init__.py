"""The engines and their two contracts (`base`): generation (`Engine.generate`: `reference`,
PyTorch; `vllm`, adapter in `vllm/`) and acceptance over recorded responses
(`AcceptanceEngine`: trace `replay`; the model engines through `acceptance`). What each can do:
`factory.engine_capabilities`. Importing this package imports neither torch nor vLLM."""

from samspec_bench.bench.engines.base import (Engine, EngineCapabilities, GenerationResult, Request,  # noqa: F401
                                              RequestOutput, SamplingParams)
from samspec_bench.bench.engines.factory import engine_capabilities, make_engine  # noqa: F401
