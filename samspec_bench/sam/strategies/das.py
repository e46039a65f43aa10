"""`das`: DAS (arXiv 2511.13841): a per-problem suffix index over a sliding window of recent
rollouts, and larger draft budgets for requests predicted to run long.

Differs: the window is the last 4 responses per prompt (a HistoryStore window), not DAS's
window of steps; a request is predicted long when its prompt's earlier responses average at
least the median of that average over the step (budget 16, else 4), a stand-in for DAS's
length predictor; SAM's min_endpos continuation, no tree."""

from samspec_bench.sam.strategies.base import Strategy
from samspec_bench.sam.strategies.rules import BudgetByLength

STRATEGY = Strategy(name="das", drafter="sam-fixed", sources="history", k=16, switch="always",
                    rule=lambda: BudgetByLength(short_k=4, long_k=16), history_window=4,
                    follows="DAS (arXiv 2511.13841): sliding window of recent rollouts, length-aware budget",
                    differs="window of 4 responses per prompt; predicted length = mean of the prompt's history")
