"""Draft trees verified by the reference engine (bench/engines/tree_verify.py): the tree mask,
rotary positions and cache compaction give the plain decode's tokens, greedy and sampled,
where the true continuation is a later path of the tree; trees only where few requests run
and nobody waits; bad options. Exactness on the tiny random Qwen3 with batch_invariant=True
(every result independent of the batch shape), as in test_reference_engine.py."""

from __future__ import annotations

import json
from typing import Hashable

import pytest
import torch

from samspec_bench.bench.engines import tree_verify
from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.reference_engine import ReferenceEngine
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import load_model, resolve_model
from samspec_bench.sam import Drafter
from samspec_bench.sam.draft_tree import tree_size

K = 4


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py


@pytest.fixture(scope="module")
def engine():
    model, tok = load_model("builtin:tiny-qwen3")
    return ReferenceEngine(model, tokenizer=tok, max_num_seqs=8, max_model_len=512, num_blocks=256, block_size=8,
                           batch_invariant=True)


def _prompts(n: int) -> list[list[int]]:
    vocab = json.loads((resolve_model("builtin:tiny-qwen3") / "config.json").read_text())["vocab_size"]
    g = torch.Generator().manual_seed(3)
    return [torch.randint(3, min(2000, vocab), (6 + 5 * i,), generator=g).tolist() for i in range(n)]


class KnowingDrafter(Drafter):
    """Knows each request's plain output. Its own draft (a chain) is always wrong; its tree
    holds a wrong path, a path right for two tokens, and the true continuation last, so a step
    that accepts everything must take the third path, whose nodes are not next to the root."""

    def __init__(self, truth: dict[Hashable, list[int]], vocab: int):
        self.truth, self.vocab, self.pos = truth, vocab, {}

    def start(self, req_id, prompt_ids, group=None):
        self.pos[req_id] = 0

    def extend(self, req_id, token_ids):
        self.pos[req_id] += len(list(token_ids))

    def stop(self, req_id):
        self.pos.pop(req_id, None)

    def _true(self, req_id, k):
        return self.truth[req_id][self.pos[req_id]: self.pos[req_id] + k]

    def _wrong(self, toks):
        return [(t + 1) % self.vocab for t in toks]

    def propose(self, req_id, k):
        return self._wrong(self._true(req_id, k))

    def paths(self, req_id, k):
        true = self._true(req_id, k)
        wrong = self._wrong(true)
        return [wrong, true[:2] + wrong[2:], true] if true else []

    def evidence_sources(self, req_id):
        return []


@pytest.fixture
def knowing_trees(monkeypatch):
    monkeypatch.setattr(tree_verify, "propose_paths",
                        lambda drafter, rid, k, width: (drafter.propose(rid, k), drafter.paths(rid, k)[:width]))


@pytest.mark.parametrize("params", [SamplingParams(max_tokens=24, ignore_eos=True),
                                    SamplingParams(max_tokens=24, ignore_eos=True, temperature=0.9, top_k=50, seed=7)],
                         ids=["greedy", "sampled"])
def test_a_tree_whose_last_path_is_true_gives_the_plain_tokens(engine, knowing_trees, params):
    """Greedy: the same tokens. Sampled with a seed: the tree walk draws one sample per emitted
    token from the request's generator, as plain decoding does, so the same tokens too (the
    chain verifier's rejection sampling draws differently)."""
    reqs = lambda: [Request(i, p, params) for i, p in enumerate(_prompts(2))]  # noqa: E731
    plain = engine.generate(reqs())
    truth = {o.req_id: o.token_ids for o in plain.outputs}
    drafter = KnowingDrafter(truth, engine.decoder.vocab_size)
    res = engine.generate(reqs(), drafter=drafter, num_spec_tokens=K, tree_paths=3)
    assert [o.token_ids for o in res.outputs] == [o.token_ids for o in plain.outputs]
    tree_steps = 0
    for o in res.outputs:
        s = o.steps
        for p, d, a, e in zip(s.position, s.drafted, s.accepted, s.emitted):
            room = min(K, len(o.token_ids) - p - 1)
            if room >= 3:   # a full tree: 3 paths of `room` tokens, the last one true
                tree_steps += 1
                assert d == tree_size(drafter_paths(room)) and a == room and e == room + 1
    assert tree_steps >= 6
    assert res.engine["draft_trees"] == {"paths": 3, "at_most_running": 8}


def drafter_paths(room: int) -> list[list[int]]:
    """The shape of KnowingDrafter's tree for `room` tokens (distinct tokens stand in)."""
    true = list(range(room))
    wrong = [t + 100 for t in true]
    return [wrong, true[:2] + wrong[2:], true]


def test_trees_only_where_few_run_and_nobody_waits(engine, knowing_trees):
    """tree_at=1: while two requests run, steps verify the (wrong) chain and accept nothing;
    once one is left alone, its tree steps accept their whole room."""
    reqs = [Request(0, _prompts(1)[0], SamplingParams(max_tokens=8, ignore_eos=True)),
            Request(1, _prompts(2)[1], SamplingParams(max_tokens=30, ignore_eos=True))]
    plain = engine.generate(reqs)
    drafter = KnowingDrafter({o.req_id: o.token_ids for o in plain.outputs}, engine.decoder.vocab_size)
    res = engine.generate(reqs, drafter=drafter, num_spec_tokens=K, tree_paths=3, tree_at=1)
    assert [o.token_ids for o in res.outputs] == [o.token_ids for o in plain.outputs]
    with_two = [st for st in res.steps if st.num_running == 2 and st.num_drafted]
    alone = [st for st in res.steps if st.num_running == 1 and st.num_drafted]
    assert with_two and all(st.num_accepted == 0 and st.num_drafted <= 2 * K for st in with_two)
    assert alone and all(st.num_accepted > 0 for st in alone)


def test_visibility_and_positions_of_a_tree_chunk():
    # nodes: 0 (child of the root), 1 (child of 0), 2 (child of the root), 3 (child of 2)
    parents = [-1, 0, -1, 2]
    vis = tree_verify.visible(parents).int().tolist()
    assert vis == [[1, 0, 0, 0, 0],
                   [1, 1, 0, 0, 0],
                   [1, 1, 1, 0, 0],
                   [1, 0, 0, 1, 0],
                   [1, 0, 0, 1, 1]]
    assert tree_verify.chunk_positions(10, parents) == [10, 11, 12, 11, 12]


def test_bad_tree_options_are_refused(engine):
    with pytest.raises(UserError, match="tree_paths"):
        engine.generate([Request(0, [5, 6, 7], SamplingParams(max_tokens=4))], tree_paths=2)   # no drafter
    with pytest.raises(UserError, match="sliding-window"):
        tree_verify.tree_option(2, 8, object(), [None, 4096])
    assert tree_verify.tree_option(0, 8, None, [4096]) == (0, 0)
