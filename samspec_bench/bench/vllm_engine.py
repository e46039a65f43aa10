"""Old public path of the vLLM back end, kept for code and commands written against it:
`from samspec_bench.bench.vllm_engine import VllmEngine` and
`python -m samspec_bench.bench.vllm_engine ...` (the none / ngram / suffix / sam comparison, now
`samspec-bench compare`, with the same flags). The code lives in `samspec_bench.bench.engines.vllm`
(adapter, compare); these are the same objects. Importing this module does not import vLLM."""

import sys

from samspec_bench.bench.engines.vllm.adapter import (VllmEngine, close_shared, get_engine, parse_engine_args,
                                                      speculative_config)
from samspec_bench.bench.engines.vllm.method_comparison import compare_methods

__all__ = ["VllmEngine", "close_shared", "compare_methods", "get_engine", "parse_engine_args", "speculative_config"]

if __name__ == "__main__":   # script entry point: runs `samspec-bench compare` (docs/architecture.md)
    from samspec_bench.cli import main

    main(["compare", *sys.argv[1:]])
