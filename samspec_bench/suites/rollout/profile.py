"""`samspec-bench rollout profile`: measure an engine's step time (the reference PyTorch engine,
or vLLM through `VllmEngine`) over running batch, scheduled tokens per request and context,
fit the step-time model (`bench.simulation.step_model`) and write the profile JSON that
`rollout --step-model` prices a replay with.

The grid: every batch size x every prompt pad (extra prompt tokens: the context apart from the
batch) runs once without speculation (1 token per request and step) and once per k with an
oracle drafter (`engines.oracle.OracleDrafter`) that proposes the run's own greedy continuation,
so every speculative step verifies k draft tokens per request (k + 1 scheduled tokens; fewer
only where a request ends). In between, where the engine takes mixed oracle widths (the
reference engine), the oracle drafts 0..k tokens, different across the batch, so that the fit
can tell a verify step's cost per request from its cost per draft token (elsewhere, vLLM, one
width per call: a second run at ceil(k / 2) when only one k is asked for).
Each step's context comes from the simulation of the same run, checked step for step against
the engine's schedule (a run it does not reproduce goes into the fit without context only if
none reproduces).

Profile JSON (format 3):

    {"format": 3, "kind": "step-profile",
     "engine": {"name", "version", "device", "model", "dtype", "tp", "threads"},
     "date": ISO 8601, "grid": {"batch_sizes", "ks", "prompt_pads", "pad_max_batch", "tokens"},
     "runs": [{"batch", "prompt_pad", "k", "steps", "context"}], "seconds": wall time of the profile,
     "note": who measured it (optional),
     "device": what ran on which device (engine_device.device_record; optional),
     "timer": what measured the step times (the engine's StepRecord.timer: on CUDA / NPU the
              reference engine's device time, events read after synchronising; on the CPU the
              wall clock; optional: profiles written before it still read),
     "measured_steps": {"time_s": [...], <each step feature>: [...]},
     "model": StepTimeModel.describe() (intercept, coef, fit: residuals, valid_range,
              verify_widths)}
"""

from __future__ import annotations

import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.engine_device import device_record, engine_options as device_options
from samspec_bench.bench.engines.factory import engine_capabilities, engine_names, make_engine
from samspec_bench.bench.engines.oracle import OracleDrafter
from samspec_bench.bench.policies import make_policy
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.bench.simulation.fitted_step_model import (FEATURES, MIN_VERIFY_STEPS, StepTimeModel,
                                                      fit_from_steps, step_features, uncovered_ks)
from samspec_bench.errors import UserError, comma_list, no_repeats
from samspec_bench.results import atomic_write_text
from samspec_bench.suites.rollout.measured import steps_from_generation
from samspec_bench.workload import PROMPTS, question_ids

# the short profile `rollout` measures on a measured engine without --step-model, and `samspec-bench
# run` before its replay: well under a minute for the built-in model on 2 cores; the rollout's own k
AUTO_PROFILE = {"tokens": 16, "prompt_pads": (0, 128), "pad_max_batch": 4}
# `samspec-bench run`'s replay profile: 16 tokens a request; the run adds the batch sizes and the
# prompt pad its replay needs (suites/run/rollout_plan.profile_grid)
RUN_PROFILE = {"tokens": 16, "prompt_pads": (0,), "pad_max_batch": None}
PROFILE_FORMAT = 3
PROFILE_KIND = "step-profile"
PROFILE_ENGINES = engine_names(generates=True)


def parse_prompt_pads(text: str) -> tuple[int, ...]:
    """--prompt-pad: comma-separated integers >= 0, none twice (blank: 0; an empty item refused)."""
    if not str(text).strip():
        return (0,)
    try:
        pads = [int(x) for x in comma_list(text, "--prompt-pad", "0,256")]
    except ValueError:
        pads = [-1]
    if any(x < 0 for x in pads):
        raise UserError(f"--prompt-pad {text!r}: give comma-separated integers >= 0, e.g. 0,256")
    return tuple(no_repeats(pads, "--prompt-pad", text, "0,256"))


