"""The command table: each `samspec-bench` subcommand, where its click command lives, and the
one-line help that `--help` shows without importing it. Below both `cli` (which dispatches)
and the `run` suite (which plans steps from it), so neither imports the other."""

from __future__ import annotations

# name -> ("module:click_command", one-line help shown by --help without importing the module).
# A suite adds its line here when it lands; nothing is listed before it works.
COMMANDS: dict[str, tuple[str, str]] = {
    "accuracy": ("samspec_bench.suites.accuracy:command", "Accuracy with SAM off vs on through lm-eval, paired by problem (CI, McNemar, MDD)."),
    "accept": ("samspec_bench.suites.accept:command", "Acceptance by position, drafter, k and draft source."),
    "op-equivalence": ("samspec_bench.suites.op_equivalence:command", "Decode vs verify path: kernel pairs and a model (logprob diffs, KL, flips); --tolerance gate."),
    "drafters": ("samspec_bench.suites.drafters:command",
                 "Benchmark the drafters (speed, memory, context-length sweep) on real traces."),
    "sampler": ("samspec_bench.suites.sampler:command", "Prove rejection samplers exact or lossy (--audit any sampler); time the vectorised sampler."),
    "report": ("samspec_bench.suites.report_cmd:command", "One self-contained HTML (or Markdown) report comparing result directories."),
    "rollout": ("samspec_bench.suites.rollout:command", "RL rollout time with SAM off/always/below a batch threshold: head vs long tail, sweeps, simulation."),
    "curves": ("samspec_bench.suites.curves:command", "Training curves SAM off vs on (TensorBoard, verl console, wandb, CSV): learning EQUIVALENT/DIFFERENT, step-time ratios."),
    "compare": ("samspec_bench.suites.compare:command",
                "SAM against vLLM's none / ngram / suffix inside vLLM on the same prompts: tok/s over repeats, cost, identity (resumable)."),
    "dominance": ("samspec_bench.suites.dominance:command",
                  "Does SAM Pareto-dominate Arctic's suffix decoding on every trace, k and source? (trace replay counts)"),
    "step-model": ("samspec_bench.suites.step_model_check:command",
                   "Check a step-time model (profile or roofline) against measured engine steps: per-step and total errors."),
    "spec-metrics": ("samspec_bench.suites.spec_metrics:command", "A vLLM run's own spec-decode metrics (Prometheus scrapes or its log lines) as acceptance: per position, %, mean length."),
    "run": ("samspec_bench.suites.run.command:command", "Run every available suite with small defaults and render the report (resumable)."),
}
