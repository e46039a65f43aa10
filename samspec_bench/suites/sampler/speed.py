"""Speed: the vectorised sampler against both loop references on the same inputs and the
same uniforms (outputs compared), per batch size, k and vocabulary, on the run's device.

What a millisecond is depends on the device, and every row says which (`timer`): on the CPU,
the median CPU time of the calling thread (run with one intra-op thread, the work done,
whatever else the machine runs), the fastest wall time beside it; on an accelerator, device
time (events on the device's stream, read after synchronising: `devices.DeviceTimer`), median
and fastest call. The host's wall clock around asynchronous launches would time the launches.

Two loop references, because "the loop" is not one baseline: the eager one draws a recovered
token at every draft position first (as vllm-ascend's PyTorch fallback and vLLM's kernels
do), the lazy one only at the first rejection. The vectorised sampler is lazy, so its ratio
to the lazy loop is the part of the speed-up that vectorisation alone buys.

Where vLLM imports, its own `rejection_sample` runs on the same drafts (its own random
numbers: outputs are not compared). It takes processed logits and applies the softmax
inside, so it is compared with the vectorised sampler timed from the same logits (softmax
included): ratio_vs_vllm = vllm_ms / vectorised_logits_ms."""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import gc
import time
from typing import Any, Callable, Optional

import numpy as np
import torch

from samspec_bench.bench.rejection import draw_uniforms, rejection_sample
from samspec_bench.bench.rejection.loop import rejection_sample_loop
from samspec_bench.devices import DeviceTimer, device_kind, out_of_memory, resolve_device, synchronize, timer_label
from samspec_bench.errors import UserError
from samspec_bench.suites.sampler.config import SamplerConfig
from samspec_bench.suites.sampler.vllm import vllm_rejection_call


def speed_timer(device: str, threads: int) -> str:
    """What the speed table's (median) milliseconds are on this device."""
    if device_kind(device) == "cpu":
        return f"CPU time of the calling thread (thread_time), {threads} intra-op thread(s), median"
    return f"{timer_label(device)}, median"


def fastest_timer(device: str) -> str:
    """What the fastest-call columns (`*_min_ms`, `ratio_min`) are on this device."""
    return "CPU wall clock (perf_counter)" if device_kind(device) == "cpu" else timer_label(device)


def _speed_table(V: int, rows: int, acc: float, gen, device: str = "cpu") -> tuple:
    """Target rows with p(draft) = acc, the rest spread at random; and the draft ids (on `device`,
    drawn by `gen`, a generator of that device)."""
    tp = torch.rand((rows, V), generator=gen, device=device)
    draft = torch.randint(0, V, (rows,), generator=gen, device=device)
    ar = torch.arange(rows, device=device)
    tp[ar, draft] = 0
    tp.mul_((1 - acc) / tp.sum(-1, keepdim=True))
    tp[ar, draft] = acc
    return tp, draft


def _generator(device: str, seed: int) -> torch.Generator:
    """The grid's random inputs are drawn on the device itself (no host-to-device copies)."""
    return torch.Generator(device=device).manual_seed(seed)


@dataclasses.dataclass
class Timing:
    ms: float        # median by the device's timer (CPU: the calling thread's CPU time; else device time)
    min_ms: float    # the fastest call (CPU: wall clock; else device time)
    calls: int


def _clock(device: str) -> Callable:
    """One timed call: fn -> (fn's result, seconds by the table's timer, seconds for the fastest call)."""
    if device_kind(device) == "cpu":
        def call(fn):
            c0, w0 = time.thread_time(), time.perf_counter()
            res = fn()
            return res, time.thread_time() - c0, time.perf_counter() - w0
        return call
    timer = DeviceTimer(device)

    def timed(fn):
        with timer.span():
            res = fn()
        return res, timer.ms[-1] / 1e3, timer.ms[-1] / 1e3
    return timed


