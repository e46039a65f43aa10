"""The method comparison inside vLLM: none / ngram / suffix / sam on the same prompts, greedy,
with its own command line:

    python -m samspec_bench.bench.engines.vllm.compare --num-prompts 8 --max-tokens 256 --repeats 3

(the old path `python -m samspec_bench.bench.vllm_engine` runs the same). Needs vLLM.

Arms (`--methods`, comma-separated):
  none-plain  an engine built without speculation
  none        the SAM engine with the drafter off (the same scheduling as sam)
  sam         SAM through our proposer (`drafter.SamProposer`) with the engine's default draft
              length (`drafter.ENGINE_LENGTH`, evidence:cost=auto: the evidence policy with the
              cost fitted online from the engine's step times, `online_cost.py`); sam[SPEC]: with
              the draft length policy SPEC (sam[fixed]: SAM-Decoding's baseline, up to k tokens
              whenever any suffix matches; sam[evidence]: the replay default, a fixed cost;
              sam[evidence:cost=0.2]); sam-mN: no draft for matches shorter than N tokens
  sam+tail    sam on its own engine whose proposer has option tail on (drafter.py: while the
              batch drains, each row's draft tokens are priced by its chance to finish last)
  sam+batch   sam with every request of the call in one group (group sharing): each drafts from
              every request's prompt and tokens so far, as Arctic's suffix decoding drafts from
              other requests (it also keeps finished ones); freed when the call ends
  ngram       vLLM's n-gram method (prompt_lookup_min 2, max 5)
  suffix      vLLM's suffix method (Arctic; keeps finished responses, so it runs once);
              suffix-own keeps none (each request drafts from its own context)
All sam arms and `none` share one engine (the drafter's options ride on each request).

On a CPU, vLLM is set up as its CPU guide asks, for every arm alike (`--cpu-threads all`, the
default; `platform.cpu_engine_environment`): the model's OpenMP threads on every core this
process may use (vLLM's own "auto" binding keeps one core per worker for its scheduler, which
on a 2-core machine halves the model's compute), Intel OpenMP preloaded into vLLM's (spawned)
processes, numba's workqueue layer for vLLM's ngram proposer. `--cpu-threads vllm` keeps
vLLM's own setup; a binding or preload already in the environment wins. What was used is in
the result (`cpu_threads`).

Every engine is built and warmed up first (on a prompt that is not measured, then on the
measured prompts for one token each, so that no arm pays an engine's first calls: the first
arm measured on an engine used to pay about 6 s of a 30 s call on a 2-core CPU). vLLM's prefix
cache keeps full KV blocks only (128 tokens on CPU by default), so prompts shorter than a
block are still prefilled in every measured call, alike in every arm
(`prompt_tokens_prefilled` per arm). Then the repeats run round-robin over the arms (the arm
order rotates each repeat), so that arms measured in one repeat saw about the same machine
load: each repeat is a fresh generate call on the same prompts. `--sequential` builds one
engine at a time instead (less memory, more exposure to load changes). Reported per arm, each figure with its unit and source:
tok/s over the repeats (median, min, max, stdev; measured) and its ratio to the baselines
(ratio of medians, and per-repeat ratios), tokens per step, drafted tokens per step, verify
tokens per emitted token (from step counts, not times), the proposer's own time per step and
its share of wall time (measured inside vLLM's worker), the cost a cost=auto arm fitted
online (per repeat, and its course over the last repeat), the step-cost fit (a ms per step +
b ms per verified token) and, at the medians of the drafting arms' fits, the arm's speed-up
over the plain engine modelled as counted, with exact drafts and with free verification
(wall_model.py: what limits the arm on this hardware; modelled, not measured), and greedy
identity with the first arm (every repeat; first divergence positions).

No logprobs are asked by default (vLLM's default; a verify step would compute them for its
draft positions too); `--logprobs` asks for each emitted token's, as an RL rollout that keeps
rollout logprobs does. The result says which (`logprobs`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import statistics
import sys
from typing import Any, Sequence

from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.vllm.adapter import VllmEngine, parse_engine_args
from samspec_bench.bench.engines.vllm.drafter import ENGINE_LENGTH, ENV_OPTIONS
from samspec_bench.bench.engines.vllm.platform import (CPU_THREADS_CHOICES, cpu_engine_environment, on_cpu,
                                                        restored_environment, versions)
from samspec_bench.bench.engines.vllm.wall_model import modelled_ratios
from samspec_bench.data import encode_chat, read_benchmark
from samspec_bench.errors import UserError
from samspec_bench.metrics import first_divergence
from samspec_bench.models import BUILTIN_MODEL
from samspec_bench.paths import default_data_dir
from samspec_bench.results import atomic_write_text, check_output_file
from samspec_bench.sam.drafters import SamDrafter

PROG = "python -m samspec_bench.bench.engines.vllm.compare"
DEFAULT_METHODS = "none-plain,none,sam,sam[fixed],ngram,suffix,suffix-own"
BASELINES = ("none", "none-plain", "ngram")
GOAL_OVER_NONE = 1.15   # the goal: SAM tok/s >= ngram's and >= 1.15x no speculation
MEASURED = "measured (wall time of the generate call)"
FROM_COUNTS = "from step counts (not a time)"
WARM_PROMPT = "Write the numbers from one to twenty in words."
BATCH_GROUP = "call"   # sam+batch: the group every request of a measured call shares
LOGPROBS_NOTE = {False: "no logprobs asked (vLLM's default): none computed in any arm",
                 True: "each emitted token's logprob asked in every arm (--logprobs), as an RL rollout keeping "
                       "rollout logprobs does; a verify step computes them for its draft positions too"}
PREFILL_NOTE = ("every engine prefilled the measured prompts once before the first repeat (one token each), "
                "so that no arm pays a cold start; vLLM's prefix cache keeps only full KV blocks (128 tokens "
                "on CPU by default), so a measured call still prefills what is left: prompt_tokens_prefilled "
                "per arm, the same work in every arm and part of its wall time")


def fig(value: Any, unit: str, source: str) -> dict[str, Any]:
    return {"value": value, "unit": unit, "source": source}


def spread(values: Sequence[float], unit: str, source: str) -> dict[str, Any]:
    """median, min, max, stdev (0 for one value) and every run's value, with unit and source."""
    vals = [float(v) for v in values]
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "stdev": statistics.stdev(vals) if len(vals) > 1 else 0.0, "runs": vals, "n": len(vals),
            "unit": unit, "source": source}


