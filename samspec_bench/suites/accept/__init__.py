"""The acceptance suite: how much a drafter accepts on real rollouts, at which lengths, with
which k, against the alternatives, and whether sharing drafts across a GRPO group, or with
earlier RL steps' responses to the same prompt, helps.

    samspec-bench accept --engine replay --traces ../shared/data/traces/qwen25math_math_100x8.jsonl \\
        --drafter sam,ngram --num-spec-tokens 3,8 --sources own,group --output results/
    samspec-bench accept --engine replay --traces <verl trainer.rollout_data_dir> --model Qwen3-8B \\
        --sources own,group,history,group+history
    samspec-bench accept --model Qwen3-8B      # the model itself (vLLM, else reference) on built-in prompts

Traces: samspec JSONL, verl rollout dumps, lm-eval --log_samples files or plain
prompt/response JSONL (samspec_bench.trace_formats). With --model, replay uses that model's
tokenizer and refuses traces whose `model` field names another (--any-model lets them in).
Tool output inside responses (verl's multi-turn tool turns, ```output blocks) is prefilled,
not decoded: one request per model turn (`turns`; --tool-output decode replays it as
generated). verl's validation generations are not RL steps: beside rollouts they are left out
and counted (--history-includes-validation replays them as steps).

Every combination of drafter x k x draft sources is one configuration. The engine reports
per-step records (position at drafting time, drafted, accepted, emitted) for every response;
the metrics (names and definitions in samspec_bench.metrics, METRIC_DEFINITIONS) are pooled
over all responses and binned by position. A speedup estimate follows from tokens and a
step-cost model (the cost of a verify step relative to a plain decode step), whose ratio
comes from --verify-cost-ratio, an engine profile, or a stated assumption.

Output (one run directory): result.json, responses.jsonl (one line per response and
configuration, with its steps), config.json (for --resume), acceptance_vs_position.png/.svg.

Modules: `config` (AcceptConfig, build_config, the sweep, the verify cost), `inputs` (traces
and corpus), `turns` (multi-turn responses as requests), `running` (run, execute), `output`
(figure and tables), `command` (click).
"""

from samspec_bench.suites.accept.command import command
from samspec_bench.suites.accept.config import (ENGINES, SUITE, AcceptConfig, build_config, build_configs,
                                                parse_ks, parse_list, parse_source, resolve_verify_cost)
from samspec_bench.suites.accept.inputs import Inputs, load_inputs
from samspec_bench.suites.accept.output import FIGURE_STEM, MIN_PLOT_STEPS, print_table, write_figure
from samspec_bench.suites.accept.running import CONFIG_FILE, RESPONSES_FILE, execute, run

__all__ = ["CONFIG_FILE", "ENGINES", "FIGURE_STEM", "MIN_PLOT_STEPS", "RESPONSES_FILE", "SUITE", "AcceptConfig",
           "Inputs", "build_config", "build_configs", "command", "execute", "load_inputs", "parse_ks", "parse_list",
           "parse_source", "print_table", "resolve_verify_cost", "run", "write_figure"]
