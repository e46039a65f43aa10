"""Rollout simulation without a model: `scheduler` (the engines' continuous-batching rules
replayed step by step), `profiles` (per-position acceptance from real token sequences, the
scheduler's input) and `step_model` (step time as a fitted linear function of what a step
computes). Imports point scheduler -> profiles, step_model; nothing here imports a suite."""
