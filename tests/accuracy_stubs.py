"""A stub generation engine for the accuracy suite's tests (tests/suites/accuracy): character
tokens, a fixed answer for every prompt, no model."""

from __future__ import annotations

from samspec_bench.bench.engines.base import FINISH_LENGTH, GenerationResult, RequestOutput
from samspec_bench.metrics import ResponseSteps


class CharTokenizer:
    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i != 0)


class StubEngine:
    """Answers every prompt with a fixed text (then runs on past lm-eval's stop string);
    raises for prompts that contain `fail_on` (only when that request is in the batch)."""

    name = "stub"

    def __init__(self, answer=" 3 + 4 = 7\n#### 7\n\nQuestion: more", fail_on=None):
        self.tokenizer = CharTokenizer()
        self.answer = answer
        self.fail_on = fail_on
        self.calls = []

    def generate(self, requests, *, drafter=None, num_spec_tokens=3, progress=False, on_output=None, **kw):
        self.calls.append(len(requests))
        texts = [self.tokenizer.decode(r.prompt_ids) for r in requests]
        if self.fail_on and any(self.fail_on in t for t in texts):
            raise RuntimeError("stub failure")
        outs = []
        for r in requests:
            ids = self.tokenizer.encode(self.answer)[: r.params.max_tokens]
            n = len(ids) - 1
            steps = ResponseSteps(str(r.req_id), len(r.prompt_ids), len(ids), list(range(1, n + 1)), [0] * n,
                                  [0] * n, [1] * n)
            o = RequestOutput(r.req_id, list(r.prompt_ids), ids, [0.0] * len(ids), FINISH_LENGTH, steps)
            outs.append(o)
            if on_output:
                on_output(o)
        return GenerationResult(outputs=outs, steps=[], wall_time_s=0.0)

    def describe(self):
        return {"name": "stub"}

    def close(self):
        pass
