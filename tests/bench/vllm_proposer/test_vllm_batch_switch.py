"""The seed's batch-size switch inside the SAM proposer (option `threshold`: draft only when at
most T requests stay in the batch for the next step, counting the requests this step finishes
by max_tokens or a stop token) and the max_tokens bound on drafts, against a fake batch. No
vLLM needed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from samspec_bench.bench.vllm_proposer import EXTRA_KEY, SamProposer

K = 4
MAX_LEN = 512


class _StopParams:
    def __init__(self, extra, max_tokens, eos=None, stop_token_ids=()):
        self.extra_args = extra
        self.max_tokens = max_tokens
        self.eos_token_id = eos
        self.stop_token_ids = list(stop_token_ids)


def _gated_batch(threshold, max_tokens, eos=None):
    """Five requests with a repeated motif (SAM always finds a draft) in a fake batch; their
    first token sampled. Returns the proposer, the batch arrays and a step function."""
    runner = SimpleNamespace(requests={}, input_batch=SimpleNamespace(req_ids=[], req_id_to_index={},
                                                                      num_prompt_tokens=np.zeros(8, np.int32)))
    prop = SamProposer(None, runner=runner, num_speculative_tokens=K, max_model_len=MAX_LEN)
    motif = [7, 8, 9, 10]
    rows = [f"r{i}" for i in range(5)]
    tok = np.zeros((5, MAX_LEN), dtype=np.int32)
    ntok = np.zeros(5, dtype=np.int32)
    for j, rid in enumerate(rows):
        prompt = [20 + j] + motif * 4
        tok[j, :len(prompt)] = prompt
        ntok[j] = len(prompt)
        extra = {EXTRA_KEY: {"key": rid, "threshold": threshold}}
        runner.requests[rid] = SimpleNamespace(sampling_params=_StopParams(extra, max_tokens[j], eos))
    b = runner.input_batch
    b.req_ids = list(rows)
    b.req_id_to_index = {r: j for j, r in enumerate(rows)}
    b.num_prompt_tokens[:5] = ntok[:5]

    def step(sampled):
        for j, new in enumerate(sampled):
            tok[j, ntok[j]: ntok[j] + len(new)] = new
            ntok[j] += len(new)
        return prop.propose(sampled, ntok.copy(), tok)
    return prop, step


def test_batch_switch_drafts_only_when_the_next_batch_is_small():
    # T = 2: five rows stay running -> no draft for any row
    prop, step = _gated_batch(2, max_tokens=[1, 1, 1, 50, 50])
    first = step([[7]] * 5)   # the prefill's samples: r0..r2 reach max_tokens = 1 and finish
    assert all(d for d in first[3:]), "2 requests stay: at or below the threshold, both draft"
    assert prop.gate == {"on": 1, "off": 0}
    prop2, step2 = _gated_batch(2, max_tokens=[50] * 5)
    assert step2([[7]] * 5) == [[]] * 5, "5 requests stay running: above the threshold, nobody drafts"
    assert prop2.gate == {"on": 0, "off": 1}
    # without a threshold the same batch drafts
    prop3, step3 = _gated_batch(None, max_tokens=[50] * 5)
    assert all(step3([[7]] * 5)) and prop3.gate == {"on": 0, "off": 0}


def test_batch_switch_counts_stop_tokens_unless_ignored():
    # three rows sample the EOS token (99): they finish, two stay -> drafts
    _, step = _gated_batch(2, max_tokens=[50] * 5, eos=99)
    out = step([[99], [99], [99], [7], [7]])
    assert all(out[3:])
    # ignore_eos: vLLM's sampling params carry no eos_token_id -> all five stay, no drafts
    _, step = _gated_batch(2, max_tokens=[50] * 5, eos=None)
    assert step([[99], [99], [99], [7], [7]]) == [[]] * 5


def test_batch_switch_bad_env_threshold(monkeypatch):
    monkeypatch.setenv("SAMSPEC_VLLM_DRAFTER", '{"threshold": -1}')
    with pytest.raises(ValueError, match="threshold"):
        SamProposer(None, num_speculative_tokens=K, max_model_len=MAX_LEN)


def test_no_draft_past_max_tokens():
    """A request 2 tokens short of max_tokens drafts at most 1 (the last token is the target's);
    one token short: no draft (vLLM would verify tokens the request can never emit)."""
    _, step = _gated_batch(None, max_tokens=[3, 2, 50, 50, 50])
    out = step([[7]] * 5)
    assert len(out[0]) == 1 and out[1] == [] and all(len(d) == K for d in out[2:])
