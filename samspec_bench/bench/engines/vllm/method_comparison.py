"""The method comparison inside vLLM: none / ngram / suffix / sam on the same prompts, greedy.
The command is `samspec-bench compare` (suites/compare: run folder, --json, --resume):

    samspec-bench compare --num-prompts 8 --max-tokens 256 --repeats 3

(`python -m samspec_bench.bench.engines.vllm.method_comparison` and `python -m
samspec_bench.bench.vllm_engine` run that command with the same flags). Needs vLLM. This module
runs the arms and hands each finished generate call over as a run record (compare_figures.py
turns the records into the figures), so that a resumed comparison skips the calls it has.

Arms (`--methods`, comma-separated):
  none-plain  an engine built without speculation
  none        the SAM engine with the drafter off (the same scheduling as sam)
  sam         SAM through our proposer (`vllm_proposer.SamProposer`) with the engine's default draft
              length (`vllm_proposer.ENGINE_LENGTH`, evidence:cost=auto: the evidence policy with the
              cost fitted online from the engine's step times, `online_cost.py`); sam[SPEC]: with
              the draft length policy SPEC (sam[fixed]: SAM-Decoding's baseline, up to k tokens
              whenever any suffix matches; sam[evidence]: the replay default, a fixed cost;
              sam[evidence:cost=0.2]); sam-mN: no draft for matches shorter than N tokens
  sam+tail    sam on its own engine whose proposer has option tail on (vllm_proposer: while the
              batch drains, each row's draft tokens are priced by its chance to finish last)
  sam+batch   sam with every request of the call in one group (group sharing): each drafts from
              every request's prompt and tokens so far, as Arctic's suffix decoding drafts from
              other requests (it also keeps finished ones); freed when the call ends
  ngram       vLLM's n-gram method (prompt_lookup_min 2, max 5)
  suffix      vLLM's suffix method (Arctic; keeps finished responses, so it runs once);
              suffix-own keeps none (each request drafts from its own context)
All sam arms and `none` share one engine (the drafter's options ride on each request). A
user's speculative_config (`--speculative-config`) is what the engine of the method it names
runs, as given. The prompts: a benchmark, or vLLM bench's custom / sharegpt / random datasets
(compare_prompts.py); `seed` is vLLM's engine seed and the dataset's.

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
identity with the first arm (every repeat; first divergence positions): compare_figures.py.

No logprobs are asked by default (vLLM's default; a verify step would compute them for its
draft positions too); `--logprobs` asks for each emitted token's, as an RL rollout that keeps
rollout logprobs does. The result says which (`logprobs`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
from typing import Any, Callable, Sequence

from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.vllm.adapter import VllmEngine
from samspec_bench.bench.engines.vllm.compare_figures import (PREFILL_NOTE, arm_rows, engines_of, fig, goal,
                                                              run_record)
from samspec_bench.bench.engines.vllm.compare_prompts import PromptSpec, prompt_texts, random_prompt_ids
from samspec_bench.bench.engines.vllm.platform import (CPU_THREADS_CHOICES, cpu_engine_environment, on_cpu,
                                                        restored_environment, versions)
from samspec_bench.bench.vllm_proposer.proposer_options import ENGINE_LENGTH, ENV_OPTIONS
from samspec_bench.data import BENCHMARKS, encode_chat
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import BUILTIN_MODEL
from samspec_bench.paths import default_data_dir
from samspec_bench.sam.drafters import SamDrafter

DEFAULT_METHODS = "none-plain,none,sam,sam[fixed],ngram,suffix,suffix-own"
WARM_PROMPT = "Write the numbers from one to twenty in words."
BATCH_GROUP = "call"   # sam+batch: the group every request of a measured call shares
LOGPROBS_NOTE = {False: "no logprobs asked (vLLM's default): none computed in any arm",
                 True: "each emitted token's logprob asked in every arm (--logprobs), as an RL rollout keeping "
                       "rollout logprobs does; a verify step computes them for its draft positions too"}


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


def draft_length(drafter: Any) -> str | None:
    """The draft length policy a SAM arm runs (None: not a SAM arm): its spec, else the engine's
    default (the cost fitted online)."""
    if not isinstance(drafter, SamDrafter):
        return None
    return drafter.length.spec() if drafter.length_given else ENGINE_LENGTH


def check_methods(methods: Sequence[str], repeats: int, cpu_threads: str) -> dict[str, tuple[str, Any]]:
    """The arms' plans; a UserError for a bad arm, repeat count or thread choice."""
    if repeats < 1:
        raise UserError(f"--repeats {repeats}: give an integer >= 1")
    if not methods:
        raise UserError("--methods: name at least one arm (e.g. none,sam,ngram)")
    if cpu_threads not in CPU_THREADS_CHOICES:
        raise UserError(f"--cpu-threads {cpu_threads!r}: use one of {', '.join(CPU_THREADS_CHOICES)}")
    return {m: arm_plan(m) for m in dict.fromkeys(methods)}


