"""`arctic`: Arctic Inference's suffix decoding (vLLM's `suffix` method): the most frequent
continuation of the longest match, at most max_spec_factor (1) x the match length tokens,
pruned where the path probability falls below min_token_prob (0.1), from a global cache of
finished responses.

Differs: arctic-inference is an optional install, so this arm is SAM's evidence policy with
Arctic's rule (`evidence:cost=0.1,cap=1,depth=1`, no prior or correction): the same
quantities over a suffix automaton; the global cache is the prompt's earlier responses and
its GRPO siblings (`group+history`; siblings are indexed while they run, Arctic's cache holds
finished responses only, and other prompts' responses are not searched)."""

from samspec_bench.sam.strategies.base import Strategy
from samspec_bench.sam.strategies.histospec import MIN_PROB_PATH

STRATEGY = Strategy(name="arctic", drafter="sam", sources="group+history", k=16, switch="always",
                    length=MIN_PROB_PATH + ",cap=1",
                    follows="Arctic suffix decoding (vLLM 'suffix'): max_spec_factor 1, min_token_prob 0.1",
                    differs="suffix automaton; cache = the prompt's history and its group, not every prompt's")
