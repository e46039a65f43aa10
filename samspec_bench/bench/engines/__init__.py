"""Engines behind one interface (`base.Engine`): `reference` (PyTorch), `vllm` (adapter in
`vllm/`), and trace `replay`. Importing this package imports neither torch nor vLLM."""

from samspec_bench.bench.engines.base import (Engine, GenerationResult, Request, RequestOutput,  # noqa: F401
                                              SamplingParams)
from samspec_bench.bench.engines.factory import make_engine  # noqa: F401