def padded(ids, pad: int) -> list[int]:
    """`ids` with `pad` tokens of its own text (repeated) in front."""
    return (list(ids) * (pad // max(len(ids), 1) + 1))[:pad] + list(ids)


def half_width(k: int) -> int:
    """The second draft width vLLM's profile measures beside k when only one k is asked for
    (one width per vLLM call): ceil(k / 2), 0 for k = 1."""
    return (int(k) + 1) // 2 if k > 1 else 0


def recorded_profile(out) -> tuple[np.ndarray, np.ndarray]:
    """(drafted[p], accepted[p]) over response positions from an engine output's own decode
    record: replaying it reproduces the engine's drafts exactly."""
    n = max(len(out.token_ids), 1)
    d = np.zeros(n, dtype=np.int16)
    a = np.zeros(n, dtype=np.int16)
    rs = out.steps
    for p, dd, aa in zip(rs.position, rs.drafted, rs.accepted):
        if 0 <= int(p) < n:
            d[int(p)], a[int(p)] = int(dd), int(aa)
    return d, a


def with_context(table: dict[str, np.ndarray], gen, k: int, max_num_seqs: int, max_num_batched_tokens: int,
                 kv: dict[str, int] | None = None) -> bool:
    """Add the per-step KV context (`context_tokens`) to an engine run's step table from a
    simulation of the same requests and drafts (`kv`: the engine's KV capacity and block size,
    for its preemptions); False (context NaN) where the simulation does not reproduce the
    engine's schedule."""
    reqs = []
    for o in gen.outputs:
        d, a = recorded_profile(o) if k else (None, None)
        reqs.append(SimRequest(len(o.prompt_ids), max(len(o.token_ids), 1), d, a))
    r = simulate(reqs, k=k, policy=make_policy("always" if k else "off"), step_model=StepTimeModel.constant(1.0),
                 max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens, fast_forward=False,
                 **(kv or {}))
    same = (r.num_steps == len(table["time_s"])
            and np.array_equal(r.steps["num_scheduled_tokens"], table["num_scheduled_tokens"])
            and np.array_equal(r.steps["num_running"], table["num_running"]))
    table["context_tokens"] = r.steps["context_tokens"] if same else np.full(len(table["time_s"]), np.nan)
    return bool(same)


# ---------- the engine ----------

def _device_name() -> str:
    """The CPU's model name: an engine whose runtime names no device runs on the CPU (on a GPU
    machine too, so the GPU's name would be wrong here)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return f"cpu: {line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"cpu: {platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def engine_info(name: str, engine, model: str, dtype: str, threads: int) -> dict[str, Any]:
    """What was profiled: engine name and version, device, model, dtype, tensor parallelism,
    CPU threads (the engine's own setting, else the torch threads the profile ran with)."""
    rt = engine.runtime()
    return {"name": name, "version": rt["version"], "device": rt.get("device") or _device_name(), "model": model,
            "dtype": dtype, "tp": int(rt.get("tp") or 1), "threads": rt.get("threads") or threads}


def open_engine(name: str, model: str, dtype: str, seed: int, max_num_seqs: int, max_num_batched_tokens: int,
                kmax: int, engine_args: dict[str, Any] | None = None, device: str = "cpu"):
    """The engine to profile: the scheduler limits as options or, where the engine takes vLLM
    engine arguments, as those with prefix caching off (repeated prompts must be recomputed, as
    in a rollout's first pass); an engine that fixes its method when built gets SAM's proposer
    (its oracle mode drafts) with the largest k."""
    caps = engine_capabilities(name)
    limits = {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens}
    if not caps.engine_args:
        if engine_args:
            raise UserError(f"--engine-arg: the {name} engine takes no vLLM engine arguments; drop them")
        return make_engine(name, model, dtype=dtype, **limits, **device_options(name, device))
    options: dict[str, Any] = {"engine_args": {**limits, "enable_prefix_caching": False, **(engine_args or {})}}
    if caps.engine_seed:
        options["seed"] = seed
    if caps.method_at_build:
        options.update(speculative="sam", num_spec_tokens=max(kmax, 1))
    return make_engine(name, model, dtype=dtype, **options)


def _oracle_runs(engine, reqs, cont: dict, ks: Sequence[int]) -> list[tuple[int, Any]]:
    """(k, generation) of the speculative runs of one grid point: per k, the oracle drafting k
    and half_width(k) tokens alternately (mixed oracle widths), or else k in one run and, when
    no other k of the list gives a second width, half_width(k) in another (one width per call)."""
    if engine.capabilities.mixed_oracle_widths:
        return [(k, engine.generate(reqs, drafter=OracleDrafter(cont, {r.req_id: i % (k + 1) for i, r in enumerate(reqs)}),
                                    num_spec_tokens=k)) for k in ks]
    widths = list(ks)
    if len(widths) == 1 and half_width(widths[0]):
        widths.append(half_width(widths[0]))
    return [(k, engine.generate(reqs, drafter=OracleDrafter(cont), num_spec_tokens=k)) for k in widths]


# ---------- the profile ----------

def profile_engine(eng, engine: str, model: str, batch_sizes: Sequence[int], tokens: int, ks: Sequence[int], *,
                   threads: int, dtype: str, max_num_seqs: int, max_num_batched_tokens: int, seed: int = 0,
                   prompt_pads: Sequence[int] = (0,), pad_max_batch: int | None = None,
                   log: Callable[[str], None] | None = None,
                   kv: dict[str, int] | None = None) -> tuple[StepTimeModel, list[dict[str, np.ndarray]], dict[str, Any]]:
    """Measure step times over the grid (module docstring) on an open engine and fit. Prompt
    pads after the first run only at batch sizes up to `pad_max_batch` (None: every one).
    `kv`: the engine's KV capacity ({"kv_capacity_tokens", "block_size"}; pads whose request
    would not fit are left out, preemptions are simulated). Returns the model, the step tables
    in the fit and the profile's metadata (engine, grid, runs)."""
    ks = sorted({int(k) for k in ks})
    say = log or (lambda _m: None)
    t0 = time.perf_counter()
    tok = eng.tokenizer
    tables: list[dict[str, np.ndarray]] = []
    runs, timers = [], set()
    cap = (kv or {}).get("kv_capacity_tokens")
    need = tokens + max(ks) + 1
    # the built-in prompts whose request fits the KV cache (a small cache: the short ones)
    pool = [ids for ids in (question_ids(tok, q) for q in PROMPTS) if cap is None or len(ids) + need <= cap]
    pool = pool or [min((question_ids(tok, q) for q in PROMPTS), key=len)]
    longest = max(len(pool[i % len(pool)]) for i in range(max(batch_sizes)))
    fits = [pad for pad in prompt_pads if cap is None or longest + pad + tokens + max(ks) + 1 <= cap]
    if not fits:
        raise UserError(f"--kv-capacity-tokens {cap}: too small to profile the engine ({longest} prompt + {tokens} "
                        f"tokens + k={max(ks)} per request); raise it or give --step-model")
    grid = [(b, pad) for b in batch_sizes for j, pad in enumerate(fits)
            if j == 0 or pad_max_batch is None or b <= pad_max_batch]
    for b, pad in grid:
        reqs = [Request(f"profile-{i}", padded(pool[i % len(pool)], pad),
                        SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True, seed=seed + i))
                for i in range(b)]
        g = eng.generate(reqs)
        cont = {o.req_id: list(o.token_ids) for o in g.outputs}
        for k, gen in [(0, g)] + _oracle_runs(eng, reqs, cont, ks):
            st = steps_from_generation(gen)
            timers.update(s.timer for s in gen.steps)
            ok = with_context(st, gen, k, max_num_seqs, max_num_batched_tokens, kv)
            tables.append(st)
            runs.append({"batch": b, "prompt_pad": pad, "k": k, "steps": len(st["time_s"]), "context": ok})
        say(f"profile: batch {b}, prompt pad {pad}: done")
    ok = [t for t in tables if np.isfinite(t["context_tokens"]).all()]
    # context is a feature only when every run's context is known; a run the simulation did
    # not reproduce is left out when most were reproduced
    if ok and len(ok) * 2 >= len(tables):
        use = ok
    else:
        use = [{c: v for c, v in t.items() if c != "context_tokens"} for t in tables]
    m = fit_from_steps(use, source=f"rollout profile: {engine} engine, {model}, batch sizes {list(batch_sizes)}, "
                                   f"prompt pads {list(prompt_pads)}, {tokens} tokens, k={ks}")
    meta = {"engine": engine_info(engine, eng, model, dtype, threads),
            "grid": {"batch_sizes": list(batch_sizes), "ks": ks, "prompt_pads": list(prompt_pads),
                     "pad_max_batch": pad_max_batch, "tokens": tokens},
            "runs": runs, "context_known": bool(use is ok), "seconds": time.perf_counter() - t0,
            "timer": "; ".join(sorted(timers))}
    return m, use, meta


def auto_batch_sizes(largest: int) -> list[int]:
    """1, 4, 16, ... (each under half of `largest`), then `largest` itself."""
    largest = max(int(largest), 1)
    out, b = [], 1
    while 2 * b < largest:
        out.append(b)
        b *= 4
    return out + [largest]


def quick_profile(path: str | Path, engine: str, model: str, ks: Sequence[int], largest: int, *, threads: int = 1,
                  dtype: str = "float32", seed: int = 0, log: Callable[[str], None] | None = None,
                  note: str | None = None, grid: dict[str, Any] | None = None, device: str = "cpu") -> Path:
    """A short grid (`grid`, default AUTO_PROFILE; its batch_sizes, else 1, 4, 16, ... up to
    `largest`) on a fresh engine, written as a profile JSON at `path` (with `note`)."""
    g = grid or AUTO_PROFILE
    sizes = list(g.get("batch_sizes") or auto_batch_sizes(largest))
    m, tables, meta = profile(model, sizes, g["tokens"], ks, threads, dtype, seed=seed,
                              prompt_pads=g["prompt_pads"], engine=engine, log=log, pad_max_batch=g["pad_max_batch"],
                              device=device)
    p = write_profile(path, profile_document(m, tables, meta, note))
    for line in profile_lines(m, meta) if log else ():
        log(line)
    return p


def check_grid(batch_sizes: Sequence[int], tokens: int, ks: Sequence[int], engine: str = "reference") -> None:
    if engine not in PROFILE_ENGINES:
        raise UserError(f"--engine {engine!r}: profile an engine that generates ({' or '.join(PROFILE_ENGINES)})")
    if not batch_sizes or min(batch_sizes) < 1:
        raise UserError(f"--batch-sizes {list(batch_sizes)}: give batch sizes >= 1")
    if tokens < 2:
        raise UserError(f"--tokens {tokens}: a profile needs at least 2 tokens per request")
    if not ks or min(ks) < 1:
        raise UserError(f"-k {list(ks)}: give the draft lengths to profile, integers >= 1 (e.g. 3,5,8)")


def profile(model: str, batch_sizes: list[int], tokens: int, ks: Sequence[int], threads: int, dtype: str,
            seed: int = 0, prompt_pads: tuple[int, ...] = (0, 256), engine: str = "reference",
            engine_args: dict[str, Any] | None = None, log: Callable[[str], None] | None = None,
            pad_max_batch: int | None = None,
            device: str = "cpu") -> tuple[StepTimeModel, list[dict[str, np.ndarray]], dict[str, Any]]:
    """Open the engine on `device` (resolved: engine_device), measure the grid (`profile_engine`),
    close it; the metadata records the device."""
    check_grid(batch_sizes, tokens, ks, engine)
    import torch  # imports torch: the engines run on it

    torch.set_num_threads(threads)
    mx = max(batch_sizes)
    mnbt = max(2048, mx * (max(ks) + 1))
    eng = open_engine(engine, model, dtype, seed, mx, mnbt, max(ks), engine_args, device)
    try:
        eng.generate([Request("w", question_ids(eng.tokenizer, PROMPTS[0]), SamplingParams(max_tokens=4))])  # warm-up
        m, tables, meta = profile_engine(eng, engine, model, batch_sizes, tokens, ks, threads=threads, dtype=dtype,
                                         max_num_seqs=mx, max_num_batched_tokens=mnbt, seed=seed,
                                         prompt_pads=prompt_pads, pad_max_batch=pad_max_batch, log=log)
        return m, tables, {**meta, "device": device_record(engine, device)}
    finally:
        eng.close()


def profile_document(model: StepTimeModel, tables: list[dict[str, np.ndarray]], meta: dict[str, Any],
                     note: str | None = None) -> dict[str, Any]:
    """The profile JSON (format 3; module docstring); `note`: who measured it and why."""
    feats = [step_features(t) for t in tables]
    keys = [f for f in FEATURES if feats and all(f in x for x in feats)]
    measured = {"time_s": [float(x) for t in tables for x in np.asarray(t["time_s"], dtype=float)]}
    for f in keys:
        measured[f] = [float(x) for fe in feats for x in fe[f]]
    return {"format": PROFILE_FORMAT, "kind": PROFILE_KIND, "engine": meta["engine"],
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "grid": meta["grid"],
            "runs": meta.get("runs"), "seconds": meta.get("seconds"), **({"note": note} if note else {}),
            **({"device": meta["device"]} if meta.get("device") else {}),
            **({"timer": meta["timer"]} if meta.get("timer") else {}),
            "measured_steps": measured,
            "model": model.describe()}


def write_profile(path: str | Path, doc: dict[str, Any]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(p, json.dumps(doc, indent=1) + "\n")   # whole or absent: a resume reads it back


def read_profile(path: str | Path) -> tuple[StepTimeModel, dict[str, Any] | None]:
    """A step-time model from a profile JSON (format 3: the model and the profile's engine /
    date / grid) or an older model JSON (`StepTimeModel.load`; no profile metadata). The model
    is checked as every model file is (`StepTimeModel.from_document`: known coefficient names,
    finite numbers, no step priced at 0 s or below): a bad one is a UserError naming the file."""
    p = Path(path)
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"--step-model {p}: cannot read a step-time profile ({e}); write one with "
                        "`samspec-bench rollout profile`") from None
    if not (isinstance(d, dict) and d.get("format") == PROFILE_FORMAT):
        return StepTimeModel.load(p), None
    if not isinstance(d.get("model"), dict):
        raise UserError(f"--step-model {p}: a format-3 profile without a model object; write it again with "
                        "`samspec-bench rollout profile`")
    model = StepTimeModel.from_document(d["model"], f"--step-model {p}")
    return model, {k: d.get(k) for k in ("kind", "engine", "date", "grid", "note", "device", "timer")}


def check_covers(model: StepTimeModel, ks: Sequence[int], path: str) -> None:
    """Refuse a profile that never verified k draft tokens per request for a k the run asks for."""
    missing = uncovered_ks(model, ks)
    if missing:
        widths = model.fit.get("verify_widths") or {}
        few = [k for k in missing if int(widths.get(str(k), 0)) > 0]   # measured, but too few steps to fit
        have = ", ".join(f"k={w}: {n} steps" for w, n in sorted(widths.items(), key=lambda x: int(x[0])) if n)
        what = (f"too few verify steps of k={','.join(map(str, few))} (at least {MIN_VERIFY_STEPS} each)" if few
                else f"no verify steps of k={','.join(map(str, missing))}")
        raise UserError(f"--step-model {path}: the profile has {what} (measured: {have or 'none'}); measure them with "
                        f"`samspec-bench rollout profile -k {','.join(map(str, sorted(set(ks))))}`"
                        + (" and a larger --tokens" if few else ""))


def profile_lines(model: StepTimeModel, meta: dict[str, Any] | None) -> list[str]:
    """The profile in a few printed lines: what was measured, the fitted step time, its
    residuals and the ranges it holds over."""
    fit = model.fit
    e = (meta or {}).get("engine") or {}
    out = []
    if e:
        took = (meta or {}).get("seconds")
        out.append(f"engine: {e.get('name')} ({e.get('version')}), {e.get('model')} {e.get('dtype')}, tp {e.get('tp')}, "
                   f"threads {e.get('threads')}, on {e.get('device')}"
                   + (f"; profiled in {took:.1f} s (wall)" if took is not None else ""))
    if (meta or {}).get("timer"):
        out.append(f"step times measured by: {meta['timer']}")
    terms = " + ".join(f"{c * 1e3:.4g} ms x {f}" for f, c in model.coef.items() if c)
    out.append(f"step time = {model.intercept * 1e3:.4g} ms" + (f" + {terms}" if terms else ""))
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f} %"  # noqa: E731
    r2 = fit.get("r2")
    out.append(f"fit on {fit.get('n_steps')} steps: R² {'n/a' if r2 is None else f'{r2:.3f}'}, per-step relative error "
               f"median {pct(fit.get('median_rel_error'))}, max {pct(fit.get('max_rel_error'))}; summed time "
               f"{pct(fit.get('total_error'))}")
    vr = fit.get("valid_range") or {}
    out.append("valid over: " + ", ".join(f"{f} {lo:g}..{hi:g}" for f, (lo, hi) in vr.items()))
    widths = fit.get("verify_widths") or {}
    out.append("verify steps measured (draft tokens per request: steps): "
               + (", ".join(f"k={w}: {n}" for w, n in widths.items()) or "none"))
    left = {f: r for f, r in (fit.get("dropped_reason") or {}).items() if r != "absent"}
    if left:
        out.append("not priced: " + ", ".join(f"{f} ({r})" for f, r in left.items()))
    return out
