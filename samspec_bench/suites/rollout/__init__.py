"""`samspec-bench rollout`: RL-shaped rollouts with SAM speculation off, always on, or on when
the running batch is at or below a threshold (the seed's adaptive switch); the long-tail phase
and the whole rollout timed per arm.

    samspec-bench rollout --engine reference --prompts 8 --group-size 4 --length-dist lognormal:32:0.8 \\
        --spec-threshold 4 -k 3
    samspec-bench rollout profile --engine reference -k 3,5 --output step_profile.json   # profile an engine
    samspec-bench rollout --engine replay --traces shared/data/traces/qwen25math_math_100x8.jsonl \\
        --step-model step_profile.json --spec-threshold 4,8,16 -k 3,5

    samspec-bench rollout --engine replay --sources group --length-dist lognormal:6000:0.9 \\
        --prompts 1536 --group-size 16 --max-num-seqs 256 --arms off,threshold   # RL-length responses
    samspec-bench rollout --preset seed-qwen3-32b --traces TRACES.jsonl      # the seed's run, vs its figures
    samspec-bench rollout --preset histospec-qwen3-14b                       # HistoSpec's (RhymeRL) setting
    samspec-bench rollout --strategy histospec:k=3,histospec,seer/costk --dev-split 0.5 \
        --step-model roofline:hardware=H100,model=Qwen3-8B    # parameters chosen on dev, figures held out
    samspec-bench rollout --prompts 96 --group-size 16 --dp 4 --max-num-seqs 128 --step-model m.json

Engines: `reference` and `vllm` measure real runs (and the simulation's prediction of the same
workload, priced by the engine's own profile, measured first unless `--step-model` gives one,
with its error; a second prediction from a model fitted on the OTHER arms); `replay` simulates
from traces (`bench.simulation.scheduler.simulate`, a fitted step-time model). Replay options:
draft sources `own` or `group` (GRPO siblings, lockstep profiles: `bench.simulation.profiles`),
lengths from the traces or drawn from `--length-dist` (profiles stretched by block resampling),
a KV capacity with the engine's preemption rule (`--kv-capacity-tokens`). Per-step tables:
steps.csv and steps.parquet. Phases: the tail is the steps with nobody waiting and at most T
requests in the batch (T = the arm's threshold; `--tail-threshold` for the always-on arm); the
head is the rest, so head + tail = total. `--dp N` shards the requests over N engine instances
as verl does (`bench.simulation.dp`), each simulated on its own; the rollout's time is the
slowest instance's. `--preset` fills the seed's configuration and prints the prediction beside
its published figures; `--sensitivity` adds the gain versus median length and truncated share.

Modules (each imports only those before it): `presets` (the seed's and the anchors'
configurations and published figures, the comparison), `unread_options` (options a run would not
read, refused: build_config's and `rollout profile`'s), `config` (RolloutConfig, build_config,
arms, lengths), `phases` (head / tail split, tail metrics, speedups, per-instance metrics, best
setting: pure functions), `cost_policies` (the cost switch and the per-step k from an arm's
profiles and the step model), `replay_arm` (simulated arms, sharded or not), `heldout` (the
dev / held-out split: parameters chosen on dev), `sensitivity` (gain vs lengths),
`measured` (arms on a real engine, their step models, prediction error), `profile` (`rollout
profile`: engine profiles, format 3), `units` (what priced a run, step units), `outputs` (step
tables, figures), `strategy_table` (one row per strategy, median [min, max] over draws), `lines`
(terminal lines), `command` (run, execute, the click group).

Units: every figure is seconds measured on an engine, seconds modelled by the step model named
in `priced_by` (a profile or the roofline model), or decode steps when no step model was given
(then no key says time: `total_steps`, `step_ratio_overall`, ...).
"""

from samspec_bench.suites.rollout.command import command, execute, run
from samspec_bench.suites.rollout.config import SUITE, RolloutConfig, arm_settings, build_config, draw_lengths

__all__ = ["SUITE", "RolloutConfig", "arm_settings", "build_config", "command", "draw_lengths", "execute", "run"]
