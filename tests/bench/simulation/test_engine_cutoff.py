"""The engine-wide rolling cut-off (`enginecutoff:W:T`, switches.EngineCutoff) in the simulated
schedule: worked by hand, set against the per-request cut-off, and equal with and without the
closed-form fast paths (which it must not take while its decision still depends on history)."""

import numpy as np
import pytest

from samspec_bench.bench.policies import AlwaysPolicy
from samspec_bench.bench.simulation import fast_paths
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.bench.simulation.profiles import rule_profile
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.sam.strategies.rules import RollingCutoff
from samspec_bench.sam.strategies.switches import EngineCutoff, parse_switch

ONE = StepTimeModel.constant(1.0)


def profile(n, drafted, accepted):
    return np.full(n, drafted, np.int16), np.full(n, accepted, np.int16)


# A keeps every draft of 2, B none: pooled over the batch the rate is 2 / 4 = 0.5 a step
GOOD, BAD = profile(20, 2, 2), profile(20, 2, 0)


def test_engine_cutoff_by_hand():
    # prompts of 1, responses of 20, k 2, window 2, threshold 0.6.
    # step 0: both prefill (first tokens, nothing drafted: not in the window) -> pos 1, 1
    # step 1: A drafts 2 keeps 2 -> pos 4; B drafts 2 keeps 0 -> pos 2; window (4 drafted, 2 kept)
    # step 2: A -> 7, B -> 3; window full: 4 / 8 = 0.5 < 0.6 -> off after step 2
    # steps 3..: plain decode, one token each: A finishes in step 15 (clock 16), B in step 19 (clock 20)
    reqs = [SimRequest(1, 20, *GOOD), SimRequest(1, 20, *BAD)]
    for ff in (True, False):
        r = simulate(reqs, k=2, policy=parse_switch("enginecutoff:2:0.6"), step_model=ONE, fast_forward=ff)
        assert r.num_steps == 20, ff
        assert list(r.steps["num_drafted"]) == [0, 4, 4] + [0] * 17, ff
        assert list(r.steps["num_accepted"]) == [0, 2, 2] + [0] * 17
        assert list(r.steps["speculative"]) == [True] * 3 + [False] * 17   # the decision: on for the prefill too
        assert list(r.finish_time_s) == [16.0, 20.0]
        assert r.policy["off_after_step"] == 2
    # at threshold 0.5 a window of exactly 0.5 does not cut (below, not at) until A runs out:
    # step 7, A's last token (no room to draft), B drafts 2 keeps 0: window (4, 2), (2, 0) -> 1/3
    r = simulate(reqs, k=2, policy=EngineCutoff(2, 0.5), step_model=ONE)
    assert r.policy["off_after_step"] == 7
    assert list(r.steps["num_drafted"][:9]) == [0] + [4] * 6 + [2, 0] and r.steps["num_drafted"].sum() == 26


def test_per_request_and_engine_wide_cutoffs_differ():
    """Planted: the per-request cut-off (window 2, 0.6) stops only B, whose own drafts fail;
    the engine-wide one pools A's and B's drafts (0.5) and stops A too."""
    cut = lambda d, a: rule_profile(d, a, RollingCutoff(None, window=2, threshold=0.6))  # noqa: E731
    per_request = simulate([SimRequest(1, 20, *cut(*GOOD)), SimRequest(1, 20, *cut(*BAD))], k=2,
                           policy=AlwaysPolicy(), step_model=ONE)
    # A: 3 tokens a step from pos 1: 4, 7, ..., 19 after step 6, its last token alone in step 7
    assert list(per_request.steps["num_drafted"][:9]) == [0, 4, 4, 2, 2, 2, 2, 0, 0]
    assert list(per_request.finish_time_s) == [8.0, 20.0]
    engine = simulate([SimRequest(1, 20, *GOOD), SimRequest(1, 20, *BAD)], k=2,
                      policy=EngineCutoff(2, 0.6), step_model=ONE)
    assert list(engine.finish_time_s) == [16.0, 20.0]
    assert engine.steps["num_drafted"].sum() == 8 < per_request.steps["num_drafted"].sum() == 16


