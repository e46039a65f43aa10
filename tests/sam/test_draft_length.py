"""The draft-length policies (sam/draft_length.py) and the automaton evidence they read."""

import random

import numpy as np
import pytest

from samspec_bench.bench.engines.replay import replay_group, replay_response
from samspec_bench.metrics import total_counts
from samspec_bench.sam import SamDrafter, SuffixAutomaton, make_drafter
from samspec_bench.sam._samcore import AcceptanceStats, EvidenceBatch, SamCore
from samspec_bench.sam.draft_length import FIXED_LENGTH, EvidenceLength, TokenAcceptance, parse_length, shape_key
from samspec_bench.sam.history import HistoryStore
from samspec_bench.sam.python_automaton import COUNT_WALK, ReferenceSam


# ---------- the automaton's evidence: C against the Python reference ----------

@pytest.mark.parametrize("interleaved", [False, True])
def test_evidence_and_counts_equal_the_reference_on_random_strings(interleaved):
    rng = random.Random(7 + interleaved)
    for _ in range(150):
        c, r = SamCore(interleaved=interleaved, evidence=True), ReferenceSam(interleaved=interleaved)
        docs = []
        for _ in range(rng.randint(1, 4)):
            docs.append(c.new_doc())
            assert r.new_doc() == docs[-1]
        vocab = rng.choice([2, 3, 5, 20])
        for _ in range(rng.randint(1, 40)):
            d = rng.choice(docs) if interleaved else docs[-1]
            toks = [rng.randrange(vocab) for _ in range(rng.randint(1, 6))]
            c.extend(toks, d)
            r.extend(toks, d)
            for choice in (0, 1, 2):
                k = rng.randint(0, 9)
                assert c.evidence(k, d, choice) == r.evidence(k, d, choice)
                depth = rng.randint(1, 6)
                assert c.evidence_chain(k, d, choice, depth) == r.evidence_chain(k, d, choice, depth)
            assert c.match_draft(5, d) == r.evidence(5, d, 0)[:2]   # earliest = min_endpos's draft
        assert [c.count(i) for i in range(c.num_states)] == r.cnt


def test_counts_are_occurrence_counts_and_the_recent_draft_continues_the_latest_occurrence():
    text = [1, 2, 3, 9, 1, 2, 4, 8, 1, 2, 3, 7, 1, 2]
    sa = SuffixAutomaton(text, evidence=True)
    L, draft, counts = sa.evidence(3)                   # match "1 2", earliest occurrence at 0
    assert (L, draft) == (2, [3, 9, 1]) and counts[0] == 4 and counts[1] == 2    # "1 2" x4, "1 2 3" x2
    L, draft, counts = sa.evidence(2, 2)                # recent: the occurrence at 8
    assert draft == [3, 7] and counts[:2] == [4, 2]
    _, draft, counts, continued = sa.evidence(1, 1)     # frequent: 3 follows "1 2" twice, 4 once
    assert draft == [3] and continued == [3]            # "1 2" continued 3 times (not at the end)
    chain = SuffixAutomaton([5, 2, 6] + text, evidence=True).evidence_chain(1, 1, 3)
    assert [c[0] for c in chain] == [2, 1]              # "1 2", then the shorter match "2" up its suffix link
    assert chain[0][2][0] == 4 and chain[1][2][0] == 5 and chain[1][3] == [4]   # "2" x5, continued 4 times
    with pytest.raises(ValueError, match="evidence=True"):
        SuffixAutomaton(text).evidence(3)               # the plain automaton keeps no evidence


class _FallCountingReference(ReferenceSam):
    """The reference, counting the marks that lower a state's latest occurrence (an
    interleaved document marking an older end than another did): the case the compiled
    core's kept most frequent child must find again by a scan."""

    falls = 0

    def _mark_recent(self, q, pos):
        t = q
        for _ in range(COUNT_WALK):
            if t <= 0:
                break
            self.falls += pos < self.rpos[t]
            t = self.link[t]
        super()._mark_recent(q, pos)


def _frequent_by_scan(r, q):
    """The most frequent child and the occurrences followed by a token, from all of q's edges
    (the definition the compiled core keeps up to date instead of scanning)."""
    kids = list(r.next[q].values())
    return (r._frequent_child(q), sum(r.cnt[t] for t in kids)) if kids else (-1, 0)


def _chain_length(r, q):
    n = 0
    while q > 0:
        n, q = n + 1, r.link[q]
    return n


