"""Old public path of `samspec_bench.bench.engines.vllm.method_comparison` (kept for users' scripts and
`python -m samspec_bench.bench.engines.vllm.compare`, which runs `samspec-bench compare`)."""

import sys

from samspec_bench.bench.engines.vllm.method_comparison import *  # noqa: F401,F403

if __name__ == "__main__":   # script entry point: runs `samspec-bench compare` (docs/architecture.md)
    from samspec_bench.cli import main

    main(["compare", *sys.argv[1:]])
