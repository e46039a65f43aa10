"""`accept --strategy`: a named strategy replays as its drafter, k, sources and length rule
(a per-request `/cutoff:W:T` with it); a step switch is refused (accept has no batch)."""

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


def test_a_rolling_cutoff_runs_per_request_and_a_bad_one_is_one_line(shared_data, tmp_path, capsys):
    """`/cutoff:W:T` is a per-request rule (rules.RollingCutoff): the acceptance replay runs it
    (it was refused as a step switch); a bad value is one line naming the input once, the value
    and the form."""
    from samspec_bench import cli
    from samspec_bench.bench.draft_config import build_drafter
    dc = check_strategy("seed/cutoff:8:0.3")
    assert dc.strategy == "seed/cutoff:8:0.3" and build_drafter(dc).rule.describe()["name"] == "rolling-cutoff"
    with pytest.raises(SystemExit) as e:
        cli.main(["accept", "--data-dir", str(shared_data), "--strategy", "seed/cutoff:8:1.5",
                  "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.count("seed/cutoff:8:1.5") == 1, err
    assert err.startswith("error: --strategy 'seed/cutoff:8:1.5': THRESHOLD '1.5' is not a number in [0, 1]; give "
                          "cutoff:WINDOW:THRESHOLD") and not (tmp_path / "out").exists()


def test_strategies_join_the_sweep():
    from types import SimpleNamespace
    cfg = SimpleNamespace(drafters=["sam-fixed"], num_spec_tokens=[3], sources=["own"], group_order="sequential",
                          ngram_min=2, ngram_max=5, sam_min_match=1, strategies=["seed", "seer"], engine="replay")
    configs = build_configs(cfg)
    assert [c.strategy for c in configs] == [None, "seed", "seer"]
    assert configs[2].group and configs[2].order == "sequential"
