"""Rollout simulation without a model: `scheduler` (the engines' continuous-batching rules
replayed step by step), `profiles` (per-position acceptance from real token sequences, the
scheduler's input) and `step_model` (step time as a fitted linear function of what a step
computes). The scheduler's parts: profile_table (profiles packed for reading by request and
position), kv_blocks (the KV cache, preemption), fast_paths (closed-form stretches), step_log
(per-step columns, tail acceptance). Imports point scheduler -> those -> profiles, step_model;
nothing here imports a suite."""
