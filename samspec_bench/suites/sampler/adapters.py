"""Loading the audited samplers: `--audit module:function` or a built-in name.

A sampler is audited through one of two adapter shapes (both defined, field by field, in
`samspec_bench.bench.rejection.contract`):

1. Probabilities (`RejectionInputs` -> [B, max_spec_len + 1] token ids): the target
   probabilities after temperature / top-k / top-p, the drafts, the bonus tokens (sampled by
   the caller), greedy flags and seeded generators. The caller did the sampling parameters,
   so the audit cannot see how they are handled: the probability battery, the seeded-request
   battery and the greedy check run, the logits battery does not.

       # mysampler.py: the per-token rule, one request and one position at a time
       import torch
       from samspec_bench.bench.rejection import RejectionInputs

       def verify(inp: RejectionInputs) -> torch.Tensor:
           out = torch.full((inp.batch_size, inp.max_spec_len + 1), -1, dtype=torch.long,
                            device=inp.target_probs.device)
           start = 0
           for b, n in enumerate(inp.num_draft_tokens):
               g = inp.generators.get(b)                    # a seeded request's generator, or None
               for j in range(n + 1):
                   if j == n:                               # every draft accepted: the bonus token
                       out[b, j] = int(inp.bonus_token_ids[b, 0])
                       break
                   x, p = int(inp.draft_token_ids[start + j]), inp.target_probs[start + j].double()
                   if inp.draft_probs is None:              # a deterministic draft: q is one-hot
                       q = torch.zeros_like(p)
                       q[x] = 1.0
                   else:
                       q = inp.draft_probs[start + j].double()
                   if bool(inp.is_greedy[b]):               # greedy: the argmax path
                       out[b, j] = int(p.argmax())
                       if out[b, j] != x:
                           break
                   elif torch.rand((), dtype=torch.float64, generator=g) * q[x] < p[x]:
                       out[b, j] = x                        # accepted with probability min(1, p(x) / q(x))
                   else:                                    # rejected: a token of max(0, p - q)
                       out[b, j] = int(torch.multinomial((p - q).clamp_min(0), 1, generator=g))
                       break
               start += n
           return out

       samspec-bench sampler --no-builtin --audit mysampler:verify

2. Logits (`LogitsInputs`: raw target logits [num_tokens, V], bonus logits [B, V] and a
   `SamplingBatch` with each request's temperature, top-k, top-p and optional generator, as
   vLLM's verify step receives them): the sampler applies the sampling parameters and
   samples the bonus token itself. The audit runs the probability battery through it
   (logits log p at temperature 1), the logits battery (per-request temperature / top-k /
   top-p mixed in every batch), the seeded-request battery and the greedy check (temperature
   0). A function declares this shape by annotating its one parameter as `LogitsInputs`, or
   by having `speculative_sample`'s parameters (draft_token_ids, num_draft_tokens,
   target_logits, bonus_logits, sampling):

       from samspec_bench.bench.rejection import LogitsInputs, compute_probs, cu_num_tokens, rejection_sample

       def verify(inp: LogitsInputs):
           s = inp.sampling
           probs = compute_probs(inp.target_logits, inp.cu_num_draft_tokens, s)
           bonus = compute_probs(inp.bonus_logits, cu_num_tokens([1] * inp.batch_size), s)
           return rejection_sample(inp.draft_token_ids, inp.num_draft_tokens, probs,
                                   max_spec_len=inp.max_spec_len, draft_probs=inp.draft_probs,
                                   bonus_probs=bonus, is_greedy=s.is_greedy(), generators=s.generators)

A function with vLLM's `rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len,
cu_num_draft_tokens, draft_probs, target_probs | target_logits, bonus_token_ids,
sampling_metadata)` signature is adapted to the probability shape automatically: token ids are
passed as int32, `target_logits` (vLLM >= 0.1x, softmax applied inside) as
log-probabilities, and `sampling_metadata` as an object with all_greedy, all_random,
temperature (the module's GREEDY_TEMPERATURE for greedy rows, else 1), generators, top_k =
top_p = None. For vLLM modules on CPU the platform's kernel overrides are registered first,
as the engine does at start-up. The audit seeds the default generator before every call, so a
verdict is reproducible.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import sys
import types
from typing import Callable, Optional

import torch

from samspec_bench.errors import UserError
from samspec_bench.suites.sampler.config import BUILTIN_AUDITS, LOGITS_LEVEL, moved_target
from samspec_bench.suites.sampler.vllm import register_cpu_kernels


def _cwd_importable() -> None:
    """The working directory on sys.path (last, shadowing nothing installed), as `python -m`
    has it: `--audit mysampler:verify` finds ./mysampler.py, as the README's example runs it
    (a console script's sys.path holds its own folder, not the working directory)."""
    cwd = os.getcwd()
    if not any(p in ("", ".", cwd) for p in sys.path):
        sys.path.append(cwd)


def _resolve_target(spec: str):
    """'module:function' -> the function. UserError naming the input when that fails."""
    if ":" not in spec:
        raise UserError(f"--audit {spec}: expected module:function or one of the built-in names "
                        f"({', '.join(BUILTIN_AUDITS)})")
    mod_name, fn_name = spec.split(":", 1)
    _cwd_importable()
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's input problem
        raise UserError(f"--audit {spec}: cannot import {mod_name!r} ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}); install it or fix the module path") from None
    fn = mod
    for part in fn_name.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise UserError(f"--audit {spec}: {mod_name} has no attribute {fn_name!r}; "
                            "pass module:function of a rejection sampler")
    if not callable(fn):
        raise UserError(f"--audit {spec}: {fn_name} is not callable; pass a sampler function")
    return fn


VLLM_PARAMS = ("draft_token_ids", "num_draft_tokens", "max_spec_len", "cu_num_draft_tokens", "draft_probs",
               "target_probs", "target_logits", "bonus_token_ids", "sampling_metadata")
LOGITS_PARAMS = ("draft_token_ids", "num_draft_tokens", "target_logits", "bonus_logits", "sampling")


def _annotation_name(p: inspect.Parameter) -> str:
    a = p.annotation
    return a if isinstance(a, str) else getattr(a, "__name__", "")


def adapt(fn: Callable, spec: str) -> tuple[Callable, str, str]:
    """(a contract-style callable, its shape "probs" | "logits", the style detected)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn, "probs", "contract"
    names = list(params)
    required = [n for n, p in params.items() if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if all(n in names for n in LOGITS_PARAMS) and "sampling_metadata" not in names:
        return _speculative_adapter(fn, names), "logits", "speculative_sample"
    if "sampling_metadata" in names or (("target_probs" in names or any(n.startswith("target_logits") for n in names))
                                        and "cu_num_draft_tokens" in names):
        unknown = [n for n in required if n not in VLLM_PARAMS and not n.startswith("target_logits")]
        if unknown:
            raise UserError(f"--audit {spec}: vLLM-style signature with unknown required parameters "
                            f"{unknown}; wrap it in a function taking RejectionInputs "
                            "(see samspec_bench.bench.rejection.RejectionInputs)")
        return _vllm_adapter(fn, names), "probs", "vllm"
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is inspect.Parameter.empty]
    if len(positional) > 1:
        raise UserError(f"--audit {spec}: takes {len(positional)} required arguments; a sampler must take one "
                        "RejectionInputs or LogitsInputs (or have vLLM's rejection_sample signature)")
    # the battery calls fn(inputs): a function that cannot take it fails every call (not a finding)
    takes_one = any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params.values())
    keyword_only = [n for n, p in params.items() if p.kind == p.KEYWORD_ONLY and p.default is inspect.Parameter.empty]
    if not takes_one or keyword_only:
        why = "takes no positional argument" if not takes_one else f"requires keyword-only {', '.join(keyword_only)}"
        raise UserError(f"--audit {spec}: {why}; a sampler must take one RejectionInputs or LogitsInputs (or have "
                        "vLLM's rejection_sample signature)")
    if positional and _annotation_name(positional[0]).endswith("LogitsInputs"):
        return _token_ids(fn), "logits", "contract"
    return fn, "probs", "contract"


def _token_ids(fn: Callable) -> Callable:
    """The sampler's output as a tensor (a SpecSampleOutput-like result gives its token_ids)."""
    def call(inp):
        out = fn(inp)
        return getattr(out, "token_ids", out)
    return call


def _speculative_adapter(fn: Callable, names: list[str]) -> Callable:
    def call(inp):
        extra = {"draft_probs": inp.draft_probs, "cu_num_draft_tokens": inp.cu_num_draft_tokens,
                 "max_spec_len": inp.max_spec_len}
        out = fn(inp.draft_token_ids, inp.num_draft_tokens, inp.target_logits, inp.bonus_logits, inp.sampling,
                 **{k: v for k, v in extra.items() if k in names})
        return getattr(out, "token_ids", out)
    return call


def _vllm_adapter(fn: Callable, names: list[str]) -> Callable:
    mod = inspect.getmodule(fn)
    if getattr(mod, "__name__", "").startswith("vllm."):
        register_cpu_kernels()
    greedy_temp = getattr(mod, "GREEDY_TEMPERATURE", 0)
    greedy_temp = float(getattr(greedy_temp, "value", greedy_temp))

    def call(inp):
        dev = inp.target_probs.device
        temp = torch.where(inp.is_greedy.to(dev), torch.tensor(greedy_temp, device=dev),
                           torch.tensor(1.0, device=dev)).to(torch.float32)
        md = types.SimpleNamespace(
            all_greedy=inp.all_greedy, all_random=inp.all_random, temperature=temp,
            top_k=None, top_p=None, min_p=None, generators=inp.generators, max_num_logprobs=None,
            no_penalties=True, prompt_token_ids=None, frequency_penalties=None, presence_penalties=None,
            repetition_penalties=None, output_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={},
            logitsprocs=None)
        # Token ids as vLLM's engine passes them (int32, like SamplerOutput.sampled_token_ids).
        values = {"draft_token_ids": inp.draft_token_ids.to(torch.int32), "num_draft_tokens": list(inp.num_draft_tokens),
                  "max_spec_len": inp.max_spec_len, "cu_num_draft_tokens": inp.cu_num_draft_tokens,
                  "draft_probs": inp.draft_probs, "target_probs": inp.target_probs,
                  "bonus_token_ids": inp.bonus_token_ids.to(torch.int32), "sampling_metadata": md}
        for n in names:
            if n.startswith("target_logits"):  # target_logits (vLLM >= 0.1x), target_logits_or_tuple (vllm-ascend)
                # Processed logits, softmax applied inside: softmax(log p) = p, argmax(log p) = argmax(p).
                values[n] = torch.log(inp.target_probs)
        return fn(**{n: values[n] for n in names if n in values})

    return call


@dataclasses.dataclass
class Audited:
    """One sampler to audit: fn takes RejectionInputs, logits_fn takes LogitsInputs (either
    may be None; a built-in has both). shape: the one the user's function has."""
    name: str
    target: str
    description: str
    fn: Optional[Callable] = None
    style: str = "contract"
    logits_fn: Optional[Callable] = None
    skipped: Optional[str] = None
    explicit: bool = False
    shape: str = "probs"


def resolve_audit(spec: str, explicit: bool) -> Audited:
    """A built-in name or module:function -> the sampler to audit. What does not load is
    skipped, except an explicit --audit (other than vllm / vllm-ascend): a UserError."""
    if spec in BUILTIN_AUDITS:
        target, desc = BUILTIN_AUDITS[spec]
        name = spec
    else:   # a moved module's old name loads from the new one; the run keeps the user's spelling
        target, desc, name = moved_target(spec), "user-supplied sampler", spec
    try:
        fn = _resolve_target(target)
    except UserError as e:
        if explicit and spec not in ("vllm", "vllm-ascend"):
            raise
        msg = str(e).split(": ", 1)[-1]
        return Audited(name, target, desc, skipped=msg.split("; install")[0].replace("cannot import", "not importable:"))
    wrapped, shape, style = adapt(fn, spec)
    if shape == "logits":
        return Audited(name, target, desc, None, style, wrapped, explicit=explicit, shape="logits")
    logits_fn = _token_ids(_resolve_target(LOGITS_LEVEL[name])) if name in LOGITS_LEVEL else None
    return Audited(name, target, desc, wrapped, style, logits_fn, explicit=explicit)
