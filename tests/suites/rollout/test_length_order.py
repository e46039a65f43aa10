"""--length-rank-share and the drafting-by-length figure (suites/rollout/length_order.py): ranks
and normal scores by hand, drawn lengths following the recorded order while keeping the named
distribution, and the figure's sign on planted profiles (the refusals: test_length_share.py)."""

import json
import math
from statistics import NormalDist
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from samspec_bench.reports.suite_headlines import SUITE_SUMMARIZERS
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout.length_order import (drafting_by_length, drafting_line, mid_ranks, normal_scores,
                                                       spearman, tokens_per_step)
from samspec_bench.suites.rollout.replay_arm import draw

BIG = 10 ** 9


def test_mid_ranks_and_spearman_by_hand():
    assert mid_ranks([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [9, 7, 3, 1]) == pytest.approx(-1.0)
    # ties: ranks x (1, 2.5, 2.5, 4), y (1, 2, 3, 4): 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman([3, 3, 3], [1, 2, 3]) is None


def test_normal_scores_are_the_mid_rank_quantiles():
    got = normal_scores([40, 10, 30, 20])
    inv = NormalDist().inv_cdf
    assert got.tolist() == pytest.approx([inv(7 / 8), inv(1 / 8), inv(5 / 8), inv(3 / 8)])
    assert normal_scores([5, 5]).tolist() == pytest.approx([0.0, 0.0])   # tied: the same score


def test_rank_share_1_puts_the_drawn_lengths_in_the_recorded_order_and_keeps_the_lognormal():
    rng = np.random.default_rng(5)
    recorded = rng.permutation(np.arange(100, 2100))          # 2000 distinct recorded lengths
    x = ro.draw_lengths("lognormal:300:0.8", 2000, 1, 1, BIG, rank_scores=normal_scores(recorded), rank_share=1.0)
    assert (np.diff(x[np.argsort(recorded)]) >= 0).all()   # rounded to whole tokens: ties, never out of order
    for p in (0.1, 0.5, 0.9):   # the named quantiles: 300 exp(0.8 Phi^-1(p))
        assert np.quantile(x, p) == pytest.approx(300 * math.exp(0.8 * NormalDist().inv_cdf(p)), rel=0.01)


def test_rank_share_half_correlates_partly_and_0_draws_as_without_it():
    recorded = np.random.default_rng(6).permutation(np.arange(4000))
    scores = normal_scores(recorded)
    x = ro.draw_lengths("lognormal:300:0.8", 4000, 2, 1, BIG, rank_scores=scores, rank_share=0.5)
    assert 0.62 < spearman(x, recorded) < 0.76   # sqrt(0.5) in the normal scores: about 0.69 in ranks
    assert abs(np.std(np.log(x)) - 0.8) < 0.03
    plain = ro.draw_lengths("lognormal:300:0.8", 4000, 2, 1, BIG)
    assert np.array_equal(ro.draw_lengths("lognormal:300:0.8", 4000, 2, 1, BIG, rank_scores=scores, rank_share=0.0),
                          plain)
    assert abs(spearman(plain, recorded)) < 0.05
    # with a group share too, the rank share still orders the draw
    y = ro.draw_lengths("pareto:50:1.5", 4000, 3, 1, BIG, group_size=8, share=0.5, rank_scores=scores,
                        rank_share=0.9)
    assert spearman(y, recorded) > 0.85


def test_a_replays_draw_follows_the_requests_recorded_responses():
    # 6 distinct responses of lengths 3..8; requests replay them out of order, one of them twice
    rep = SimpleNamespace(idx=[5, 0, 3, 1, 4, 2, 0, 5], group_size=4, n_prompts=2,
                          pairs=[([1], [1] * n) for n in range(3, 9)], trace_lengths=np.arange(3, 9))
    cfg = ro.RolloutConfig(length_dist="lognormal:300:0.8", length_rank_share=1.0, min_len=1, max_response_len=BIG)
    lengths, stretch = draw(cfg, rep)
    rec = [len(rep.pairs[j][1]) for j in rep.idx]
    assert stretch and spearman(lengths, rec) == pytest.approx(1.0)
    assert lengths[1] == lengths[6] and lengths[0] == lengths[7] == lengths.max()   # a response replayed twice


def test_tokens_per_step_walks_the_profile():
    acc = np.array([0, 3, 0, 0, 0, 1, 0, 0])
    # from 1: 3 accepted -> 5; 1 accepted -> 7; nothing -> 8: 3 steps for 7 tokens
    assert tokens_per_step(np.full(8, 3), acc) == pytest.approx(7 / 3)
    assert tokens_per_step(np.zeros(1), np.zeros(1)) is None


@pytest.mark.parametrize("longer_draft_better", [True, False])
def test_drafting_by_length_has_the_planted_sign(longer_draft_better):
    lengths = [40, 80, 120, 160, 200]
    accepted = [1, 2, 3, 4, 5] if longer_draft_better else [5, 4, 3, 2, 1]
    pairs = [([0], [1] * n) for n in lengths]
    prof = [(np.full(n, 8), np.full(n, a)) for n, a in zip(lengths, accepted)]
    rep = SimpleNamespace(idx=[0, 1, 2, 3, 4, 4], pairs=pairs, profiles={("k", 1): prof})
    got = drafting_by_length(rep, [{"label": "off", "profile": None}, {"label": "arm", "profile": ("k", 1)}])
    assert list(got) == ["arm"] and got["arm"]["responses"] == 5
    assert got["arm"]["spearman"] == pytest.approx(1.0 if longer_draft_better else -1.0)
    line = drafting_line(got, "arm")
    assert ("draft better" if longer_draft_better else "draft worse") in line and "drawn lengths ignore it" in line
    assert "take 0.5 of their rank from it" in drafting_line(got, "arm", 0.5)


def test_the_replay_reports_the_figure_and_draws_in_order(shared_data, tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(ro.command, ["--data-dir", str(shared_data), "--arms", "off,always", "--length-dist",
                                          "lognormal:300:0.8", "--length-rank-share", "1", "--draws", "1",
                                          "--prompts", "12", "--group-size", "8",
                                          "--output", str(tmp_path / "o"), "--json", str(out)])
    assert res.exit_code == 0, res.output
    w = json.loads(out.read_text())["metrics"]["workload"]
    fig = w["drafting_by_length"]["always k=3"]
    assert w["length_rank_share"] == 1.0 and fig["responses"] == 96 and -1 <= fig["spearman"] <= 1
    assert "between a response's recorded length and its tokens per step" in res.output
    assert "drawn lengths take 1 of their rank from it" in res.output
    assert "1 of each normal score from its recorded response's length" in w["lengths"]
    # the report reads it too
    (run,) = (tmp_path / "o").glob("rollout-*")
    heads = {h["name"]: h for h in SUITE_SUMMARIZERS["rollout"](json.loads((run / "result.json").read_text()))[0]}
    head = heads["always k=3: Spearman(recorded response length, tokens per step)"]
    assert head["value"] == fig["spearman"] and "take 1 of their rank from it" in head["note"]
