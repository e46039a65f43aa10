"""Does SAM Pareto-dominate Arctic's suffix decoding? Trace replay, side by side in one run.

    python -m samspec_bench.bench.draft_dominance [--traces F ...] [--tokenizer DIR] [-k 3,8]
        [--sam-length evidence] [--limit-groups N] [--json out.json]

For every trace, k and source (own: the response's prompt and prefix; group: + its GRPO
siblings so far, members advancing one batched step at a time), it replays 'sam' (with
--sam-length), 'sam-fixed' (the min_endpos baseline) and Arctic's 'suffix' on the same
tokens and prints tokens per step and drafted tokens per step (counts, not time) and
PASS where SAM's tokens per step >= suffix's and its drafted tokens per step <= suffix's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict
from pathlib import Path

from samspec_bench.bench.engines.replay import replay_group, replay_response
from samspec_bench.data import load_tokenizer, read_traces, resolve_data_dir, tokenize_traces
from samspec_bench.errors import UserError
from samspec_bench.metrics import total_counts
from samspec_bench.sam.drafters import ArcticSuffixDrafter, SamDrafter, arctic_available

SOURCES = ("own", "group")


def units(items, group: bool, limit: int | None) -> list[list[tuple[str, object, object]]]:
    """Replay units: one per response (own), or one per GRPO group in file order (group);
    `limit`: only the responses of the first `limit` groups, for both sources."""
    gkey = [it.group if it.group is not None else ("solo", i) for i, it in enumerate(items)]
    keep = set(list(OrderedDict.fromkeys(gkey))[:limit]) if limit is not None else None
    by: "OrderedDict[object, list]" = OrderedDict()
    for i, it in enumerate(items):
        if keep is None or gkey[i] in keep:
            by.setdefault(gkey[i] if group else i, []).append((str(i), it.prompt_ids, it.response_ids))
    return list(by.values())


def replay(make, units_, k: int, group: bool) -> dict:
    recs = []
    for u in units_:
        d = make()
        recs += replay_group(d, u, k) if group else [replay_response(d, u[0][1], u[0][2], k, key=u[0][0])]
    c = total_counts(recs)
    return {"tokens_per_step": c.tokens_per_step, "drafted_per_step": c.drafted_per_step,
            "verify_tokens_per_token": c.verify_tokens_per_token, "acceptance_rate": c.acceptance_rate,
            "steps": c.steps}


def run(traces: list[Path], tokenizer: str, ks: list[int], sam_length: str, limit: int | None,
        progress=print) -> list[dict]:
    tok = load_tokenizer(tokenizer)
    rows = []
    for path in traces:
        items = tokenize_traces(read_traces(path), tok)
        for k in ks:
            for source in SOURCES:
                group = source == "group"
                us = units(items, group, limit)
                sam = replay(lambda: SamDrafter(group_sharing=group, length=sam_length), us, k, group)
                fixed = replay(lambda: SamDrafter(group_sharing=group, length="fixed"), us, k, group)
                arctic = replay(lambda: ArcticSuffixDrafter(share_finished=group), us, k, group)
                ok = (sam["tokens_per_step"] >= arctic["tokens_per_step"]
                      and sam["drafted_per_step"] <= arctic["drafted_per_step"])
                row = {"trace": path.name, "k": k, "source": source, "sam": sam, "sam_fixed": fixed,
                       "suffix": arctic, "dominates": ok}
                rows.append(row)
                progress(fmt_row(row))
    return rows


def fmt_row(r: dict) -> str:
    f = lambda m: f"{m['tokens_per_step']:.3f} / {m['drafted_per_step']:.3f}"  # noqa: E731
    return (f"{r['trace']:<32} k={r['k']:<2} {r['source']:<5}  sam {f(r['sam'])}   sam-fixed {f(r['sam_fixed'])}"
            f"   suffix {f(r['suffix'])}   {'PASS' if r['dominates'] else 'FAIL'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", nargs="*", help="trace files (default: every trace of the data directory)")
    ap.add_argument("--tokenizer", help="tokenizer directory (default: <data dir>/tokenizers/qwen3)")
    ap.add_argument("-k", default="3,8", help="draft lengths, comma list")
    ap.add_argument("--sam-length", default="evidence", help="SAM's draft-length spec (fixed, evidence, evidence:cost=...)")
    ap.add_argument("--limit-groups", type=int, help="the first N groups of every trace")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    try:
        if not arctic_available():
            raise UserError("arctic-inference is not installed: pip install arctic-inference (see README)")
        if a.traces:
            traces = [Path(t) for t in a.traces]
        else:
            traces = sorted((resolve_data_dir(None) / "traces").glob("*.jsonl"))
        tokenizer = a.tokenizer or str(resolve_data_dir(None) / "tokenizers" / "qwen3")
        ks = [int(x) for x in a.k.split(",")]
        SamDrafter(length=a.sam_length)  # a bad spec stops here, before any replay
    except (UserError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("tokens per step / drafted tokens per step (counts from trace replay, not time)")
    rows = run(traces, tokenizer, ks, a.sam_length, a.limit_groups, progress=lambda s: print(s, flush=True))
    passed = sum(r["dominates"] for r in rows)
    print(f"SAM ({a.sam_length}) Pareto-dominates suffix in {passed} of {len(rows)} (trace, k, source) cells")
    if a.json:
        Path(a.json).write_text(json.dumps({"sam_length": a.sam_length, "rows": rows,
                                            "passed": passed, "cells": len(rows)}, indent=1))
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
