"""The evidence policy's draft budget (`evidence:budget=B`, sam/draft_budget.py): the hard cap on
the mean drafted tokens per step, the multiplier choosing which tokens get the budget, the
budget shared with the acceptance record, and bad specs."""

from __future__ import annotations

import random

import pytest
from click.testing import CliRunner

from samspec_bench.bench.engines.replay import replay_response
from samspec_bench.cli import group
from samspec_bench.errors import UserError
from samspec_bench.metrics import total_counts
from samspec_bench.sam.draft_budget import DraftBudget
from samspec_bench.sam.draft_length import parse_length
from samspec_bench.sam.drafters import SamDrafter


def _repetitive(seed: int = 0) -> list[int]:
    """A phrase of 40 tokens repeated 30 times, 10 fresh tokens after each: long sure matches."""
    rng = random.Random(seed)
    phrase = [rng.randrange(100, 200) for _ in range(40)]
    out: list[int] = []
    for _ in range(30):
        out += phrase + [rng.randrange(300, 400) for _ in range(10)]
    return out


def _replay(length: str, resp: list[int], k: int, compiled: bool = True, n: int = 3):
    d = SamDrafter(length=length, compiled=compiled)
    recs = [replay_response(d, [1, 2, 3], resp, k, req_id=i) for i in range(n)]
    return d, total_counts(recs), recs


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("budget", [0.5, 1.0])
def test_the_cap_holds_where_the_policy_would_draft_much_more(compiled, budget):
    resp = _repetitive()
    _, free, _ = _replay("evidence", resp, 8, compiled)
    assert free.drafted_per_step > 2 * budget   # unbudgeted it drafts far more than the budget
    d, capped, _ = _replay(f"evidence:budget={budget}", resp, 8, compiled)
    assert d.policy_path == ("c" if compiled else "python")
    assert capped.drafted_per_step <= budget   # the bucket starts empty: never above B x steps
    assert capped.drafted_per_step >= 0.8 * budget   # and the multiplier spends most of it
    assert d.describe()["budget"]["steps"] == capped.steps


def test_compiled_and_python_paths_spend_the_same_budget():
    resp = _repetitive(1)
    _, c, rc = _replay("evidence:budget=0.7", resp, 4, True)
    _, p, rp = _replay("evidence:budget=0.7", resp, 4, False)
    assert [list(r.drafted) for r in rc] == [list(r.drafted) for r in rp] and c.accepted == p.accepted


def _strong_and_weak(seed: int = 3) -> tuple[list[int], set[int]]:
    """Stretches of a phrase seen many times (strong counts) between stretches over a 4-token
    alphabet (every short match seen, its continuations split four ways: weak counts); the
    positions of the strong stretches."""
    rng = random.Random(seed)
    phrase = [rng.randrange(100, 200) for _ in range(24)]
    out: list[int] = []
    strong: set[int] = set()
    for _ in range(25):
        strong.update(range(len(out), len(out) + len(phrase)))
        out += phrase
        out += [rng.randrange(10, 14) for _ in range(24)]
    return out, strong


def _share_in(recs, strong: set[int]) -> float:
    """Of the drafted tokens, the share drafted at positions of the strong stretches."""
    tot = inside = 0
    for r in recs:
        for pos, d in zip(r.position, r.drafted):
            tot += d
            inside += d * (pos in strong)
    return inside / tot


def test_the_multiplier_spends_the_budget_where_counts_are_strong():
    """The same bucket with the multiplier frozen (rate=0: drafts cut first come, first served)
    against the moving multiplier: at the same budget the latter drafts a larger share of its
    tokens in the strong stretches, and gets more of them accepted."""
    resp, strong = _strong_and_weak()
    _, free, free_recs = _replay("evidence:cost=0.05", resp, 8)
    budget = 0.6
    assert free.drafted_per_step > 2 * budget
    _, frozen, frozen_recs = _replay(f"evidence:cost=0.05,budget={budget},rate=0", resp, 8)
    _, moving, moving_recs = _replay(f"evidence:cost=0.05,budget={budget}", resp, 8)
    assert frozen.drafted_per_step <= budget and moving.drafted_per_step <= budget
    assert _share_in(moving_recs, strong) > _share_in(frozen_recs, strong) + 0.05
    assert moving.acceptance_rate > frozen.acceptance_rate


