"""Old public path of the vllm-ascend plugin (`samspec_bench.bench.ascend_plugin:register`), kept
for plugin lists written against it. The code lives in `samspec_bench.bench.vllm_proposer.ascend`."""

from samspec_bench.bench.vllm_proposer.ascend import (AscendSamProposer, ascend_installed,  # noqa: F401
                                                      block_verify_possible, guard_rail, register)
