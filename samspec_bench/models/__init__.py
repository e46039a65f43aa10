"""Models: checkpoints (specs -> local checkpoints, the built-in models), rl_names (the common
RL models' ids and short names) and shapes (architecture shapes for step models)."""