def test_the_budget_travels_with_the_acceptance_record():
    a = SamDrafter(length="evidence:budget=1.0")
    b = SamDrafter(length="evidence:budget=1.0", token_stats=a.token_stats)
    c = SamDrafter(length="evidence:budget=1.0")
    assert a._budget is b._budget and a._budget is not c._budget
    before = a._budget
    a.reset_statistics()
    assert a._budget is not before


def test_a_pool_keeps_one_budget_across_records_and_bounds_the_whole_run():
    # drafters of one pool share a budget whatever their records, and a new record (a new RL
    # step's task) keeps it: over every step together the drafts stay within B x steps
    resp = _repetitive(1)
    spec = "evidence:budget=0.8,pool=t-run"
    a, b = SamDrafter(length=spec), SamDrafter(length=spec)
    other = SamDrafter(length="evidence:budget=0.8,pool=t-other")
    assert a._budget is b._budget and a._budget is not other._budget
    before = a._budget
    a.reset_statistics()
    assert a._budget is before and a.token_stats is not b.token_stats
    recs = []
    for step in range(3):   # three "RL steps", each a new record, as the replay cuts tasks
        d = SamDrafter(length=spec)
        d.reset_statistics()
        recs += [replay_response(d, [1, 2, 3], resp[: 300 + 200 * step], 8, req_id=i) for i in range(2)]
    c = total_counts(recs)
    assert before.drafted == c.drafted and before.steps == c.steps   # the pool saw every step
    assert c.drafted <= 0.8 * c.steps and c.drafted >= 0.5 * c.steps   # bounded, and spent
    with pytest.raises(ValueError, match="pool"):
        parse_length("evidence:pool=x")   # a pool names a budget: budget= is needed


def test_a_ceiling_caps_the_run_while_each_record_keeps_its_own_budget():
    """budget per record (an RL step's), ceiling over the run: step 1 may spend 0.2 a step,
    step 2 up to 3.0; the ceiling (1.0 a step) keeps what step 1 left, so step 2 drafts above
    1.0 a step, and over both the drafts stay within 1.0 x every step."""
    resp = _repetitive(2)
    per_step = []
    for step, budget in enumerate((0.2, 3.0)):
        spec = f"evidence:budget={budget},pool=t-ceiling,ceiling=1.0"
        d = SamDrafter(length=spec)
        d.reset_statistics()   # a new RL step's record: a budget of its own, the same ceiling
        recs = [replay_response(d, [1, 2, 3], resp, 8, req_id=i) for i in range(2)]
        per_step.append((d, total_counts(recs)))
    (d1, c1), (d2, c2) = per_step
    assert d1._budget is not d2._budget and d1._budget.ceiling is d2._budget.ceiling
    assert c1.drafted <= 0.2 * c1.steps   # each record's own bucket holds its step
    assert c2.drafted > 1.0 * c2.steps    # step 2 spends what step 1 saved under the ceiling
    assert c1.drafted + c2.drafted <= 1.0 * (c1.steps + c2.steps)   # the run's bound
    ceiling = d2._budget.ceiling
    assert ceiling.steps == c1.steps + c2.steps and ceiling.drafted == c1.drafted + c2.drafted
    assert d2.describe()["budget"]["ceiling"]["ceiling_per_step"] == 1.0
    pol = parse_length("evidence:budget=0.5,pool=p,ceiling=0.123456789012345")
    assert parse_length(pol.spec()).ceiling == 0.123456789012345   # printed exactly


@pytest.mark.parametrize("spec", ["evidence:budget=1,ceiling=1", "evidence:budget=1,pool=p,ceiling=0",
                                  "evidence:budget=1,pool=p,ceiling=inf", "evidence:budget=1,pool=p,ceiling=-2"])