def _assert_frequent_kept(c, r):
    for q in range(c.num_states):
        assert c.frequent(q) == _frequent_by_scan(r, q), q


@pytest.mark.parametrize("interleaved", [False, True])
def test_the_kept_most_frequent_child_equals_a_scan_of_every_state_on_random_strings(interleaved):
    """best and continued are kept per state as tokens arrive (no edge scan per draft): after
    every extend they equal a scan of all edges, for every state, on short random strings and
    on long near-periodic ones (suffix-link chains longer than COUNT_WALK: truncated counts)."""
    rng = random.Random(3 + interleaved)
    falls = longest_chain = 0
    for trial in range(80):
        c, r = SamCore(interleaved=interleaved, evidence=True), _FallCountingReference(interleaved=interleaved)
        docs = [c.new_doc() for _ in range(rng.randint(1, 4))]
        for _ in docs:
            r.new_doc()
        vocab = rng.choice([1, 2, 3, 5, 20])
        period = [rng.randrange(vocab) for _ in range(rng.randint(1, 5))]
        long_run = trial % 2 == 1
        for step in range(rng.randint(20, 60)):
            d = rng.choice(docs) if interleaved else docs[-1]
            n = rng.randint(1, 12 if long_run else 6)
            toks = [period[i % len(period)] if long_run and rng.random() < 0.9 else rng.randrange(vocab)
                    for i in range(n)]
            c.extend(toks, d)
            r.extend(toks, d)
            if not long_run or step % 8 == 0:
                _assert_frequent_kept(c, r)
            longest_chain = max(longest_chain, _chain_length(r, r.doc_last[d]))
        _assert_frequent_kept(c, r)
        falls += r.falls
    assert longest_chain > 2 * COUNT_WALK    # chains longer than the counting walk were indexed
    assert (falls > 0) == interleaved        # interleaved documents lower a latest occurrence: found again


@pytest.mark.parametrize("group", [False, True])
def test_the_kept_most_frequent_child_equals_a_scan_of_every_state_on_a_shared_trace(group, qwen3_tokenizer_dir, traces_dir):
    """The same on real tokens: one request's own text, and a group's documents growing at
    once by accepted runs of 1 to 4 tokens (as a decode loop extends them)."""
    items = _trace_prefix(qwen3_tokenizer_dir, traces_dir, 8 if group else 2)
    c, r = SamCore(interleaved=group, evidence=True), _FallCountingReference(interleaved=group)
    texts = [np.concatenate([it.prompt_ids, it.response_ids[:600]]).tolist() for it in items]
    if not group:
        texts = [sum(texts, [])]
    docs = [c.new_doc() for _ in texts]
    for _ in docs:
        r.new_doc()
    at, step, rng = [0] * len(texts), 0, random.Random(5)
    while any(a < len(t) for a, t in zip(at, texts)):
        for d, t in zip(docs, texts):
            if at[d] < len(t):
                n = rng.randint(1, 4) if at[d] else len(items[d].prompt_ids) if group else 40
                c.extend(t[at[d]: at[d] + n], d)
                r.extend(t[at[d]: at[d] + n], d)
                at[d] += n
        step += 1
        if step % 100 == 0:
            _assert_frequent_kept(c, r)
    _assert_frequent_kept(c, r)
    assert [c.count(i) for i in range(c.num_states)] == r.cnt
    assert (r.falls > 0) == group


# ---------- the policy ----------

def test_specs_parse_and_bad_specs_name_the_fix():
    assert parse_length("fixed") is FIXED_LENGTH and parse_length(None) == EvidenceLength()
    pol = parse_length("evidence:cost=0.2,choice=frequent")
    assert pol.cost == 0.2 and pol.choice == "frequent" and parse_length(pol.spec()) == pol
    for bad in ("fixd", "evidence:cost", "evidence:cost=x", "evidence:cost=1.5", "evidence:choice=best",
                "evidence:depth=0", "evidence:depth=1.5", "evidence:tokens=-1", "evidence:tokens=x", "evidence:shape=-2", "evidence:pairs=-1",
                # cap=inf raised OverflowError at the Python path's first draft (the C one drafted); nan, -1 were off
                "evidence:cap=inf", "evidence:cap=nan", "evidence:cap=-1"):
        with pytest.raises(ValueError, match="evidence|fixed"):
            parse_length(bad)


