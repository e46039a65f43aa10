"""The acceptance suite over the reference engine: the traces' prompts are generated
greedily by the model (max_tokens = the recorded response's length) with each drafter
configuration, and every response's decode steps are reported. Exact for what the model
generated, not for the traces' own responses (the model writes its own)."""

from __future__ import annotations

from typing import Any

from samspec_bench.bench.engines.base import Request, SamplingParams


class ReferenceAcceptanceEngine:
    name = "reference"
    exact = False

    def __init__(self, model: str, *, dtype: str = "float32", threads: int = 1, max_num_seqs: int = 32):
        self.model, self.dtype, self.threads, self.max_num_seqs = model, dtype, threads, max_num_seqs
        self._engine = None

    def engine(self):
        if self._engine is None:
            import torch

            from samspec_bench.bench.engines.reference import ReferenceEngine

            torch.set_num_threads(self.threads)  # small GEMMs stall with several threads on a busy CPU
            self._engine = ReferenceEngine(self.model, dtype=self.dtype, max_num_seqs=self.max_num_seqs)
        return self._engine

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "dtype": self.dtype, "exact": self.exact,
                "responses": "generated greedily by the model from the traces' prompts, max_tokens = recorded length"}

    def unsupported(self, cfg) -> str | None:
        from samspec_bench.sam.drafters import available_drafters

        if cfg.drafter not in available_drafters():
            return f"drafter '{cfg.drafter}' is not available here"
        if cfg.corpus:
            return "a static corpus is not wired into the reference engine yet (use --engine replay)"
        if cfg.group and cfg.drafter != "sam":
            return f"'{cfg.drafter}' has no per-group sharing"
        if cfg.group and cfg.order != "concurrent":
            return "in an engine, group members always run concurrently (use --group-order concurrent)"
        return None

    def run(self, items, jobs):
        from samspec_bench.bench.engines.replay import build_drafter

        return generate_steps(self.engine(), items, jobs, lambda cfg: build_drafter(cfg, None))


def generate_steps(engine, items, jobs, drafter_for):
    """The acceptance suite's jobs on a model engine: each job's traces' prompts are generated
    greedily (max_tokens = the recorded response's length) with `drafter_for(cfg)`, and every
    response's decode steps are yielded as (job index, [(item index, ResponseSteps)])."""
    from samspec_bench.metrics import ResponseSteps
    from samspec_bench.bench.engines.replay import response_key

    for j, (cfg, indices) in enumerate(jobs):
        if not indices:
            continue
        reqs = [Request(i, [int(t) for t in items[i].prompt_ids],
                        SamplingParams(max_tokens=max(int(items[i].response_ids.size), 1)),
                        group=f"{items[i].source}:{items[i].group}") for i in indices]
        res = engine.generate(reqs, drafter=drafter_for(cfg), num_spec_tokens=cfg.k)
        out = []
        for i, o in zip(indices, res.outputs):
            s = o.steps
            out.append((i, ResponseSteps(key=response_key(items[i]), prompt_len=s.prompt_len,
                                         response_len=s.response_len, position=s.position, drafted=s.drafted,
                                         accepted=s.accepted, emitted=s.emitted)))
        yield j, out