def test_a_ceiling_needs_a_pool_and_a_finite_positive_rate(spec):
    with pytest.raises(ValueError, match="ceiling"):
        parse_length(spec)


def test_the_bucket_never_lends():
    """Credit B per step, a draft at most the credit: with a proposer that always wants k, the
    total after n steps is at most B n, and a draft never exceeds the credit."""
    state = DraftBudget(budget=0.75, burst=4, rate=0.01, cost=0.2)
    got = []
    for _ in range(100):
        got.append(len(state.spend(8, lambda most, cost: [7] * most)))
    assert sum(got) <= 0.75 * 100 and max(got) <= 4 and sum(got) >= 0.75 * 100 - 1
    assert state.cost > 0.2   # drafts cut by the credit count as k: the price rose
    assert state.steps == 100 and state.drafted == sum(got)


@pytest.mark.parametrize("spec", ["evidence:budget=0", "evidence:budget=-1", "evidence:budget=inf",
                                  "evidence:budget=nan", "evidence:budget=abc", "evidence:budget=1,rate=-0.1"])
def test_bad_budget_specs(spec):
    with pytest.raises(ValueError, match="budget|rate"):
        parse_length(spec)


@pytest.mark.parametrize("spec", ["evidence:budget=0", "evidence:budget=inf", "evidence:budget=x"])
def test_bad_budget_on_the_command_line_is_one_line_exit_2(spec, tmp_path):
    res = CliRunner().invoke(group, ["dominance", "--sam-length", spec, "--traces", str(tmp_path / "none.jsonl"),
                                     "--output", str(tmp_path)])
    # a UserError: the CLI prints its one line and exits 2
    assert isinstance(res.exception, UserError) and res.exception.exit_code == 2, res.output
    assert "budget" in str(res.exception) and "\n" not in str(res.exception)


def test_spec_and_describe_print_the_budget_exactly():
    b = 1.0457238912345678
    pol = parse_length(f"evidence:budget={b!r}")
    assert pol.budget == b and parse_length(pol.spec()).budget == b
    assert pol.describe()["budget"] == b and "budget=" in pol.spec()
    assert parse_length("evidence").budget is None and "budget" not in parse_length("evidence").spec()


@pytest.mark.parametrize("windup, cost_after", [(0.0, 0.2), (0.25, 0.275), (1.0, 0.5)])
def test_a_cut_draft_counts_its_missing_tokens_by_windup(windup, cost_after):
    """Budget 1 a step, no burst, k 4: every step the credit holds one token, the policy wants
    all it may have, so the bucket cuts the draft to 1. For the multiplier the cut draft counts
    as 1 + windup x (4 - 1): cost 0.2 + 0.1 x (1 + 3 windup - 1) after one step."""
    b = DraftBudget(budget=1.0, burst=0.0, rate=0.1, cost=0.2, windup=windup)
    draft = b.spend(4, lambda most, cost: [7] * most)
    assert draft == [7] and b.cost == pytest.approx(cost_after)


@pytest.mark.parametrize("spec", ["evidence:budget=1,windup=1.5", "evidence:budget=1,windup=-0.1"])
def test_windup_outside_zero_one_is_refused(spec):
    with pytest.raises(ValueError, match="windup"):
        parse_length(spec)


@pytest.mark.parametrize("spenddown, price", [(0.0, 0.2), (0.01, 0.2 - 0.01 * (31 - 4)), (0.1, 0.0)])
def test_saved_credit_lowers_the_price_by_spenddown(spenddown, price):
    """Budget 1 a step, a proposer that drafts nothing for 30 steps: 30 tokens saved. On the
    31st step the credit is 31, k 4, so the price handed to the chooser is the multiplier (0.2,
    rate 0 keeps it) less spenddown x (31 - 4), at least 0."""
    b = DraftBudget(budget=1.0, burst=100, rate=0.0, cost=0.2, spenddown=spenddown)
    for _ in range(30):
        b.spend(4, lambda most, cost: [])
    seen = []
    b.spend(4, lambda most, cost: seen.append(cost) or [])
    assert seen == [pytest.approx(max(price, 0.0))] and b.cost == 0.2


