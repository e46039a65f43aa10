"""Draft trees verified by the reference engine (bench/engines/tree_verify.py): the tree mask,
rotary positions and cache compaction give the plain decode's tokens, greedy and sampled,
where the true continuation is a later path of the tree; trees only where few requests run
and nobody waits; bad options. Exactness on the tiny random Qwen3 with batch_invariant=True
(every result independent of the batch shape), as in test_reference_engine.py."""

from __future__ import annotations

import json
import pytest
import torch

from tree_fixtures import KnowingDrafter, knowing_tree_size, knowing_trees  # noqa: F401 (a fixture)
from samspec_bench.bench.engines import tree_verify
from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.reference_engine import ReferenceEngine
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import load_model, resolve_model

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
                assert d == knowing_tree_size(room) and a == room and e == room + 1
    assert tree_steps >= 6
    assert res.engine["draft_trees"] == {"paths": 3, "at_most_running": 8}


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