def split_methods(text: str) -> list[str]:
    """--methods: comma-separated arms; commas inside [...] belong to a length spec."""
    return [m.strip() for m in re.split(r",(?![^\[]*\])", text) if m.strip()]


def arm_plan(name: str) -> tuple[str, Any]:
    """(engine key, drafter argument of generate) of an arm; a UserError names a bad one."""
    if name == "none-plain":
        return "plain", None
    if name == "none":
        return "sam", None
    if name == "sam+tail":
        return "sam-tail", SamDrafter()
    if name == "sam+batch":   # one group for the whole call: every request drafts from all of them
        return "sam", SamDrafter(group_sharing=True)
    if name in ("ngram", "suffix", "suffix-own"):
        return name, ("suffix" if name == "suffix-own" else name)
    m = re.fullmatch(r"sam(?:-m(\w+))?(?:\[([^\]]*)\])?", name)
    if m is None:
        raise UserError(f"--methods {name!r}: use none-plain, none, sam, sam-mN, sam[LENGTH], sam+tail, sam+batch, "
                        "ngram, suffix or suffix-own (e.g. sam[fixed], sam[evidence:cost=0.2], sam-m2)")
    min_match, length = m.group(1), m.group(2)
    if min_match is not None and (not min_match.isdigit() or int(min_match) < 1):
        raise UserError(f"--methods {name}: sam-mN needs an integer N >= 1 (the shortest match that drafts)")
    try:
        return "sam", SamDrafter(l_threshold=int(min_match or 1), length=length or None)
    except ValueError as e:
        raise UserError(f"--methods {name}: {e}") from None