def _cand(length, counts, continued=None):
    """One candidate as evidence_chain returns it (draft tokens 100, 101, ...)."""
    c = (length, [100 + i for i in range(len(counts) - 1)], counts)
    return c if continued is None else c + (continued,)


def _n(pol, k, *cands, state=None, at_end=True):
    return len(pol.choose(state, k, list(cands), at_end)[0])


def test_no_match_no_draft_and_never_more_than_k():
    pol = EvidenceLength(cost=0.0)
    assert pol.choose(None, 8, []) == ([], 0.0)
    assert _n(pol, 8, _cand(0, [3, 3, 3])) == 0
    for k in range(1, 9):
        assert _n(pol, k, _cand(50, [90] * 20)) == k          # overwhelming evidence: all k
        assert _n(pol, k, _cand(50, [90, 89])) == min(k, 1)   # only the tokens the source has


def test_length_is_monotone_in_the_evidence():
    pol = EvidenceLength(cost=0.5, tau=1e9)   # no calibration: the estimate alone (its own cost:
    k = 8                                      # the test does not follow the default's)
    by_match = [_n(pol, k, _cand(L, [3] + [2] * k)) for L in range(1, 40)]
    assert by_match == sorted(by_match) and by_match[0] < by_match[-1]
    # the same match, its continuation seen more often (of as many occurrences): longer
    by_cont = [_n(pol, k, _cand(3, [11] + [c] * k)) for c in range(1, 11)]
    assert by_cont == sorted(by_cont) and by_cont[0] < by_cont[-1]
    # a higher verify cost: shorter
    by_cost = [_n(EvidenceLength(cost=c, tau=1e9), k, _cand(6, [3] * (k + 1))) for c in (0.05, 0.2, 0.4, 0.6, 0.8)]
    assert by_cost == sorted(by_cost, reverse=True) and by_cost[0] > by_cost[-1]
    # a request whose drafts were rejected drafts less than one whose drafts were accepted
    bad, good = pol.new_request(), pol.new_request()
    pol = EvidenceLength()
    for _ in range(40):
        pol.observe(bad, 2.0, 0)
        pol.observe(good, 2.0, 4)
    assert _n(pol, k, _cand(4, [2] * 9), state=bad) < _n(pol, k, _cand(4, [2] * 9), state=good)


def test_occurrences_without_continuation_are_not_evidence():
    pol = EvidenceLength(tau=1e9)
    # the match seen 9 times, followed by the draft token 4 times: 4 of 8 earlier ones (at_end)
    # but 4 of 4 when the other 5 occurrences are other documents' current ends (continued)
    assert pol.choose(None, 4, [_cand(3, [9, 4, 4, 4, 4])])[1] < pol.choose(None, 4, [_cand(3, [9, 4, 4, 4, 4], [4, 4, 4, 4])])[1]


def test_the_best_candidate_up_the_suffix_links_is_drafted():
    pol = EvidenceLength(tau=1e9)
    long_ = (5, [7, 7, 7], [2, 1, 1, 1])          # the longest match, seen once before
    short = (2, [8, 9, 9], [30, 28, 27, 26])      # a shorter one, continued alike 28 of 29 times
    draft, expected = pol.choose(None, 3, [long_, short])
    assert draft == [8, 9, 9] and 2.0 < expected <= 3.0
    assert pol.choose(None, 3, [long_])[0] == [7, 7, 7][: len(pol.choose(None, 3, [long_])[0])]


@pytest.mark.parametrize("record", [TokenAcceptance, AcceptanceStats])
def test_token_acceptance_counts_the_tokens_the_verifier_reached(record):
    stats = record()
    stats.update([5, 6, 7, 8], [0.5, 0.4, 0.3, 0.2], 1)   # 5 accepted, 6 rejected, 7 and 8 never reached
    assert stats.stats == {5: [0.5, 1.0], 6: [0.4, 0.0]}
    stats.update([6, 6], [0.4, 0.4], 2)                    # both accepted
    assert stats.stats[6] == pytest.approx([1.2, 2.0]) and len(stats) == 2
    assert stats.factor(9, 4.0) == 1.0                     # unseen: the estimate unchanged
    assert stats.factor(5, 1.0) == pytest.approx(2.0 / 1.5) and stats.factor(6, 1e-12) == pytest.approx(2.0 / 1.2)