def _time(fn, device: str, min_reps: int, min_seconds: float, max_reps: int = 50) -> tuple[Timing, Any]:
    """Time fn(): >= min_reps calls (more while under min_seconds; one when a call takes > 2 s),
    after one untimed warm-up call (counted when it took > 2 s). Returns the timing and the first call's result."""
    clock = _clock(device)
    synchronize(device)   # nothing queued before the first call counts
    gc.collect()
    gc.disable()  # no collector pauses inside the timed calls
    try:
        res, *first = clock(fn)
        samples = [] if first[1] < 2.0 else [tuple(first)]
        start = time.perf_counter()
        while len(samples) < max_reps and (len(samples) < min_reps or time.perf_counter() - start < min_seconds):
            if first[1] > 2.0 and samples:
                break
            samples.append(tuple(clock(fn)[1:]))
    finally:
        gc.enable()
    ms = float(np.median([m for m, _ in samples]) * 1e3)
    fastest = float(min(f for _, f in samples) * 1e3)
    return Timing(ms, fastest, len(samples)), res


def steady_state_allocator() -> Optional[str]:
    """glibc only: serve buffers up to 32 MiB from the heap and keep freed memory, so repeated
    [V]-sized temporaries are not fresh page-faulting mmaps. On the 2-core VMs this project
    runs on, those page faults cost the loop reference up to ~8x more than the work itself
    (and the vectorised sampler far less), which would inflate the speed-up; this measures a
    warmed-up long-running process instead. Returns what was set, None when not available."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        if libc.mallopt(M_MMAP_THRESHOLD, 32 << 20) and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30):
            return "glibc mallopt(M_MMAP_THRESHOLD=32MiB, M_TRIM_THRESHOLD=1GiB)"
    except (OSError, AttributeError):
        pass
    return None


def speed_benchmark(cfg: SamplerConfig, progress=None, done: Optional[dict] = None, on_row=None) -> list[dict]:
    """Vectorised sampler vs loop reference over the grid, on cfg.device (`auto` resolved here
    when the caller did not); one row per (vocab, k, batch), each naming its device and timers."""
    cfg = dataclasses.replace(cfg, device=resolve_device(cfg.device))
    allocator = steady_state_allocator() if cfg.speed_steady_allocator else None
    grid = [(V, k, B) for V in cfg.speed_vocabs for k in cfg.speed_ks for B in cfg.speed_batches]
    task = progress.add_task("speed", total=len(grid)) if progress is not None else None
    rows = []
    done = done or {}
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, cfg.speed_threads))
    try:
        _speed_grid(cfg, progress, task, rows, done, on_row)
    finally:
        torch.set_num_threads(threads)
    for r in rows:
        r.setdefault("allocator", allocator)
    if task is not None:
        progress.update(task, visible=False)
    return rows


def _warm_up(tp_all, draft_all, batches, ks, device: str) -> None:
    """Untimed calls: the first few that allocate [V]-sized buffers run several times slower
    (page faults while the allocator adapts; kernels loading on an accelerator); measured on
    the CPU, it settles within ~5 calls."""
    wb, wk = min(16, max(batches)), min(3, max(ks))
    wn = [wk] * wb
    d, p = draft_all[: wb * wk], tp_all[: wb * wk]
    wkw = dict(bonus_token_ids=torch.zeros(wb, dtype=torch.long, device=device),
               uniforms=draw_uniforms(wn, device=device))
    for _ in range(6):
        rejection_sample(d, wn, p, **wkw)
        rejection_sample(d, wn, p, recover="eager", **wkw)
        rejection_sample_loop(d, wn, p, **wkw)
        rejection_sample_loop(d, wn, p, eager_recovered=False, **wkw)


def _speed_grid(cfg, progress, task, rows, done, on_row):
    dev = cfg.device
    vllm_ok = vllm_rejection_call(torch.zeros(1, dtype=torch.long, device=dev), [1], torch.zeros(1, 8, device=dev),
                                  torch.zeros(1, device=dev)) is not None
    labels = {"device": dev, "timer": speed_timer(dev, cfg.speed_threads), "fastest_timer": fastest_timer(dev)}
    max_rows = max(cfg.speed_ks) * max(cfg.speed_batches)
    for V in cfg.speed_vocabs:
        point = f"--speed-vocab {V} with --speed-k {max(cfg.speed_ks)} x --speed-batch {max(cfg.speed_batches)}"
        try:
            gen = _generator(dev, cfg.seed + V)
            tp_all, draft_all = _speed_table(V, max_rows, cfg.speed_acceptance, gen, dev)
            _warm_up(tp_all, draft_all, cfg.speed_batches, cfg.speed_ks, dev)
            for k in cfg.speed_ks:
                for B in cfg.speed_batches:
                    point = f"--speed-vocab {V} with --speed-k {k} x --speed-batch {B}"
                    key = f"{V}/{k}/{B}"
                    if key in done:
                        rows.append(done[key])
                    else:
                        row = {**_time_point(cfg, V, k, B, tp_all, draft_all, gen, vllm_ok), **labels}
                        rows.append(row)
                        if on_row:
                            on_row(key, row)
                    if task is not None:
                        progress.advance(task)
        except (MemoryError, RuntimeError) as e:
            if not out_of_memory(e):
                raise
            # the grid's size is the user's input: bad input (exit 2), not an internal error
            raise UserError(f"{point}: the speed inputs ({max_rows * V * 4 / 2 ** 30:.1f} GiB of float32 "
                            f"probabilities, and copies of them) do not fit in {dev}'s memory; lower --speed-batch, "
                            "--speed-k or --speed-vocab") from None
        tp_all = draft_all = None
        gc.collect()


def _time_point(cfg, V: int, k: int, B: int, tp_all, draft_all, gen, vllm_ok: bool) -> dict:
    """One grid point: every sampler timed on the same inputs and uniforms (on cfg.device)."""
    dev = cfg.device
    N = B * k
    tp, draft = tp_all[:N], draft_all[:N]
    nums = [k] * B
    bonus = torch.randint(0, V, (B,), generator=gen, device=dev)
    torch.manual_seed(cfg.seed + N)
    kw = dict(bonus_token_ids=bonus, uniforms=draw_uniforms(nums, device=dev))
    ms = cfg.speed_min_seconds
    reps = max(1, cfg.speed_reps)
    t_vec, out_vec = _time(lambda: rejection_sample(draft, nums, tp, **kw), dev, max(5, reps), ms)
    t_vec_eager, out_eager = _time(lambda: rejection_sample(draft, nums, tp, recover="eager", **kw), dev, reps, ms)
    t_loop, out_loop = _time(lambda: rejection_sample_loop(draft, nums, tp, **kw), dev, reps, ms)
    t_loop_lazy, _ = _time(lambda: rejection_sample_loop(draft, nums, tp, eager_recovered=False, **kw), dev, reps, ms)
    logits = torch.log(tp)
    t_vec_logits, _ = _time(lambda: rejection_sample(draft, nums, torch.softmax(logits, -1), **kw), dev,
                            max(5, reps), ms)
    t_vllm = None
    if vllm_ok:
        t_vllm, _ = _time(vllm_rejection_call(draft, nums, logits, bonus), dev, max(5, reps), ms)
    acc = float(((out_vec != -1).sum(1) - 1).float().mean() / k)
    return {"vocab": V, "k": k, "batch": B,
            "loop_ms": t_loop.ms, "vectorised_ms": t_vec.ms, "ratio": t_loop.ms / t_vec.ms,
            "loop_lazy_ms": t_loop_lazy.ms, "ratio_vs_loop_lazy": t_loop_lazy.ms / t_vec.ms,
            "vectorised_eager_ms": t_vec_eager.ms, "ratio_eager_vectorised": t_loop.ms / t_vec_eager.ms,
            "loop_min_ms": t_loop.min_ms, "vectorised_min_ms": t_vec.min_ms, "ratio_min": t_loop.min_ms / t_vec.min_ms,
            "calls": {"vectorised": t_vec.calls, "loop": t_loop.calls},
            "vectorised_logits_ms": t_vec_logits.ms, "vectorised_logits_min_ms": t_vec_logits.min_ms,
            "vllm_ms": t_vllm.ms if t_vllm else None, "vllm_min_ms": t_vllm.min_ms if t_vllm else None,
            "ratio_vs_vllm": t_vllm.ms / t_vec_logits.ms if t_vllm else None,
            "acceptance_rate": acc,
            "outputs_equal": bool(torch.equal(out_vec, out_loop) and torch.equal(out_vec, out_eager))}
