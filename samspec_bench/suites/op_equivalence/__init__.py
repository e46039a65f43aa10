"""`samspec-bench op-equivalence`: do the decode path and the verify path compute the same thing?

Speculative decoding is lossless only if the target model scores a token the same way when it
is decoded alone (one query token per request) and when it is verified inside a chunk of k+1
tokens. Two levels:

Kernel level (`kernel_level`). Random paged inputs (batch, sequence lengths, block size, heads,
GQA ratio, head size, dtype as options) through every available kernel pair of
`samspec_bench.bench.engines.kernels` (the reference engine's two paths, a fixed-order control,
PyTorch's fused SDPA, and where installed torch-npu's `_npu_paged_attention` vs
`_npu_paged_attention_splitfuse` / `npu_fused_infer_attention_score` and vLLM's flash-attention
varlen kernel). Compared: the attention outputs element by element, and "probe" distributions
(the outputs projected by one fixed random matrix onto a 4096-token vocabulary).

Model level (`model_level`, with --model; --engine reference or vllm). A greedy continuation of
each prompt without speculation (decode path) is scored through the verify path in chunks of
k+1 (teacher forcing on the reference engine, oracle drafts inside vLLM) and compared position
by position; greedy generation with the drafter gives the first divergence and the logit margin
there. On the reference engine a batch-invariant control run shows whether differences come
from reduction order.

Metrics per level x pair x dtype: see `stats` (logprob_diff_*, exact_zero_fraction,
argmax_flip_rate, kl_*, full_*, verl's rollout_* names, output_diff_* at kernel level, and a
histogram of the sampled-token differences).

Output: results/op-equivalence-<timestamp>/ with result.json (metrics.pairs keyed
"level/pair/dtype", metrics.gate, tables.kernel_cases, tables.greedy), kernel_cases.jsonl and
greedy.jsonl (written as cases finish) and logprob_diff_hist.png. `--tolerance X` fails the run
(exit 1, one line on stderr) when any row's logprob_diff_max (or --tolerance-metric) exceeds X.

    samspec-bench op-equivalence                                  # kernel level, seconds
    samspec-bench op-equivalence --model builtin:smollm2-135m --dtype float32,bfloat16
    samspec-bench op-equivalence --pairs npu --dtype bfloat16 --tolerance 0   # on an Ascend box

Modules: config (OpEqConfig, build_config), stats (the numbers), kernel_level, model_level,
figures, command (run, execute, the click command). The package's `command` is the click
command, which shadows the submodule of that name: reach the module through
`importlib.import_module("samspec_bench.suites.op_equivalence.command")`.
"""

from samspec_bench.suites.op_equivalence.command import command, execute, print_report, run
from samspec_bench.suites.op_equivalence.config import (CASES_FILE, DTYPE_NAMES, FIGURE, GATE_METRICS, GREEDY_FILE,
                                                        LEVELS, SUITE, OpEqConfig, build_config)
from samspec_bench.suites.op_equivalence.figures import draw_histograms
from samspec_bench.suites.op_equivalence.kernel_level import PROBE_VOCAB, run_kernel_level
from samspec_bench.suites.op_equivalence.model_level import (BUILTIN_PROMPTS, compare_paths, load_prompts,
                                                             run_model_level)
from samspec_bench.suites.op_equivalence.diff_stats import HIST_EDGES, Accumulator, apply_gate, histogram

__all__ = ["SUITE", "command", "build_config", "execute", "run", "OpEqConfig", "Accumulator", "histogram",
           "apply_gate", "load_prompts", "run_model_level", "compare_paths", "run_kernel_level", "draw_histograms",
           "print_report", "BUILTIN_PROMPTS", "HIST_EDGES", "PROBE_VOCAB", "LEVELS", "DTYPE_NAMES", "GATE_METRICS",
           "FIGURE", "CASES_FILE", "GREEDY_FILE"]
