"""The comparison of the closing note: none / ngram / suffix / sam inside vLLM on the same
prompts, one engine per method, with its own command line:

    python -m samspec_bench.bench.engines.vllm.compare --dtype float32 --num-prompts 8 --max-tokens 256

(the old path `python -m samspec_bench.bench.vllm_engine` runs the same). Needs vLLM.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from typing import Any, Sequence

from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.vllm.adapter import VllmEngine, parse_engine_args
from samspec_bench.bench.engines.vllm.platform import versions
from samspec_bench.data import encode_chat, read_benchmark
from samspec_bench.errors import UserError
from samspec_bench.metrics import first_divergence
from samspec_bench.models import BUILTIN_MODEL
from samspec_bench.paths import default_data_dir
from samspec_bench.results import atomic_write_text
from samspec_bench.sam.drafters import SamDrafter

PROG = "python -m samspec_bench.bench.engines.vllm.compare"


def compare_methods(model: str = BUILTIN_MODEL, *, dtype: str = "float32", k: int = 3,
                    benchmark: str = "math500", num_prompts: int = 8, max_tokens: int = 256,
                    data_dir: str | None = None, engine_args: dict[str, Any] | None = None,
                    methods: Sequence[str] = ("none-plain", "none", "sam", "ngram", "suffix", "suffix-own"),
                    repeats: int = 1) -> dict[str, Any]:
    """Greedy generation of the same prompts with every method, one engine per method (vLLM
    fixes the method at build time): tokens/s (output tokens / wall time of the generate call,
    the batch of all prompts), tokens_per_step and acceptance_length from the per-request
    records, and whether the outputs equal the no-speculation outputs. `none` runs on the SAM
    engine with the drafter off (the same scheduling as `sam`); `none-plain` on an engine
    built without speculation; `suffix` is vLLM's default (finished responses stay cached
    and later requests draft from them too), `suffix-own` keeps no finished response
    (suffix_decoding_max_cached_requests=0: each request drafts from its own context, as SAM
    does here); `sam-mN` is SAM with min_match N (no draft for matches shorter than N).
    Every engine is warmed up on a prompt that is not one of the measured ones; with
    `repeats` > 1 the measured call runs that many times and the median tokens/s is kept
    (on a shared machine the spread is reported too)."""
    ddir = data_dir or default_data_dir()
    if ddir is None:
        raise UserError("no shared data found: pass data_dir (the directory holding benchmarks/)")
    texts = [r["question"] for r in read_benchmark(benchmark, ddir)[:num_prompts]]
    rows: dict[str, Any] = {}
    base_tokens = None
    ids = None
    for m in methods:
        if m.startswith("suffix") and importlib.util.find_spec("arctic_inference") is None:
            rows[m] = {"skipped": "arctic-inference is not installed"}
            continue
        spec = {"none-plain": None, "none": "sam", "suffix-own": "suffix"}.get(m, "sam" if m.startswith("sam") else m)
        opts = {"suffix": {"suffix_decoding_max_cached_requests": 0}} if m == "suffix-own" else None
        arm: Any = None if m.startswith("none") else spec
        if m.startswith("sam-m"):
            arm = SamDrafter(l_threshold=int(m.removeprefix("sam-m")))
        eng = VllmEngine(model, speculative=spec, num_spec_tokens=k, dtype=dtype, engine_args=engine_args,
                         speculative_options=opts)
        try:
            if ids is None:
                ids = [encode_chat(eng.tokenizer, t) for t in texts]
            reqs = [Request(i, p, SamplingParams(max_tokens=max_tokens)) for i, p in enumerate(ids)]
            warm = eng.tokenizer("Write the numbers from one to twenty in words.")["input_ids"]
            eng.generate([Request("warm-up", warm, SamplingParams(max_tokens=32))], drafter=arm, num_spec_tokens=k)
            runs = []
            # vLLM's default suffix keeps finished responses: a repeat would draft from the
            # previous repeat's answers to the same prompts, so it runs once
            for _ in range(1 if m == "suffix" else max(1, repeats)):
                t0 = time.perf_counter()
                res = eng.generate(reqs, drafter=arm, num_spec_tokens=k)
                runs.append((time.perf_counter() - t0, res))
            tps = [r.metrics()["output_tokens_per_s"] for _, r in runs]
            t1 = t0 + runs[-1][0]
            met = res.metrics()
            toks = [o.token_ids for o in res.outputs]
            if base_tokens is None:
                base_tokens = toks
            same = [a == b for a, b in zip(toks, base_tokens)]
            firsts = [first_divergence(a, b) for a, b in zip(toks, base_tokens)]
            rows[m] = {"output_tokens": met["output_tokens"], "wall_time_s": met["wall_time_s"],
                       "tokens_per_s": statistics.median(tps), "tokens_per_s_runs": tps, "generate_call_s": t1 - t0,
                       "mean_request_tokens_per_s": sum(len(o.token_ids) / o.finish_time_s for o in res.outputs
                                                        if o.finish_time_s) / len(res.outputs),
                       "tokens_per_step": met["tokens_per_step"],
                       "acceptance_length": met["acceptance_length"], "acceptance_rate": met["acceptance_rate"],
                       "greedy_identical_to_first_arm": f"{sum(same)}/{len(same)}",
                       "first_divergence": [f for f in firsts if f is not None],
                       "drafter_class": eng.guard_rails.get("drafter_class"),
                       "async_scheduling": eng.guard_rails["scheduling"]["async_scheduling"],
                       "startup_s": eng.startup_s}
        finally:
            eng.close()
    return {"model": model, "dtype": dtype, "k": k, "benchmark": benchmark, "num_prompts": len(texts),
            "max_tokens": max_tokens, "reference_arm": methods[0], "versions": versions(), "arms": rows}


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    ap = argparse.ArgumentParser(prog=prog, description="none / ngram / suffix / sam inside vLLM on the same prompts")
    ap.add_argument("--model", default=BUILTIN_MODEL)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--benchmark", default="math500")
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--methods", default="none-plain,none,sam,ngram,suffix,suffix-own")
    ap.add_argument("--engine-arg", action="append", default=[])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    out = compare_methods(a.model, dtype=a.dtype, k=a.k, benchmark=a.benchmark, num_prompts=a.num_prompts,
                          max_tokens=a.max_tokens, data_dir=a.data_dir, engine_args=parse_engine_args(a.engine_arg),
                          methods=[m.strip() for m in a.methods.split(",") if m.strip()], repeats=a.repeats)
    text = json.dumps(out, indent=2)
    if a.json:
        atomic_write_text(a.json, text + "\n", option="--json")
    print(text)
    for m, r in out["arms"].items():
        if "skipped" in r:
            print(f"{m:11s} skipped: {r['skipped']}", file=sys.stderr)
            continue
        al = r["acceptance_length"]
        print(f"{m:11s} {r['tokens_per_s']:8.1f} tok/s  (per request {r['mean_request_tokens_per_s']:.1f})  tokens_per_step {r['tokens_per_step']:.3f}  "
              f"AL {al if al is None else round(al, 3)}  identical {r['greedy_identical_to_first_arm']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