def _build(key: str, model: str, dtype: str, k: int, engine_args: dict | None) -> VllmEngine:
    spec = {"plain": None, "suffix-own": "suffix", "sam-tail": "sam"}.get(key, key)
    opts = {"suffix": {"suffix_decoding_max_cached_requests": 0}} if key == "suffix-own" else None
    with _tail_default(key == "sam-tail"):   # the proposer reads its engine-wide options when vLLM builds it
        return VllmEngine(model, speculative=spec, num_spec_tokens=k, dtype=dtype, engine_args=engine_args,
                          speculative_options=opts)


@contextlib.contextmanager
def _tail_default(on: bool):
    """While an engine is built: the SAM proposer's option tail on by default (drafter.py)."""
    with restored_environment([ENV_OPTIONS]):
        if on:
            os.environ[ENV_OPTIONS] = json.dumps({**json.loads(os.environ.get(ENV_OPTIONS) or "{}"), "tail": True})
        yield


def _cost_figures(res) -> dict[str, Any]:
    """Acceptance and its cost from the step counts of one generate call."""
    c = res.counts()
    steps = c.steps or 0
    return {"tokens_per_step": fig(c.tokens_per_step, "tokens / decode step", FROM_COUNTS),
            "drafted_per_step": fig(c.drafted / steps if steps else None, "draft tokens / decode step", FROM_COUNTS),
            "verify_tokens_per_emitted_token": fig((steps + c.drafted) / c.tokens if c.tokens else None,
                                                   "target positions / emitted token", FROM_COUNTS),
            "acceptance_rate": fig(c.acceptance_rate, "accepted / drafted", FROM_COUNTS),
            "acceptance_length": fig(c.acceptance_length, "tokens / step with a draft", FROM_COUNTS),
            "decode_steps": fig(steps, "request decode steps", FROM_COUNTS),
            "engine_steps": fig(len(res.steps), "engine steps", FROM_COUNTS)}


def _ratios(num: dict, den: dict) -> dict[str, Any]:
    """num's tok/s over den's: ratio of medians, and the per-repeat ratios (same repeat index:
    measured close in time)."""
    pairs = [a / b for a, b in zip(num["runs"], den["runs"]) if b > 0]
    out: dict[str, Any] = {"ratio_of_medians": num["median"] / den["median"] if den["median"] > 0 else None,
                           "unit": "x", "source": "measured (ratio of tok/s in the same run)"}
    if pairs:
        out.update(per_repeat_median=statistics.median(pairs), per_repeat_min=min(pairs), per_repeat_max=max(pairs))
    return out


