"""Old public path of the vllm-ascend plugin (`samspec_bench.bench.ascend_plugin:register`), kept
for plugin lists written against it. The code lives in `samspec_bench.bench.engines.vllm.ascend`."""

from samspec_bench.bench.engines.vllm.ascend import (AscendSamProposer, ascend_installed,  # noqa: F401
                                                     guard_rail, register)
