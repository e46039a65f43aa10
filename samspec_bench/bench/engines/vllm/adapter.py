"""The vLLM back end (`--engine vllm`): the engine interface of `engines/base.py` over vLLM's
offline engine, with SAM as a vLLM drafter (`drafter.SamProposer`, method `custom_class`)
next to vLLM's own `ngram` and `suffix` methods.

    eng = VllmEngine(BUILTIN_MODEL, speculative="sam", num_spec_tokens=3,
                     engine_args={"max_num_seqs": 64, "tensor_parallel_size": 1})
    base = eng.generate(reqs)                        # SAM engine, drafter off: same scheduling
    spec = eng.generate(reqs, drafter="sam")
    ngram = eng.generate(reqs, drafter="ngram")      # rebuilds the engine with method ngram

vLLM fixes the speculative method and k when the engine is built, so `generate` reuses the
engine when it can and otherwise closes it and builds one for the method asked: the no-spec
arm runs on a SAM engine with the drafter switched off per request (identical scheduling to
the SAM arm), or on a plain engine when the engine was built with `speculative=None`; `sam`
runs with any k up to the engine's; `ngram`/`suffix` need an engine of their own.
Engine arguments pass through unchanged (`engine_args`, from `--engine-arg key=value` or a
JSON file): tensor/data/pipeline parallel sizes, max_num_seqs, dtype, ..., so a run is
configured the way vLLM users already configure it.

Beside it: `step_records` (per-step and per-request records rebuilt from vLLM's stats and
metrics), `guard_rails` (what was actually built, printed at start-up), `platform` (the
installed vLLM), `compare` (none / ngram / suffix / sam on the same prompts, a CLI).

vLLM is imported lazily: this module imports without it.
"""

from __future__ import annotations

import dataclasses
import difflib
import gc
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

from samspec_bench.bench.engines.base import (FINISH_LENGTH, FINISH_STOP, Engine, GenerationResult, Request,
                                              RequestOutput, RequestProgress)
from samspec_bench.bench.engines.vllm import guard_rails
from samspec_bench.bench.engines.vllm.drafter import CLASS_PATH, EXTENSION_PATH, EXTRA_KEY
from samspec_bench.bench.engines.vllm.platform import engine_arg_exists, on_cpu, require_vllm
from samspec_bench.bench.engines.vllm.proposer_timing import summary as proposer_summary
from samspec_bench.bench.engines.vllm.step_records import (STEP_RECORDS, LiveRequest, StepLog, StepStats, add_raw,
                                                           counter_diff, hook_step_stats, new_raw_counts,
                                                           response_steps)
from samspec_bench.bench.policies import NeverSpeculate, SpecPolicy, describe_policy
from samspec_bench.errors import UserError
from samspec_bench.models import BUILTIN_MODEL, resolve_model
from samspec_bench.sam.draft_length import parse_length
from samspec_bench.sam.drafters import SamDrafter

METHODS = ("sam", "ngram", "suffix")


# --- engine arguments ------------------------------------------------------------------------------

def parse_engine_args(pairs: Sequence[str] = (), json_file: str | None = None) -> dict[str, Any]:
    """`--engine-arg key=value` (repeatable; values parsed as JSON when they parse, else kept
    as strings: `tensor_parallel_size=2`, `dtype=bfloat16`, `speculative_config={"...": 1}`)
    over an optional JSON file of the same keys (`--engine-args-file`)."""
    out: dict[str, Any] = {}
    if json_file:
        p = Path(json_file)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except OSError:
            raise UserError(f"--engine-args-file {p}: cannot read it; pass a JSON file of vLLM engine arguments") from None
        except ValueError as e:
            raise UserError(f"--engine-args-file {p}: not JSON ({e}); pass an object like "
                            '{"tensor_parallel_size": 2, "max_num_seqs": 128}') from None
        if not isinstance(data, dict):
            raise UserError(f"--engine-args-file {p}: expected a JSON object of vLLM engine arguments")
        out.update(data)
    for item in pairs:
        key, sep, raw = str(item).partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UserError(f"--engine-arg {item!r}: expected key=value (e.g. max_num_seqs=64)")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def _check_engine_args(args: dict[str, Any]) -> None:
    try:
        from vllm.engine.arg_utils import EngineArgs  # imports vLLM
    except Exception:  # noqa: BLE001
        return
    known = {f.name for f in dataclasses.fields(EngineArgs)}
    bad = [k for k in args if k not in known]
    if bad:
        close = difflib.get_close_matches(bad[0], sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"engine argument {bad[0]!r} is not a vLLM EngineArgs field{hint}: see "
                        "`vllm serve --help` for the names (dashes become underscores)")


