"""`samspec-bench run`: every suite that can run here, with small defaults, then the report.

    samspec-bench run                                   # built-in model + built-in workload (laptop CPU)
    samspec-bench run --model /ckpt --engine vllm --data-dir ../shared/data --config suites.yaml
    samspec-bench run --resume results/run-20260101-120000   # continue an interrupted run

The steps, in order (plan.STEPS): `workload` (without a data directory: a small GRPO-like trace
generated with the model on built-in math prompts), `accept`, `drafters`, `sampler`,
`op-equivalence`, then `accuracy` and `rollout` where this build has them. A step that cannot
run here is skipped with its reason (no such command in this build, vLLM not installed, no
traces); a step that fails is recorded with its error and the others still run.

Each step calls its suite in this process through the suite contract (build_config, then
execute; the suite is found in samspec_bench.commands.COMMANDS) with options from:
the step's small defaults < --model / --engine / --data-dir (for commands that take them) <
the step's section of --config (keys are the suite's CLI option names, e.g.
`accept: {drafter: "sam,ngram", num-spec-tokens: [3, 5]}`; `op-equivalence: false` skips a step),
each converted by that option's click type; the others take the option's default.
The state (settings, each step's status, arguments and run directory) is saved in
`<output>/run-<timestamp>/run_state.json` after every step, so `--resume DIR` skips finished
steps and resumes a suite that was interrupted and supports it. At the end, report.html and
report.md are written into the run directory.

Modules: plan (the steps and what each gets), options (option names -> click parameters),
config_file (the YAML file), config_values (the file's values through each suite's build_config,
before the run folder is made), state (run_state.json: its shape, step directories, results that read
back), steps (running one step), command (the click command, the report, the exit status).
"""
