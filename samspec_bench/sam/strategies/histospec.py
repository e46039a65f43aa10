"""`histospec`: HistoSpec / RhymeRL (arXiv 2508.18588; the verl recipe of PR 4535): draft from
the responses earlier epochs gave the same prompt (a suffix tree per prompt), draft length by
AIMD (start 2, x2 after a draft accepted whole, /2 after any other, within [2, 16]), the
draft pruned where its path probability falls below min_token_prob 0.1.

Differs (read from the paper's description, no code copied): a suffix automaton over the
prompt's earlier responses (`history`, the last 16 per prompt) instead of a suffix tree; the
match is the longest suffix of the whole context, not only the last 7 tokens; the path
probability is the evidence estimate with no prior and no correction (count / occurrences of
the longest match, `evidence:cost=0.1,depth=1,...`), the same quantity as a suffix tree's."""

from samspec_bench.sam.strategies.base import Strategy
from samspec_bench.sam.strategies.rules import AimdLength

# the drafter's own length: the most frequent continuation of the longest match while its
# path probability is at least 0.1 (no pseudo-count, no request scaling, no corrections)
MIN_PROB_PATH = "evidence:cost=0.1,depth=1,novelty=1e-06,tau=1000000000,tokens=0,shape=0,pooled=0,choice=frequent"

STRATEGY = Strategy(name="histospec", drafter="sam", sources="history", k=16, switch="always",
                    length=MIN_PROB_PATH, rule=lambda: AimdLength(start=2, lo=2, hi=16),
                    follows="HistoSpec/RhymeRL (arXiv 2508.18588, verl PR 4535): AIMD 2..16, min_token_prob 0.1",
                    differs="suffix automaton, not a tree; match not limited to the last 7 tokens")
