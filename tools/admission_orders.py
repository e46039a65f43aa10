"""How much the admission order alone is worth to one engine instance, in decode steps (no step
model, no speculation): first come first served, Seer's context-aware order
(bench/simulation/admission.py) and longest-first by the true lengths (an oracle: no engine
knows them; the bound an order could reach without moving requests once admitted).

    PYTHONPATH=. python tools/admission_orders.py [--draws 6] [--share 0.76] [--json OUT.json]

Lengths are drawn as `rollout --length-dist lognormal:MEDIAN:SIGMA --length-group-share SHARE`
draws them (suites/rollout/config.draw_lengths), GROUPS prompts x GROUP_SIZE responses through
SLOTS running requests; the defaults are one instance of the seed-qwen3-32b preset (96 prompts
x 16 over 4 instances, max_num_seqs 128, lengths lognormal:7400:0.9 up to 34,816). Per draw it
prints each order's steps, their ratios to first come first served, and the request that
finished last under the context order: its group's probe length and when it started under
each order. Steps counted, not time (docs/drafting.md, "Lengths alike in a group")."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def one_draw(seed: int, a: argparse.Namespace) -> dict:
    from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
    from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
    from samspec_bench.suites.rollout.config import draw_lengths

    n = a.groups * a.group_size
    L = draw_lengths(f"lognormal:{a.median}:{a.sigma}", n, seed, 4, a.max_len, group_size=a.group_size,
                     share=a.share)
    reqs = [SimRequest(a.prompt, int(x), group=i // a.group_size) for i, x in enumerate(L)]
    opts = dict(k=0, policy=None, step_model=StepTimeModel.constant(1.0), max_num_seqs=a.slots,
                max_num_batched_tokens=a.max_len + 2048)
    runs = {o: simulate(reqs, admission=o, **opts) for o in ("fcfs", "context")}
    order = np.argsort(-L, kind="stable")
    oracle = simulate([reqs[i] for i in order], **opts)
    last = int(np.nanargmax(runs["context"].finish_time_s))
    g = last // a.group_size
    return {"seed": seed, "steps": {"fcfs": runs["fcfs"].makespan_s, "context": runs["context"].makespan_s,
                                    "longest_first_oracle": oracle.makespan_s},
            "fcfs_over_context": runs["fcfs"].makespan_s / runs["context"].makespan_s,
            "fcfs_over_oracle": runs["fcfs"].makespan_s / oracle.makespan_s,
            "last_under_context": {"request": last, "length": int(L[last]), "probe_length": int(L[g * a.group_size]),
                                   "group_median": float(np.median(L[g * a.group_size:(g + 1) * a.group_size])),
                                   "start_step_context": float(runs["context"].first_token_time_s[last]),
                                   "start_step_fcfs": float(runs["fcfs"].first_token_time_s[last])}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--draws", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--share", type=float, default=0.76)
    p.add_argument("--groups", type=int, default=24)
    p.add_argument("--group-size", type=int, default=16)
    p.add_argument("--slots", type=int, default=128)
    p.add_argument("--median", type=float, default=7400)
    p.add_argument("--sigma", type=float, default=0.9)
    p.add_argument("--max-len", type=int, default=34816)
    p.add_argument("--prompt", type=int, default=200)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.draws < 1 or a.groups < 1 or a.group_size < 1 or a.slots < 1 or not 0 <= a.share <= 1:
        print("admission_orders: --draws, --groups, --group-size and --slots must be >= 1 and --share in [0, 1]",
              file=sys.stderr)
        return 2
    rows = []
    for i in range(a.draws):
        r = one_draw(a.seed + i, a)
        rows.append(r)
        s, last = r["steps"], r["last_under_context"]
        print(f"seed {r['seed']}: steps fcfs {s['fcfs']:.0f}, context {s['context']:.0f} "
              f"(fcfs/context {r['fcfs_over_context']:.3f}x), longest-first oracle {s['longest_first_oracle']:.0f} "
              f"(fcfs/oracle {r['fcfs_over_oracle']:.3f}x); last under context: length {last['length']}, its probe "
              f"{last['probe_length']}, group median {last['group_median']:.0f}, started at step "
              f"{last['start_step_context']:.0f} (fcfs {last['start_step_fcfs']:.0f})", flush=True)
    ratios = [r["fcfs_over_context"] for r in rows]
    oracle = [r["fcfs_over_oracle"] for r in rows]
    print(f"fcfs/context: median {np.median(ratios):.3f}x [{min(ratios):.3f}, {max(ratios):.3f}]; fcfs/oracle: "
          f"median {np.median(oracle):.3f}x [{min(oracle):.3f}, {max(oracle):.3f}] over {len(rows)} draws "
          "(decode steps, modelled)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "draws": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
