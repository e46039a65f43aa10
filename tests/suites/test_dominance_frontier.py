"""`dominance --anchors --frontier` (suites/dominance_frontier.py): the cost search on planted
spending curves, that it never reads the tokens it is compared on, and the fixed-cost default in
a cell and on the command line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from samspec_bench.cli import group
from samspec_bench.errors import UserError
from samspec_bench.results import load_result
from samspec_bench.sam.draft_budget import MAX_COST
from samspec_bench.sam.draft_length import parse_length
from samspec_bench.sam.strategies import parse_strategy
from samspec_bench.suites import dominance_anchors as anchors
from samspec_bench.suites import dominance_frontier as frontier

GRPO = "qwen25math_math_100x8.jsonl"


class Unread:
    """A figure the search must not look at: any comparison or arithmetic fails the test."""

    def _fail(self, *a):
        pytest.fail("the cost search read the tokens per step it is compared on")
    __lt__ = __le__ = __gt__ = __ge__ = __add__ = __sub__ = __float__ = _fail


def _curve(drafted_at):
    calls = []

    def replay_at(cost):
        calls.append(cost)
        return {"tokens_per_step": Unread(), "drafted_per_step": drafted_at(cost)}
    return replay_at, calls


def test_the_search_finds_the_lowest_cost_within_the_spending_from_drafted_tokens_only():
    replay_at, calls = _curve(lambda c: 4.0 * (1 - c))   # drafted 4 at cost 0, 0 at cost 1
    out = frontier.cost_at_spend(replay_at, 3.0)       # 3.0 is reached at cost 0.25
    assert 0.25 <= out["cost"] <= 0.25 + MAX_COST / 2 ** frontier.HALVINGS
    assert out["metrics"]["drafted_per_step"] <= 3.0
    assert len(calls) == 1 + frontier.HALVINGS and calls[0] == 0.0
    assert [c for c, _ in out["tried"]] == calls


def test_cost_zero_is_kept_without_a_search_when_it_is_within_the_spending():
    replay_at, calls = _curve(lambda c: 1.5)
    out = frontier.cost_at_spend(replay_at, 2.0)
    assert out["cost"] == 0.0 and calls == [0.0]


def test_a_point_over_the_spending_is_never_kept_even_where_the_curve_is_not_monotone():
    # drafted dips under the spending only in a narrow band the bisection steps over, then rises
    def bumpy(c):
        return 1.0 if 0.30 < c < 0.31 else 5.0
    out = frontier.cost_at_spend(_curve(bumpy)[0], 2.0)
    assert out["metrics"] is None and out["cost"] is None   # nothing found: said, not a point over
    assert all(d > 2.0 for _, d in out["tried"]) and out["tried"][-1][0] == MAX_COST
    out = frontier.cost_at_spend(_curve(lambda c: 5.0 if c < 0.9 else 1.0)[0], 2.0)
    assert out["metrics"]["drafted_per_step"] == 1.0 and out["cost"] >= 0.9


def test_the_fixed_cost_config_is_the_default_policy_with_only_its_cost_moved():
    dc = frontier.fixed_cost_config(8, "group+history", 0.3)
    default = anchors.default_config(8, "group+history")
    assert (dc.k, dc.group, dc.history, dc.order) == (default.k, default.group, default.history, default.order)
    got, base = parse_length(dict(dc.options)["length"]), parse_length(anchors.DEFAULT_POLICY)
    assert got.cost == 0.3 and got.budget is None
    assert {f: getattr(got, f) for f in ("novelty", "depth", "cap", "tau", "choice")} == \
        {f: getattr(base, f) for f in ("novelty", "depth", "cap", "tau", "choice")}


def test_a_cell_with_frontier_matches_the_anchors_pooled_spending():
    """A stub replay: the anchor drafts 1.75 per step pooled; the default at cost c drafts 3 (1 - c)
    and keeps 2 - c tokens per step, so the search stops near c = 5/12 with 1.583 tokens: below
    the anchor's 1.6, a loss the row says."""
    def replay(jobs, window):
        dc = jobs[0][0]
        if dc.strategy and not dc.strategy.startswith("evidence"):
            return {"tokens_per_step": 1.6, "drafted_per_step": 1.75, "acceptance_rate": 0.5, "steps": 10,
                    "by_step": {"1": {"tokens_per_step": 1.6, "drafted_per_step": 1.75, "steps": 10}}}
        spec = parse_length(dict(dc.options).get("length", anchors.DEFAULT_POLICY))
        c = spec.cost if spec.budget is None else 0.5
        return {"tokens_per_step": 2 - c, "drafted_per_step": 3 * (1 - c), "acceptance_rate": 0.5, "steps": 10}
    row = anchors.anchor_cell([], "seed", 3, replay, {}, budget_scope="step", frontier=True)
    assert 5 / 12 <= row["frontier_cost"] <= 5 / 12 + MAX_COST / 2 ** frontier.HALVINGS
    assert row["frontier"]["drafted_per_step"] <= 1.75
    assert not row["frontier_vs_anchor"]["dominates"] and row["frontier_vs_anchor"]["tokens_per_step"] < 0
    assert "fixed cost 0.41" in anchors.fmt_row({**row, "trace": "t"})
    flat = anchors.cell_table([{**row, "trace": "t"}])[0]
    assert flat["frontier_cost"] == row["frontier_cost"] and flat["frontier_dominates"] is False
    plain = anchors.anchor_cell([], "seed", 3, replay, {}, budget_scope="step")
    assert "frontier" not in plain and "fixed cost" not in anchors.fmt_row({**plain, "trace": "t"})


def test_frontier_needs_anchors(tmp_path):
    res = CliRunner().invoke(group, ["dominance", "--frontier", "--output", str(tmp_path / "r")])
    assert isinstance(res.exception, UserError) and "add --anchors" in str(res.exception)


@pytest.mark.slow
def test_frontier_on_a_trace_slice_and_a_resume_that_adds_it(traces_dir, qwen3_tokenizer_dir, tmp_path):
    base = ["dominance", "--anchors", "--traces", str(traces_dir / GRPO), "--tokenizer", str(qwen3_tokenizer_dir),
            "-k", "3", "--limit-groups", "1", "--output", str(tmp_path / "runs")]
    CliRunner().invoke(group, base)
    (run,) = list((tmp_path / "runs").iterdir())
    assert "frontier" not in load_result(run)["rows"][0]
    res = CliRunner().invoke(group, [*base, "--frontier", "--resume", str(run)])
    assert "(kept)" not in res.output   # cells without the fixed-cost point are replayed again
    result = load_result(run)
    assert result["metrics"]["frontier_dominated_cells"] == sum(r["frontier_vs_anchor"]["dominates"]
                                                                for r in result["rows"])
    for r in result["rows"]:
        assert r["frontier"]["drafted_per_step"] <= r["anchor_metrics"]["drafted_per_step"]
        assert 0.0 <= r["frontier_cost"] <= MAX_COST
    # the point is what the default replays at that cost: one replay at it gives the same counts
    r = result["rows"][0]
    items = anchors.load_items(traces_dir / GRPO, str(qwen3_tokenizer_dir), 1)
    again = anchors.replay_arm(items, [(frontier.fixed_cost_config(3, r["sources"], r["frontier_cost"]), None)],
                               parse_strategy(f"{r['anchor']}:k=3").history_window)
    assert (again["tokens_per_step"], again["drafted_per_step"]) == \
        (r["frontier"]["tokens_per_step"], r["frontier"]["drafted_per_step"])
    assert "at one fixed cost matched to the anchor's pooled" in res.output
