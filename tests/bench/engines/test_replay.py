"""Trace replay against independent brute-force replays on real traces.

The oracles below are plain Python scans over the token lists (no automaton): the longest
suffix of the context that also ends at an earlier position, at its earliest such position,
then the tokens after it. The replay must give the same steps (positions, drafted, accepted,
emitted), exactly."""

from __future__ import annotations

import dataclasses
import signal

import numpy as np
import pytest

from samspec_bench.bench.draft_config import DraftConfig, build_drafter, unsupported_reason
import samspec_bench.bench.engines.replay as replay_mod
from samspec_bench.bench.engines.replay import (ReplayEngine, _budget_pool, build_corpus, check_group_prompts,
                                                history_entry, replay_group, replay_response, run_unit)
from samspec_bench.metrics import total_counts
from samspec_bench.suites.accept.turns import TurnItem
from samspec_bench.sam import CorpusAutomaton
from samspec_bench.sam.drafters import NgramDrafter, SamDrafter, arctic_available

FILES = {  # trace file -> lines taken from its start (whole groups)
    "qwen25math_math_100x8.jsonl": 24,  # three groups of 8 sampled responses
    "gpt3_gsm8k_4models.jsonl": 16,  # four groups of 4
    "tora70b_gsm8k.jsonl": 10,
    "tora_code34b_gsm8k.jsonl": 10,
}


# ---------- oracles ----------

def brute_draft(text: list[int], k: int) -> list[int]:
    """Up to k tokens after the earliest earlier occurrence of the longest suffix of `text`
    that also ends before its last position ([] when the last token never occurred before)."""
    n = len(text)
    best, best_e = 0, -1
    for e in range(n - 1):
        m = 0
        while m <= e and text[e - m] == text[n - 1 - m]:
            m += 1
        if m > best:  # strictly longer: ties keep the earliest end
            best, best_e = m, e
    return text[best_e + 1: best_e + 1 + k] if best else []