def engine_method(key: str) -> str | None:
    """The speculative method of an engine key (arm_plan's first element)."""
    return {"plain": None, "suffix-own": "suffix", "sam-tail": "sam"}.get(key, key)


def _build(key: str, model: str, dtype: str, k: int, engine_args: dict | None, seed: int = 0) -> VllmEngine:
    opts = {"suffix": {"suffix_decoding_max_cached_requests": 0}} if key == "suffix-own" else None
    with _tail_default(key == "sam-tail"):   # the proposer reads its engine-wide options when vLLM builds it
        return VllmEngine(model, speculative=engine_method(key), num_spec_tokens=k, dtype=dtype,
                          engine_args=engine_args, speculative_options=opts, seed=seed)


@contextlib.contextmanager
def _tail_default(on: bool):
    """While an engine is built: the SAM proposer's option tail on by default (vllm_proposer)."""
    with restored_environment([ENV_OPTIONS]):
        if on:
            os.environ[ENV_OPTIONS] = json.dumps({**json.loads(os.environ.get(ENV_OPTIONS) or "{}"), "tail": True})
        yield


def compare_methods(model: str = BUILTIN_MODEL, *, dtype: str = "float32", k: int = 3,
                    benchmark: str = "math500", num_prompts: int = 8, max_tokens: int = 256,
                    data_dir: str | None = None, engine_args: dict[str, Any] | None = None,
                    methods: Sequence[str] = tuple(split_methods(DEFAULT_METHODS)), repeats: int = 1,
                    sequential: bool = False, cpu_threads: str = "all", logprobs: bool = False,
                    log=None, done: Sequence[dict] = (), on_record: Callable[[dict], None] | None = None,
                    prompts: PromptSpec | None = None, seed: int = 0, ignore_eos: bool = False
                    ) -> dict[str, Any]:
    """See the module docstring. Returns the JSON-ready result. `done`: run records of an
    earlier, interrupted comparison with the same settings (their calls are not repeated);
    `on_record` gets every new record as its call finishes. `prompts`: vLLM bench's datasets
    (compare_prompts; None: the benchmark); `seed`: vLLM's engine seed (and the dataset's);
    `ignore_eos`: every response runs to max_tokens."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    plans = check_methods(methods, repeats, cpu_threads)
    methods = list(plans)
    spec = prompts or PromptSpec(benchmark, seed=seed)
    ddir = data_dir or default_data_dir()
    if ddir is None and spec.dataset in BENCHMARKS:
        raise UserError("no shared data found: pass --data-dir (the directory holding benchmarks/)")
    texts = prompt_texts(spec, num_prompts, ddir)
    skipped = {m: "arctic-inference is not installed" for m, (key, _) in plans.items()
               if key.startswith("suffix") and importlib.util.find_spec("arctic_inference") is None}
    arms = [m for m in methods if m not in skipped]
    keys = list(dict.fromkeys(plans[m][0] for m in arms))
    groups = [[m for m in arms if plans[m][0] == key] for key in keys] if sequential else [arms]
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")   # GiB per engine: several engines live at once
    records = [r for r in done if r.get("arm") in arms]
    have = {(r["arm"], r["repeat"]) for r in records}

    def keep(rec: dict) -> None:
        records.append(rec)
        if on_record is not None:
            on_record(rec)

    # on a CPU: the model's threads on every core, Intel OpenMP preloaded (platform.py)
    setup = cpu_engine_environment(cpu_threads) if on_cpu() else contextlib.nullcontext(
        {"choice": cpu_threads, "source": "not a CPU platform: nothing set"})
    with setup as threads:
        ids: list | None = None
        for group in groups:
            ids = _run_group(group, plans, lambda tok: _prompt_ids(tok, texts, spec, num_prompts), ids, have, keep,
                             model=model, dtype=dtype, k=k, engine_args=engine_args, repeats=repeats,
                             max_tokens=max_tokens, logprobs=0 if logprobs else None, log=log, seed=seed,
                             ignore_eos=ignore_eos)
    rows, reference = arm_rows(records, methods, skipped)
    return {"model": model, "dtype": dtype, "k": k, "benchmark": spec.dataset,
            "num_prompts": len(texts) if texts is not None else num_prompts,
            "dataset": {"name": spec.dataset, "path": spec.path, "input_len": spec.input_len, "seed": spec.seed},
            "seed": seed, "ignore_eos": ignore_eos,
            "max_tokens": max_tokens, "repeats": repeats, "greedy": True, "reference_arm": reference,
            "prefill": PREFILL_NOTE, "engines": engines_of(records), "versions": versions(), "arms": rows,
            "goal": goal(rows), "cpu_threads": threads,
            "logprobs": {"asked": logprobs, "note": LOGPROBS_NOTE[logprobs]}}


def calls_to_run(group: Sequence[str], repeats: int, have: set) -> list[tuple[int, str]]:
    """(repeat, arm) in the order they run: round-robin, the arm order rotated each repeat (no
    arm always first); vLLM's default suffix keeps finished responses, so a repeat would draft
    from the previous repeat's answers to the same prompts: it runs once. Calls in `have`
    (arm, repeat) are left out."""
    out = []
    for r in range(repeats):
        for m in group[r % len(group):] + group[: r % len(group)]:
            if not (m == "suffix" and r > 0) and (m, r) not in have:
                out.append((r, m))
    return out


def _prompt_ids(tokenizer, texts: list[str] | None, spec: PromptSpec, num_prompts: int) -> list[list[int]]:
    """The measured prompts' token ids: text prompts through the chat template, random ones drawn."""
    if texts is None:
        return random_prompt_ids(tokenizer, num_prompts, int(spec.input_len), spec.seed)
    return [encode_chat(tokenizer, t) for t in texts]


