"""The acceptance contract (`base.AcceptanceEngine`) over a generating engine (`accept
--engine reference|vllm`): the traces' prompts are generated greedily by the model (max_tokens
= the recorded response's length) with each drafter configuration, and every response's decode
steps are reported. Exact for what the model generated, not for the traces' own responses (the
model writes its own).

One class for every engine of `factory.make_engine`: what differs between engines is which
drafters run and where, and the class asks the engine's capabilities (ours in this process
where any drafter object runs; inside the engine's process where it runs named methods, SAM
through our proposer next to vLLM's own ngram / suffix). Trace replay (no model) is
`replay.ReplayEngine`."""

from __future__ import annotations

from typing import Any

from samspec_bench.bench.draft_config import build_drafter
from samspec_bench.bench.engines.base import EngineCapabilities, Request, SamplingParams
from samspec_bench.bench.engines.engine_device import engine_options
from samspec_bench.bench.engines.factory import engine_capabilities, engine_names, make_engine, require_engine
from samspec_bench.bench.engines.replay import response_key
from samspec_bench.errors import UserError
from samspec_bench.metrics import ResponseSteps
from samspec_bench.models.checkpoints import BUILTIN_MODEL
from samspec_bench.sam.drafters import SamDrafter, arctic_available, available_drafters
from samspec_bench.sam.strategies import parse_strategy

RESPONSES = "generated greedily by the model from the traces' prompts, max_tokens = recorded length"
# the engine's options unless given: a batch as large as the suite's jobs need (an engine sized by
# its options), the context an engine of vLLM engine arguments reserves KV cache for
BATCH_DEFAULTS = {"max_num_seqs": 32}
ENGINE_ARGS_DEFAULTS = {"max_model_len": 4096}


def engine_defaults(caps: EngineCapabilities) -> dict[str, Any]:
    return dict(ENGINE_ARGS_DEFAULTS if caps.engine_args else BATCH_DEFAULTS)


class ModelAcceptanceEngine:
    """`base.AcceptanceEngine` over the model engine `engine` (reference | vllm), built on
    first use through `make_engine(engine, model, dtype=dtype, **options)`. `engine_args`:
    vLLM engine arguments (`--engine-arg`; `accept` refuses them for an engine that takes
    none, so one that does not simply never reads them). `threads`: torch threads where the model runs in this process.
    `device`: where an engine that runs torch here puts the model (`engine_device.engine_device`
    resolved it; an engine that places itself ignores it)."""

    exact = False

    def __init__(self, engine: str, model: str = BUILTIN_MODEL, *, dtype: str = "float32",
                 engine_args: dict[str, Any] | None = None, threads: int = 1, device: str = "cpu", **options: Any):
        if engine not in engine_names(generates=True):
            raise UserError(f"--engine {engine!r}: the model engines are {', '.join(engine_names(generates=True))}")
        require_engine(engine)   # now, before the suite writes anything
        self.name, self.model, self.dtype, self.threads = engine, model, dtype, threads
        self.capabilities = engine_capabilities(engine)
        self.device = device
        self.options = {**engine_defaults(self.capabilities), **engine_options(engine, device), **options}
        if self.capabilities.engine_args:
            self.options["engine_args"] = dict(engine_args or {})
        self._engine = None

    def engine(self):
        if self._engine is None:
            if self.capabilities.torch_in_process:
                import torch  # imports torch

                torch.set_num_threads(self.threads)  # small GEMMs stall with several threads on a busy CPU
            self._engine = make_engine(self.name, self.model, dtype=self.dtype, **self.options)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "model": self.model, "dtype": self.dtype, "device": self.device}
        if self.capabilities.engine_args and self._engine is not None:
            d = self._engine.describe()   # what vLLM built (its guard-rails) explains its numbers
        return {**d, "exact": self.exact, "responses": RESPONSES}

    def unsupported(self, cfg) -> str | None:
        caps = self.capabilities
        where = f"in the {self.name} engine" if caps.in_process_drafters else f"inside {self.name}"
        if not caps.in_process_drafters:
            if cfg.drafter not in caps.drafter_methods:
                return (f"the {self.name} engine runs the drafters {', '.join(caps.drafter_methods)} (SAM and the "
                        f"engine's own methods), not '{cfg.drafter}'")
        elif cfg.drafter not in available_drafters():
            return f"drafter '{cfg.drafter}' is not available here"
        if cfg.corpus and "corpus" not in caps.draft_sources:
            return f"a static corpus is not wired into the {self.name} engine yet (use --engine replay)"
        if cfg.group and cfg.drafter != "sam":
            return f"'{cfg.drafter}' has no per-group sharing {where}"
        if cfg.group and cfg.order != "concurrent":
            return f"{where}, group members always run concurrently (use --group-order concurrent)"
        if cfg.drafter == "suffix" and not arctic_available():
            return f"the suffix method {where} needs arctic-inference (see the README)"
        if cfg.history and "history" not in caps.draft_sources:
            return "the history source replays earlier RL steps' recorded responses: --engine replay only"
        if tree_of(cfg)[0] and not caps.draft_trees:
            return f"multi-path drafts (paths=W): the {self.name} engine verifies one path a step (use --engine reference)"
        return None

    def drafter(self, cfg) -> Any:
        """The drafter argument of `generate` for a configuration."""
        if self.capabilities.in_process_drafters:
            return build_drafter(cfg, None)
        if cfg.drafter == "sam":   # SAM through our proposer inside the engine; others are its own methods
            return SamDrafter(group_sharing=cfg.group, l_threshold=int(dict(cfg.options).get("l_threshold", 1)))
        return cfg.drafter

    def run(self, items, jobs):
        return generate_steps(self.engine(), items, jobs, self.drafter)


def tree_of(cfg) -> tuple[int, int]:
    """(paths, at most running) of a configuration's strategy's draft trees; (0, 0): one path."""
    if not cfg.strategy:
        return 0, 0
    st = parse_strategy(cfg.strategy)
    return (st.paths, st.tree_running) if st.paths else (0, 0)


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
        paths, at = tree_of(cfg)
        trees = {"tree_paths": paths, "tree_at": at} if paths else {}
        res = engine.generate(reqs, drafter=drafter_for(cfg), num_spec_tokens=cfg.k, **trees)
        out = []
        for i, o in zip(indices, res.outputs):
            s = o.steps
            out.append((i, ResponseSteps(key=response_key(items[i]), prompt_len=s.prompt_len,
                                         response_len=s.response_len, position=s.position, drafted=s.drafted,
                                         accepted=s.accepted, emitted=s.emitted)))
        yield j, out
