"""`samspec-bench curves RUN_A RUN_B [RUN ...]`: did a change alter learning, and how much
faster did each step become? The seed's end-to-end check (DAPO with SAM off and on, reward and
response-length curves laid over each other), for the logs users have.

Runs: TensorBoard event files or folders, verl console logs (current and older formats, lines
cut by wandb's capture), verl file-logger JSONL, wandb run folders, CSV exports
(samspec_bench.evals.training_logs; detected, --format forces one); a folder holding several
runs stands for them (one per sub-folder, or per log file in it, in name order). The first run
is the baseline; each other run is compared with it on the steps both logged (unequal
lengths: the common range, with its step count). Metrics are shown by verl's tags with units;
the family's metric name is secondary (and the key of result.json's comparisons).

Per learning metric (families in `metrics`: reward, response length and clip ratio, entropy,
validation per data source, KL; --metric adds tags): the mean per-step difference B - A with
an interval that respects autocorrelation (HAC with fixed-b critical values), a TOST verdict
against the family's margin, over the whole common range and its final quarter:
EQUIVALENT / DIFFERENT / INCONCLUSIVE (samspec_bench.evals.curve_stats). Per speed metric
(timing_s/gen, timing_s/step, perf/throughput): the ratio B/A of the means with an interval,
and whether B is faster; perf/throughput, per GPU in verl, as total throughput (throughput.py;
--gpus RUN=N where the logs do not tell a run's GPU count). The comparison's verdict: DIFFERENT if a metric is, EQUIVALENT if all
are, else INCONCLUSIVE.

Output: results/curves-<timestamp>/ with result.json (metrics.comparisons per run, tables
verdicts and speed) and curves_verdicts.png, curves_learning.png, curves_speed.png.

    samspec-bench curves sam_off/tensorboard sam_on/tensorboard
    samspec-bench curves off.output.log on.output.log --margin reward=0.02 --metric actor/grad_norm
    samspec-bench curves wandb/run-A wandb/run-B --fail-on different     # a CI gate

Modules: config (CurvesConfig, build_config), metric_families (families, aliases, units, margins,
resolution), verdicts (the comparisons and result tables), throughput, rollout_tail, figures, command (run,
execute, the click command). The package's `command` is the click command, which shadows the submodule of that
name: reach the module through `importlib.import_module("samspec_bench.suites.curves.command")`.
"""

from samspec_bench.suites.curves.command import command, execute, exit_code, print_report, run
from samspec_bench.suites.curves.verdicts import compare_runs, load_runs, run_labels, speed_change
from samspec_bench.suites.curves.config import (FIGURE_LEARNING, FIGURE_SPEED, FIGURE_VERDICTS, SUITE, CurvesConfig,
                                                build_config, parse_step_range)
from samspec_bench.suites.curves.metric_families import FAMILIES, SPECS, MetricSpec, Resolved, resolve

__all__ = ["SUITE", "command", "build_config", "execute", "run", "print_report", "exit_code", "CurvesConfig",
           "compare_runs", "load_runs", "run_labels", "speed_change", "parse_step_range", "FAMILIES", "SPECS",
           "MetricSpec", "Resolved", "resolve", "FIGURE_LEARNING", "FIGURE_SPEED", "FIGURE_VERDICTS"]
