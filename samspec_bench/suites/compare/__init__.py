"""`samspec-bench compare`: SAM against vLLM's own methods (none / ngram / suffix) inside vLLM on
the same prompts, greedy. The computation is the library's (bench/engines/vllm/compare.py runs
the arms, compare_figures.py makes the figures); this package holds the command:

    samspec-bench compare --num-prompts 8 --max-tokens 256 --repeats 3 [--methods none,sam,ngram]

Output (one run directory): config.json, runs.jsonl (one record per generate call, appended as
it finishes: `--resume DIR` keeps them and runs only the missing calls), result.json (metrics:
the per-arm figures and the goal; tables: one flat row per arm). The old
`python -m samspec_bench.bench.engines.vllm.method_comparison` runs this command.

Modules: `config` (CompareConfig, build_config), `lines` (printed lines, the arm table),
`command` (execute, click).
"""

from samspec_bench.suites.compare.command import command, execute
from samspec_bench.suites.compare.config import RUNS_FILE, SUITE, CompareConfig, build_config

__all__ = ["RUNS_FILE", "SUITE", "CompareConfig", "build_config", "command", "execute"]
