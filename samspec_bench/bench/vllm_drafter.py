"""Old public path of SAM's vLLM drafter, kept so that configurations already written keep
working: `speculative_config={"method": "custom_class", "model":
"samspec_bench.bench.vllm_drafter.SamProposer"}`. The code lives in
`samspec_bench.bench.vllm_proposer`; these are the same objects."""

from samspec_bench.bench.vllm_proposer import (CLASS_PATH, EXTENSION_PATH, EXTRA_KEY,  # noqa: F401
                                               LEGACY_CLASS_PATH, SamProposer, SamWorkerExtension)
