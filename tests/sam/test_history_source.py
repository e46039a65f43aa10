"""The `history` draft source: the store's bounds (per-prompt window, memory budget), SAM
drafting from earlier steps' responses to the same prompt, step-by-step replay (results
independent of the number of workers, the store fed with every response of a step), and the
documented split of single-step traces into an earlier and a current step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from samspec_bench.bench.draft_config import DraftConfig, unsupported_reason
from samspec_bench.bench.engines.replay import ReplayEngine, emulate_steps, group_units, has_steps, replay_response
from samspec_bench.data import TokenizedResponse
from samspec_bench.sam.drafters import SamDrafter
from samspec_bench.sam.history import HistoryStore, prompt_key


def response(**fields) -> TokenizedResponse:
    """A replay item: the trace reader's record, with the prompt given as token ids."""
    return TokenizedResponse(**{"prompt_format": "ids", **fields})


def arr(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int32)


def rec(steps) -> tuple[list, list, list]:
    return [int(x) for x in steps.drafted], [int(x) for x in steps.accepted], [int(x) for x in steps.emitted]


def test_window_keeps_the_newest_responses():
    store = HistoryStore(window=3)
    for i in range(5):
        store.add([1, 2, 3], [10 + i, 20 + i])
    assert [r.tolist() for r in store.responses([1, 2, 3])] == [[12, 22], [13, 23], [14, 24]]
    assert store.evicted_window == 2 and store.responses_held == 3 and store.added == 5
    assert store.nbytes == 4 * (3 + 3 * 2)   # the prompt once, three responses, int32
    assert store.responses([1, 2]) == [] and store.automaton([1, 2]) is None


def test_budget_drops_the_least_recently_added_prompts():
    store = HistoryStore(window=8, budget_bytes=4 * 40)
    for p in range(4):
        store.add([p, p], list(range(10)))      # 48 bytes a prompt entry
    assert store.nbytes <= store.budget_bytes
    assert store.evicted_prompts == 1 and store.evicted_budget == 1
    assert store.responses([0, 0]) == [] and len(store.responses([3, 3])) == 1
    store.add([1, 1], list(range(10)))          # 1 is refreshed: 2 is now the oldest
    store.add([5, 5], list(range(10)))
    assert store.responses([2, 2]) == [] and len(store.responses([1, 1])) == 2
    assert store.peak_bytes <= store.budget_bytes
    d = store.describe()
    assert d["evicted_by_budget"] == store.evicted_budget and d["stored_bytes"] == store.nbytes


def test_one_prompt_over_the_budget_loses_its_oldest_responses():
    store = HistoryStore(window=8, budget_bytes=4 * 25)
    for i in range(3):
        store.add([9, 9], [i] * 10)
    assert [r[0] for r in store.responses([9, 9])] == [1, 2] and store.nbytes == 4 * 22
    store.add([9, 9], list(range(30)))     # alone bigger than the budget: nothing of the prompt is kept
    assert len(store) == 0 and store.nbytes == 0 and store.peak_bytes <= store.budget_bytes


def test_a_conversation_finds_the_history_of_its_first_prompt():
    """A later turn's prompt is the conversation so far: the longest held prompt that begins it
    gives its history; a prompt that merely shares a start does not."""
    store = HistoryStore(window=4)
    store.add([1, 2], [7])
    store.add([1, 2, 3], [8, 9])
    assert [r.tolist() for r in store.responses([1, 2, 3, 50, 60])] == [[8, 9]]   # the longest wins
    assert [r.tolist() for r in store.responses([1, 2, 4])] == [[7]]
    assert store.responses([1, 3, 2]) == [] and store.responses([1]) == []
    assert store.automaton([1, 2, 3, 50]) is not None and store.prefix_hits == 1
    assert store.automaton([1, 2, 3]) is not None and store.prefix_hits == 1   # its own: no prefix hit
    store.add([], [5])                        # an empty prompt begins every prompt, and stands for none
    assert store.responses([9, 9]) == []


def test_an_evicted_prompt_no_longer_answers_for_longer_ones():
    store = HistoryStore(window=8, budget_bytes=4 * 14)
    store.add([1, 2], [5, 5, 5])              # 20 bytes
    store.add([3, 4], [6, 6, 6])
    store.add([5, 6], [7, 7, 7])              # over the budget: [1, 2] goes
    assert store.evicted_prompts == 1 and store.responses([1, 2, 3]) == []
    assert len(store.responses([5, 6, 1])) == 1


