"""The drafter benchmark's timed measurements: trace replay (bulk, stream and draft passes,
repeated round the drafters) and the context-length sweep; each keeps its fastest round."""

from __future__ import annotations

import itertools
import time

import numpy as np

from samspec_bench.suites.drafters.config import DraftersConfig, build_drafter

MODES = ("bulk", "stream", "draft")


def replay_pass(drafter, groups, k: int, mode: str, on_group=None) -> tuple[float, int, int, int]:
    """Feed every response to the drafter; a group's members stay live until the group ends
    (so a group-sharing drafter sees its siblings). mode "bulk": the response in one call;
    "stream": one call per token, as a decode loop emits them; "draft": stream and draft k
    after every token. Returns (seconds, tokens indexed, drafts, bytes summed over groups
    at their end)."""
    seconds, tokens, drafts, mem = 0.0, 0, 0, 0
    perf = time.perf_counter
    for members in groups:
        ids = []
        for r in members:
            rid = (r.source.name, r.line)
            ids.append(rid)
            resp = r.response_ids if mode == "bulk" else r.response_ids.tolist()
            group = (r.source.name, r.group)
            t0 = perf()
            drafter.start(rid, r.prompt_ids, group=group)
            if mode == "bulk":
                drafter.extend(rid, resp)
            elif mode == "stream":
                for tkn in resp:
                    drafter.extend(rid, (tkn,))
            else:
                for tkn in resp:
                    drafter.extend(rid, (tkn,))
                    drafter.propose(rid, k)
            seconds += perf() - t0
            tokens += r.prompt_ids.size + len(resp)
            drafts += len(resp) if mode == "draft" else 0
        if mode == "bulk":
            mem += drafter.memory_bytes()
        for rid in ids:
            drafter.stop(rid)
        if on_group is not None:
            on_group()
    return seconds, tokens, drafts, mem


MIN_MEASURE_SECONDS = 0.2


def timed_pass(name: str, groups, k: int, mode: str, on_group=None) -> tuple[float, int, int, int, int]:
    """Seconds per replay pass, measured over at least MIN_MEASURE_SECONDS as timeit's
    autorange does: a compiled drafter's pass takes a few milliseconds, and the first one
    after another drafter's runs up to a quarter slower (cold caches, the allocator's state);
    repeating it until the measurement lasts 0.2 s averages that away. Slow drafters run once.
    Returns (seconds per pass, tokens, drafts, bytes, passes timed)."""
    secs, tokens, drafts, mem = replay_pass(build_drafter(name), groups, k, mode, on_group)
    total, loops = secs, 1
    while total < MIN_MEASURE_SECONDS:
        total += replay_pass(build_drafter(name), groups, k, mode)[0]
        loops += 1
    return total / loops, tokens, drafts, mem, loops


SWEEP_BUILD_TOKENS = 65_536


