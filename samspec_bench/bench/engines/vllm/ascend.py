"""Old path of the vllm-ascend plugin (`samspec_bench.bench.engines.vllm.ascend:register`, the
`vllm.general_plugins` entry point of earlier installs), kept for plugin lists and installed
metadata written against it. The code lives in `samspec_bench.bench.vllm_proposer.ascend`."""

from samspec_bench.bench.vllm_proposer.ascend import (AscendSamProposer, ascend_installed,  # noqa: F401
                                                      block_verify_possible, guard_rail, register)
