"""The named strategies' length and switch rules on hand-made sequences, with the exact draft
lengths each must give; a rule applied inside a decode loop (accept) and along a profile's
walk (rollout) gives the same drafts."""

from types import SimpleNamespace

import numpy as np
import pytest

from samspec_bench.bench.engines.replay import replay_response
from samspec_bench.bench.simulation.profiles import acceptance_profile, rule_profile, walk_profile
from samspec_bench.sam import make_drafter
from samspec_bench.sam.history import HistoryStore
from samspec_bench.sam.strategies import STRATEGIES, RuleDrafter, parse_strategy
from samspec_bench.sam.strategies.base import rule_context
from samspec_bench.sam.strategies.rules import AimdLength, BudgetByLength, RollingCutoff
from samspec_bench.sam.strategies.switches import (BatchSchedule, CostSwitch, Threshold, needs_cost, parse_switch,
                                                   switch_threshold)


def running(n):
    return SimpleNamespace(num_running=n, num_waiting=0, num_decoding=n, step=0)


def test_aimd_doubles_on_full_acceptance_and_halves_otherwise():
    rule = AimdLength(start=2, lo=2, hi=16)
    state, seen = rule.start(), []
    for accepted_whole in (True, True, True, True, False):
        n = rule.length(state, 16)
        seen.append(n)
        rule.update(state, n, n if accepted_whole else n - 1)
    seen.append(rule.length(state, 16))
    assert seen == [2, 4, 8, 16, 16, 8]
    for _ in range(5):
        rule.update(state, 8, 0)
    assert rule.length(state, 16) == 2          # never below lo


def test_aimd_along_a_profile_walk_with_a_planted_rejection():
    n = 70
    drafted = np.full(n, 16, dtype=np.int16)
    accepted = np.full(n, 16, dtype=np.int16)
    drafted[0] = accepted[0] = 0
    accepted[35] = 3                             # the fifth draft of the walk is cut short
    d, a = rule_profile(drafted, accepted, AimdLength())
    walk = walk_profile(d, a, 16)
    # walk: p=1 (2, all) -> 4 (4) -> 9 (8) -> 18 (16) -> 35 (16, 3 accepted) -> 39 (8) ...
    assert walk[0][:6] == [1, 4, 9, 18, 35, 39]
    assert walk[1][:6] == [2, 4, 8, 16, 16, 8]
    assert d[2] == 4 and d[36] == 8              # off the walk: the rule's current length


def test_length_budget_by_predicted_length():
    rule = BudgetByLength(short_k=4, long_k=16)
    assert rule.length(rule.start({"predicted_len": 900, "long_len": 500}), 16) == 16
    assert rule.length(rule.start({"predicted_len": 100, "long_len": 500}), 16) == 4
    assert rule.length(rule.start({"predicted_len": None, "long_len": 500}), 16) == 4
    store = HistoryStore()
    store.add([1, 2], [5] * 10)
    store.add([3, 4], [6] * 30)
    store.add([7], [8] * 50)
    ctx = rule_context(store, [3, 4])
    assert ctx == {"predicted_len": 30.0, "long_len": 30.0}


def test_rolling_cutoff_stops_a_request_after_a_poor_window():
    rule = RollingCutoff(AimdLength(start=4, lo=2, hi=8), window=3, threshold=0.5)
    state = rule.start()
    assert rule.length(state, 8) == 4
    rule.update(state, 4, 1)                     # 0.25
    rule.update(state, 2, 2)                     # 1.0: mean over 2 drafts is not a full window yet
    assert rule.length(state, 8) == 4            # AIMD: 4 -> 2 -> 4
    rule.update(state, 4, 0)                     # window (0.25, 1, 0): mean 0.417 < 0.5
    assert rule.length(state, 8) == 0


def test_switches():
    assert Threshold(8)(running(8)) and not Threshold(8)(running(9))
    sched = parse_switch("schedule:1-8=3;9-64=0")
    assert isinstance(sched, BatchSchedule)
    assert [sched.k_for(b) for b in (1, 8, 9, 64, 65)] == [3, 3, 0, 0, 0]
    assert sched(running(4)) and not sched(running(12))
    # t(B, x) = 1 + 0.1 B + 0.05 x; d = 2, a = 0.5: pays iff 1 + 0.2 B < 1.5 (1 + 0.1 B), i.e. B < 10
    cost = CostSwitch(lambda b, x: 1 + 0.1 * b + 0.05 * x, drafted_per_step=2, accepted_per_step=0.5, max_running=16)
    assert [b for b in range(1, 17) if cost(running(b))] == list(range(1, 10))
    with pytest.raises(ValueError, match="step model"):
        parse_switch("cost")
    with pytest.raises(ValueError, match="use always"):
        parse_switch("sometimes")


