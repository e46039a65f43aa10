"""`seer`: Seer (arXiv 2511.14617): draft from the sibling responses of the same GRPO group while
they are being generated (all members in one engine instance, one shared index), up to 8 tokens.

Differs: one path (SAM's min_endpos continuation), not Seer's multi-path tree drafts (`:paths=W`
adds this project's trees in the tail); no adaptive per-batch draft budget; the group index is
the project's group automaton, siblings advance in lockstep in the simulation's profiles
(bench/simulation/profiles.py). Seer's context-aware scheduling is `seer:sched=context` in
`rollout` (bench/simulation/admission.py: each group's probe first, then longest estimated
group first); its divided rollout is `seer:divided=D` (bench/simulation/shared_queue.py: the
instances pull from one queue, a request moving on every D response tokens); without them the
engine admits first come first served and every instance keeps its shard."""

from samspec_bench.sam.strategies.base import Strategy

STRATEGY = Strategy(name="seer", drafter="sam-fixed", sources="group", k=8, switch="always",
                    follows="Seer (arXiv 2511.14617): group siblings as they generate",
                    differs="single path, no tree drafts, no adaptive budget; scheduling first come first served "
                            "unless :sched=context; fixed shards unless :divided=D")
