"""Drafters behind the common interface: semantics against brute force, sources, selection."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from samspec_bench.sam import (AdaptiveLength, CorpusAutomaton, NgramDrafter, SamDrafter, SuffixAutomaton,
                               make_drafter)
from samspec_bench.sam.drafters import arctic_available, check_k
from samspec_bench.sam.python_automaton import ObjectSam


def brute_ngram(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """vLLM's prompt lookup: the longest n in [min_n, max_n] whose last-n tokens occur
    earlier, the earliest such occurrence, then up to k tokens after it."""
    n_tok = len(tokens)
    for n in range(min(max_n, n_tok - 1), min_n - 1, -1):
        suffix = tokens[n_tok - n:]
        for end in range(n - 1, n_tok - 1):  # earliest end position first
            if tokens[end - n + 1: end + 1] == suffix:
                return tokens[end + 1: end + 1 + k]
    return []


streams = st.lists(st.integers(0, 4), min_size=1, max_size=80)


@settings(max_examples=300, deadline=None)
@given(streams, st.integers(1, 3), st.integers(0, 4), st.integers(1, 8))
def test_ngram_drafter_has_vllm_semantics(tokens, min_n, extra, k):
    max_n = min_n + extra
    d = NgramDrafter(min_n=min_n, max_n=max_n)
    d.start("r", tokens[:1])
    assert d.propose("r", k) == brute_ngram(tokens[:1], min_n, max_n, k)
    for i in range(1, len(tokens)):
        d.extend("r", [tokens[i]])
        assert d.propose("r", k) == brute_ngram(tokens[: i + 1], min_n, max_n, k)


@settings(max_examples=100, deadline=None)
@given(streams, st.integers(1, 8))
def test_python_baselines_draft_exactly_like_the_compiled_automaton(tokens, k):
    fast, obj = SuffixAutomaton(), ObjectSam()
    ref = make_drafter("sam-python")
    ref.start("r", [])
    for t in tokens:
        fast.extend([t])
        obj.extend([t])
        ref.extend("r", [t])
        assert obj.draft(k) == fast.draft(k) == ref.propose("r", k)


def test_sam_drafter_own_context_equals_suffix_automaton():
    rng = np.random.default_rng(1)
    prompt, resp = rng.integers(0, 20, 50), rng.integers(0, 20, 200)
    d = SamDrafter(length="fixed")
    d.start(7, prompt)
    sa = SuffixAutomaton(prompt)
    for t in resp:
        assert d.propose(7, 5) == sa.draft(5)
        d.extend(7, [int(t)])
        sa.extend([int(t)])
    d.stop(7)
    assert d.active == 0 and d.memory_bytes() == 0


def test_plain_sam_drafter_runs_compiled_and_equals_the_python_path():
    """The fixed baseline's per-request calls run in C; a drafter configured to draft
    exactly as much (a huge adaptive factor) runs the Python path. Interleaved requests,
    every prompt form, every step: same drafts, same errors, same bookkeeping."""
    fast = SamDrafter(length="fixed")
    slow = SamDrafter(length=AdaptiveLength(factor=1e9))
    assert type(fast.extend.__self__).__name__ == "SamBatch"
    assert type(slow.extend.__self__).__name__ == "SamDrafter"
    rng = np.random.default_rng(3)
    prompt_a = rng.integers(0, 9, 40)
    prompts = lambda: {"a": prompt_a, "b": [1, 2, 3] * 5, ("c", 1): iter([4, 5, 4, 5]), "d": []}  # noqa: E731
    for d in (fast, slow):
        for rid, p in prompts().items():
            d.start(rid, p, group="g")
    for step in range(150):
        for rid in prompts():
            toks = rng.integers(0, 9, int(rng.integers(1, 4)))
            for d in (fast, slow):
                d.extend(rid, toks if step % 2 else toks.tolist())
            assert fast.propose(rid, 6) == slow.propose(rid, 6)
    assert fast.active == slow.active == 4
    assert fast.memory_bytes() == slow.memory_bytes() > 0
    for d in (fast, slow):
        with pytest.raises(ValueError, match="already started"):
            d.start("a", [1])
        with pytest.raises(KeyError):
            d.extend("zz", [1])
        with pytest.raises(KeyError):
            d.propose("zz", 3)
        with pytest.raises(ValueError):
            d.extend("a", [1.5])
        with pytest.raises(ValueError):
            d.extend("a", [])
        for rid in prompts():
            d.stop(rid)
        with pytest.raises(KeyError):
            d.stop("a")
        assert d.active == 0 and d.memory_bytes() == 0


def test_group_sharing_drafts_from_siblings_and_frees_the_group():
    d = SamDrafter(group_sharing=True)
    d.start("a", [1, 2], group="g")
    d.start("b", [1, 2], group="g")
    d.start("c", [1, 2], group="other")
    d.extend("a", [3, 4, 5, 6])
    assert d.propose("b", 3) == [3, 4, 5]
    assert d.propose("c", 3) == []  # another group sees nothing of a
    d.stop("a")
    assert d.propose("b", 3) == [3, 4, 5]  # a's tokens outlive a while its group lives
    d.stop("b")
    d.stop("c")
    assert d.memory_bytes() == 0 and not d._groups


def test_static_corpus_selection_with_l_bias_and_l_threshold():
    corpus = CorpusAutomaton([[10, 11, 12, 13, 14, 15]])
    d = SamDrafter(corpus=corpus, l_bias=0)
    d.start("r", [10, 11, 12])  # no own repeat; the corpus has 10 11 12 -> 13 14 15
    assert d.propose("r", 2) == [13, 14]
    biased = SamDrafter(corpus=corpus, l_bias=3)  # static must beat dynamic by more than 3
    biased.start("r", [10, 11, 12])
    assert biased.propose("r", 2) == []
    strict = SamDrafter(corpus=corpus, l_threshold=4)  # a 3-token match is too short
    strict.start("r", [10, 11, 12])
    assert strict.propose("r", 2) == []
    strict.extend("r", [13])
    assert strict.propose("r", 2) == [14, 15]


def test_dynamic_match_wins_ties_against_the_corpus():
    corpus = CorpusAutomaton([[1, 2, 9, 9]])
    d = SamDrafter(corpus=corpus)
    d.start("r", [1, 2, 3, 1, 2])  # own: "1 2" -> 3 ; corpus: "1 2" -> 9 9 ; equal lengths
    assert d.propose("r", 2) == [3, 1]


def test_adaptive_length_bounds_the_draft_by_the_match():
    rule = AdaptiveLength(factor=0.5, offset=0, min_tokens=1)
    assert [rule(L, 8) for L in (0, 1, 2, 5, 40)] == [0, 1, 1, 2, 8]
    d = SamDrafter(length=rule)
    d.start("r", [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4])  # match length 4 -> 2 tokens
    assert d.propose("r", 8) == [5, 6]


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="unknown drafter"):
        make_drafter("medusa")
    with pytest.raises(ValueError, match="k"):
        check_k(0)
    with pytest.raises(ValueError):
        NgramDrafter(min_n=3, max_n=2)
    with pytest.raises(ValueError):
        SamDrafter(l_threshold=0)
    d = SamDrafter()
    d.start("r", [1])
    with pytest.raises(ValueError):
        d.start("r", [1])
    with pytest.raises(ValueError):
        d.extend("r", [-3])


@pytest.mark.skipif(not arctic_available(), reason="arctic-inference is not installed")
def test_arctic_adapter_drafts_a_repeated_continuation():
    d = make_drafter("suffix")
    toks = [5, 6, 7, 8, 9] * 6
    d.start("r", toks)
    d.extend("r", [5, 6])
    draft = d.propose("r", 3)
    assert draft == [7, 8, 9][: len(draft)] and len(draft) >= 1
    d.stop("r")


def test_group_members_with_different_prompts_each_index_their_own():
    d = SamDrafter(group_sharing=True)
    d.start("a", [1, 2, 3], group="g")
    d.start("b", [4, 5, 4], group="g")
    assert d.propose("b", 2) == [5, 4]  # b's own prompt "4 5 4" is indexed, not a's
    d.extend("a", [1, 2])
    assert d.propose("a", 2) == [3, 1]


def test_ngram_drafter_refuses_ids_it_cannot_hold_instead_of_wrapping():
    d = NgramDrafter()
    d.start("r", [5, 6, 7, 5, 6])
    with pytest.raises(ValueError, match="4294967303 at index 0"):
        d.extend("r", np.array([2**32 + 7]))   # wrapped to int32 it was 7 and drafted [5, 6]
    with pytest.raises(ValueError, match="2147483648"):
        d.extend("r", [2**31])
    assert d.propose("r", 2) == [7, 5]        # nothing half-appended
    with pytest.raises(ValueError, match="-1 at index 1"):
        d.start("s", [1, -1])
    with pytest.raises(ValueError, match="already started"):
        d.start("r", [1])
    d.start("g", iter([1, 2, 1, 2]))          # a generator prompt, as the automata take it
    assert d.propose("g", 2) == [1, 2]


@pytest.mark.parametrize("length", ["evidence", "fixed"])
def test_a_refused_start_in_a_group_leaves_no_live_member_behind(length):
    """The group's member count was raised before the prompt was checked: after a refused
    start the group's automaton outlived its last member (a leak per refused request)."""
    d = SamDrafter(group_sharing=True, length=length)
    d.start("a", [1, 2, 3, 4], group="g")
    for bad in ([1, -2], [5, 2**40]):
        with pytest.raises(ValueError, match="out of range"):
            d.start("b", bad, group="g")
        with pytest.raises(ValueError, match="out of range"):
            d.start("c", bad, group="new")
    assert d.active == 1 and d._groups["g"][1] == 1 and "new" not in d._groups
    d.start("b", [1, 2], group="g")    # the refused id starts cleanly
    d.extend("b", [3])
    assert d.propose("b", 2) == [4]    # the sibling's text
    d.stop("a")
    d.stop("b")
    assert d.memory_bytes() == 0 and not d._groups and not d._group_of