@pytest.mark.parametrize("record", [TokenAcceptance, AcceptanceStats])
def test_each_table_is_judged_against_the_others_factors(record):
    stats = record()
    key = shape_key(5, 3, 3, 2)
    assert key == (3, 2, 1, 2) and shape_key(1, 40, 2, 9) == (1, 5, 0, 3)
    # token 7 drafted with count estimate 0.5, token factor 0.8, shape factor 0.5, and accepted
    pairs = record is TokenAcceptance   # the compiled record keeps no pairs (the policy then runs in Python)
    stats.update([7], [(0.5, 0.8, 0.5, key)], 1, pairs=pairs)
    assert stats.stats[7] == [0.25, 1.0]                                                   # 0.5 x shape's 0.5
    assert stats.shape_stats == {key: [0.4, 1.0]}                                          # 0.5 x token's 0.8
    assert stats.shape_factor(key, 1.0) == pytest.approx(2.0 / 1.4) and stats.shape_factor(key, 0.0) == 1.0
    if pairs:
        assert stats.pair_stats[(-1, 7)] == [0.25, 1.0]
        assert stats.factor(7, 1.0, -1, 1.0) == pytest.approx((1.0 + 2.0 / 1.25) / 1.25)  # pair centred on token
    else:
        assert stats.pair_stats == {}
        with pytest.raises(ValueError, match="no pair table"):
            stats.factor(7, 1.0, -1, 1.0)


@pytest.mark.parametrize("record", [TokenAcceptance, AcceptanceStats])
def test_pooled_shape_prior_is_centred_on_every_shape_judgement(record):
    stats = record()
    a, b, unseen = shape_key(5, 3, 3, 1), shape_key(40, 1, 1, 2), shape_key(2, 9, 4, 3)
    stats.update([7, 8], [(0.5, 1.0, 1.0, a), (0.5, 1.0, 1.0, a)], 1)   # a: one accepted, one rejected
    stats.update([9], [(0.6, 0.5, 1.0, b)], 0)                           # b: 0.3 predicted, rejected
    assert stats.shape_total == pytest.approx([1.3, 1.0])
    g = (1.0 + 2.0) / (1.3 + 2.0)                                        # the pooled ratio, prior weight 2
    assert stats.shape_factor(unseen, 2.0, pooled=True) == pytest.approx(g)
    assert stats.shape_factor(b, 2.0, pooled=True) == pytest.approx((0.0 + 2.0 * g) / (0.3 + 2.0))
    assert stats.shape_factor(unseen, 2.0) == 1.0 and stats.shape_factor(b, 2.0) == pytest.approx(2.0 / 2.3)
    assert stats.shape_factor(unseen, 0.0, pooled=True) == 1.0           # shape=0: no correction at all


def test_pooled_prior_carries_what_other_shapes_learnt_to_a_new_shape():
    """Drafts of one shape always rejected: with pooled=1 a candidate of another shape, never
    judged, is drafted shorter too (its prior is the record's overall ratio); with pooled=0 it
    is drafted as the raw estimate says."""
    seen_cand, new_cand = _cand(2, [5, 4, 4, 4, 4]), _cand(30, [2, 2, 2, 2, 2])
    n = {}
    for pooled in (0, 1):
        pol = EvidenceLength(cost=0.3, tau=1e9, tokens=0, shape=4, pooled=pooled)
        stats = TokenAcceptance()
        before = len(pol.choose(pol.new_request(), 4, [new_cand], True, stats)[0])
        for _ in range(50):
            state = pol.new_request()
            draft, _ = pol.choose(state, 4, [seen_cand], True, stats)
            if draft:
                stats.update(draft, state.pending_q, 0)
        assert not set(k[0] for k in stats.shape_stats) & {shape_key(30, 2, 2, 1)[0]}   # new_cand's shapes unseen
        n[pooled] = (before, len(pol.choose(pol.new_request(), 4, [new_cand], True, stats)[0]))
    assert n[0][0] == n[0][1] == n[1][0] > n[1][1]
    with pytest.raises(ValueError, match="pooled=2"):
        parse_length("evidence:pooled=2")


