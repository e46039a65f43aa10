"""The engine contracts every suite talks to, and what each engine can do.

Two contracts, because two kinds of engine answer different questions:

- `Engine.generate` (generation): requests in, tokens + logprobs + per-step records out, with
  or without speculative decoding. A model writes the tokens: `reference` (PyTorch) and
  `vllm`.

      engine = ReferenceEngine("builtin:smollm2-135m")          # or another back end
      reqs = [Request(i, prompt_ids, SamplingParams(max_tokens=256)) for i, prompt_ids in ...]
      base = engine.generate(reqs)                                # no speculation
      spec = engine.generate(reqs, drafter="sam", num_spec_tokens=3)
      spec.outputs[0].token_ids, spec.outputs[0].logprobs, spec.steps, spec.metrics()

- `AcceptanceEngine.run` (acceptance over recorded responses): drafter configurations in,
  per-response decode records out. Trace replay (`replay.ReplayEngine`) has no model, so it
  cannot generate: the target's greedy choice is the next recorded token, which makes its
  acceptance exact for those responses. A generating engine joins through
  `acceptance.ModelAcceptanceEngine`, which generates the traces' prompts instead.

`EngineCapabilities` says what an engine can do, so a suite asks (`engine.capabilities`, or
`factory.engine_capabilities(name)` before one is built) instead of testing its name.

Nothing here imports torch: the interface (and a replay back end) work without it.

Metric names follow docs/architecture.md and `samspec_bench.metrics`: each `RequestOutput`
carries its decode as a `ResponseSteps` record (drafted / accepted / emitted per decode
step), and `GenerationResult.metrics()` pools them.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Iterator, Protocol, Sequence

from samspec_bench import __version__
from samspec_bench.bench.policies import StepState
from samspec_bench.metrics import AcceptanceCounts, ResponseSteps, total_counts

if TYPE_CHECKING:
    from samspec_bench.bench.draft_config import DraftConfig

FINISH_STOP = "stop"      # a stop token (EOS or one of stop_token_ids) was emitted, or a stop string
FINISH_LENGTH = "length"  # max_tokens reached, or the sequence reached the engine's max_model_len


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling. temperature 0 is greedy; top_k <= 0 and top_p >= 1 are off.
    `seed` gives the request its own generator (reproducible whatever else runs beside it).
    Stop tokens: the model's EOS (unless ignore_eos) plus `stop_token_ids`; the stop token is
    kept in the output, as vLLM does. `stop`: strings that end the request as soon as the
    decoded output contains one; the tokens are kept (a verify step may emit a few past the
    stop string): cut the text at the stop string where it matters."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int = 256
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    # also return the top-n alternatives of every emitted token; None: no logprobs wanted (an
    # engine may then skip computing them, as vLLM does: its outputs' logprobs stay empty)
    logprobs: int | None = 0

    def __post_init__(self):
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature = {self.temperature!r}: must be a finite number >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p = {self.top_p!r}: must lie in (0, 1]")
        if int(self.top_k) != self.top_k:
            raise ValueError(f"top_k = {self.top_k!r}: must be an integer (<= 0 for off)")
        if self.logprobs is not None and (int(self.logprobs) != self.logprobs or self.logprobs < 0):
            raise ValueError(f"logprobs = {self.logprobs!r}: must be an integer >= 0, or None for none")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens = {self.max_tokens!r}: must be >= 1")
        object.__setattr__(self, "logprobs", None if self.logprobs is None else int(self.logprobs))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if not all(isinstance(x, str) and x for x in stop):
            raise ValueError(f"stop = {self.stop!r}: must be non-empty strings")
        object.__setattr__(self, "stop", stop)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 1e-5


@dataclass
class Request:
    req_id: Hashable
    prompt_ids: Sequence[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    group: Hashable | None = None     # GRPO group (drafters that share across a group use it)

    def __post_init__(self):
        self.prompt_ids = [int(t) for t in self.prompt_ids]
        if not self.prompt_ids:
            raise ValueError(f"request {self.req_id!r}: empty prompt")


@dataclass
class StepRecord:
    """One engine step (one target forward pass over the running batch)."""

    step: int
    time_s: float              # the whole step: schedule, draft, forward, sample (by `timer`)
    forward_s: float           # of which the model forward
    num_running: int           # requests in this step's batch
    num_waiting: int           # requests still waiting for a slot after scheduling
    num_scheduled_tokens: int  # query tokens of the forward pass (prefill + decode + drafts)
    num_prefill_tokens: int
    num_decode_reqs: int       # requests past their prefill that sampled this step
    num_drafted: int
    num_accepted: int
    num_emitted: int           # tokens appended to outputs this step
    speculative: bool          # the policy's decision for this step
    attention: str             # 'decode' or 'splitfuse'
    num_preempted: int = 0
    num_finished: int = 0
    # what measured time_s / forward_s: an accelerator's device time (events read after
    # synchronising: devices.timer_label) or the host's wall clock
    timer: str = "host wall clock"


@dataclass
class RequestOutput:
    req_id: Hashable
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]              # of each emitted token (see the engine's logprobs_mode); may be
                                       # empty when params.logprobs is None
    finish_reason: str
    steps: ResponseSteps               # the decode, step by step (metrics.py's record)
    top_logprobs: list[list[tuple[int, float]]] | None = None  # per token, when params.logprobs > 0
    first_token_time_s: float | None = None   # since generate() started
    finish_time_s: float | None = None
    num_preemptions: int = 0

    @property
    def counts(self) -> AcceptanceCounts:
        return self.steps.counts()


@dataclass
class GenerationResult:
    outputs: list[RequestOutput]       # in the order the requests were given
    steps: list[StepRecord]
    wall_time_s: float
    engine: dict[str, Any] = field(default_factory=dict)
    drafter: dict[str, Any] | None = None
    num_spec_tokens: int = 0

    def output(self, req_id: Hashable) -> RequestOutput:
        for o in self.outputs:
            if o.req_id == req_id:
                return o
        raise KeyError(req_id)

    @property
    def num_output_tokens(self) -> int:
        return sum(len(o.token_ids) for o in self.outputs)

    def counts(self) -> AcceptanceCounts:
        return total_counts(o.steps for o in self.outputs)

    def metrics(self) -> dict[str, Any]:
        """Acceptance metrics (docs/architecture.md names) plus throughput."""
        m = self.counts().metrics()
        m["num_requests"] = len(self.outputs)
        m["output_tokens"] = self.num_output_tokens
        m["engine_steps"] = len(self.steps)
        m["wall_time_s"] = self.wall_time_s
        m["output_tokens_per_s"] = self.num_output_tokens / self.wall_time_s if self.wall_time_s > 0 else None
        return m


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine can do: the questions suites ask instead of testing an engine's name.
    Each back end holds one as its class attribute `capabilities`; `factory.engine_capabilities`
    answers by name without importing the back end (no torch, no vLLM)."""

    generates: bool                   # implements Engine.generate: a model writes the tokens (False:
                                      # acceptance over recorded responses only, AcceptanceEngine)
    needs_model: bool                 # loads a model (--model runs it)
    needs_traces: bool                # replays recorded responses: traces and their tokenizer, no model
    exact_greedy_acceptance: bool     # acceptance is exact for the traces' own responses
    draft_sources: tuple[str, ...]    # DraftConfig sources it runs (draft_config.SOURCE_NAMES)
    drafter_methods: tuple[str, ...] = ()   # drafters it runs by name inside the engine; (): any drafter
                                            # object of samspec_bench.sam, run in this process
    oracle_drafts: bool = False       # generate(drafter=OracleDrafter(...)): drafts given continuations
    mixed_oracle_widths: bool = False  # the oracle's draft width may differ per request and step (else
                                       # k every step: one width per generate call)
    teacher_forcing: bool = False     # score(sequences, ...): teacher-forced log-probs of given tokens
    attention_paths: tuple[str, ...] = ()   # values of the attention= construction option (): fixed
    kv_blocks_settable: bool = False  # num_blocks= / block_size= construction options
    engine_args: bool = False         # takes vLLM engine arguments (engine_args=): scheduler limits and the
                                      # KV block count go there, not as options of their own
    method_at_build: bool = False     # the speculative method and the largest k are fixed when built
                                      # (speculative=, num_spec_tokens=); another method rebuilds
    engine_seed: bool = False         # an engine-wide seed= construction option
    torch_in_process: bool = False    # the model runs on torch in this process (torch threads apply)
    shared_per_process: bool = False  # start-up takes tens of seconds: one engine per process
                                      # (factory.shared_engine)
    draft_trees: bool = False         # generate(tree_paths=W, tree_at=R): verifies multi-path draft trees
    requires: str | None = None       # an optional install it needs (factory.require_engine checks it)

    @property
    def in_process_drafters(self) -> bool:
        """Any drafter object of samspec_bench.sam runs (in this process), not only named methods."""
        return not self.drafter_methods