# ---------- k and the other counts: numpy integers as ints, never a bool ----------

DRAFTER_KINDS = [("sam", {}), ("sam-fixed", {}), ("sam", {"compiled": False}), ("sam", {"group_sharing": True}),
                 ("sam-fixed", {"group_sharing": True}), ("sam", {"length": "evidence:budget=0.7"}),
                 ("sam", {"length": "evidence:budget=0.7", "compiled": False}), ("ngram", {}),
                 ("sam-python", {}), ("sam-public", {})]


@pytest.mark.parametrize("name,options", DRAFTER_KINDS)
def test_every_drafter_takes_a_numpy_k_as_an_int_and_refuses_a_bool(name, options):
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    drafts = []
    for k in (3, np.int64(3), np.int32(3)):
        d = make_drafter(name, **options)
        d.start("r", prompt)
        drafts.append((d.peek("r", k), d.propose("r", k)))
    assert drafts[0] == drafts[1] == drafts[2]
    d = make_drafter(name, **options)
    d.start("r", prompt)
    d.start("new", [7])   # no match to draft from: the same refusals
    for req in ("r", "new"):
        for call in (d.propose, d.peek):
            with pytest.raises(ValueError, match="k = True: must be an integer >= 0, not a bool"):
                call(req, True)
            for bad in (np.True_, 2.0):
                with pytest.raises(TypeError, match="must be an integer >= 0"):
                    call(req, bad)
            with pytest.raises(ValueError, match=r"k must be >= 0 \(got -1\)"):
                call(req, -1)