def test_bad_bounds():
    with pytest.raises(ValueError, match="window"):
        HistoryStore(window=0)
    with pytest.raises(ValueError, match="budget"):
        HistoryStore(budget_bytes=0)
    for budget in (0.5, float("inf")):   # 0.5 was int()ed to 0 (every response evicted), inf an OverflowError
        with pytest.raises(ValueError, match="budget"):
            HistoryStore(budget_bytes=budget)
    with pytest.raises(ValueError, match="cache_size"):   # was a KeyError at the first lookup
        HistoryStore(cache_size=-1)


def test_ids_int32_cannot_hold_are_refused_when_added_not_wrapped():
    """Responses and prompts were cast to int32 unchecked: 2^32+5 was stored as 5 (a wrong
    token drafted), a prompt with 2^32+1 answered for [1, ...], 3.7 became 3, and a negative
    id failed only later, when a request's start built the automaton."""
    store = HistoryStore()
    with pytest.raises(ValueError, match="history response: token id 4294967301 at index 0"):
        store.add([1, 2], np.array([2**32 + 5, 7]))
    with pytest.raises(ValueError, match="history prompt: token id 4294967297"):
        store.add(np.array([2**32 + 1, 2]), [3, 4])
    with pytest.raises(ValueError, match="-5 at index 0"):
        store.add([1, 2], [-5, 3])
    with pytest.raises(ValueError, match="3.7"):
        store.add([1, 2], [3.7, 4.2])
    assert len(store) == 0 and store.automaton([1, 2]) is None
    store.add(iter([1, 2]), (t for t in [3, 4]))    # any iterable of ints, as the automata take
    assert [r.tolist() for r in store.responses([1, 2])] == [[3, 4]]


def test_a_store_with_built_automata_pickles():
    import pickle

    store = HistoryStore()
    store.add([1, 2], [3, 4])
    assert store.automaton([1, 2]) is not None    # an automaton in the cache (not picklable)
    copy = pickle.loads(pickle.dumps(store))
    assert [r.tolist() for r in copy.responses([1, 2])] == [[3, 4]]
    assert copy.automaton([1, 2]).num_documents == 1 and copy.lookups == 2


def test_prompt_key_depends_on_the_ids_only():
    assert prompt_key([1, 2, 3]) == prompt_key(np.array([1, 2, 3], dtype=np.int64))
    assert prompt_key([1, 2, 3]) != prompt_key([1, 2, 4])