def compare_methods(model: str = BUILTIN_MODEL, *, dtype: str = "float32", k: int = 3,
                    benchmark: str = "math500", num_prompts: int = 8, max_tokens: int = 256,
                    data_dir: str | None = None, engine_args: dict[str, Any] | None = None,
                    methods: Sequence[str] = tuple(split_methods(DEFAULT_METHODS)), repeats: int = 1,
                    sequential: bool = False, cpu_threads: str = "all", logprobs: bool = False,
                    log=None) -> dict[str, Any]:
    """See the module docstring. Returns the JSON-ready result."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if repeats < 1:
        raise UserError(f"--repeats {repeats}: give an integer >= 1")
    methods = list(dict.fromkeys(methods))
    if not methods:
        raise UserError("--methods: name at least one arm (e.g. none,sam,ngram)")
    plans = {m: arm_plan(m) for m in methods}
    ddir = data_dir or default_data_dir()
    if ddir is None:
        raise UserError("no shared data found: pass --data-dir (the directory holding benchmarks/)")
    texts = [r["question"] for r in read_benchmark(benchmark, ddir)[:num_prompts]]
    skipped = {m: "arctic-inference is not installed" for m, (key, _) in plans.items()
               if key.startswith("suffix") and importlib.util.find_spec("arctic_inference") is None}
    arms = [m for m in methods if m not in skipped]
    keys = list(dict.fromkeys(plans[m][0] for m in arms))
    groups = [[m for m in arms if plans[m][0] == key] for key in keys] if sequential else [arms]
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")   # GiB per engine: several engines live at once
    if cpu_threads not in CPU_THREADS_CHOICES:
        raise UserError(f"--cpu-threads {cpu_threads!r}: use one of {', '.join(CPU_THREADS_CHOICES)}")

    runs: dict[str, list] = {m: [] for m in arms}       # per arm: (repeat, GenerationResult)
    info: dict[str, dict] = {}
    # on a CPU: the model's threads on every core, Intel OpenMP preloaded (platform.py)
    setup = cpu_engine_environment(cpu_threads) if on_cpu() else contextlib.nullcontext(
        {"choice": cpu_threads, "source": "not a CPU platform: nothing set"})
    with setup as threads:
        ids: list | None = None
        for group in groups:
            ids = _run_group(group, plans, texts, ids, runs, info, model=model, dtype=dtype, k=k,
                             engine_args=engine_args, repeats=repeats, max_tokens=max_tokens,
                             logprobs=0 if logprobs else None, log=log)
    out = _result(model, dtype, k, benchmark, len(texts), max_tokens, repeats, methods, plans, runs, info, skipped)
    return {**out, "cpu_threads": threads, "logprobs": {"asked": logprobs, "note": LOGPROBS_NOTE[logprobs]}}


def _run_group(group, plans, texts, ids, runs, info, *, model, dtype, k, engine_args, repeats, max_tokens, logprobs,
               log):
    """Build and warm the engines of these arms, run the repeats round-robin into `runs`, close
    them. Returns the measured prompts' token ids (encoded by the first engine's tokenizer)."""
    engines: dict[str, VllmEngine] = {}
    try:
        for key in dict.fromkeys(plans[m][0] for m in group):
            log(f"compare: building the {key} engine (k={k}) ...")
            eng = engines[key] = _build(key, model, dtype, k, engine_args)
            if ids is None:
                ids = [encode_chat(eng.tokenizer, t) for t in texts]
            warm = eng.tokenizer(WARM_PROMPT)["input_ids"]
            first = next(plans[m][1] for m in group if plans[m][0] == key)
            eng.generate([Request("warm-up", warm, SamplingParams(max_tokens=32))], drafter=first, num_spec_tokens=k)
            # the measured prompts once, one token each: no arm pays the engine's first calls on them
            eng.generate([Request(f"prefill-{i}", p, SamplingParams(max_tokens=1)) for i, p in enumerate(ids)],
                         drafter=first, num_spec_tokens=k)
        for r in range(repeats):
            order = group[r % len(group):] + group[: r % len(group)]   # rotate: no arm always first
            for m in order:
                # vLLM's default suffix keeps finished responses: a repeat would draft from the
                # previous repeat's answers to the same prompts, so it runs once
                if m == "suffix" and r > 0:
                    continue
                key, drafter = plans[m]
                shared = BATCH_GROUP if getattr(drafter, "group_sharing", False) else None
                reqs = [Request(i, p, SamplingParams(max_tokens=max_tokens, logprobs=logprobs), group=shared)
                        for i, p in enumerate(ids)]
                res = engines[key].generate(reqs, drafter=drafter, num_spec_tokens=k)
                runs[m].append((r, res))
                prop = res.engine.get("proposer") or {}
                share = prop.get("share_of_wall_time")
                log(f"compare: repeat {r + 1}/{repeats} {m:11s} {res.metrics()['output_tokens_per_s']:7.1f} tok/s"
                    + (f"  proposer {prop['ms_per_call_mean']:.3f} ms/step ({100 * share:.2f} % of wall)"
                       if share is not None else ""))
        for key, eng in engines.items():
            info[key] = {"drafter_class": eng.guard_rails.get("drafter_class"),
                         "async_scheduling": eng.guard_rails["scheduling"]["async_scheduling"],
                         "startup_s": fig(eng.startup_s, "s", "measured")}
    finally:
        for eng in engines.values():
            eng.close()
    return ids


def _result(model, dtype, k, benchmark, n_prompts, max_tokens, repeats, methods, plans, runs, info, skipped) -> dict:
    reference = next((m for m in methods if runs.get(m)), None)
    base = {r: [o.token_ids for o in res.outputs] for r, res in runs.get(reference, [])}
    base_any = next(iter(base.values()), None)
    rows: dict[str, Any] = {m: {"skipped": why} for m, why in skipped.items()}
    for m, rr in runs.items():
        tps = spread([res.metrics()["output_tokens_per_s"] for _, res in rr], "output tokens / s", MEASURED)
        last = rr[-1][1]
        same, firsts = 0, []
        for r, res in rr:
            ref = base.get(r, base_any)
            for a, b in zip((o.token_ids for o in res.outputs), ref):
                f = first_divergence(a, b)
                same += f is None
                if f is not None:
                    firsts.append(f)
        total = sum(len(res.outputs) for _, res in rr)
        props = [res.engine.get("proposer") for _, res in rr if res.engine.get("proposer")]
        drafter = plans[m][1]
        row = {"engine": plans[m][0], "repeats": len(rr), "tokens_per_s": tps,
               **({"draft_length": drafter.length.spec() if drafter.length_given else ENGINE_LENGTH}
                  if isinstance(drafter, SamDrafter) else {}),
               "output_tokens": fig(last.num_output_tokens, "tokens", "counted"),
               "prompt_tokens_prefilled": fig(sum(s.num_prefill_tokens for s in last.steps),
                                              "prompt tokens computed in the last repeat", FROM_COUNTS),
               **_cost_figures(last),
               "greedy_identical_to_reference": {"identical": same, "of": total, "reference_arm": reference,
                                                 "first_divergence": firsts, "unit": "responses (all repeats)"}}
        if props and all(p["ms_per_call_mean"] is not None for p in props):
            row["proposer_ms_per_step"] = spread([p["ms_per_call_mean"] for p in props],
                                                 "ms / propose call (one per engine step)",
                                                 "measured inside vLLM's worker (time.perf_counter around propose)")
            row["proposer_share_of_wall"] = spread([p["share_of_wall_time"] for p in props],
                                                   "fraction of the generate call's wall time",
                                                   "measured inside vLLM's worker")
            fits = [p["verify_cost"] for p in props if p.get("verify_cost")]
            if fits and all(f["draft_token_cost_decode_steps"] is not None for f in fits):
                row["draft_token_cost"] = spread([f["draft_token_cost_decode_steps"] for f in fits],
                                                 "decode steps per draft token (the evidence policy's cost)",
                                                 fits[0]["source"])
                row["ms_per_verified_token"] = spread([f["ms_per_verified_token"] for f in fits],
                                                      "ms per verified token (marginal)", fits[0]["source"])
                row["fixed_ms_per_step"] = spread([f["fixed_ms"] for f in fits], "ms per engine step (fixed part)",
                                                  fits[0]["source"])
            online = [p["online_cost"] for p in props if p.get("online_cost")]
            if online:   # cost=auto: the cost the proposer fitted online, at the end of each repeat
                row["online_cost"] = {**spread([o["final"] for o in online], online[0]["unit"], online[0]["source"]),
                                      "series_last_repeat": online[-1]["series"],
                                      "series_unit": "[propose call, cost]"}
            if all(p["step_wall_ms_mean"] for p in props):
                row["step_wall_ms"] = spread([p["step_wall_ms_mean"] for p in props], "ms / engine step", MEASURED)
        rows[m] = row
    for m, row in rows.items():
        if "tokens_per_s" not in row:
            continue
        row["tokens_per_s_vs"] = {b: _ratios(row["tokens_per_s"], rows[b]["tokens_per_s"])
                                  for b in BASELINES if b != m and "tokens_per_s" in rows.get(b, {})}
    _add_wall_model(rows, runs)
    return {"model": model, "dtype": dtype, "k": k, "benchmark": benchmark, "num_prompts": n_prompts,
            "max_tokens": max_tokens, "repeats": repeats, "greedy": True, "reference_arm": reference,
            "prefill": PREFILL_NOTE,
            "engines": info, "versions": versions(), "arms": rows, "goal": goal(rows)}


def _add_wall_model(rows: dict, runs: dict) -> None:
    """Each arm that drafted: its speed-up over the plain engine (else `none`) modelled from
    the last repeat's step counts at one step cost for the whole run (wall_model.py): a and b
    are the medians of the drafting arms' fits, since every arm runs the same model and one
    arm's fit alone scatters (the arms of one run on a 2-core CPU: a 42 to 58 ms, b 2.7 to 5.0 ms)."""
    base = next((b for b in ("none-plain", "none") if runs.get(b)), None)
    if base is None:
        return
    last = {m: (runs[m][-1][1], runs[m][-1][1].counts()) for m in rows if runs.get(m)}
    b_res, b_c = last[base]
    drafting = [m for m, (_, c) in last.items() if m != base and c.drafted]
    fitted = [rows[m] for m in drafting if "fixed_ms_per_step" in rows[m]]
    if not fitted:
        return
    a = statistics.median(r["fixed_ms_per_step"]["median"] for r in fitted)
    b = statistics.median(r["ms_per_verified_token"]["median"] for r in fitted)
    for m in drafting:
        res, c = last[m]
        model = modelled_ratios(a, b, len(b_res.steps), b_c.steps + b_c.drafted, len(res.steps),
                                c.steps + c.drafted, c.drafted - c.accepted)
        if model is not None:
            rows[m]["wall_model_vs"] = {base: {**model, "fitted_arms": len(fitted)}}