def test_spenddown_spends_what_a_stretch_without_evidence_left():
    """A response that starts with 400 fresh tokens (no match: little is drafted even for free)
    and then repeats a phrase: the budget's deficit from the first stretch is never spent
    without the spend-down; with it the saved credit is spent on the repeats, within B x steps."""
    rng = random.Random(5)
    resp = [rng.randrange(1000, 5000) for _ in range(400)] + _repetitive(3)
    got = {}
    for sd in (0.0, 0.01):
        _, c, _ = _replay(f"evidence:budget=3.0,spenddown={sd}", resp, 8, n=1)
        got[sd] = c
        assert c.drafted <= 3.0 * c.steps
    # 3 a step is more than the policy drafts where it has little evidence: without the
    # spend-down most of it stays in the bucket (1.78 a step here), with it nearly all is spent
    assert got[0.01].drafted_per_step > got[0.0].drafted_per_step + 0.5
    assert got[0.01].drafted_per_step >= 0.9 * 3.0


def test_without_a_bucket_the_multiplier_remembers_the_deficit_and_cuts_nothing():
    """Budget 2 a step, rate 0.01: 50 steps with nothing to draft, then steps that want k = 4.
    With its bucket (burst 4) the deficit is forgotten: the price sits at 0 and rises from the
    first wanting step, the credit cuts every draft to 2 after the saved 4. Without (bucket=0)
    the multiplier went to 0.2 - 0.01 x 2 x 50 = -0.8: the price handed out stays 0 for the 40
    steps the deficit of 100 tokens pays for at 2 over budget a step, and nothing is cut."""
    runs = {}
    for bucket in (True, False):
        b = DraftBudget(budget=2.0, burst=4.0, rate=0.01, cost=0.2, bucket=bucket)
        for _ in range(50):
            b.spend(4, lambda most, cost: [])
        prices, drafts = [], []
        for _ in range(45):
            drafts.append(len(b.spend(4, lambda most, cost: prices.append(cost) or [7] * most)))
        runs[bucket] = (prices, drafts, b)
    prices, drafts, b = runs[False]
    assert b.describe()["multiplier_now"] == pytest.approx(-0.8 + 0.01 * 2 * 45)
    assert prices[:40] == [0.0] * 40 and prices[41] > 0   # the deficit paid for 40 steps, then it rises
    assert drafts == [4] * 45                              # no credit of its own cuts a draft
    prices, drafts, b = runs[True]
    assert b.cost >= 0 and prices[2] > 0                   # floored at 0: the deficit forgotten
    assert sum(drafts) <= 4 + 2 * 45 and drafts[-1] == 2   # the bucket cuts to B a step


def test_a_ceiling_still_bounds_the_run_when_the_records_only_pace():
    """bucket=0 under a ceiling: the records' budgets (0.2, then 3.0 a step) cut nothing, the
    ceiling of 1.0 a step is the only cap and holds over the run."""
    resp = _repetitive(4)
    counts = []
    for budget in (0.2, 3.0):
        d = SamDrafter(length=f"evidence:budget={budget},pool=t-pace,ceiling=1.0,bucket=0")
        d.reset_statistics()
        counts.append(total_counts([replay_response(d, [1, 2, 3], resp, 8, req_id=i) for i in range(2)]))
        assert d.describe()["budget"]["bucket"] is False
    assert counts[0].drafted > 0.2 * counts[0].steps   # step 1's own budget paces, it does not cap
    drafted, steps = sum(c.drafted for c in counts), sum(c.steps for c in counts)
    assert drafted <= 1.0 * steps and drafted >= 0.8 * steps


@pytest.mark.parametrize("spec, word", [("evidence:budget=1,bucket=0", "ceiling"),
                                        ("evidence:budget=1,pool=p,ceiling=1,bucket=0.5", "bucket"),
                                        ("evidence:budget=1,pool=p,ceiling=1,bucket=2", "bucket")])
def test_a_budget_without_a_bucket_needs_a_ceiling(spec, word):
    with pytest.raises(ValueError, match=word):
        parse_length(spec)
