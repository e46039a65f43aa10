"""The draft token's cost fitted online from step times (bench/vllm_proposer/online_cost.py) and the
`cost=auto` spec it feeds (sam/draft_length.OnlineCost): synthetic step times with a known
slope, no vLLM."""

from __future__ import annotations

import random

import pytest

from samspec_bench.bench.vllm_proposer.online_cost import OnlineDraftCost
from samspec_bench.sam import SamDrafter
from samspec_bench.sam.draft_length import DEFAULT_COST, EvidenceLength, OnlineCost, parse_length


def _true_cost(a: float, b: float, rows: int, est: OnlineDraftCost) -> float:
    """b E / S at the estimator's per-row means (checked against the fed steps separately): the
    formula, exact given those means."""
    emitted, verified = est.per_row()
    return b * rows * emitted / (a + b * rows * verified)


# _feed's per-row means with max_draft=3: drafts uniform on 0..3 (verified 1 + 1.5), accepted
# uniform on 0..draft (emitted 1 + 0.75)
EMITTED, VERIFIED = 1.75, 2.5


def _cost_of_the_feed(a: float, b: float, rows: int) -> float:
    """b E / S at the fed distribution's means: what the estimator should approach."""
    return b * rows * EMITTED / (a + b * rows * VERIFIED)


def _feed(est: OnlineDraftCost, a: float, b: float, rows: int, n: int, rng: random.Random, noise: float = 0.0,
          max_draft: int = 3, outliers: float = 0.0) -> list[float]:
    """n steps of `rows` rows, each row drafting 0..max_draft tokens and having 0..all of them
    accepted; step time a + b * verified (+ Gaussian noise of sd `noise`, + a pause of 20 x the
    step with probability `outliers`)."""
    costs = []
    for _ in range(n):
        drafts = [rng.randint(0, max_draft) for _ in range(rows)]
        verified = rows + sum(drafts)
        emitted = rows + sum(rng.randint(0, d) for d in drafts)
        t = a + b * verified + rng.gauss(0.0, noise)
        if rng.random() < outliers:
            t += 20 * (a + b * rows)
        costs.append(est.observe(t, rows, verified, emitted))
    return costs


def test_recovers_a_known_slope():
    rng = random.Random(1)
    a, b, rows = 0.020, 0.004, 4        # cost = 0.016 / 0.036 = 0.444 decode steps
    est = OnlineDraftCost()
    _feed(est, a, b, rows, 300, rng)
    assert est.warm and est.cost == pytest.approx(_true_cost(a, b, rows, est), abs=1e-6)
    # per row and step: 1 + 1.5 drafted verified on average, 1 + 0.75 emitted
    assert est.per_row() == (pytest.approx(EMITTED, abs=0.15), pytest.approx(VERIFIED, abs=0.15))
    # drafting makes a draft token dearer than at no drafting (b r / (a + b r)) and emitting more cheaper
    assert est.cost != pytest.approx(b * rows / (a + b * rows), abs=0.01)
    fa, fb = est.fit()
    assert (fa, fb) == (pytest.approx(a), pytest.approx(b))
    d = est.describe()
    assert d["ms_per_verified_token"] == pytest.approx(4.0) and d["unit"] == "decode steps per draft token"


def test_noise_and_outliers_are_absorbed():
    rng = random.Random(2)
    a, b, rows = 0.020, 0.004, 4
    est = OnlineDraftCost()
    _feed(est, a, b, rows, 2000, rng, noise=0.002, outliers=0.03)
    assert est.cost == pytest.approx(_cost_of_the_feed(a, b, rows), abs=0.06)   # 0.467
    assert est.clipped > 0
    # without the clipping the same pauses pull the fit away
    raw = OnlineDraftCost(clip=1e9)
    _feed(raw, a, b, rows, 2000, random.Random(2), noise=0.002, outliers=0.03)
    assert abs(raw.cost - _true_cost(a, b, rows, raw)) > abs(est.cost - _true_cost(a, b, rows, est))


