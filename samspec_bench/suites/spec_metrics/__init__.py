"""`samspec-bench spec-metrics`: a real vLLM run's own speculative-decoding metrics read back as a
trace of acceptance (bench/engines/vllm/spec_metrics.py reads them):

    samspec-bench spec-metrics before.prom after.prom       # Prometheus scrapes of a server's /metrics
    samspec-bench spec-metrics vllm_server.log [--json -]   # vLLM's "SpecDecoding metrics:" log lines

Output (one run directory): result.json (metrics: the pooled figures under vLLM's names and
units and the project's, how every line of the files was read; tables: one row per interval).

Modules: `command` (build_config, execute, click).
"""

from samspec_bench.suites.spec_metrics.command import SUITE, SpecMetricsConfig, build_config, command, execute

__all__ = ["SUITE", "SpecMetricsConfig", "build_config", "command", "execute"]