def test_constructor_counts_take_numpy_integers_and_refuse_bools():
    d = NgramDrafter(min_n=np.int64(1), max_n=np.int32(2))
    d.start("r", [1, 2, 3, 1, 2])
    assert d.propose("r", 2) == [3, 1] and type(d.min_n) is int
    s = SamDrafter(l_threshold=np.int64(3), length="fixed")
    s.start("r", [1, 2, 3, 1, 2])
    assert s.propose("r", 2) == [] and s.l_threshold == 3   # match length 2 < 3
    for bad in ({"min_n": True}, {"max_n": True}):
        with pytest.raises(ValueError, match="not a bool"):
            NgramDrafter(**bad)
    with pytest.raises(ValueError, match="l_threshold = True"):
        SamDrafter(l_threshold=True)


# ---------- pickling: a drafter with no live request is rebuilt from its options ----------


@pytest.mark.parametrize("name,options", [k for k in DRAFTER_KINDS if k[0].startswith("sam-f") or k[0] == "sam"])
def test_a_drafter_without_live_requests_pickles_and_drafts_as_a_new_one(name, options):
    import pickle

    copy = pickle.loads(pickle.dumps(make_drafter(name, **options)))
    fresh = make_drafter(name, **options)
    assert type(copy) is type(fresh) and copy.describe() == fresh.describe()
    resp = [4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 9, 4, 5, 6]
    for d in (copy, fresh):
        d.start("r", resp[:6])
    for t in resp[6:]:
        assert copy.propose("r", 4) == fresh.propose("r", 4)
        copy.extend("r", [t])
        fresh.extend("r", [t])
    with pytest.raises(TypeError, match="1 live request.*live automata are not pickled; fork"):
        pickle.dumps(copy)


def test_pickling_keeps_a_python_record_and_refuses_a_compiled_one_that_learnt():
    import pickle

    for compiled in (True, False):
        d = SamDrafter(compiled=compiled)
        d.start("r", [1, 2, 3, 1, 2, 3, 1, 2])
        d.propose("r", 3)
        d.extend("r", [3, 9])
        d.stop("r")
        assert len(d.token_stats) > 0
        if compiled:
            with pytest.raises(TypeError, match="acceptance record.*has learnt"):
                pickle.dumps(d)
        else:
            assert pickle.loads(pickle.dumps(d)).token_stats.stats == d.token_stats.stats
