"""Is the vectorised rejection sampler's device time host-bound here? At the speed grid's largest
point (vocab 151,936, batch 256, k 8) it times one call by CUDA events (what `sampler` reports),
sums its kernels' device time (torch.profiler), and counts kernels and host syncs per call
(`torch.cuda.set_sync_debug_mode`). A span well above the kernels' sum means launches and syncs
set the figure, so it moves with the host CPU (README, "Device check").

    PYTHONPATH=. python tools/sampler_host_bound.py [--device cuda:0] [--json OUT.json]

Needs a CUDA device (exit 2 with one line otherwise)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings

VOCAB, BATCH, K, ACCEPT = 151_936, 256, 8, 0.7


def measure(device: str, calls: int = 20, profiled: int = 5) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from samspec_bench.bench.rejection import draw_uniforms, rejection_sample
    from samspec_bench.suites.sampler.speed import _speed_table

    gen = torch.Generator(device=device).manual_seed(0)
    tp, draft = _speed_table(VOCAB, BATCH * K, ACCEPT, gen, device)
    nums = [K] * BATCH
    kw = dict(bonus_token_ids=torch.randint(0, VOCAB, (BATCH,), generator=gen, device=device),
              uniforms=draw_uniforms(nums, device=device))

    def call():
        return rejection_sample(draft, nums, tp, **kw)
    for _ in range(3):   # warm-up: allocator, kernels' first launches
        call()
    torch.cuda.synchronize(device)
    spans = []
    for _ in range(calls):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        torch.cuda.synchronize(device)
        spans.append(a.elapsed_time(b))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(profiled):
            call()
        torch.cuda.synchronize(device)
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
            torch.cuda.synchronize(device)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    syncs = sum("synchroniz" in str(w.message).lower() for w in caught)
    return {"device": torch.cuda.get_device_name(device), "vocab": VOCAB, "batch": BATCH, "k": K,
            "span_ms_median": statistics.median(spans), "span_ms_min": min(spans),
            "kernel_ms_per_call": sum(e.self_device_time_total for e in events) / profiled / 1e3,
            "kernels_per_call": sum(e.count for e in events) / profiled, "host_syncs_per_call": syncs,
            "unit": "ms of device time; span = CUDA events around one call, kernels = their summed device time"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    try:
        import torch
        ok = torch.cuda.is_available()
    except ImportError:
        ok = False
    if not ok or not args.device.startswith("cuda"):
        print(f"error: --device {args.device}: this check needs a CUDA device (torch sees none here)", file=sys.stderr)
        return 2
    out = measure(args.device)
    print(f"{out['device']}: span {out['span_ms_median']:.2f} ms median ({out['span_ms_min']:.2f} fastest), "
          f"kernels {out['kernel_ms_per_call']:.2f} ms, {out['kernels_per_call']:.0f} kernels and "
          f"{out['host_syncs_per_call']} host syncs a call (vocab {VOCAB}, batch {BATCH}, k {K})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