@pytest.mark.parametrize("record", [TokenAcceptance, AcceptanceStats])
def test_a_pooled_prior_that_alone_silences_the_drafter_fades(record):
    """An unlucky start (every early draft rejected) drives the pooled ratio below the cost:
    with no draft nothing is judged, so without fading the drafter would stay silent for good.
    Each silenced draft (a first token that passes with the shape prior centred on no change)
    fades the pooled sums by the policy's decay until a draft passes again; a silence the
    pooled prior did not cause fades nothing."""
    pol = EvidenceLength(cost=0.4, tau=1e9, tokens=0, shape=4, decay=0.9)
    stats = record()
    for _ in range(10):   # first tokens rejected: 10 predicted, nothing accepted, pooled ratio 4 / 14
        stats.update([7, 8, 9], [(1.0, 1.0, 1.0, shape_key(5, 3, 3, j)) for j in (1, 2, 3)], 0)
    cand = _cand(30, [2, 2, 2, 2, 2])   # a shape never judged, a confident raw estimate
    silent = 0
    while not pol.choose(pol.new_request(), 4, [cand], True, stats)[0]:
        silent += 1
        assert silent < 50
    q1 = 2 / (2 + 1 / 30)                        # the first token's raw estimate
    g = [4.0 / (10.0 * 0.9 ** n + 4.0) for n in (silent - 1, silent)]   # the pooled ratio before / after
    assert silent > 0 and stats.shape_total[0] == pytest.approx(10.0 * 0.9 ** silent)
    assert q1 * g[0] < 0.4 <= q1 * g[1]          # silent exactly while the pooled prior blocked it
    # a candidate the unpooled prior would not draft either: its silence fades nothing
    before = list(stats.shape_total)
    assert pol.choose(pol.new_request(), 4, [_cand(1, [9, 1, 1])], True, stats)[0] == []
    assert stats.shape_total == before


def test_shape_correction_learns_where_the_count_estimate_is_overconfident():
    pol = EvidenceLength(cost=0.3, tau=1e9, tokens=0, shape=4)
    cand = _cand(2, [5, 4, 4, 4, 4])                       # 4 of 5 continued alike: q ~ 0.7 per token
    stats = TokenAcceptance()
    first = len(pol.choose(pol.new_request(), 4, [cand], True, stats)[0])
    for _ in range(50):                                    # drafts of this shape are always rejected
        state = pol.new_request()
        draft, _ = pol.choose(state, 4, [cand], True, stats)
        if not draft:
            break
        stats.update(draft, state.pending_q, 0)
    assert len(pol.choose(pol.new_request(), 4, [cand], True, stats)[0]) < first


def test_per_token_correction_shortens_drafts_of_tokens_that_were_rejected():
    pol = EvidenceLength(cost=0.3, tau=1e9, tokens=2, shape=0)
    off = EvidenceLength(cost=0.3, tau=1e9, tokens=0, shape=0)
    cand = _cand(4, [3, 2, 2, 2, 2])                       # drafts 100, 101, 102, 103
    hard, easy = TokenAcceptance(), TokenAcceptance()
    for _ in range(30):
        hard.update([101], [0.6], 0)                       # 101 drafted 30 times, never accepted
        easy.update([101], [0.6], 1)
    n = lambda p, st: len(p.choose(p.new_request(), 4, [cand], True, st)[0])  # noqa: E731
    assert n(pol, hard) < n(pol, TokenAcceptance()) == n(off, hard) <= n(pol, easy)
    state = pol.new_request()
    draft, _ = pol.choose(state, 4, [cand], True, easy)
    assert len(state.pending_q) == len(draft)              # the estimates the record is judged against


def test_drafter_records_token_acceptance_only_with_the_correction_and_may_share_it():
    rng = np.random.default_rng(3)
    prompt, resp = rng.integers(0, 6, 80), rng.integers(0, 6, 200)
    shared = TokenAcceptance()
    for length, expect in (("evidence:tokens=0,shape=0", 0), ("evidence:tokens=4", 1)):
        d = SamDrafter(length=length, token_stats=shared)
        replay_response(d, prompt, resp, 4)
        assert (len(shared) > 0) == bool(expect)
    before = {t: list(v) for t, v in shared.stats.items()}
    replay_response(SamDrafter(length="evidence:tokens=4", token_stats=shared), prompt, resp, 4)
    assert sum(v[0] for v in shared.stats.values()) > sum(v[0] for v in before.values())  # it outlives a drafter


def test_cost_from_a_profile_is_read_per_draft():
    seen = []
    pol = EvidenceLength(cost=lambda k: seen.append(k) or 0.9)
    assert _n(pol, 5, _cand(3, [4] + [1] * 5)) == 0 and seen == [5]