def _mixed(n, seed):
    """Requests whose drafts are kept well early and poorly late, so the gate trips mid-run."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        m = int(rng.integers(40, 200))
        d = rng.integers(1, 5, m).astype(np.int16)
        a = np.where(np.arange(m) < 30, d, rng.integers(0, 2, m)).astype(np.int16)
        out.append(SimRequest(int(rng.integers(1, 30)), m, d, np.minimum(a, d)))
    return out


@pytest.mark.parametrize("spec, trips", [("enginecutoff:6:0.5", True), ("enginecutoff:6:0.01", False)])
def test_fast_forward_equals_step_by_step(spec, trips, monkeypatch):
    """The closed forms are skipped while the gate still listens and taken once it is off:
    stepping one by one gives the same schedule, step for step."""
    calls = []
    real = fast_paths.speculative_end
    monkeypatch.setattr(fast_paths, "speculative_end", lambda *a: calls.append(1) or real(*a))
    model = StepTimeModel(0.01, {"running": 0.001, "decode_tokens": 1e-4, "draft_tokens": 3e-4, "speculative": 0.002})
    reqs = _mixed(24, 3)
    a, b = (simulate(reqs, k=4, policy=parse_switch(spec), step_model=model, max_num_seqs=8, fast_forward=ff)
            for ff in (True, False))
    assert a.num_steps == b.num_steps and a.policy == b.policy
    for c in a.steps:
        assert np.array_equal(a.steps[c], b.steps[c]), c
    assert np.array_equal(a.finish_time_s, b.finish_time_s)
    off = a.policy["off_after_step"]
    assert (off is not None) == trips
    if trips:
        assert a.steps["speculative"][:off + 1].any() and not a.steps["num_drafted"][off + 1:].any()
    assert not calls   # never the speculative end: the gate is history-dependent until it is off


def test_spec_errors_are_one_line():
    for spec, msg in (("enginecutoff:0:0.3", "window >= 1"), ("enginecutoff:8:1", "0 < threshold < 1"),
                      ("enginecutoff:8:0", "0 < threshold < 1"), ("enginecutoff:8", "enginecutoff:WINDOW:THRESHOLD"),
                      ("enginecutoff:x:0.3", "enginecutoff:WINDOW:THRESHOLD")):
        with pytest.raises(ValueError, match=msg) as e:
            parse_switch(spec)
        assert spec in str(e.value) and "\n" not in str(e.value)


def test_combined_switch_by_hand():
    """`schedule:1-1=2+enginecutoff:2:0.6`: the same pair as above, but the schedule lets a step
    draft only while one request runs: both run to the end together, nothing is drafted and
    both finish at clock 20; with a band that covers two running requests the gate trips
    exactly as alone (off after step 2)."""
    reqs = [SimRequest(1, 20, *GOOD), SimRequest(1, 20, *BAD)]
    for ff in (True, False):
        narrow = simulate(reqs, k=2, policy=parse_switch("schedule:1-1=2+enginecutoff:2:0.6"), step_model=ONE,
                          fast_forward=ff)
        assert narrow.steps["num_drafted"].sum() == 0 and list(narrow.finish_time_s) == [20.0, 20.0]
        wide = simulate(reqs, k=2, policy=parse_switch("schedule:1-2=2+enginecutoff:2:0.6"), step_model=ONE,
                        fast_forward=ff)
        assert list(wide.steps["num_drafted"]) == [0, 4, 4] + [0] * 17
        assert list(wide.finish_time_s) == [16.0, 20.0]
    # the smaller k of the parts: a band of 1 caps the drafts of a k=2 arm at one token each
    capped = simulate(reqs, k=2, policy=parse_switch("schedule:1-2=1+enginecutoff:4:0.1"), step_model=ONE)
    assert capped.steps["num_drafted"].max() == 2   # two requests x 1 token
    # pooled 1 of 2 a step while both draft (0.5 > 0.1); A (2 tokens a step from pos 1) emits its last
    # token in step 10 without room to draft, so steps 10..13 hold B's failed drafts alone: 0 of 4 in
    # the window of step 13 (step 12's still holds step 9's 1 of 2: 1 / 5 = 0.2)
    assert capped.policy["parts"][1]["off_after_step"] == 13 and capped.policy["name"] == "both"


@pytest.mark.parametrize("spec, says", [("threshold:8+", "threshold"), ("always+enginecutoff:8", "enginecutoff:WINDOW"),
                                        ("always+bogus", "use always")])
def test_combined_switch_bad_specs(spec, says):
    with pytest.raises(ValueError, match=says):
        parse_switch(spec)


def test_only_a_switch_holding_a_gate_reports_when_it_tripped():
    assert parse_switch("enginecutoff:2:0.5").gate and parse_switch("threshold:8+enginecutoff:2:0.5").gate
    assert not getattr(parse_switch("threshold:8+schedule:1-8=2"), "gate", False)
    assert not getattr(parse_switch("threshold:8"), "gate", False)