def goal(rows: dict) -> dict[str, Any]:
    """The issue's goal for every sam arm: tok/s >= ngram's and >= 1.15x none (both none arms
    where measured; ratio of medians), greedy outputs identical."""
    out = {}
    for m, row in rows.items():
        if not m.startswith("sam") or "tokens_per_s_vs" not in row:
            continue
        vs = row["tokens_per_s_vs"]
        checks = {}
        if "ngram" in vs:
            checks["vs_ngram"] = (vs["ngram"]["ratio_of_medians"], 1.0)
        for b in ("none", "none-plain"):
            if b in vs:
                checks[f"vs_{b}"] = (vs[b]["ratio_of_medians"], GOAL_OVER_NONE)
        g = row["greedy_identical_to_reference"]
        met = all(r is not None and r >= need for r, need in checks.values()) and g["identical"] == g["of"]
        out[m] = {**{c: {"ratio": r, "needed": need, "unit": "x"} for c, (r, need) in checks.items()},
                  "greedy_identical": g["identical"] == g["of"], "met": met and bool(checks)}
    return out


def print_table(out: dict, file=sys.stderr) -> None:
    print(f"prefill: {out['prefill']}", file=file)
    if out.get("logprobs"):
        print(f"logprobs: {out['logprobs']['note']}", file=file)
    if out.get("cpu_threads"):
        ct = out["cpu_threads"]
        print(f"cpu threads: {ct.get('VLLM_CPU_OMP_THREADS_BIND', '-')} ({ct['source']})", file=file)
    for m, r in out["arms"].items():
        if "skipped" in r:
            print(f"{m:11s} skipped: {r['skipped']}", file=file)
            continue
        t = r["tokens_per_s"]
        vs = "  ".join(f"x{v['ratio_of_medians']:.3f} vs {b}" for b, v in r["tokens_per_s_vs"].items())
        prop = r.get("proposer_ms_per_step")
        share = r.get("proposer_share_of_wall")
        g = r["greedy_identical_to_reference"]
        name = f"{m} ({r['draft_length']})" if "draft_length" in r and "[" not in m else m
        print(f"{name:11s} {t['median']:7.1f} tok/s [{t['min']:.1f}..{t['max']:.1f}, n={t['n']}]  "
              f"tokens/step {r['tokens_per_step']['value']:.3f}  drafted/step {r['drafted_per_step']['value']:.3f}  "
              f"verify/token {r['verify_tokens_per_emitted_token']['value']:.3f}  "
              + (f"proposer {prop['median']:.3f} ms/step ({100 * share['median']:.2f} % wall)  " if prop else "")
              + (f"draft token cost {r['draft_token_cost']['median']:.2f} steps (fit)  " if "draft_token_cost" in r else "")
              + (f"online cost {r['online_cost']['median']:.2f} steps (cost=auto, fitted online)  "
                 if "online_cost" in r else "")
              + f"identical {g['identical']}/{g['of']}  {vs}", file=file)
        for b, w in r.get("wall_model_vs", {}).items():
            print(f"{'':11s} modelled vs {b} (a {w['fixed_ms']:.1f} ms/step + b {w['ms_per_verified_token']:.2f} "
                  f"ms/verified token, the run's fit): x{w['as_counted']:.3f} as counted, "
                  f"x{w['exact_drafts']:.3f} with exact drafts, x{w['free_verification']:.3f} with free verification",
                  file=file)
    for m, g in out["goal"].items():
        parts = "  ".join(f"{c} x{v['ratio']:.3f} (need {v['needed']})" for c, v in g.items() if isinstance(v, dict))
        print(f"goal {m}: {'MET' if g['met'] else 'not met'}  {parts}  greedy identical {g['greedy_identical']}",
              file=file)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    ap = argparse.ArgumentParser(prog=prog, description="none / ngram / suffix / sam inside vLLM on the same prompts "
                                 "(greedy; tok/s over repeats, acceptance and its cost, proposer time)")
    ap.add_argument("--model", default=BUILTIN_MODEL)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--benchmark", default="math500")
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--methods", default=DEFAULT_METHODS,
                    help="arms, comma-separated: none-plain, none, sam, sam[fixed], sam[evidence:cost=0.2], "
                         "sam[evidence:cost=auto], sam-mN, sam+tail, sam+batch, "
                         "ngram, suffix, suffix-own")
    ap.add_argument("--engine-arg", action="append", default=[])
    ap.add_argument("--repeats", type=int, default=2, help="fresh generate calls per arm (tok/s spread)")
    ap.add_argument("--sequential", action="store_true", help="one engine at a time (less memory)")
    ap.add_argument("--cpu-threads", choices=CPU_THREADS_CHOICES, default="all",
                    help="on a CPU: all = the model's threads on every core and Intel OpenMP preloaded, as "
                         "vLLM's CPU guide asks (default); vllm = vLLM's own setup (on x86 it keeps one core "
                         "for its scheduler). A binding or preload in the environment wins")
    ap.add_argument("--logprobs", action="store_true",
                    help="ask for each emitted token's logprob, as an RL rollout that keeps rollout logprobs does "
                         "(off: vLLM's default, no logprobs computed)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    try:
        if a.json:
            check_output_file(a.json, "--json", "compare.json")   # before minutes of generation
        out = compare_methods(a.model, dtype=a.dtype, k=a.k, benchmark=a.benchmark, num_prompts=a.num_prompts,
                              max_tokens=a.max_tokens, data_dir=a.data_dir,
                              engine_args=parse_engine_args(a.engine_arg),
                              methods=split_methods(a.methods), repeats=a.repeats,
                              sequential=a.sequential, cpu_threads=a.cpu_threads, logprobs=a.logprobs)
    except UserError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    text = json.dumps(out, indent=2)
    if a.json:
        atomic_write_text(a.json, text + "\n", option="--json")
    print(text)
    print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