def speculative_config(method: str | None, k: int, options: dict[str, Any] | None = None) -> dict | None:
    """The `speculative_config` for a method: SAM through custom_class, vLLM's ngram / suffix."""
    if method is None:
        return None
    if method == "sam":
        cfg = {"method": "custom_class", "model": CLASS_PATH, "num_speculative_tokens": k}
    elif method == "ngram":
        cfg = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    elif method == "suffix":
        cfg = {"method": "suffix", "num_speculative_tokens": k}
    else:
        raise UserError(f"speculative method {method!r}: use one of {', '.join(METHODS)} (or none)")
    cfg.update(options or {})
    return cfg


# --- the engine -------------------------------------------------------------------------------------

class VllmEngine(Engine):
    """See the module docstring. `model`: builtin:<name>, a checkpoint directory, or any model
    name vLLM resolves itself. `speculative`: the method the engine is built with first
    ("sam", "ngram", "suffix" or None). `engine_args` go to `vllm.LLM` unchanged and win
    over the defaults set here (dtype, max_model_len, seed, enforce_eager on CPU)."""

    name = "vllm"

    def __init__(self, model: str = BUILTIN_MODEL, *, speculative: str | None = "sam",
                 num_spec_tokens: int = 3, dtype: str = "float32", max_model_len: int | None = 4096,
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
        if "speculative_config" in self.user_engine_args:
            raise UserError("engine argument speculative_config is set by the vLLM engine from the drafter "
                            "(sam / ngram / suffix): pass the method with --drafter and its options with "
                            "speculative_options")
        _check_engine_args(self.user_engine_args)
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
        args: dict[str, Any] = {"model": self.model_path, "dtype": self.dtype, "seed": self.seed,
                                "disable_log_stats": False, "worker_extension_cls": EXTENSION_PATH}
        if self.max_model_len:
            args["max_model_len"] = int(self.max_model_len)
        if on_cpu():
            args["enforce_eager"] = True   # torch.compile on CPU costs minutes at start-up
        if method is not None:
            args["speculative_config"] = speculative_config(method, k, self.speculative_options.get(method))
            args["per_request_spec_decode_metrics"] = "detailed"
        if engine_arg_exists("enable_logging_iteration_details"):
            args["enable_logging_iteration_details"] = True   # per-step batch and tokens (StepRecord)
        args.update(self.user_engine_args)
        if args.get("worker_extension_cls") != EXTENSION_PATH:
            self._log("vllm: worker_extension_cls was overridden: SAM's per-request records cannot be fetched")
        return args

    def _build(self, method: str | None, k: int) -> None:
        self.close()
        from vllm import LLM  # imports vLLM

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache on CPU (vLLM's CPU knob)
        args = self.engine_args(method, k)
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
                "engine_args": {k: v for k, v in getattr(self, "_engine_args_used", {}).items()},
                "startup_s": self.startup_s, "guard_rails": self.guard_rails,
                "proposer_time": dict(self.proposer_totals),
                "step_records": STEP_RECORDS}

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
                 on_output: Callable[[RequestOutput], None] | None = None,
                 oracle: dict[Hashable, Sequence[int]] | None = None) -> GenerationResult:
        """drafter: None, "sam", "sam-fixed", "ngram", "suffix" or a `SamDrafter` (its group sharing,
        l_threshold and draft length spec are used). oracle: {req_id: continuation}: draft exactly that
        continuation (teacher-forced verification; op-equivalence). spec_policy: None, off, always or the batch-size
        threshold policy (`policies.make_policy`; SAM only: the proposer drafts only when at most T requests stay
        in the batch); other callables are refused."""
        sam_opts: dict[str, Any] = {}
        drafter = SamDrafter(length="fixed") if drafter == "sam-fixed" else drafter   # replay's name for the baseline
        if isinstance(drafter, SamDrafter):
            if drafter.corpus is not None:
                raise UserError("a SAM drafter with a static corpus cannot run inside vLLM yet: drop the corpus")
            length = drafter.length.spec() if drafter.length_given else None   # None: drafter.ENGINE_LENGTH
            try:   # the spec travels to vLLM's process as text: it must parse back to the same policy
                parse_length(length)
            except ValueError:
                raise UserError(f"SAM draft length {length}: inside vLLM use a spec string: fixed, evidence or "
                                "evidence:cost=0.2 (a profile callable or an adaptive rule cannot reach the "
                                "engine's process)") from None
            sam_opts = {"min_match": drafter.l_threshold, "group_sharing": drafter.group_sharing, "length": length}
            drafter = "sam"
        elif drafter is not None and not isinstance(drafter, str):
            raise UserError(f"drafter {type(drafter).__name__}: the vLLM engine takes 'sam', 'ngram', 'suffix' "
                            "or a SamDrafter (the drafter runs inside vLLM's process)")
        if oracle is not None:
            drafter = "sam"
        if drafter is not None and drafter not in METHODS:
            raise UserError(f"drafter {drafter!r}: the vLLM engine runs {', '.join(METHODS)} (or none)")
        drafter, threshold = _policy_inside_vllm(spec_policy, drafter)
        k = int(num_spec_tokens) if drafter is not None else 0
        if drafter is not None and k < 1:
            raise UserError(f"num_spec_tokens = {num_spec_tokens}: must be >= 1 with a drafter")
        ids = [r.req_id for r in requests]
        if len(set(ids)) != len(ids):
            raise UserError("request ids must be unique within one generate() call")
        self._ensure(drafter, k)
        from vllm import SamplingParams as VSP  # imports vLLM
        from vllm.sampling_params import RequestOutputKind

        on_sam_engine = self._method == "sam"
        lives: dict[str, LiveRequest] = {}
        engine = self._llm.llm_engine
        before = self.spec_counters()
        if self._timed:
            self._rpc("samspec_take_propose_times")   # drop what earlier calls (the probe) left
        held = _hold_scheduler(engine)   # every request in the first step's queue, as a rollout starts
        t0 = time.perf_counter()
        order: list[LiveRequest] = []
        for i, r in enumerate(requests):
            p = r.params
            key = f"samspec-{next(self._ids)}"
            extra = None
            if on_sam_engine:
                ex: dict[str, Any] = {"key": key, "mode": "none" if drafter is None else "sam"}
                if drafter is not None:
                    ex["k"] = k
                    if threshold is not None:
                        ex["threshold"] = threshold
                    if sam_opts.get("min_match", 1) != 1:
                        ex["min_match"] = int(sam_opts["min_match"])
                    if sam_opts.get("length") is not None:
                        ex["length"] = sam_opts["length"]
                    if sam_opts.get("group_sharing"):
                        ex["group"] = str(r.group if r.group is not None else key)
                if oracle is not None:
                    ex["mode"] = "oracle"
                    ex["oracle"] = [int(t) for t in oracle.get(r.req_id, [])]
                extra = {EXTRA_KEY: ex}
            vsp = VSP(temperature=float(p.temperature) if not p.greedy else 0.0,
                      top_k=int(p.top_k) if p.top_k > 0 else 0, top_p=float(p.top_p),
                      seed=p.seed if not p.greedy else None, max_tokens=int(p.max_tokens),
                      stop_token_ids=list(p.stop_token_ids), ignore_eos=bool(p.ignore_eos),
                      stop=list(p.stop), logprobs=p.logprobs, detokenize=bool(p.stop), extra_args=extra,
                      output_kind=RequestOutputKind.DELTA)
            live = LiveRequest(r, i, key, top=[] if p.logprobs else None)
            lives[key] = live
            order.append(live)
            try:
                engine.add_request(key, {"prompt_token_ids": list(r.prompt_ids)}, vsp)
            except ValueError as e:
                for lv in order[:-1]:
                    engine.abort_request([lv.key])
                _release_scheduler(engine, held)
                raise UserError(f"request {r.req_id!r}: vLLM refused it ({str(e).splitlines()[0]})") from None
        _release_scheduler(engine, held)
        bar = RequestProgress(len(order), progress, "generate (vllm)")
        log = StepLog(self._step_stats, drafting=drafter is not None, threshold=threshold, requests=len(order))
        try:
            while engine.has_unfinished_requests():
                outs = engine.step()
                now = time.perf_counter()
                emitted_total = 0
                n_fin = 0
                for o in outs:
                    live = lives.get(o.request_id)
                    if live is None:
                        continue
                    c = o.outputs[0]
                    emitted_total += live.add(c, now - t0)
                    if o.finished and not live.done:
                        live.done = True
                        live.finish = c.finish_reason
                        live.finish_t = now - t0
                        live.spec_metrics = c.spec_decode_metrics
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
        wall = time.perf_counter() - t0
        records = {}
        if on_sam_engine:
            got = self._rpc("samspec_take_records", [lv.key for lv in order])
            if isinstance(got, list):
                records = {r["key"]: r for r in got}
        proposer = None
        if self._timed:
            proposer = proposer_summary(self._rpc("samspec_take_propose_times"), wall, len(log.steps))
            if proposer is not None:
                self.proposer_totals["propose_calls"] += proposer["propose_calls"]
                self.proposer_totals["propose_s"] += proposer["total_s"]
                self.proposer_totals["generate_wall_s"] += wall
        after = self.spec_counters()
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
        counters = {name: counter_diff(after.get(name), before.get(name)) for name in after}
        eng = {**self.describe(), "spec_counters": counters, "spec_policy": describe_policy(spec_policy),
               "batch_switch_threshold": threshold,
               "drafter_raw_counts": raw if records else None,
               "proposer": proposer,
               "arm": ("none" if drafter is None else drafter) + (" (oracle)" if oracle is not None else ""),
               "baseline_on_spec_engine": drafter is None and on_sam_engine}
        return GenerationResult(outputs=outputs, steps=log.steps, wall_time_s=wall, engine=eng,
                                drafter=None if drafter is None else {"name": drafter, "engine": "vllm", **sam_opts},
                                num_spec_tokens=k)

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


