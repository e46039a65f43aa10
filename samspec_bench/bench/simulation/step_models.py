"""Old public path of `samspec_bench.bench.simulation.step_model_spec` (kept for users' scripts and
`python -m samspec_bench.bench.simulation.step_models`, which runs `samspec-bench step-model`)."""

import sys

from samspec_bench.bench.simulation.step_model_spec import *  # noqa: F401,F403

if __name__ == "__main__":   # script entry point: runs `samspec-bench step-model` (docs/architecture.md)
    from samspec_bench.cli import main

    main(["step-model", *sys.argv[1:]])