def test_fixed_baseline_is_the_old_min_endpos_drafter():
    rng = np.random.default_rng(2)
    prompt, resp = rng.integers(0, 12, 60), rng.integers(0, 12, 300)
    for d in (SamDrafter(length="fixed"), make_drafter("sam-fixed"), make_drafter("sam", length="fixed")):
        d.start(1, prompt)
        sa = SuffixAutomaton(prompt)
        for t in resp:
            assert d.propose(1, 4) == sa.draft(4)
            d.extend(1, [int(t)])
            sa.extend([int(t)])


def test_evidence_policy_drafts_a_prefix_of_its_source_and_learns_from_what_it_sees():
    rng = np.random.default_rng(4)
    prompt, resp = rng.integers(0, 6, 40), rng.integers(0, 6, 200)
    d = SamDrafter(length="evidence:choice=earliest,depth=1")   # the longest match only
    d.start("r", prompt)
    sa = SuffixAutomaton(prompt)
    for t in resp:
        draft = d.propose("r", 5)
        assert draft == sa.draft(5)[: len(draft)]   # earliest choice: a prefix of min_endpos's draft
        d.extend("r", [int(t)])
        sa.extend([int(t)])
    assert d._ev["r"].predicted > 0                 # drafts were judged from the emitted tokens
    d.stop("r")
    assert d.active == 0


def _slice(items, n_groups):
    groups = []
    for it in items:
        if not groups or groups[-1][0] != it.group:
            groups.append((it.group, []))
        groups[-1][1].append(("x", it.prompt_ids, it.response_ids))
    return [m for _, m in groups[:n_groups]]


def test_evidence_policy_pareto_dominates_the_fixed_policy_on_a_shared_trace(qwen3_tokenizer_dir, traces_dir):
    """Same tokens, same run: the evidence policy at k=8 against the fixed policy at every
    k' <= 8. The fixed k' that drafts at least as many tokens per step emits fewer tokens per
    step: the evidence point lies above the fixed policy's curve (own and group sources)."""
    from samspec_bench.data import load_tokenizer, read_traces, tokenize_traces

    items = tokenize_traces(read_traces(traces_dir / "qwen25math_math_100x8.jsonl"),
                            load_tokenizer(qwen3_tokenizer_dir))
    groups = _slice(items, 3)

    def counts(spec, k):
        recs = []
        for members in groups:
            recs += [replay_response(SamDrafter(length=spec), p, r, k) for _, p, r in members]
            recs += replay_group(SamDrafter(group_sharing=True, length=spec), members, k)
        return total_counts(recs)

    ev = counts("evidence", 8)
    fixed = [counts("fixed", k) for k in range(1, 9)]
    assert fixed[-1].drafted_per_step > ev.drafted_per_step      # the comparison is not empty
    costlier = next(f for f in fixed if f.drafted_per_step >= ev.drafted_per_step)
    assert ev.tokens_per_step > costlier.tokens_per_step
    assert ev.verify_tokens_per_token < costlier.verify_tokens_per_token


# ---------- the compiled path (EvidenceBatch) against choose() in Python ----------

C_SPECS = ["evidence", "evidence:cost=0.1,novelty=2,depth=3,cap=1.5,tau=4,decay=0.9,choice=earliest",
           "evidence:choice=recent,cost=0.05,depth=64,novelty=0.5", "evidence:cap=0.5,cost=0.5,depth=1",
           "evidence:cost=0,tau=1e9", "evidence:tokens=0,shape=0", "evidence:tokens=0,shape=2,cost=0.1",
           "evidence:tokens=1,shape=0,choice=recent", "evidence:pooled=0,shape=2,cost=0.1",
           "evidence:cost=0.45,shape=2,tokens=0,decay=0.95"]


