"""The rollout suite's statistics, as pure functions of per-step tables (the columns of
`bench.simulation.scheduler.STEP_COLUMNS`, measured or simulated): the head / tail split,
completion-time tails, each arm's metrics, its speedups over the off baseline, the best
setting, and the tail's acceptance by token position.

The tail is the steps with nobody waiting and at most T requests in the batch (T = the arm's
threshold, or the tail threshold of an always-on arm); the head is the rest, so head + tail =
total. Speedups compare phases defined the same way: the baseline's tail uses the arm's T.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

POSITION_EDGES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)   # token-position bins of the tail


def tail_mask(steps: Mapping[str, np.ndarray], T: int) -> np.ndarray:
    """Which steps are the tail: nobody waiting and at most T running."""
    return (np.asarray(steps["num_waiting"]) == 0) & (np.asarray(steps["num_running"]) <= T)


def idle_end(steps: Mapping[str, np.ndarray], stepped_s: float) -> float | None:
    """Where an instance that waited idle for work (a shared queue, bench/simulation/shared_queue.py)
    ended: its clock, when that is past the `stepped_s` seconds its steps add up to; else None
    (no wait: the summed steps stand, exactly as before)."""
    clock = steps.get("clock_s")
    if clock is None or not len(clock):
        return None
    end = float(clock[-1])
    return end if end > stepped_s * (1 + 1e-9) else None


def phase_split(steps: Mapping[str, np.ndarray], T: int) -> dict[str, float]:
    """Time and steps in all, in the head and in the tail. An engine that waited idle (for work
    from a shared queue, for a multi-turn request's tool) ends at its clock, the wait (`idle_s`)
    in its head, so head + tail = total still."""
    tail = tail_mask(steps, T)
    t = steps["time_s"]
    total, tail_s = float(t.sum()), float(t[tail].sum())
    end = idle_end(steps, total)
    out = {"total_s": total, "head_s": float(t[~tail].sum()), "tail_s": tail_s,
           "tail_steps": int(tail.sum()), "head_steps": int((~tail).sum())}
    if end is not None:
        out.update(total_s=end, head_s=end - tail_s, idle_s=end - total)
    return out


def completion_stats(finish) -> dict[str, float]:
    """Percentiles, makespan, mean and straggler ratio (makespan / mean) of the requests'
    completion times; unfinished (non-finite) ones left out, {} when none finished."""
    f = np.asarray(finish, dtype=float)
    f = f[np.isfinite(f)]
    if not f.size:
        return {}
    return {"p50_s": float(np.percentile(f, 50)), "p90_s": float(np.percentile(f, 90)),
            "p99_s": float(np.percentile(f, 99)), "makespan_s": float(f.max()), "mean_s": float(f.mean()),
            "straggler_ratio": float(f.max() / f.mean()) if f.mean() > 0 else None}


def last_decile_s(completion: Mapping[str, Any] | None) -> float | None:
    """Seer's tail (arXiv 2511.14617: the last 10 % of requests to complete): from the time
    90 % of the requests had finished to the last one, in the completion's units."""
    c = completion or {}
    return c["makespan_s"] - c["p90_s"] if "makespan_s" in c and "p90_s" in c else None


def arm_metrics(steps: Mapping[str, np.ndarray], finish, T: int) -> dict[str, Any]:
    """One arm's phases, step counts, drafted / accepted / emitted tokens and their cost
    (`acceptance_cost`), preemptions and completion times."""
    m = phase_split(steps, T)
    m["tail_threshold"] = T
    m["steps"] = int(len(steps["time_s"]))
    m["spec_steps"] = int(steps["speculative"].sum())
    if "tree" in steps:   # steps that verified multi-path drafts (a measured engine table has none)
        m["tree_steps"] = int(np.sum(steps["tree"]))
    d, a, e = (int(steps[c].sum()) for c in ("num_drafted", "num_accepted", "num_emitted"))
    m.update(drafted=d, accepted=a, emitted=e, acceptance_rate=(a / d) if d else None,
             decode_request_steps=int(np.sum(steps["num_decode_reqs"])) if "num_decode_reqs" in steps else None)
    m.update(acceptance_cost(m))
    m.update(phase_tokens(steps, T))
    if "num_preempted" in steps:
        m["preemptions"] = int(np.sum(steps["num_preempted"]))
    m["completion"] = completion_stats(finish)
    m["last10_s"] = last_decile_s(m["completion"])
    return m


def acceptance_cost(m: Mapping[str, Any]) -> dict[str, float | None]:
    """What the arm drafted for what it kept, from its summed counts, per decode step of a
    request (n of them): tokens_per_step = (n + accepted) / n (each step keeps its accepted
    drafts and one token of its own), drafted_per_step = drafted / n, verify_tokens_per_token
    = (n + drafted) / (n + accepted) (target tokens computed per token kept; 1.0 without
    speculation). Counted from the decode steps alone: an engine's `num_emitted` also holds
    the first token each prefill samples."""
    n, d, a = m["decode_request_steps"], m["drafted"], m["accepted"]
    if n is None:   # a table without per-request decode counts
        return {"tokens_per_step": None, "drafted_per_step": None, "verify_tokens_per_token": None}
    return {"tokens_per_step": ratio(n + a, n), "drafted_per_step": ratio(d, n),
            "verify_tokens_per_token": ratio(n + d, n + a)}


PHASE_COLUMNS = ("num_waiting", "num_running", "num_decode_reqs", "num_accepted", "num_emitted")   # phase_tokens reads


def phase_tokens(steps: Mapping[str, np.ndarray], T: int) -> dict[str, float | None]:
    """Per phase (head, and the tail_mask steps): tokens kept per decode step of a request,
    (n + accepted) / n; for the tail also the requests decoding per step on average and the
    tokens it emitted. The tail holds the requests that finish last: with the off arm's same
    figures these split a tail speed-up into how well those requests draft, how many run at
    once and how much work is left to the tail (None: no decode steps there, or a table without
    per-request decode counts)."""
    names = ("tokens_per_step_head", "tokens_per_step_tail", "running_per_step_tail", "emitted_tail")
    if "num_decode_reqs" not in steps:
        return dict.fromkeys(names)
    tail = tail_mask(steps, T)
    n, a = np.asarray(steps["num_decode_reqs"]), np.asarray(steps["num_accepted"])
    out = {}
    for name, sel in (("head", ~tail), ("tail", tail)):
        nn = int(n[sel].sum())
        out[f"tokens_per_step_{name}"] = ratio(nn + int(a[sel].sum()), nn)
    out["running_per_step_tail"] = ratio(int(n[tail].sum()), int(tail.sum()))
    out["emitted_tail"] = int(np.asarray(steps["num_emitted"])[tail].sum())
    return out


def ratio(a, b):
    """a / b, None where b is missing or not positive."""
    return a / b if b and b > 0 else None


def tail_ratio(base_tail, arm_tail):
    """The tail speed-up: None where the baseline has no tail (its longest responses end together
    at the limit): a 0 there would read as a result."""
    return ratio(base_tail, arm_tail) if base_tail and base_tail > 0 else None


def add_speedups(metrics: dict[str, dict], settings, off_steps, default_T: int) -> None:
    """Speedups of every non-off arm in `metrics` (in place): the off baseline's time over the
    arm's, overall and per phase, the baseline split with the arm's own tail threshold.
    `default_T` is unused (kept for callers)."""
    for s in settings:
        if s["arm"] == "off":
            continue
        m = metrics[s["label"]]
        base = phase_split(off_steps, m["tail_threshold"])
        m["speedup_overall"] = ratio(base["total_s"], m["total_s"])
        m["speedup_head"] = ratio(base["head_s"], m["head_s"])
        m["speedup_tail"] = tail_ratio(base["tail_s"], m["tail_s"])
        m["speedup_last10"] = tail_ratio(metrics["off"].get("last10_s"), m.get("last10_s"))
        m["baseline_phases"] = base
        m["time_saved_fraction"] = 1 - m["total_s"] / base["total_s"] if base["total_s"] else None


def best_setting(metrics: dict[str, dict]) -> str | None:
    """The speculating arm with the shortest total time (None when only off ran)."""
    cands = [(m["total_s"], lbl) for lbl, m in metrics.items() if lbl != "off"]
    return min(cands)[1] if cands else None


def bin_label(i: int, edges=POSITION_EDGES) -> str:
    """Bin i of the position edges as '[lo,hi)' (the last one '[lo,inf)')."""
    lo = 0 if i == 0 else edges[i - 1]
    return f"[{lo},{edges[i]})" if i < len(edges) else f"[{lo},inf)"


def tail_acceptance_rows(ta: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """The tail's drafted / accepted tokens by position bin (a simulation's `tail_acceptance`
    with POSITION_EDGES), bins without drafts left out."""
    return [{"bin": bin_label(i), "drafted": int(ta["drafted"][i]), "accepted": int(ta["accepted"][i]),
             "acceptance_rate": ratio(int(ta["accepted"][i]), int(ta["drafted"][i]))}
            for i in range(len(ta["drafted"])) if ta["drafted"][i]]


# ---------- data-parallel instances (bench/simulation/dp.py) ----------

def dp_arm_metrics(instance_steps, instance_finish, T: int, finish_all, requests_per_instance) -> dict[str, Any]:
    """One arm of a rollout sharded over instances. The rollout ends with its slowest instance:
    total_s is that instance's time and head_s / tail_s its phases (head + tail = total);
    step and token counts are sums over instances; `dp` holds the per-instance view and the
    pooled tail (each instance's own tail steps, summed). An instance that waited idle for work
    (a shared queue, bench/simulation/shared_queue.py) ends at its clock, its idle time in its head."""
    per = [arm_metrics(st, f, T) for st, f in zip(instance_steps, instance_finish)]   # idle in their head
    mk = np.array([p["total_s"] for p in per], dtype=float)
    slow = int(np.argmax(mk))
    m: dict[str, Any] = {k: per[slow][k] for k in ("total_s", "head_s", "tail_s", "tail_steps", "head_steps")}
    if per[slow].get("idle_s"):   # the slowest instance waited idle (for work, for a tool)
        m["idle_s"] = per[slow]["idle_s"]
    m["tail_threshold"] = T
    for k in ("steps", "spec_steps", "drafted", "accepted", "emitted", "preemptions", "decode_request_steps"):
        m[k] = int(sum(p.get(k) or 0 for p in per))
    if all("tree_steps" in p for p in per):
        m["tree_steps"] = int(sum(p["tree_steps"] for p in per))
    m["acceptance_rate"] = ratio(m["accepted"], m["drafted"])
    m.update(acceptance_cost(m))
    pooled = ({c: np.concatenate([np.asarray(st[c]) for st in instance_steps]) for c in PHASE_COLUMNS}
              if all("num_decode_reqs" in st for st in instance_steps) else {})
    m.update(phase_tokens(pooled, T))   # every instance's own tail steps, together
    m["completion"] = completion_stats(finish_all)   # every instance's clock starts at the rollout's start
    m["last10_s"] = last_decile_s(m["completion"])
    tail = np.array([p["tail_s"] for p in per])
    m["dp"] = {"instances": len(per), "slowest_instance": slow, "instance_makespan_s": mk.tolist(),
               "mean_instance_makespan_s": float(mk.mean()),
               "idle_share": float(1 - mk.mean() / mk.max()) if mk.max() > 0 else None,
               "tail_share_slowest": ratio(per[slow]["tail_s"], mk.max()),
               "tail_s_pooled": float(tail.sum()), "head_s_pooled": float(mk.sum() - tail.sum()),
               "tail_share_pooled": ratio(float(tail.sum()), float(mk.sum()))}
    m["instances"] = [{"instance": i, "requests": int(n), "total_s": p["total_s"], "head_s": p["head_s"],
                       "tail_s": p["tail_s"], "tail_share": ratio(p["tail_s"], p["total_s"]), "steps": p["steps"],
                       "spec_steps": p["spec_steps"], "drafted": p["drafted"], "accepted": p["accepted"],
                       "emitted": p["emitted"], "preemptions": p.get("preemptions", 0), "idle_s": p.get("idle_s", 0.0)}
                      for i, (p, n) in enumerate(zip(per, requests_per_instance))]
    return m


def add_dp_speedups(metrics: dict[str, dict], settings, off_instance_steps) -> None:
    """Speedups of every non-off arm of a sharded rollout (in place), the off baseline's
    instances split with the arm's own tail threshold:
    speedup_overall = off rollout time (slowest instance) / the arm's;
    speedup_mean_instance = mean instance time off / on (every instance's own finish);
    speedup_tail / speedup_head = pooled over instances (sum of each instance's phase times);
    per instance, its own overall and tail speedups, except for a divided rollout (one queue:
    its instance i does other work than off's instance i, so their ratio means nothing)."""
    for s in settings:
        if s["arm"] == "off":
            continue
        m = metrics[s["label"]]
        base = [phase_split(st, m["tail_threshold"]) for st in off_instance_steps]
        b_tot = np.array([b["total_s"] for b in base])
        b_tail = np.array([b["tail_s"] for b in base])
        d = m["dp"]
        m["speedup_overall"] = ratio(float(b_tot.max()), m["total_s"])
        m["speedup_mean_instance"] = ratio(float(b_tot.mean()), d["mean_instance_makespan_s"])
        m["speedup_tail"] = tail_ratio(float(b_tail.sum()), d["tail_s_pooled"])
        m["speedup_last10"] = tail_ratio(metrics["off"].get("last10_s"), m.get("last10_s"))
        m["speedup_head"] = ratio(float(b_tot.sum() - b_tail.sum()), d["head_s_pooled"])
        m["baseline_phases"] = {"total_s": float(b_tot.max()), "mean_instance_makespan_s": float(b_tot.mean()),
                                "tail_s_pooled": float(b_tail.sum()), "head_s_pooled": float(b_tot.sum() - b_tail.sum())}
        m["time_saved_fraction"] = 1 - m["total_s"] / float(b_tot.max()) if b_tot.max() > 0 else None
        for row, b in zip([] if m.get("divided") else m["instances"], base):
            row["speedup_overall"] = ratio(b["total_s"], row["total_s"])
            row["speedup_tail"] = tail_ratio(b["tail_s"], row["tail_s"])
