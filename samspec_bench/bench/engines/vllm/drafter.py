"""Old public path of SAM's vLLM drafter, kept so that configurations already written keep
working (the README's): `speculative_config={"method": "custom_class", "model":
"samspec_bench.bench.engines.vllm.drafter.SamProposer"}` and `worker_extension_cls=
"samspec_bench.bench.engines.vllm.drafter.SamWorkerExtension"`. The code runs inside vLLM's
worker and lives in `samspec_bench.bench.vllm_proposer`; these are the same objects."""

from samspec_bench.bench.vllm_proposer import (CLASS_PATH, ENGINE_LENGTH, ENV_OPTIONS, EXTENSION_PATH,  # noqa: F401
                                               EXTRA_KEY, LEGACY_CLASS_PATH, MODES, SamProposer, SamWorkerExtension)