def test_warm_up_keeps_the_default_then_fits():
    rng = random.Random(3)
    est = OnlineDraftCost(warmup=32)
    costs = _feed(est, 0.01, 0.005, 2, 31, rng)
    assert set(costs) == {DEFAULT_COST} and not est.warm and est.fit() is None
    costs = _feed(est, 0.01, 0.005, 2, 1, rng)
    assert est.warm and costs[-1] == pytest.approx(_true_cost(0.01, 0.005, 2, est))


def test_cost_is_clipped_to_the_unit_interval():
    rng = random.Random(4)
    # a negative slope (drafting makes steps faster: noise) gives 0, never below
    est = OnlineDraftCost()
    _feed(est, 0.05, -0.001, 4, 200, rng)
    assert est.cost == 0.0
    # verify nearly all of the step: the cost nears emitted / verified per row, capped at max_cost
    est = OnlineDraftCost(max_cost=0.5)
    _feed(est, 0.0001, 0.05, 4, 200, rng)
    emitted, verified = est.per_row()
    assert emitted / verified > 0.6 and est.cost == 0.5


def test_no_spread_in_verified_tokens_keeps_the_last_cost():
    rng = random.Random(5)
    # never drafting: no slope to see, the default stays
    est = OnlineDraftCost()
    _feed(est, 0.02, 0.004, 4, 200, rng, max_draft=0)
    assert est.warm and est.cost == DEFAULT_COST and est.updates == 0
    # fitted, then the policy stops drafting: once the spread is gone the fit holds
    est = OnlineDraftCost(half_life=16)
    _feed(est, 0.02, 0.004, 4, 100, rng)
    _feed(est, 0.02, 0.004, 4, 300, rng, max_draft=0)
    held, updates = est.cost, est.updates
    _feed(est, 0.02, 0.004, 4, 100, rng, max_draft=0)
    assert est.cost == held and est.updates == updates and held != DEFAULT_COST


def test_recent_steps_weigh_more():
    rng = random.Random(6)
    est = OnlineDraftCost(half_life=32)
    _feed(est, 0.02, 0.001, 4, 300, rng)
    low = est.cost
    assert low == pytest.approx(_cost_of_the_feed(0.02, 0.001, 4), abs=0.03)          # 0.233
    _feed(est, 0.02, 0.008, 4, 300, rng)   # the machine changed: verify got dearer
    assert est.cost == pytest.approx(_cost_of_the_feed(0.02, 0.008, 4), abs=0.06)     # 0.56


def test_bad_steps_are_ignored():
    est = OnlineDraftCost()
    for interval, rows, verified in ((0.0, 4, 6), (-1.0, 4, 6), (float("nan"), 4, 6), (0.1, 0, 0), (0.1, 4, 3)):
        assert est.observe(interval, rows, verified) == DEFAULT_COST
    assert est.steps == 0
    with pytest.raises(ValueError):
        OnlineDraftCost(max_cost=1.0)


def test_cost_auto_spec_round_trips_and_is_read_per_draft():
    pol = parse_length("evidence:cost=auto,tau=8")
    assert isinstance(pol.cost, OnlineCost) and pol.threshold(3) == DEFAULT_COST
    assert pol.spec() == "evidence:cost=auto,tau=8" and parse_length(pol.spec()) == pol
    pol.cost.set(0.6)
    assert pol.threshold(3) == 0.6 and "now 0.600" in pol.describe()["cost"]
    with pytest.raises(ValueError, match="in \\[0, 1\\)"):
        pol.cost.set(1.0)
    with pytest.raises(ValueError, match="or auto"):
        parse_length("evidence:cost=automatic")
    # a higher cost set online drafts fewer tokens from the same automaton
    seq = [1, 2, 3, 4, 5, 6, 7, 8] * 6 + [1, 2, 3]
    d = SamDrafter(length="evidence:cost=auto")
    d.start("r", seq)
    cheap = d.propose("r", 8)
    d.length.cost.set(0.95)
    d.start("s", seq)
    dear = d.propose("s", 8)
    assert len(dear) < len(cheap)
    assert EvidenceLength(cost=OnlineCost()) == parse_length("evidence:cost=auto")
