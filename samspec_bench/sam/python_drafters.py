"""The pure-Python SAM drafters behind the drafter interface (sam/drafter_base.py): the speed
baselines `samspec-bench drafters` times the compiled automaton against (`sam-python`,
`sam-public`); sam/drafters.py re-exports them and names them in `make_drafter`."""

from __future__ import annotations

from typing import Hashable

import numpy as np

from samspec_bench.sam.drafter_base import Drafter
from samspec_bench.sam.python_automaton import ObjectSam, ReferenceSam, check_count, heap_bytes


class ReferenceSamDrafter(Drafter):
    """The pure-Python automaton behind the same interface: the speed baseline."""

    name = "sam-python"

    def __init__(self):
        self._reqs: dict[Hashable, ReferenceSam] = {}

    def start(self, req_id, prompt_ids, group=None):
        sam = ReferenceSam()
        sam.new_doc()
        prompt = list(np.asarray(prompt_ids).tolist()) if hasattr(prompt_ids, "__array__") else list(prompt_ids)
        if prompt:
            sam.extend(prompt)
        self._reqs[req_id] = sam

    def extend(self, req_id, token_ids):
        self._reqs[req_id].extend(token_ids)

    def propose(self, req_id, k):
        return self._reqs[req_id].draft(check_count(k, "k"))

    def stop(self, req_id):
        del self._reqs[req_id]

    def memory_bytes(self):
        return sum(heap_bytes(s) for s in self._reqs.values())


class ObjectSamDrafter(ReferenceSamDrafter):
    """The public pure-Python SAM design (objects, deep-copied clones): today's baseline."""

    name = "sam-public"

    def start(self, req_id, prompt_ids, group=None):
        sam = ObjectSam()
        prompt = np.asarray(prompt_ids).tolist()
        if prompt:
            sam.extend(prompt)
        self._reqs[req_id] = sam
