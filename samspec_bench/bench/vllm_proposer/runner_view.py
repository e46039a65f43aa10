"""What the SAM proposer reads from vLLM's model runner, the object that constructs it: the
persistent batch's request ids (`runner.input_batch.req_ids[i]`, the lookup vLLM's own suffix
proposer makes), each request's sampling parameters and options, and whether this step
finishes a request. Without a runner (another runner class, a unit test) every answer falls
back to what the rows themselves show. `host_array`: the token buffers vLLM passes, as numpy.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from samspec_bench.bench.vllm_proposer.proposer_options import EXTRA_KEY


def find_runner() -> Any:
    """The model runner constructing the caller: the nearest caller frame whose `self` is a
    model runner (vLLM's GPUModelRunner and its subclasses: CPU, XPU, NPU). Its persistent batch
    (`input_batch`) and request table (`requests`) are created after the drafter, so they are
    looked up at propose time."""
    frame = sys._getframe(1)
    depth = 0
    while frame is not None and depth < 16:
        obj = frame.f_locals.get("self")
        if (obj is not None and obj is not frame.f_locals.get("__class__") and hasattr(obj, "speculative_config")
                and callable(getattr(type(obj), "_update_states", None))):
            return obj
        frame = frame.f_back
        depth += 1
    return None


def host_array(buf, name: str) -> np.ndarray:
    """A token buffer of vLLM's call as numpy: vLLM's model runners pass numpy arrays (the
    persistent batch's host buffers, on GPU as on CPU); a CPU torch tensor is taken as its numpy
    view (no copy). A tensor on a device is refused: reading it would wait for the device."""
    if isinstance(buf, np.ndarray):
        return buf
    device = getattr(buf, "device", None)
    if device is not None and callable(getattr(buf, "numpy", None)):
        if getattr(device, "type", str(device)) != "cpu":
            raise TypeError(f"SamProposer: {name} is a tensor on {device}; the proposer reads host buffers only "
                            f"(vLLM passes numpy arrays): pass {name} on the CPU")
        return buf.numpy()
    return np.asarray(buf)


def input_batch(runner) -> Any:
    return getattr(runner, "input_batch", None) if runner is not None else None


def row_request_ids(runner) -> list | None:
    """The request id of every row of the persistent batch (None: no runner, content mapping)."""
    batch = input_batch(runner)
    return list(batch.req_ids) if batch is not None else None


def sampling_params(runner, rid) -> Any:
    reqs = getattr(runner, "requests", None) if runner is not None else None
    return getattr(reqs.get(rid), "sampling_params", None) if reqs is not None and rid is not None else None


def request_options(runner, rid, defaults: dict) -> dict:
    """The engine-wide defaults overlaid with the request's `extra_args["samspec"]`."""
    opts = dict(defaults)
    extra = getattr(sampling_params(runner, rid), "extra_args", None) or {}
    if isinstance(extra.get(EXTRA_KEY), dict):
        opts.update(extra[EXTRA_KEY])
    return opts


def prompt_len(runner, rid, n: int, num_sampled: int) -> int:
    batch = input_batch(runner)
    if batch is not None and rid is not None:
        idx = batch.req_id_to_index.get(rid)
        if idx is not None:
            return int(batch.num_prompt_tokens[idx])
    # content mapping: a new state is created at its first sample, right after the prefill
    return max(n - num_sampled, 0)


def finishes(runner, rid, sampled, n: int, max_model_len: int) -> bool:
    """Does this step finish the request (vLLM's stop check: max_model_len, max_tokens, EOS
    unless ignore_eos, stop_token_ids)? Needs the runner's request table; without it only
    max_model_len is known."""
    if n >= max_model_len:
        return True
    sp = sampling_params(runner, rid)
    if sp is None or not len(sampled):
        return False
    max_tokens = getattr(sp, "max_tokens", None)
    if max_tokens is not None and n - prompt_len(runner, rid, n, len(sampled)) >= max_tokens:
        return True
    stops = {int(t) for t in (getattr(sp, "stop_token_ids", None) or ())}
    eos = getattr(sp, "eos_token_id", None)
    if eos is not None:
        stops.add(int(eos))
    return bool(stops) and any(int(t) in stops for t in sampled)


def running_next(runner, sampled_token_ids, num_tokens_no_spec, req_ids, max_model_len: int) -> int:
    """Requests that stay in the batch for the next step: this step's rows minus those it
    finishes (the batch-size switch's count, as the scheduler's running count before the
    next step's admissions)."""
    count = 0
    for i, sampled in enumerate(sampled_token_ids):
        rid = req_ids[i] if req_ids is not None and i < len(req_ids) else None
        if req_ids is not None and rid is None:
            continue
        if not finishes(runner, rid, sampled, int(num_tokens_no_spec[i]), max_model_len):
            count += 1
    return count