def test_sam_drafts_an_earlier_response_to_the_same_prompt():
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 5000, 40)
    response = rng.integers(0, 5000, 300)   # random tokens: the own context predicts nothing
    store = HistoryStore()
    plain = replay_response(SamDrafter(length="fixed"), prompt, response, 4)
    empty = replay_response(SamDrafter(history=store, length="fixed"), prompt, response, 4)
    assert rec(empty) == rec(plain)   # nothing stored: the same drafts
    store.add(prompt, response)
    hit = replay_response(SamDrafter(history=store, length="fixed"), prompt, response, 4)
    # the stored response is the one being written: every step drafts k tokens and all are accepted
    drafted, accepted, emitted = rec(hit)
    assert all(d == 4 for d in drafted[:-1]) and accepted[:-1] == drafted[:-1]
    assert len(emitted) == -(-(len(response) - 1) // 5) < len(plain.emitted) / 4
    other = replay_response(SamDrafter(history=store, length="fixed"), prompt[:-1], response, 4)   # another prompt: no history
    assert rec(other) == rec(plain)


def test_history_is_sam_only():
    assert "sam" in unsupported_reason(DraftConfig(drafter="ngram", history=True))
    assert DraftConfig(history=True).sources == "own+history"
    assert DraftConfig(group=True, history=True).label == "sam k=3 own+group+history(concurrent)"


def _steps_items(rng, prompts=3, steps=3, n=4, length=200) -> list[TokenizedResponse]:
    """`steps` RL steps; every prompt in every step; a prompt's responses share a long core."""
    items = []
    core = {p: rng.integers(0, 3000, length) for p in range(prompts)}
    line = 0
    for s in range(1, steps + 1):
        for p in range(prompts):
            for _ in range(n):
                resp = core[p].copy()
                flips = rng.random(length) < 0.15
                resp[flips] = rng.integers(0, 3000, int(flips.sum()))
                line += 1
                items.append(response(id=str(line), group=f"g{p}", prompt_ids=arr([p + 1] * 12), response_ids=arr(resp),
                                  source=Path(f"/d/{s}.jsonl"), line=line, step=s))
    return items


def _run(engine, items, cfgs, subset=None):
    idx = list(range(len(items))) if subset is None else subset
    got = {}
    for j, chunk in engine.run(items, [(c, idx) for c in cfgs]):
        for i, st in chunk:
            got[(j, i)] = rec(st)
    return got


def test_replay_steps_through_history():
    items = _steps_items(np.random.default_rng(1))
    cfgs = [DraftConfig(), DraftConfig(history=True), DraftConfig(group=True), DraftConfig(group=True, history=True)]
    eng = ReplayEngine(workers=1)
    got = _run(eng, items, cfgs)
    first = [i for i, it in enumerate(items) if it.step == 1]
    later = [i for i, it in enumerate(items) if it.step > 1]
    # step 1 has no history: the same records as without the source
    assert all(got[(1, i)] == got[(0, i)] for i in first)
    assert all(got[(3, i)] == got[(2, i)] for i in first)
    # later steps draft from earlier ones: more accepted tokens, fewer steps
    acc = {j: sum(sum(got[(j, i)][1]) for i in later) for j in range(4)}
    assert acc[1] > acc[0] and acc[3] > acc[2]
    stats = eng.describe()["history"]["by_configuration"]["sam k=3 own+history"]
    assert stats["replayed_with_history"] == len(later) and stats["responses_added"] == len(items)
    assert stats["responses_held"] == 3 * 4 * 3 and stats["evicted_by_budget"] == 0


def test_history_results_do_not_depend_on_workers_or_on_what_is_replayed():
    items = _steps_items(np.random.default_rng(2))
    cfgs = [DraftConfig(history=True), DraftConfig(group=True, history=True)]
    # the same tasks (task_tokens): SAM's acceptance record is shared within a task
    serial = _run(ReplayEngine(workers=1, task_tokens=500), items, cfgs)
    forked = _run(ReplayEngine(workers=2, min_parallel_tokens=0, task_tokens=500), items, cfgs)
    assert forked == serial
    # a resumed run replays a subset; the store still holds every earlier response
    last = [i for i, it in enumerate(items) if it.step == 3]
    part = _run(ReplayEngine(workers=1, task_tokens=500), items, cfgs, subset=last)
    assert part == {k: v for k, v in serial.items() if k[1] in last}


def test_window_and_budget_bound_what_history_gives():
    items = _steps_items(np.random.default_rng(3))
    cfg = [DraftConfig(history=True)]
    full = ReplayEngine(workers=1)
    tiny = ReplayEngine(workers=1, history_budget_bytes=4 * 300)   # about one response
    one = ReplayEngine(workers=1, history_window=1)
    a, b, c = _run(full, items, cfg), _run(tiny, items, cfg), _run(one, items, cfg)
    acc = {name: sum(sum(v[1]) for v in got.values()) for name, got in (("full", a), ("tiny", b), ("one", c))}
    assert acc["tiny"] < acc["full"] and acc["one"] <= acc["full"]
    hb = tiny.describe()["history"]["by_configuration"]["sam k=3 own+history"]
    assert hb["peak_stored_bytes"] <= 4 * 300 and hb["evicted_by_budget"] > 0
    assert one.describe()["history"]["by_configuration"]["sam k=3 own+history"]["responses_held"] == 3


def test_emulated_steps_split_each_group_in_file_order():
    def item(i, g, src="/a.jsonl"):
        return response(id=str(i), group=g, prompt_ids=arr([1]), response_ids=arr([i, i]), source=Path(src), line=i)

    items = [item(i, "x") for i in range(8)] + [item(8 + i, "y") for i in range(5)] + [item(13, "z")] \
        + [item(14 + i, "x", "/b.jsonl") for i in range(2)]
    assert not has_steps(items)
    split = emulate_steps(items)
    steps = [it.step for it in split]
    assert steps[:8] == [0] * 4 + [1] * 4
    assert steps[8:13] == [0, 0, 1, 1, 1]
    assert steps[13] == 1                      # a group of one has nothing earlier
    assert steps[14:] == [0, 1]                # groups are per file
    assert has_steps(split)
    # group sources now share within a half
    units = group_units(split, range(len(split)))
    assert sorted(len(u) for u in units) == [1, 1, 1, 2, 3, 4, 4]