def brute_ngram(text: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """vLLM prompt lookup: the largest n in [min_n, max_n] whose last n tokens occur earlier,
    the earliest occurrence, the k tokens after it."""
    n = len(text)
    for size in range(min(max_n, n - 1), min_n - 1, -1):
        tail = text[n - size:]
        for start in range(0, n - size):
            if text[start: start + size] == tail:
                e = start + size - 1
                return text[e + 1: e + 1 + k]
    return []


def brute_replay(prompt: list[int], response: list[int], k: int, draft_fn=brute_draft) -> list[tuple]:
    """(position, drafted, accepted, emitted) per decode step. The prefill emits the first
    response token; each step accepts the matching prefix of the draft plus one bonus token,
    except at the end of the response (no token left for a bonus)."""
    text = list(prompt) + response[:1]
    pos, steps = 1, []
    while pos < len(response):
        draft = draft_fn(text, k)
        a = 0
        while a < len(draft) and pos + a < len(response) and draft[a] == response[pos + a]:
            a += 1
        e = a + 1 if pos + a < len(response) else a
        steps.append((pos, len(draft), a, e))
        text += response[pos: pos + e]
        pos += e
    return steps


class BruteGroup:
    """Documents growing in some interleaving; every token has a global position (the order
    tokens were appended). A member drafts after the longest suffix of its own document
    whose earliest occurrence (in global order, over all documents) is not its own last
    token and has a next token in its document: the library's min_endpos policy."""

    def __init__(self):
        self.docs: list[list[int]] = []
        self.occ: list[tuple[int, int]] = []  # global order -> (doc, index in doc)

    def add_doc(self, tokens) -> int:
        self.docs.append([])
        self.extend(len(self.docs) - 1, tokens)
        return len(self.docs) - 1

    def extend(self, d: int, tokens) -> None:
        for t in tokens:
            self.occ.append((d, len(self.docs[d])))
            self.docs[d].append(t)

    def draft(self, d: int, k: int) -> list[int]:
        own = self.docs[d]
        n = len(own)
        best_len, best, record = 0, None, 0
        for (od, j) in self.occ:  # ascending global position
            other = self.docs[od]
            m = 0
            while m <= j and m < n and other[j - m] == own[n - 1 - m]:
                m += 1
            if m > record:  # the earliest occurrence of every length in (record, m]
                record = m
                if (od, j) != (d, n - 1) and j + 1 < len(other):
                    best_len, best = m, (od, j)
        if not best_len:
            return []
        od, j = best
        return self.docs[od][j + 1: j + 1 + k]


def brute_group_replay(prompt: list[int], responses: list[list[int]], k: int, order: str) -> list[list[tuple]]:
    g = BruteGroup()
    docs = [g.add_doc(prompt) for _ in responses]
    steps: list[list[tuple]] = [[] for _ in responses]
    pos = [0] * len(responses)

    def verify(i: int, draft: list[int]) -> list[int]:
        r, p = responses[i], pos[i]
        a = 0
        while a < len(draft) and p + a < len(r) and draft[a] == r[p + a]:
            a += 1
        e = a + 1 if p + a < len(r) else a
        steps[i].append((p, len(draft), a, e))
        pos[i] = p + e
        return r[p: p + e]

    if order == "sequential":
        for i, r in enumerate(responses):
            g.extend(docs[i], r[:1])
            pos[i] = 1
            while pos[i] < len(r):
                g.extend(docs[i], verify(i, g.draft(docs[i], k)))
    else:
        for i, r in enumerate(responses):
            g.extend(docs[i], r[:1])
            pos[i] = 1
        while True:
            live = [i for i, r in enumerate(responses) if pos[i] < len(r)]
            if not live:
                break
            drafts = [g.draft(docs[i], k) for i in live]  # everyone drafts, then everyone emits
            for i, dr in zip(live, drafts):
                g.extend(docs[i], verify(i, dr))
    return steps


def as_tuples(rs) -> list[tuple]:
    return list(zip(rs.position.tolist(), rs.drafted.tolist(), rs.accepted.tolist(), rs.emitted.tolist()))


# ---------- real data ----------

@pytest.fixture(scope="module")
def items(traces_dir, qwen3_tokenizer_dir, tmp_path_factory):
    from samspec_bench.data import load_tokenizer, read_traces, tokenize_traces

    tmp = tmp_path_factory.mktemp("traces")
    paths = []
    for name, n in FILES.items():
        with (traces_dir / name).open(encoding="utf-8") as f:
            lines = [next(f) for _ in range(n)]
        p = tmp / name
        p.write_text("".join(lines), encoding="utf-8")
        paths.append(p)
    tok = load_tokenizer(qwen3_tokenizer_dir)
    return tokenize_traces(read_traces(paths), tok)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_default_sam_equals_brute_force_replay(items, k):
    drafter = SamDrafter(length="fixed")
    engine_out = {}
    cfg = DraftConfig("sam-fixed", k)
    for _, out in ReplayEngine(workers=1).run(items, [(cfg, range(len(items)))]):
        engine_out.update(out)
    totals = np.zeros(4, dtype=np.int64)
    for i, it in enumerate(items):
        expect = brute_replay(it.prompt_ids.tolist(), it.response_ids.tolist(), k)
        got = replay_response(drafter, it.prompt_ids, it.response_ids, k, req_id=i)
        assert as_tuples(got) == expect, f"{it.source.name}:{it.line}"
        assert as_tuples(engine_out[i]) == expect
        totals += [len(expect), sum(s[2] for s in expect), sum(1 for s in expect if s[1]), sum(s[3] for s in expect)]
    counts = total_counts(engine_out.values())
    assert (counts.steps, counts.accepted, counts.drafts, counts.tokens) == tuple(totals)
    assert counts.tokens == sum(int(it.response_ids.size) - 1 for it in items)
    assert drafter.active == 0  # every request was stopped


def test_ngram_equals_brute_force_replay(items):
    d = NgramDrafter(min_n=2, max_n=5)
    for i, it in enumerate(items[:12]):
        expect = brute_replay(it.prompt_ids.tolist(), it.response_ids.tolist(), 3,
                              lambda t, k: brute_ngram(t, 2, 5, k))
        assert as_tuples(replay_response(d, it.prompt_ids, it.response_ids, 3, req_id=i)) == expect


@pytest.mark.parametrize("order", ["concurrent", "sequential"])
def test_group_sharing_equals_brute_force_group_replay(items, order):
    group = [it for it in items if it.source.name.startswith("qwen")][:8]
    assert len({it.group for it in group}) == 1
    prompt = group[0].prompt_ids.tolist()
    responses = [it.response_ids[:160].tolist() for it in group]  # a prefix keeps the oracle quick
    expect = brute_group_replay(prompt, responses, 3, order)
    members = [(str(i), group[0].prompt_ids, np.asarray(r, dtype=np.int32)) for i, r in enumerate(responses)]
    got = replay_group(SamDrafter(group_sharing=True, length="fixed"), members, 3, order)
    for i in range(len(group)):
        assert as_tuples(got[i]) == expect[i], f"member {i}"
    # the oracle is not trivially own-only: sharing changed some drafts
    own = [brute_replay(prompt, r, 3) for r in responses]
    assert own != expect


def test_first_member_of_a_sequential_group_drafts_as_if_alone(items):
    group = [it for it in items if it.source.name.startswith("gpt3")][:4]
    cfg = DraftConfig("sam-fixed", 3, group=True, order="sequential")
    shared = dict(run_unit(cfg, group, list(range(len(group)))))
    alone = replay_response(SamDrafter(length="fixed"), group[0].prompt_ids, group[0].response_ids, 3)
    assert as_tuples(shared[0]) == as_tuples(alone)


@pytest.mark.parametrize("order", ["concurrent", "sequential"])
def test_a_one_response_group_equals_own_only(items, order):
    it = next(x for x in items if x.source.name.startswith("tora70b"))
    got = replay_group(SamDrafter(group_sharing=True, length="fixed"), [("a", it.prompt_ids, it.response_ids)], 3, order)[0]
    assert as_tuples(got) == brute_replay(it.prompt_ids.tolist(), it.response_ids.tolist(), 3)


def test_engine_results_do_not_depend_on_workers(items):
    jobs = [(DraftConfig("sam", 3), range(len(items))),
            (DraftConfig("sam", 5, group=True), range(len(items))),
            (DraftConfig("ngram", 3), range(len(items)))]

    def collect(engine):
        out: dict = {}
        for j, chunk in engine.run(items, jobs):
            for i, rs in chunk:
                assert (j, i) not in out
                out[(j, i)] = as_tuples(rs)
        return out

    # the same tasks (task_tokens): SAM's acceptance record is shared within a task
    serial = collect(ReplayEngine(workers=1, task_tokens=500))
    forked = collect(ReplayEngine(workers=2, min_parallel_tokens=0, task_tokens=500))
    assert len(serial) == 3 * len(items)
    assert forked == serial


def _report_sigint(task):
    """A stand-in for the pool's _worker: whether this worker ignores SIGINT."""
    return task[0], [(-1, signal.getsignal(signal.SIGINT) == signal.SIG_IGN)]


def test_forked_workers_leave_ctrl_c_to_the_parent(items, monkeypatch):
    """Ctrl-C reaches every process of the group: a worker interrupted while writing its result
    left a partial message in the pool's pipe, and the parent hung in Pool.terminate after
    'aborted'. Workers ignore SIGINT; the parent's KeyboardInterrupt ends the pool."""
    monkeypatch.setattr(replay_mod, "_worker", _report_sigint)
    # the parent handles Ctrl-C (a shell's background job starts with SIGINT ignored: set it here,
    # so that workers ignore it only by their own start)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        jobs = [(DraftConfig("sam", 3), range(len(items)))]
        got = list(ReplayEngine(workers=2, min_parallel_tokens=0, task_tokens=500).run(items, jobs))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler   # the parent's own handler is kept
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(got) > 1 and all(flag for _, chunk in got for _, flag in chunk)


def test_sam_acceptance_record_is_shared_within_a_task_only(items):
    """One response per task replays as a fresh drafter would; a task of every response
    carries the record from one response to the next, and that changes the drafts."""
    cfg = DraftConfig("sam", 5)

    def collect(engine):
        return {i: as_tuples(rs) for _, chunk in engine.run(items, [(cfg, range(len(items)))]) for i, rs in chunk}

    alone = collect(ReplayEngine(workers=1, task_tokens=1))
    fresh = {i: as_tuples(replay_response(build_drafter(cfg), it.prompt_ids, it.response_ids, 5, req_id=i))
             for i, it in enumerate(items)}
    assert alone == fresh
    together = collect(ReplayEngine(workers=1, task_tokens=10**9))
    assert together[0] == alone[0]          # the first response has no record before it
    assert together != alone


def test_step_records_are_consistent(items):
    for j, chunk in ReplayEngine(workers=1).run(items, [(DraftConfig("sam-fixed", 8, group=True), range(len(items)))]):
        for i, rs in chunk:
            n = items[i].response_ids.size
            assert rs.response_len == n and rs.prompt_len == items[i].prompt_ids.size
            assert int(rs.emitted.sum()) == n - 1
            assert rs.position.tolist() == (1 + np.concatenate([[0], np.cumsum(rs.emitted[:-1])])).tolist()
            assert np.all(rs.drafted <= 8) and np.all(rs.accepted <= rs.drafted)
            # a bonus token everywhere except possibly the last step
            assert np.all(rs.emitted[:-1] == rs.accepted[:-1] + 1)


# ---------- synthetic cases ----------

def test_end_of_response_rejects_draft_tokens_past_the_end():
    prompt, response = [5, 6, 7, 8], [5, 6, 7, 8]
    # after the prefill (5) the context is 5 6 7 8 5: "5" occurred at 0, draft 6 7 8 5
    rs = replay_response(SamDrafter(length="fixed"), prompt, response, 4)
    assert as_tuples(rs) == [(1, 4, 3, 3)]  # 3 accepted, the 4th is past the end, no bonus
    rs = replay_response(SamDrafter(length="fixed"), prompt, response, 2)
    assert as_tuples(rs) == [(1, 2, 2, 3)]  # 6 7 accepted, 8 is the bonus
    assert replay_response(SamDrafter(length="fixed"), prompt, [9], 3).steps == 0  # the prefill emits the only token


def test_empty_drafts_are_counted_as_steps():
    rs = replay_response(SamDrafter(length="fixed"), [1, 2], [3, 4, 5], 3)  # nothing ever repeats
    assert as_tuples(rs) == [(1, 0, 0, 1), (2, 0, 0, 1)]


def test_corpus_holding_the_response_drafts_it_exactly():
    prompt, response = [11, 12, 13], [1, 2, 3, 4, 1, 2, 5, 6, 7, 8, 9]
    corpus = CorpusAutomaton([[50, 51], prompt + response])
    rs = replay_response(SamDrafter(corpus=corpus, length="fixed"), prompt, response, 3)
    remaining = len(response) - rs.position
    assert np.all(rs.drafted == np.minimum(3, remaining))
    assert np.all(rs.accepted == rs.drafted)
    assert int(rs.emitted.sum()) == len(response) - 1


def test_build_corpus_indexes_prompt_and_response(items):
    corpus = build_corpus(items[:3])
    assert corpus.num_documents == 3
    assert corpus.num_tokens == sum(int(i.prompt_ids.size + i.response_ids.size) for i in items[:3])


def test_group_with_different_prompts_is_refused(items):
    a, b = items[0], next(x for x in items if x.source != items[0].source)
    cfg = DraftConfig("sam", 3, group=True)
    with pytest.raises(ValueError, match="different prompts"):
        run_unit(cfg, [a, b], [0, 1])


def test_model_turns_of_one_prompt_share_a_group_and_keep_history_whole(items):
    """Later model turns (suites/accept/turns.py) have prompts of their own: a group of them is
    checked on the response's prompt, and history keeps a response whole, once."""
    a, other = items[0], next(x for x in items if x.source != items[0].source)

    def turn(it, extra, history=None):
        return TurnItem(id="t", group="g#turn1", prompt_ids=np.concatenate([it.prompt_ids, extra]).astype(np.int32),
                        response_ids=it.response_ids[:3], source=it.source, line=it.line, prompt_format="ids",
                        step=None, sub="t1", turn=1, root_prompt_ids=it.prompt_ids, history_response=history)

    check_group_prompts([turn(a, [5, 6]), turn(a, [7])], [0, 1])      # the turns' prompts differ, the root not
    with pytest.raises(ValueError, match="different prompts"):
        check_group_prompts([turn(a, [5]), turn(other, [5])], [0, 1])
    assert history_entry(turn(a, [5])) is None                         # a later turn adds nothing
    first = dataclasses.replace(turn(a, []), prompt_ids=a.prompt_ids, history_response=np.arange(9))
    p, r = history_entry(first)
    assert np.array_equal(p, a.prompt_ids) and r.tolist() == list(range(9))
    p, r = history_entry(a)                                            # a plain response: itself
    assert np.array_equal(p, a.prompt_ids) and np.array_equal(r, a.response_ids)


def test_unsupported_combinations_are_explained():
    assert "own context only" in unsupported_reason(DraftConfig("ngram", 3, group=True))
    assert "corpus" in unsupported_reason(DraftConfig("ngram", 3, corpus=True))
    assert unsupported_reason(DraftConfig("sam", 3, group=True, corpus=True)) is None
    if not arctic_available():
        assert "arctic-inference" in unsupported_reason(DraftConfig("suffix", 3))
    with pytest.raises(ValueError):
        DraftConfig("sam", 0)
    with pytest.raises(ValueError):
        DraftConfig("nope", 3)


@pytest.mark.skipif(not arctic_available(), reason="arctic-inference is not installed")
def test_suffix_adapter_replays(items):
    cfg = DraftConfig("suffix", 3)
    out = dict(run_unit(cfg, items, list(range(4))))
    for i in range(4):
        assert int(out[i].emitted.sum()) == items[i].response_ids.size - 1
    grp = dict(run_unit(DraftConfig("suffix", 3, group=True), items, list(range(8))))
    assert len(grp) == 8


def test_one_task_per_rl_step(items):
    """task_tokens=None: every response of a step in one task, in file order: the same as a task
    larger than the step, and one record across the step (unlike a task per response)."""
    cfg = DraftConfig("sam", 5)

    def collect(engine):
        return {i: as_tuples(rs) for _, chunk in engine.run(items, [(cfg, range(len(items)))]) for i, rs in chunk}

    per_step = collect(ReplayEngine(workers=1, task_tokens=None))
    assert per_step == collect(ReplayEngine(workers=1, task_tokens=10**9))
    assert per_step != collect(ReplayEngine(workers=1, task_tokens=1))
    assert "one RL step" in ReplayEngine(task_tokens=None).describe()["sam_acceptance_record"]


def test_a_pooled_budget_is_found_in_the_length_spec_only():
    def cfg(drafter, length):
        return DraftConfig(drafter=drafter, k=3, options=(("length", length),) if length else ())
    assert _budget_pool(cfg("sam", "evidence:budget=1.5,pool=cell-7")) == "cell-7"
    assert _budget_pool(cfg("sam", "evidence:budget=1.5,pooled=0")) is None   # the shape prior, not a pool
    assert _budget_pool(cfg("sam", "fixed")) is None and _budget_pool(cfg("sam", None)) is None
