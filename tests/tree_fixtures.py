"""Test helpers of the engine tests: a drafter that knows each request's plain output and puts it
on the last path of its draft trees (tree verification tests, CPU and cuda)."""

from __future__ import annotations

from typing import Hashable

import pytest

from samspec_bench.bench.engines import tree_verify
from samspec_bench.sam import Drafter
from samspec_bench.sam.draft_tree import tree_size


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
    """Trees from the KnowingDrafter's paths instead of the SAM candidates."""
    monkeypatch.setattr(tree_verify, "propose_paths",
                        lambda drafter, rid, k, width: (drafter.propose(rid, k), drafter.paths(rid, k)[:width]))


def knowing_tree_size(room: int) -> int:
    """The nodes of KnowingDrafter's tree for `room` tokens (distinct tokens stand in)."""
    true = list(range(room))
    wrong = [t + 100 for t in true]
    return tree_size([wrong, true[:2] + wrong[2:], true])