class Engine(ABC):
    """The generation contract (module docstring). Back ends: `reference` (PyTorch, this
    package) and `vllm` (`vllm/adapter.py`)."""

    name: str = "engine"
    tokenizer: Any = None
    capabilities: EngineCapabilities = EngineCapabilities(generates=True, needs_model=True, needs_traces=False,
                                                          exact_greedy_acceptance=False, draft_sources=("own",))

    @abstractmethod
    def generate(self, requests: Sequence[Request], *, drafter: Any = None, num_spec_tokens: int = 3,
                 spec_policy: Callable[[StepState], bool] | None = None, progress: bool = False,
                 on_output: Callable[[RequestOutput], None] | None = None) -> GenerationResult:
        """Run the requests to completion (continuous batching) and return their outputs.
        drafter: None (no speculation), a drafter name for `samspec_bench.sam.make_drafter`,
        a `Drafter` instance, or an `oracle.OracleDrafter` (capabilities.oracle_drafts): the
        same keyword on every engine, each back end translating it into what it runs.
        spec_policy: speculate this step or not (`policies.py`). on_output is called as each
        request finishes."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def runtime(self) -> dict[str, Any]:
        """What runs the engine, for profiles: version (text), device (None: the host CPU), tp
        (tensor-parallel ranks), threads (None: the caller's torch threads)."""
        return {"version": f"samspec-bench {__version__} {self.name} engine", "device": None, "tp": 1,
                "threads": None}

    def close(self) -> None:
        """Release the engine's memory (the KV cache, the model)."""


class AcceptanceEngine(Protocol):
    """The acceptance contract (module docstring): per-response decode records for drafter
    configurations. `ReplayEngine` replays greedy decoding of the recorded responses; the
    generating engines join through `acceptance.ModelAcceptanceEngine`.

    `items` are tokenized responses (samspec_bench.data.TokenizedResponse: id, group,
    prompt_ids, response_ids, source, line). `run` yields, as work finishes, (index of the
    job, [(index of the item, its ResponseSteps), ...]); a job is (DraftConfig, indices of
    the items to run, whole groups)."""

    name: str
    exact: bool  # True when acceptance is exact for the trace's responses (replay)
    capabilities: EngineCapabilities

    def describe(self) -> dict[str, Any]: ...

    def unsupported(self, cfg: DraftConfig) -> str | None:
        """Why this engine cannot run `cfg` (None when it can)."""

    def run(self, items: Sequence[Any], jobs: Sequence[tuple[DraftConfig, Sequence[int]]]
            ) -> Iterator[tuple[int, list[tuple[int, ResponseSteps]]]]: ...

    def close(self) -> None:
        """Release what the engine holds (a model, its KV cache) once the suite is done."""


class RequestProgress:
    """A rich progress bar over finished requests, shared by the engines (no-op when disabled)."""

    def __init__(self, total: int, enabled: bool, label: str = "generate"):
        self._p = None
        if enabled and total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            # on stderr: stdout may carry a command's --json -
            self._p = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                               transient=True, console=Console(stderr=True))
            self._p.start()
            self._task = self._p.add_task(label, total=total)

    def advance(self, n: int = 1) -> None:
        if self._p is not None:
            self._p.advance(self._task, n)

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
            self._p = None


def make_requests(prompts: Iterable[Sequence[int]], params: SamplingParams | None = None,
                  groups: Iterable[Hashable] | None = None) -> list[Request]:
    """Requests 0..n-1 with the same parameters (seeded requests get seed + index)."""
    params = params or SamplingParams()
    groups = list(groups) if groups is not None else None
    out = []
    for i, p in enumerate(prompts):
        ps = params
        if params.seed is not None:
            ps = dataclasses.replace(params, seed=params.seed + i)
        out.append(Request(i, p, ps, groups[i] if groups is not None else None))
    return out