def sweep_point(name: str, stream: np.ndarray, length: int, steps: int, k: int) -> dict:
    """Index `length` tokens and time `steps` decode steps on it (append one token, draft k).
    The build cost is the mean over consecutive windows of the stream, as many as make
    SWEEP_BUILD_TOKENS (64 at 1k, one at 64k and above): the same windows for every drafter,
    each built once (one 1k build is too short to time, and building the same tokens again
    would let the branch predictor learn them). The steps run on the first window, before
    the other builds, so it is not cold in cache."""
    windows = max(1, min(SWEEP_BUILD_TOKENS // length, (stream.size - steps) // length))
    d = build_drafter(name)
    t0 = time.perf_counter()
    d.start("ctx", stream[:length])
    build = time.perf_counter() - t0
    nxt = stream[length: length + steps].tolist()
    t0 = time.perf_counter()
    for tkn in nxt:
        d.extend("ctx", (tkn,))
        d.propose("ctx", k)
    step = time.perf_counter() - t0
    mem = d.memory_bytes()
    d.stop("ctx")
    for w in range(1, windows):
        again = build_drafter(name)
        t0 = time.perf_counter()
        again.start("ctx", stream[w * length: (w + 1) * length])
        build += time.perf_counter() - t0
        again.stop("ctx")
    return {"drafter": name, "context_tokens": length, "ns_per_step": step / len(nxt) * 1e9,
            "ns_per_token_build": build / (windows * length) * 1e9, "build_windows": windows,
            "bytes_per_token": mem / (length + len(nxt)) if mem else None}


SWEEP_REPEAT_SECONDS = 1.0   # a sweep point that took longer (a Python drafter's) runs once


def sweep_round(names, stream: np.ndarray, cfg: DraftersConfig, slow: set, on_point=lambda: None) -> list[dict]:
    """One round of the sweep: every (drafter, length) point once, but those in `slow` (a point
    that took longer than SWEEP_REPEAT_SECONDS runs once). Each point carries its wall seconds."""
    points = []
    for name, length in itertools.product(names, cfg.sweep):
        if (name, length) not in slow:
            t0 = time.perf_counter()
            row = sweep_point(name, stream, length, cfg.sweep_steps, cfg.k)
            points.append(dict(row, seconds=time.perf_counter() - t0))
        on_point()   # once per point and round, a skipped one too
    return points


def sweep_rows(names, rounds: list[list[dict]], cfg: DraftersConfig) -> list[dict]:
    """Each (drafter, length) point's fastest steps and fastest build over the rounds."""
    best: dict = {}
    for points in rounds:
        for p in points:
            key, old = (p["drafter"], p["context_tokens"]), best.get((p["drafter"], p["context_tokens"]), {})
            row = {f: v for f, v in p.items() if f != "seconds"}
            build = min(row["ns_per_token_build"], old.get("ns_per_token_build", float("inf")))
            row = min(old or row, row, key=lambda r: r["ns_per_step"])
            best[key] = dict(row, ns_per_token_build=build, timed_rounds=old.get("timed_rounds", 0) + 1)
    return [best[(n, L)] for n in names for L in cfg.sweep]


def fastest_sweep(names, stream: np.ndarray, cfg: DraftersConfig, on_point=lambda: None, done=None,
                  on_round=None) -> list[dict]:
    """Each (drafter, length) point keeps its fastest steps and build of `repeats` rounds round
    the drafters (1000 steps last about 1 ms: one sample is at the mercy of other jobs). `done`:
    rounds already measured (round -> its points, --resume), not run again; `on_round(round,
    points)` as each finishes."""
    rounds = dict(done or {})
    for rep in range(cfg.repeats):
        if rep not in rounds:
            slow = {(p["drafter"], p["context_tokens"]) for pts in rounds.values() for p in pts
                    if p["seconds"] > SWEEP_REPEAT_SECONDS}
            rounds[rep] = sweep_round(names, stream, cfg, slow, on_point)
            if on_round is not None:
                on_round(rep, rounds[rep])
    return sweep_rows(names, [rounds[rep] for rep in range(cfg.repeats)], cfg)


def warm_up(names: list[str], groups, cfg: DraftersConfig, on_group=None) -> None:
    """One untimed bulk pass per drafter before the timed rounds (a resumed run warms up again)."""
    for name in names:
        replay_pass(build_drafter(name), groups, cfg.k, "bulk", on_group)


def replay_round(names: list[str], groups, cfg: DraftersConfig, rep: int, on_group=None) -> dict:
    """Round `rep`: every drafter's bulk, stream and draft passes, the order rotated by `rep`.
    Returns {drafter: {mode: {"seconds", "loops"}, "tokens", "drafts", "mem"}}."""
    out: dict[str, dict] = {}
    for name in names[rep % len(names):] + names[:rep % len(names)]:
        m: dict = {}
        for mode in MODES:
            secs, tokens, n, mem_m, loops = timed_pass(name, groups, cfg.k, mode, on_group)
            m[mode] = {"seconds": secs, "loops": loops}
            m.update({"tokens": tokens} | ({"mem": mem_m} if mode == "bulk" else {})
                     | ({"drafts": n} if mode == "draft" else {}))
        out[name] = m
    return out


def measure_replay(names: list[str], groups, cfg: DraftersConfig, on_group=None, done=None,
                   on_round=None) -> list[dict]:
    """One row per drafter: its fastest bulk, stream and draft passes over `cfg.repeats` rounds
    (after one warm-up pass each). Repeats go round the drafters (a, b, c, b, c, a, ...): a
    burst of load elsewhere on the machine then hits every drafter alike, and the ratios
    between them, which are the point, stay steady. The order rotates each round because a
    pass inherits the heap and caches the previous one left. `on_group` is called after every
    group of every pass that reports progress: len(names) * len(groups) * (1 + repeats *
    len(MODES)) calls. `done`: rounds already measured (round -> replay_round's dict, --resume),
    not run again (the warm-up runs when a round is left); `on_round(round, data)` as each finishes."""
    rounds = dict(done or {})
    todo = [rep for rep in range(cfg.repeats) if rep not in rounds]
    if todo:
        warm_up(names, groups, cfg, on_group)
    for rep in todo:
        rounds[rep] = replay_round(names, groups, cfg, rep, on_group)
        if on_round is not None:
            on_round(rep, rounds[rep])
    return replay_rows(names, [rounds[rep] for rep in range(cfg.repeats)])


def replay_rows(names: list[str], rounds: list[dict]) -> list[dict]:
    """The rows of measure_replay from its rounds: each drafter's fastest pass per mode."""
    rows = []
    for name in names:
        ms = [r[name] for r in rounds]
        b = {m: min(x[m]["seconds"] for x in ms) for m in MODES}
        worst = {m: max(x[m]["seconds"] for x in ms) for m in MODES}   # the spread of a pass: the timing's noise
        tokens, drafts, mem = ms[-1]["tokens"], ms[-1]["drafts"], ms[-1]["mem"]
        rows.append({
            "drafter": name, "tokens": tokens, "drafts": drafts,
            "timed_passes": {m: sum(x[m]["loops"] for x in ms) for m in MODES},
            "ns_per_token": b["bulk"] / tokens * 1e9,
            "ns_per_token_stream": b["stream"] / tokens * 1e9,
            # the draft pass less the stream pass; None when it was not slower (drafting cost below
            # the timing noise): never a clamped 0 ns that reads as free
            "ns_per_draft": (b["draft"] - b["stream"]) / drafts * 1e9 if b["draft"] > b["stream"] and drafts else None,
            # where unresolved, what it is at most: the stream pass's own spread over the repeats
            "ns_per_draft_at_most": ((worst["stream"] - b["stream"]) / drafts * 1e9
                                     if b["draft"] <= b["stream"] and drafts and len(rounds) > 1 else None),
            "bytes_per_token": mem / tokens if mem else None,
            # where a SAM drafter's draft-length policy ran: 'c' or 'python'
            "policy_path": getattr(build_drafter(name), "policy_path", None),
        })
    return rows