@pytest.mark.parametrize("spec", C_SPECS)
@pytest.mark.parametrize("interleaved", [False, True])
def test_compiled_choice_equals_the_python_policy_on_random_strings(spec, interleaved):
    """Same candidates, same state, same corrections' record: the same draft, the same expected
    value and the same per-token estimates, bit for bit (own text, and a group's interleaved
    documents); the records, judged alike, stay equal."""
    pol = parse_length(spec)
    rng = random.Random(hash((spec, interleaved)) % 1000)
    compared = drafted = 0
    py_stats, c_stats = TokenAcceptance(), AcceptanceStats()   # shared by every automaton below
    for _ in range(60):
        core = SamCore(interleaved=interleaved, evidence=True)
        batch = EvidenceBatch(**pol.c_params(), l_threshold=1, stats=c_stats)
        docs = [core.new_doc() for _ in range(rng.randint(1, 4) if interleaved else 1)]
        reqs = {d: batch.add(d, core, d) for d in docs}
        vocab = rng.choice([2, 3, 5, 20])
        for _ in range(rng.randint(1, 40)):
            d = rng.choice(docs)
            core.extend([rng.randrange(vocab) for _ in range(rng.randint(1, 6))], d)
            state = pol.new_request()
            state.predicted, state.accepted = rng.uniform(0, 30), rng.uniform(0, 30)
            reqs[d].predicted, reqs[d].accepted = state.predicted, state.accepted
            k = rng.randint(1, 9)
            want = pol.choose(state, k, core.evidence_chain(k, d, pol.choice_code, pol.depth), True, py_stats)
            assert batch.choose(d, k) == want
            compared += 1
            drafted += bool(want[0])
            if want[0]:   # the estimates the record is judged against, then a judgement of both
                assert batch.propose(d, k) == want[0]
                assert reqs[d].pending_q == (state.pending_q if pol.tokens or pol.shape else None)
                a = len(want[0]) if rng.random() < 0.6 else rng.randint(0, len(want[0]))   # keeps drafts coming
                py_stats.update(want[0], state.pending_q, a)
                c_stats.update(want[0], state.pending_q, a)
    assert drafted > compared // 10   # the comparison is not only of empty drafts
    assert c_stats.stats == py_stats.stats and c_stats.shape_stats == py_stats.shape_stats
    assert c_stats.shape_total == py_stats.shape_total
    assert len(c_stats) == len(py_stats) > 0 and (len(c_stats.shape_stats) > 0) == (pol.shape > 0)


def _trace_prefix(qwen3_tokenizer_dir, traces_dir, n_items):
    from samspec_bench.data import load_tokenizer, read_traces, tokenize_traces

    return tokenize_traces(read_traces(traces_dir / "qwen25math_math_100x8.jsonl"),
                           load_tokenizer(qwen3_tokenizer_dir))[:n_items]


@pytest.mark.parametrize("group_sharing", [False, True])
def test_compiled_drafter_equals_the_python_drafter_on_a_shared_trace(group_sharing, qwen3_tokenizer_dir, traces_dir):
    """SamDrafter on its compiled path and on the Python one, the same decode loop over a
    shared trace prefix (the group's members interleaved step by step): the same drafts and
    the same record of predicted and accepted tokens, for several settings (a profile cost,
    an l_threshold included)."""
    items = _trace_prefix(qwen3_tokenizer_dir, traces_dir, 10)
    settings = [dict(length=s) for s in C_SPECS[:3] + C_SPECS[5:]] + [
        dict(length=EvidenceLength(cost=lambda k: 0.1 + 0.02 * k)), dict(length="evidence", l_threshold=3)]
    for opts in settings:
        c = SamDrafter(group_sharing=group_sharing, **opts)
        py = SamDrafter(group_sharing=group_sharing, compiled=False, **opts)
        assert (c.policy_path, py.policy_path) == ("c", "python")
        for i, it in enumerate(items):
            c.start(i, it.prompt_ids, group=it.group)
            py.start(i, it.prompt_ids, group=it.group)
        drafted = 0
        for step in range(150):
            for i, it in enumerate(items):
                if step >= it.response_ids.size:
                    continue
                k = 3 + (step + i) % 6
                draft = c.propose(i, k)
                assert draft == py.propose(i, k)
                drafted += len(draft)
                toks = it.response_ids[step: step + 1]
                c.extend(i, toks)
                py.extend(i, (int(t) for t in toks) if step % 2 else toks.tolist())   # any iterable
                assert (c._ev[i].predicted, c._ev[i].accepted) == (py._ev[i].predicted, py._ev[i].accepted)
        assert drafted > 0 and c._ev[0].predicted > 0
        assert type(c.token_stats) is AcceptanceStats and type(py.token_stats) is TokenAcceptance
        assert c.token_stats.stats == py.token_stats.stats and c.token_stats.shape_stats == py.token_stats.shape_stats
        assert c.token_stats.shape_total == py.token_stats.shape_total
        assert len(c.token_stats) == len(py.token_stats) and (len(py.token_stats) > 0) == py._per_token
        for i in range(len(items)):
            c.stop(i)
        assert c.active == 0 and not c._ev


