"""`evidence`: this project's draft-length policy (sam/draft_length.py, docs/drafting.md): draft
token i while the estimated probability that tokens 1..i are all accepted is at least the
verify cost of a draft token, from occurrence counts, the request's recent acceptance and
drafter-wide corrections; from the request's own text, its GRPO siblings' and earlier RL
steps' responses to the same prompt (the sources it supports best), up to 8 tokens, always on.

Differs: its own design, no paper; the rollout simulation reads its drafts from a profile
proposed at every position (its lengths follow the request's acceptance, which a profile
approximates)."""

from samspec_bench.sam.strategies.base import Strategy

STRATEGY = Strategy(name="evidence", drafter="sam", sources="group+history", k=8, switch="always",
                    follows="this project's evidence policy (sam/draft_length.py, docs/drafting.md)",
                    differs="its own design; simulated from a per-position profile")