@pytest.mark.parametrize("spec, msg", [
    ("schedule:1-8", "band '1-8': use schedule:LO-HI=K"),        # was Python's 'not enough values to unpack'
    ("schedule:1-8=3;", "band '': use schedule:LO-HI=K"),
    ("schedule:1-x=3", "band '1-x=3': use schedule:LO-HI=K"),
    ("schedule:1-8=3;5-10=2", "bands 1-8 and 5-10 overlap"),      # running 5..8 would take 3 silently
    ("threshold:abc", "use threshold:T"),                           # was 'invalid literal for int()'
])
def test_malformed_switches_name_their_form(spec, msg):
    with pytest.raises(ValueError, match=msg) as e:
        parse_switch(spec)
    assert "unpack" not in str(e.value) and "literal" not in str(e.value)


@pytest.mark.parametrize("switch, msg", [
    ("cutoff:abc", "'cutoff:abc' has 1 value(s) after 'cutoff', not 2"),
    ("cutoff:8:0.3:1", "has 3 value(s) after 'cutoff', not 2"),
    ("cutoff:0:0.3", "WINDOW '0' is not a whole number >= 1"),
    ("cutoff:x:0.3", "WINDOW 'x' is not a whole number >= 1"),
    ("cutoff:8:abc", "THRESHOLD 'abc' is not a number in [0, 1]"),
    ("cutoff:8:1.5", "THRESHOLD '1.5' is not a number in [0, 1]"),
    ("cutoff:8:nan", "THRESHOLD 'nan' is not a number in [0, 1]"),
])
def test_a_bad_rolling_cutoff_names_the_value_and_the_form(switch, msg):
    with pytest.raises(ValueError) as e:   # was 'cutoff:WINDOW:THRESHOLD' alone, whatever was wrong
        parse_strategy(f"seed/{switch}")
    assert msg in str(e.value) and str(e.value).endswith("e.g. cutoff:8:0.3"), e.value
    assert parse_strategy("seed/cutoff:8:1").rule().describe()["threshold"] == 1.0


def test_switch_threshold_and_cost_of_combined_switches():
    assert switch_threshold("threshold:4+enginecutoff:8:0.3") == 4
    assert switch_threshold("threshold:8+threshold:4") == 4 and switch_threshold("threshold:6") == 6
    assert switch_threshold("schedule:1-8=3") is None and switch_threshold("always") is None
    assert needs_cost("cost") and needs_cost("threshold:4+costk") and not needs_cost("schedule:1-8=3")


@pytest.mark.parametrize("spec, sep", [("seed:", ":"), ("seed@", "@"), ("seed/", "/"), ("seed:k=3@/always", "@")])
def test_a_separator_with_nothing_after_it_is_refused(spec, sep):
    with pytest.raises(ValueError, match=f"nothing after '{sep}'"):   # it ran as seed, labelled 'seed/'
        parse_strategy(spec)


def test_strategy_specs_and_their_documentation():
    assert set(STRATEGIES) == {"seed", "evidence", "histospec", "seer", "das", "arctic"}
    hs = STRATEGIES["histospec"]
    assert (hs.sources, hs.k, hs.rule().describe()) == ("history", 16, {"name": "aimd", "start": 2, "lo": 2, "hi": 16})
    assert STRATEGIES["seed"].switch == "threshold:8" and STRATEGIES["seed"].k == 3
    assert parse_strategy("seer@own").sources == "own" and parse_strategy("seer@own").needs == ()
    assert parse_strategy("seed/cost").switch == "cost"
    assert parse_strategy("seed/cutoff:4:0.5").rule().describe()["window"] == 4
    with pytest.raises(ValueError, match="choose from"):
        parse_strategy("medusa")
    with pytest.raises(ValueError, match="sources"):
        parse_strategy("seed@corpus")
    for spec, bad in (("seed:k=\uff13", "\uff13"), ("seed/cutoff:\uff18:0.3", "\uff18")):   # full-width 3, 8
        with pytest.raises(ValueError, match=f"{bad!r} is not ASCII"):   # int() would read them as 3 and 8
            parse_strategy(spec)
    for s in STRATEGIES.values():
        assert s.follows and s.differs
    import importlib
    for name in STRATEGIES:
        doc = importlib.import_module(f"samspec_bench.sam.strategies.{name}").__doc__
        assert "Differs" in doc or name == "seed"


