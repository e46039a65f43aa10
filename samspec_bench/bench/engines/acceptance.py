"""The acceptance suite over a model engine (`accept --engine reference|vllm`): the traces'
prompts are generated greedily by the model (max_tokens = the recorded response's length)
with each drafter configuration, and every response's decode steps are reported. Exact for
what the model generated, not for the traces' own responses (the model writes its own).

One class for every engine of `factory.make_engine`: what differs between engines is which
drafters run and where (ours in this process for `reference`; inside vLLM's process for
`vllm`, SAM through our proposer next to vLLM's own ngram / suffix). Trace replay (no
model) is `replay.ReplayEngine`."""

from __future__ import annotations

import importlib.util
from typing import Any

from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.factory import ENGINE_NAMES, make_engine
from samspec_bench.bench.engines.replay import build_drafter, response_key
from samspec_bench.bench.engines.vllm.adapter import METHODS as VLLM_METHODS
from samspec_bench.bench.engines.vllm.platform import require_vllm
from samspec_bench.errors import UserError
from samspec_bench.metrics import ResponseSteps
from samspec_bench.models import BUILTIN_MODEL
from samspec_bench.sam.drafters import SamDrafter, available_drafters

RESPONSES = "generated greedily by the model from the traces' prompts, max_tokens = recorded length"
# each engine's options for make_engine unless given: a batch as large as the suite's jobs need
# (reference), the context vLLM reserves KV cache for (vllm)
ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {"reference": {"max_num_seqs": 32}, "vllm": {"max_model_len": 4096}}
_WHERE = {"reference": "in the reference engine", "vllm": "inside vLLM"}


class ModelAcceptanceEngine:
    """`replay.AcceptanceEngine` over the model engine `engine` (reference | vllm), built on
    first use through `make_engine(engine, model, dtype=dtype, **options)`. `engine_args`:
    vLLM engine arguments (`--engine-arg`; the reference engine takes none and ignores them,
    as `accept` always did). `threads`: torch threads for the reference engine."""

    exact = False

    def __init__(self, engine: str, model: str = BUILTIN_MODEL, *, dtype: str = "float32",
                 engine_args: dict[str, Any] | None = None, threads: int = 1, **options: Any):
        if engine not in ENGINE_NAMES:
            raise UserError(f"--engine {engine!r}: the model engines are {', '.join(ENGINE_NAMES)}")
        if engine == "vllm":
            require_vllm()   # now, before the suite writes anything
        self.name, self.model, self.dtype, self.threads = engine, model, dtype, threads
        self.options = {**ENGINE_DEFAULTS[engine], **options}
        if engine == "vllm":
            self.options["engine_args"] = dict(engine_args or {})
        self._engine = None

    def engine(self):
        if self._engine is None:
            if self.name == "reference":
                import torch  # imports torch

                torch.set_num_threads(self.threads)  # small GEMMs stall with several threads on a busy CPU
            self._engine = make_engine(self.name, self.model, dtype=self.dtype, **self.options)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "model": self.model, "dtype": self.dtype}
        if self.name == "vllm" and self._engine is not None:
            d = self._engine.describe()   # vLLM's guard-rails (what was built) explain its numbers
        return {**d, "exact": self.exact, "responses": RESPONSES}

    def unsupported(self, cfg) -> str | None:
        where = _WHERE[self.name]
        if self.name == "vllm":
            if cfg.drafter not in VLLM_METHODS:
                return (f"the vLLM engine runs the drafters {', '.join(VLLM_METHODS)} (vLLM's own ngram and "
                        f"suffix), not '{cfg.drafter}'")
        elif cfg.drafter not in available_drafters():
            return f"drafter '{cfg.drafter}' is not available here"
        if cfg.corpus:
            return f"a static corpus is not wired into the {self.name} engine yet (use --engine replay)"
        if cfg.group and cfg.drafter != "sam":
            return f"'{cfg.drafter}' has no per-group sharing {where}"
        if cfg.group and cfg.order != "concurrent":
            return f"{where}, group members always run concurrently (use --group-order concurrent)"
        if self.name == "vllm" and cfg.drafter == "suffix" and importlib.util.find_spec("arctic_inference") is None:
            return "vLLM's suffix method needs arctic-inference (see the README)"
        return None

    def drafter(self, cfg) -> Any:
        """The drafter argument of `generate` for a configuration."""
        if self.name == "reference":
            return build_drafter(cfg, None)
        if cfg.drafter == "sam":   # SAM through our proposer inside vLLM; ngram / suffix are vLLM's own methods
            return SamDrafter(group_sharing=cfg.group, l_threshold=int(dict(cfg.options).get("l_threshold", 1)))
        return cfg.drafter

    def run(self, items, jobs):
        return generate_steps(self.engine(), items, jobs, self.drafter)


def generate_steps(engine, items, jobs, drafter_for):
    """The acceptance suite's jobs on a model engine: each job's traces' prompts are generated
    greedily (max_tokens = the recorded response's length) with `drafter_for(cfg)`, and every
    response's decode steps are yielded as (job index, [(item index, ResponseSteps)])."""
    for j, (cfg, indices) in enumerate(jobs):
        if not indices:
            continue
        reqs = [Request(i, [int(t) for t in items[i].prompt_ids],
                        SamplingParams(max_tokens=max(int(getattr(items[i], "max_tokens", None)
                                                          or items[i].response_ids.size), 1)),
                        group=f"{items[i].source}:{items[i].group}") for i in indices]
        res = engine.generate(reqs, drafter=drafter_for(cfg), num_spec_tokens=cfg.k)
        out = []
        for i, o in zip(indices, res.outputs):
            s = o.steps
            out.append((i, ResponseSteps(key=response_key(items[i]), prompt_len=s.prompt_len,
                                         response_len=s.response_len, position=s.position, drafted=s.drafted,
                                         accepted=s.accepted, emitted=s.emitted)))
        yield j, out
