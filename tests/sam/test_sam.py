"""The suffix automata against brute-force scans: single text, static corpus, GRPO group."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from samspec_bench.sam import CorpusAutomaton, GroupAutomaton, ReferenceSam, SuffixAutomaton

# ---------- brute-force oracles (plain scans, no automaton) ----------


def brute_match(text: list[int]) -> tuple[int, int]:
    """Longest suffix that also ends at an earlier position, and its earliest end position."""
    n = len(text)
    best, best_e = 0, -1
    for j in range(n - 1):  # candidate earlier end position
        m = 0
        while m <= j and text[j - m] == text[n - 1 - m]:
            m += 1
        if m > best:
            best, best_e = m, j
    return best, best_e


def z_match(text: list[int]) -> tuple[int, int]:
    """Same answer as brute_match in O(n): Z-function of the reversed text."""
    r = text[::-1]
    n = len(r)
    z = [0] * n
    lo = hi = 0
    for i in range(1, n):
        if i < hi:
            z[i] = min(hi - i, z[i - lo])
        while i + z[i] < n and r[z[i]] == r[i + z[i]]:
            z[i] += 1
        if i + z[i] > hi:
            lo, hi = i, i + z[i]
    best, best_i = 0, -1
    for i in range(1, n):
        if z[i] >= best and z[i] > 0:  # ties: larger i = earlier end position
            best, best_i = z[i], i
    return (best, n - 1 - best_i) if best else (0, -1)


def occurrences(texts: list[list[int]], pattern: list[int]) -> list[tuple[int, int]]:
    """(doc, end offset) of every occurrence of pattern in the documents."""
    out, m = [], len(pattern)
    for d, t in enumerate(texts):
        for j in range(m - 1, len(t)):
            if t[j - m + 1: j + 1] == pattern:
                out.append((d, j))
    return out


def brute_lookup(texts, gpos, context, exclude=None):
    """min_endpos with a continuation over documents. gpos[d][j] is the global position of
    token j of document d (positions count in the order tokens were appended)."""
    for length in range(len(context), 0, -1):
        occ = occurrences(texts, context[-length:])
        if not occ:
            continue
        d, j = min(occ, key=lambda o: gpos[o[0]][o[1]])
        if (d, j) == exclude or j + 1 >= len(texts[d]):
            continue
        return length, texts[d][j + 1:]
    return 0, []


# ---------- single growing text ----------

alphabets = st.sampled_from([2, 3, 5, 50, 151_669])


@st.composite
def token_streams(draw):
    v = draw(alphabets)
    n = draw(st.integers(1, 120))
    if draw(st.booleans()):  # highly repetitive: copies of a short motif with mutations
        motif = draw(st.lists(st.integers(0, v - 1), min_size=1, max_size=8))
        text = [motif[i % len(motif)] for i in range(n)]
        for i in draw(st.lists(st.integers(0, n - 1), max_size=5)):
            text[i] = draw(st.integers(0, v - 1))
        return text
    return draw(st.lists(st.integers(0, v - 1), min_size=n, max_size=n))


@settings(max_examples=300, deadline=None)
@given(token_streams(), st.integers(1, 10))
def test_match_and_draft_equal_brute_force_after_every_append(text, k):
    sa = SuffixAutomaton()
    for i, t in enumerate(text):
        sa.extend([t])
        prefix = text[: i + 1]
        length, e = brute_match(prefix)
        assert sa.match_length == length
        assert sa.draft(k) == (prefix[e + 1: e + 1 + k] if length else [])


@settings(max_examples=100, deadline=None)
@given(token_streams(), st.integers(1, 30))
def test_bulk_extend_equals_token_by_token(text, chunk):
    a, b = SuffixAutomaton(), SuffixAutomaton()
    a.extend(np.array(text, dtype=np.int64))
    for i in range(0, len(text), chunk):
        b.extend(text[i: i + chunk])
    assert (a.match_length, a.draft(8)) == (b.match_length, b.draft(8))
    assert a.num_states == b.num_states and len(a) == len(b) == len(text)


def test_example_from_the_api_contract():
    sa = SuffixAutomaton()
    sa.extend([7, 8, 9, 7, 8, 9, 10, 7, 8])
    assert sa.match_length == 2  # "7 8" ends earlier at positions 1 and 4
    assert sa.draft(3) == [9, 7, 8]  # after the earliest one (position 1)
    assert sa.draft(100) == [9, 7, 8, 9, 10, 7, 8]  # clipped at the end of the text
    assert SuffixAutomaton([1, 2, 3]).draft(4) == []


def test_real_token_stream_matches_z_oracle(qwen3_tokenizer_dir, traces_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(qwen3_tokenizer_dir / "tokenizer.json"))
    lines = (traces_dir / "qwen25math_math_100x8.jsonl").read_text().splitlines()
    rng = random.Random(0)
    for line in rng.sample(lines, 3):
        rec = json.loads(line)
        ids = tok.encode(rec["prompt"] + rec["response"]).ids[:700]
        sa, ref = SuffixAutomaton(), ReferenceSam()
        ref.new_doc()
        for i, t in enumerate(ids):
            sa.extend([t])
            ref.extend([t])
            prefix = ids[: i + 1]
            length, e = z_match(prefix)
            assert sa.match_length == length == ref.match_length
            assert sa.draft(8) == (prefix[e + 1: e + 9] if length else []) == ref.draft(8)



def test_long_text_with_hub_states_equals_the_reference_step_by_step():
    """Thousands of distinct tokens give the root and a few hubs edge tables that grow many
    times (probe groups wrapping round the table end included); repeated segments give long
    matches. Structure (states, edges) and every draft equal the pure-Python reference."""
    rng = np.random.default_rng(5)
    parts = []
    for _ in range(60):
        if parts and rng.random() < 0.5:  # copy an earlier stretch, then go on elsewhere
            src = np.concatenate(parts)
            start = int(rng.integers(0, src.size))
            parts.append(src[start: start + int(rng.integers(5, 200))])
        else:
            parts.append(rng.integers(0, 3000, int(rng.integers(50, 400))))
    text = np.concatenate(parts).tolist()
    sa, ref = SuffixAutomaton(), ReferenceSam()
    ref.new_doc()
    for i in range(0, len(text), 7):
        chunk = text[i: i + 7]
        sa.extend(chunk)
        ref.extend(chunk)
        assert sa.match_length == ref.match_length
        assert sa.draft(8) == ref.draft(8)
    assert sa.num_states == len(ref.len)
    assert sa.num_edges == sum(len(nx) for nx in ref.next)

# ---------- static corpus ----------


@settings(max_examples=150, deadline=None)
@given(st.lists(token_streams(), min_size=1, max_size=5), token_streams(), st.integers(1, 8))
def test_corpus_matcher_equals_brute_force_and_never_crosses_documents(docs, context, k):
    corpus = CorpusAutomaton(docs)
    gpos, base = [], 0
    for d in docs:  # one separator position between documents
        gpos.append(list(range(base, base + len(d))))
        base += len(d) + 1
    m = corpus.matcher()
    for i in range(0, len(context), 3):
        m.extend(context[i: i + 3])
        length, cont = brute_lookup(docs, gpos, context[: i + 3])
        assert m.lookup(k) == (length, cont[:k])
        assert m.match_length == length


def test_corpus_draft_stops_at_document_end():
    corpus = CorpusAutomaton([[1, 2, 3], [4, 5, 6, 7]])
    m = corpus.matcher()
    m.extend([1, 2])
    assert m.draft(10) == [3]  # not [3, <sep>, 4, ...]
    m.extend([3])  # "1 2 3" ends its document: no continuation anywhere
    assert m.match_length == 0 and m.draft(5) == []
    assert corpus.num_documents == 2 and corpus.num_tokens == 7


def test_corpus_takes_an_empty_document_and_counts_its_tokens():
    """An empty document (an empty response) raised 'no token ids given'; and num_tokens
    subtracted one separator per document after the first, so documents that added none (an
    empty first one, a refused one) made it count too few tokens."""
    corpus = CorpusAutomaton([[], np.array([], dtype=np.int64), [1, 2, 3], iter([1, 2, 5])])
    assert corpus.num_documents == 4 and corpus.num_tokens == 6
    m = corpus.matcher()
    m.extend([1, 2])
    assert m.lookup(3) == (2, [3])
    refused = CorpusAutomaton()
    with pytest.raises(ValueError, match="out of range"):
        refused.add_document([-1])
    refused.add_document([1, 2])
    assert refused.num_tokens == 2


# ---------- GRPO group ----------


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_group_members_equal_brute_force_under_any_interleaving(data):
    v = data.draw(st.sampled_from([2, 3, 6]))
    prompt = data.draw(st.lists(st.integers(0, v - 1), min_size=0, max_size=6))
    n_members = data.draw(st.integers(1, 4))
    group = GroupAutomaton(prompt)
    members, texts, gpos, pos = [], [], [], 0
    for _ in range(n_members):
        members.append(group.add_member())
        texts.append(list(prompt))
        gpos.append(list(range(pos, pos + len(prompt))))
        pos += len(prompt)
    for _ in range(data.draw(st.integers(1, 40))):
        i = data.draw(st.integers(0, n_members - 1))
        toks = data.draw(st.lists(st.integers(0, v - 1), min_size=1, max_size=3))
        members[i].extend(toks)
        texts[i] += toks
        gpos[i] += list(range(pos, pos + len(toks)))
        pos += len(toks)
        for j, mem in enumerate(members):
            if not texts[j]:
                continue
            length, cont = brute_lookup(texts, gpos, texts[j], exclude=(j, len(texts[j]) - 1))
            assert mem.match_length == length
            assert mem.draft(4) == cont[:4]


def test_group_member_drafts_what_a_sibling_generated():
    group = GroupAutomaton([1, 2])
    a, b = group.add_member(), group.add_member()
    a.extend([3, 4, 5])
    assert b.draft(3) == [3, 4, 5]  # b has only the prompt so far; a went ahead
    b.extend([3])
    assert b.draft(3) == [4, 5]


def test_groups_are_isolated():
    g1, g2 = GroupAutomaton([1]), GroupAutomaton([1])
    a, b = g1.add_member(), g2.add_member()
    a.extend([2, 3])
    assert b.draft(2) == []


# ---------- bad input ----------


@pytest.mark.parametrize("bad", [[-1], [1.5], [1, "x"], np.array([0.5, 1.0]), [], np.array([], dtype=np.int64),
                                 np.array([[1, 2]]), [2**31], [None]])
def test_bad_token_input_raises_value_error(bad):
    sa = SuffixAutomaton([1, 2, 3])
    with pytest.raises((ValueError, TypeError)) as exc:
        sa.extend(bad)
    assert exc.type is ValueError or "iterable" in str(exc.value)
    assert (sa.match_length, len(sa)) == (0, 3)  # nothing was appended
    ref = ReferenceSam()
    ref.new_doc()
    with pytest.raises(ValueError):
        ref.extend(bad if not isinstance(bad, np.ndarray) or bad.ndim == 1 else bad.tolist()[0] + [0.5])


def test_single_int_and_negative_k_are_rejected():
    sa = SuffixAutomaton([1, 2, 1, 2])
    with pytest.raises(TypeError):
        sa.extend(5)
    with pytest.raises(ValueError):
        sa.draft(-1)
    assert sa.draft(0) == []


def test_integer_arrays_of_any_width_are_accepted():
    for dtype in (np.int32, np.int64, np.uint16, np.uint32, np.int8):
        sa = SuffixAutomaton(np.array([3, 4, 3, 4, 3], dtype=dtype))
        assert sa.draft(2) == [4, 3] and sa.match_length == 3


def test_memory_per_token_is_bounded_on_a_long_repetitive_and_random_text():
    rng = np.random.default_rng(0)
    for text in (rng.integers(0, 151_669, 200_000), np.tile(rng.integers(0, 1000, 777), 300)):
        sa = SuffixAutomaton(text)
        # the design target is 64 bytes per token on real text; these are the extremes
        assert sa.memory_bytes / len(sa) < 80
        assert sa.num_states <= 2 * len(sa)


def test_real_responses_stay_within_64_bytes_per_token(qwen3_tokenizer_dir, traces_dir):
    # The library's memory bar, on what a rollout does: the prompt in one call, then the
    # response in one call (bulk reservation) or a few tokens per decode step (growth).
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(qwen3_tokenizer_dir / "tokenizer.json"))
    lines = (traces_dir / "qwen25math_math_100x8.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in random.Random(1).sample(lines, 40)]
    for per_step in (None, 3):
        held = tokens = 0
        for rec in recs:
            prompt, resp = tok.encode(rec["prompt"]).ids, tok.encode(rec["response"]).ids
            sa = SuffixAutomaton(prompt)
            if per_step is None:
                sa.extend(resp)
            else:
                for i in range(0, len(resp), per_step):
                    sa.extend(resp[i: i + per_step])
            held += sa.memory_bytes
            tokens += len(sa)
        assert held / tokens <= 64, (per_step, held / tokens)


# ---------- integer arguments (k, depth, reserve) ----------


def _bad_ints(call):
    """call(x) for a bool, a numpy bool, a float and a negative: the (type, message) of each refusal."""
    out = []
    for x in (True, np.True_, 2.0, -1):
        with pytest.raises((ValueError, TypeError)) as exc:
            call(x)
        out.append((exc.type, str(exc.value).replace("numpy.bool", "bool")))
    return out


def test_numpy_integers_are_taken_as_ints_by_every_k_and_depth():
    text = [1, 2, 3, 1, 2, 3, 1, 2]
    sa = SuffixAutomaton(text, evidence=True)
    member = GroupAutomaton(text, evidence=True).add_member()
    matcher = CorpusAutomaton([text]).matcher()
    matcher.extend([3, 1, 2])
    for k in (np.int64(2), np.int32(2), np.uint8(2)):
        assert sa.draft(k) == sa.draft(2) == [3, 1]
        assert sa.evidence(k) == sa.evidence(2)
        assert sa.evidence_chain(k, depth=np.int64(2)) == sa.evidence_chain(2, depth=2)
        assert member.match_draft(k) == member.match_draft(2)
        assert member.evidence_chain(k, depth=np.int16(2)) == member.evidence_chain(2, depth=2)
        assert matcher.lookup(k) == matcher.lookup(2) and matcher.lookup(2)[1] != []
        assert matcher.evidence_chain(k, depth=np.int64(3)) == matcher.evidence_chain(2, depth=3)


def test_bool_float_and_negative_k_are_refused_alike_by_the_core_and_the_reference():
    sa = SuffixAutomaton([1, 2, 1, 2])
    ref = ReferenceSam()
    ref.new_doc()
    ref.extend([1, 2, 1, 2])
    got, want = _bad_ints(sa.draft), _bad_ints(ref.draft)
    assert got == want
    assert [t for t, _ in got] == [ValueError, TypeError, TypeError, ValueError]
    assert "k = True: must be an integer >= 0, not a bool" in got[0][1] and "k must be >= 0 (got -1)" in got[3][1]
    ev = SuffixAutomaton([1, 2, 1, 2], evidence=True)
    assert _bad_ints(lambda d: ev.evidence_chain(2, depth=d))[0][1].startswith("depth = True")
    assert _bad_ints(lambda d: ev.evidence_chain(2, depth=d)) == \
        _bad_ints(lambda d: ref.evidence_chain(2, 0, 0, d))


@pytest.mark.parametrize("make", [lambda r: SuffixAutomaton(reserve=r), lambda r: SuffixAutomaton([1, 2], reserve=r),
                                  lambda r: CorpusAutomaton([[1, 2]], reserve=r)])
def test_reserve_outside_its_range_is_refused_naming_it(make):
    for bad, err in ((-1, ValueError), (2**31, ValueError), (True, ValueError), (2.0, TypeError), ("8", TypeError)):
        with pytest.raises(err, match=r"reserve.*\[0, 2147483647\]"):
            make(bad)
    assert make(np.int64(64)) is not None and make(0) is not None
