"""`accept --strategy`: a named strategy replays as its drafter, k, sources and length rule;
a step switch is refused (accept has no batch)."""

import pytest

from samspec_bench.bench.draft_config import strategy_config
from samspec_bench.errors import UserError
from samspec_bench.suites.accept.config import build_configs, check_strategy


def test_strategy_configs():
    dc = strategy_config("histospec")
    assert (dc.drafter, dc.k, dc.sources, dc.strategy) == ("sam", 16, "own+history", "histospec")
    assert dict(dc.options)["length"].startswith("evidence:cost=0.1,depth=1")
    assert dc.label.startswith("histospec: sam k=16 own+history")
    assert strategy_config("seer@own").sources == "own"
    with pytest.raises(UserError, match="step switch"):
        check_strategy("seed/cost")
    with pytest.raises(UserError, match="choose from"):
        check_strategy("medusa")


def test_strategies_join_the_sweep():
    from types import SimpleNamespace
    cfg = SimpleNamespace(drafters=["sam-fixed"], num_spec_tokens=[3], sources=["own"], group_order="sequential",
                          ngram_min=2, ngram_max=5, sam_min_match=1, strategies=["seed", "seer"], engine="replay")
    configs = build_configs(cfg)
    assert [c.strategy for c in configs] == [None, "seed", "seer"]
    assert configs[2].group and configs[2].order == "sequential"