def _policy_inside_vllm(policy: Any, drafter: Any) -> tuple[Any, int | None]:
    """(drafter, threshold) for a speculation policy: never -> no drafter; always -> as is;
    the batch-size threshold policy -> its threshold, applied by the SAM proposer inside vLLM
    (it drafts only when at most T requests stay in the batch). Other per-step callables
    cannot run inside vLLM's scheduler."""
    if policy is None:
        return drafter, None
    if isinstance(policy, NeverSpeculate):
        return None, None
    name = getattr(policy, "name", None)
    t = getattr(policy, "threshold", None)
    if isinstance(policy, SpecPolicy) and name == "threshold" and isinstance(t, int) and t >= 0:
        if drafter is not None and drafter != "sam":
            raise UserError(f"spec_policy threshold<={t}: the batch-size switch runs inside the SAM proposer; "
                            f"use drafter 'sam' (not {drafter!r}) or no policy")
        return drafter, (t if drafter is not None else None)
    if isinstance(policy, SpecPolicy) and name == "always":
        return drafter, None
    raise UserError(f"spec_policy {describe_policy(policy)}: inside vLLM only off, always and the batch-size "
                    "threshold policy run (policies.make_policy); use one of those")


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


def get_engine(model: str = BUILTIN_MODEL, *, dtype: str = "float32", num_spec_tokens: int = 3,
               max_model_len: int | None = 4096, engine_args: dict[str, Any] | None = None,
               speculative: str | None = "sam") -> VllmEngine:
    """A VllmEngine shared by everything in this process that asks for the same model, dtype,
    max_model_len and engine arguments (vLLM start-up takes tens of seconds on CPU). Asking
    for another configuration closes the shared one first (one engine's memory at a time).
    Without engine arguments any shared engine of the same model, dtype and max_model_len is
    reused. The engine is built with `speculative` and k=`num_spec_tokens` on first use;
    `generate` rebuilds it only when a call needs another method or a larger k."""
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