def _run_group(group, plans, make_ids, ids, have, keep, *, model, dtype, k, engine_args, repeats, max_tokens,
               logprobs, log, seed=0, ignore_eos=False):
    """Build and warm the engines of these arms, run their calls not in `have` round-robin
    (each finished call to `keep` as a run record), close them. Returns the measured prompts'
    token ids (`make_ids` of the first engine's tokenizer)."""
    calls = calls_to_run(group, repeats, have)
    if not calls:
        return ids
    engines: dict[str, VllmEngine] = {}
    try:
        for key in dict.fromkeys(plans[m][0] for _, m in calls):
            log(f"compare: building the {key} engine (k={k}) ...")
            eng = engines[key] = _build(key, model, dtype, k, engine_args, seed)
            if ids is None:
                ids = make_ids(eng.tokenizer)
            warm = eng.tokenizer(WARM_PROMPT)["input_ids"]
            first = next(plans[m][1] for m in group if plans[m][0] == key)
            eng.generate([Request("warm-up", warm, SamplingParams(max_tokens=32))], drafter=first, num_spec_tokens=k)
            # the measured prompts once, one token each: no arm pays the engine's first calls on them
            eng.generate([Request(f"prefill-{i}", p, SamplingParams(max_tokens=1)) for i, p in enumerate(ids)],
                         drafter=first, num_spec_tokens=k)
        for r, m in calls:
            key, drafter = plans[m]
            shared = BATCH_GROUP if getattr(drafter, "group_sharing", False) else None
            reqs = [Request(i, p, SamplingParams(max_tokens=max_tokens, logprobs=logprobs, ignore_eos=ignore_eos),
                            group=shared) for i, p in enumerate(ids)]
            eng = engines[key]
            res = eng.generate(reqs, drafter=drafter, num_spec_tokens=k)
            info = {"drafter_class": eng.guard_rails.get("drafter_class"),
                    "async_scheduling": eng.guard_rails["scheduling"]["async_scheduling"],
                    "startup_s": fig(eng.startup_s, "s", "measured")}
            keep(run_record(m, r, key, draft_length(drafter), res, info))
            prop = res.engine.get("proposer") or {}
            share = prop.get("share_of_wall_time")
            log(f"compare: repeat {r + 1}/{repeats} {m:11s} {res.metrics()['output_tokens_per_s']:7.1f} tok/s"
                + (f"  proposer {prop['ms_per_call_mean']:.3f} ms/step ({100 * share:.2f} % of wall)"
                   if share is not None else ""))
    finally:
        for eng in engines.values():
            eng.close()
    return ids