def test_rule_in_a_decode_loop_matches_the_profile_walk():
    """accept's replay (RuleDrafter in the decode loop) and rollout's profile (rule_profile
    along the walk) give the same steps for a prefix-consistent drafter."""
    rng = np.random.default_rng(3)
    motif = rng.integers(10, 40, 12).tolist()
    resp = (motif * 6)[:60]
    for i in (17, 30, 44):
        resp[i] = 99 + i                         # planted breaks: partial acceptances
    prompt = motif[:5]
    rs = replay_response(RuleDrafter(make_drafter("sam-fixed"), AimdLength()), prompt, resp, 16)
    d, a = acceptance_profile(make_drafter("sam-fixed"), prompt, resp, 16)
    pos, dr, ac, em = walk_profile(*rule_profile(d, a, AimdLength()), 16)
    assert rs.position.tolist() == pos
    assert rs.drafted.tolist() == dr and rs.accepted.tolist() == ac and rs.emitted.tolist() == em
    assert max(dr) > 2 and min(x for x in dr if x) == 2   # the rule moved both ways


def test_cost_option_sets_the_evidence_policys_cost_and_nothing_else():
    from samspec_bench.sam.draft_length import parse_length
    ev = parse_strategy("evidence:k=16:cost=0.05:paths=4@group+history")
    assert (ev.k, ev.paths, ev.sources) == (16, 4, "group+history")
    assert parse_length(ev.length).cost == 0.05
    arctic = parse_strategy("arctic:cost=0.2")   # Arctic's min_token_prob: the rest of its spec is kept
    base, moved = parse_length(STRATEGIES["arctic"].length), parse_length(arctic.length)
    assert moved.cost == 0.2 and base.cost == 0.1
    assert {f: getattr(moved, f) for f in ("cap", "depth", "novelty", "choice", "pooled")} == \
        {f: getattr(base, f) for f in ("cap", "depth", "novelty", "choice", "pooled")}
    for bad, match in (("seed:cost=0.1", "drafts without it"), ("das:cost=0.1", "drafts without it"),
                       ("evidence:cost=1", r"\[0, 1\)"), ("evidence:cost=x", r"\[0, 1\)")):
        with pytest.raises(ValueError, match=match):
            parse_strategy(bad)


def test_a_lower_cost_drafts_more_in_a_replay():
    """The option reaches the drafter: on a response that repeats itself with breaks, cost 0
    drafts more tokens than cost 0.9, and the default (0.215) lies between."""
    from samspec_bench.bench.draft_config import build_drafter, strategy_config
    rng = np.random.default_rng(5)
    motif = rng.integers(10, 60, 20).tolist()
    resp = (motif * 8)[:150]
    for i in range(7, 150, 13):
        resp[i] = 200 + i
    drafted = {}
    for spec in ("evidence:k=8:cost=0.0@own", "evidence:k=8@own", "evidence:k=8:cost=0.9@own"):
        d = build_drafter(strategy_config(spec), None, None)
        drafted[spec] = int(replay_response(d, motif[:4], resp, 8).drafted.sum())
    lo, mid, hi = drafted.values()
    assert lo > mid > hi, drafted


def test_sched_option_sets_the_admission_order_and_names_what_it_needs():
    from samspec_bench.sam.strategies import NEEDS_SCHEDULER
    st = parse_strategy("seer:k=16:sched=context@group")
    assert (st.schedule, st.k, st.sources) == ("context", 16, "group")
    assert NEEDS_SCHEDULER in st.needs and st.describe()["schedule"] == "context"
    assert parse_strategy("seer").schedule == "fcfs" and NEEDS_SCHEDULER not in parse_strategy("seer").needs
    for bad, match in (("seer:sched=lifo", "one of fcfs, context"), ("seer:sched=context:sched=fcfs", "twice")):
        with pytest.raises(ValueError, match=match):
            parse_strategy(bad)


def test_divided_option_sets_the_chunk_and_names_what_it_needs():
    from samspec_bench.sam.strategies import NEEDS_DIVIDED, NEEDS_SERVER
    st = parse_strategy("seer:divided=8192:sched=context@group")
    assert (st.divided, st.schedule, st.sources) == (8192, "context", "group")
    assert NEEDS_DIVIDED in st.needs and st.describe()["divided"] == 8192
    assert parse_strategy("seer").divided == 0 and NEEDS_DIVIDED not in parse_strategy("seer").needs
    # its siblings' index must serve every instance the group's requests move to; an own-text drafter moves along
    assert NEEDS_SERVER in st.needs and NEEDS_SERVER not in parse_strategy("seer").needs
    assert NEEDS_SERVER not in parse_strategy("seed:divided=8192").needs
    for bad, match in (("seer:divided=0", "divided=D"), ("seer:divided=8k", "divided=D"),
                       ("seer:divided=4:divided=8", "twice")):
        with pytest.raises(ValueError, match=match):
            parse_strategy(bad)