def test_drafters_sharing_a_compiled_record_equal_drafters_sharing_a_python_one(qwen3_tokenizer_dir, traces_dir):
    """Two drafters on the compiled path sharing one AcceptanceStats, two on the Python path
    sharing one TokenAcceptance, requests dealt alternately to them over a shared trace prefix:
    the same drafts and records; reset_statistics starts a new record of the same kind."""
    items = _trace_prefix(qwen3_tokenizer_dir, traces_dir, 8)
    for spec in ("evidence", "evidence:tokens=4,shape=0,cost=0.15"):
        c0 = SamDrafter(length=spec)
        cs = [c0, SamDrafter(length=spec, token_stats=c0.token_stats)]
        p0 = SamDrafter(length=spec, compiled=False)
        ps = [p0, SamDrafter(length=spec, compiled=False, token_stats=p0.token_stats)]
        assert [d.policy_path for d in cs + ps] == ["c", "c", "python", "python"]
        for i, it in enumerate(items):
            cs[i % 2].start(i, it.prompt_ids)
            ps[i % 2].start(i, it.prompt_ids)
        for step in range(120):
            for i, it in enumerate(items):
                if step < it.response_ids.size:
                    assert cs[i % 2].propose(i, 8) == ps[i % 2].propose(i, 8)
                    cs[i % 2].extend(i, it.response_ids[step: step + 1])
                    ps[i % 2].extend(i, it.response_ids[step: step + 1])
        shared = c0.token_stats
        assert cs[1].token_stats is shared and shared.stats == p0.token_stats.stats != {}
        assert shared.shape_stats == p0.token_stats.shape_stats
        before = shared.stats
        cs[1].reset_statistics()
        assert type(cs[1].token_stats) is AcceptanceStats and len(cs[1].token_stats) == 0
        assert cs[1]._c_batch.stats is cs[1].token_stats and shared.stats == before   # the other keeps its record


def test_a_policy_the_compiled_path_does_not_implement_stays_in_python():
    """A parameter added later (a field EvidenceBatch does not know), a subclass, or a static
    source: the drafter chooses in Python, and says so."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class WithNewParameter(EvidenceLength):
        boost: float = 1.0

    assert EvidenceLength().c_params() is not None and WithNewParameter().c_params() is None
    assert SamDrafter(length=WithNewParameter()).policy_path == "python"
    assert SamDrafter(length="evidence").policy_path == "c"
    assert SamDrafter(length="evidence", history=HistoryStore()).policy_path == "python"
    # the default (with its corrections) runs in C; pairs are kept only by the Python record
    assert make_drafter("sam").policy_path == "c" and type(make_drafter("sam").token_stats) is AcceptanceStats
    assert parse_length("evidence:pairs=8").c_params() is None
    assert SamDrafter(length="evidence:pairs=8").policy_path == "python"
    assert SamDrafter(token_stats=TokenAcceptance()).policy_path == "python"   # a Python record stays Python
    with pytest.raises(ValueError, match="no pairs"):
        SamDrafter(length="evidence:pairs=8", token_stats=AcceptanceStats())
    d, ref = SamDrafter(length=WithNewParameter()), SamDrafter(compiled=False)
    for x in (d, ref):
        x.start(0, [1, 2, 3, 1, 2, 3, 1, 2])
    assert d.propose(0, 4) == ref.propose(0, 4) != []
    assert d._ev[0].pending is not None


def test_compiled_path_rejects_bad_input_as_the_python_one_does():
    for d in (SamDrafter(), SamDrafter(compiled=False)):
        d.start("new", [7])
        assert d.propose("new", 0) == []     # nothing to draft from: no draft, whatever k
        d.start(0, [1, 2, 3, 1, 2])
        assert d.propose(0, 0) == []   # k = 0 drafts nothing with a match too, as sam-fixed and ngram do
        assert d.propose(0, 2) != []
        with pytest.raises(ValueError, match="k = True: must be an integer >= 0, not a bool"):
            d.propose(0, True)
        with pytest.raises(TypeError):
            d.propose(0, 2.0)
        with pytest.raises(ValueError, match="k must be >= 0"):
            d.propose(0, -1)
        with pytest.raises(ValueError, match="out of range"):
            d.extend(0, [-1])
        with pytest.raises(KeyError):
            d.propose("nobody", 3)
