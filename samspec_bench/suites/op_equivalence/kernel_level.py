"""Kernel level of op-equivalence: random paged inputs through every kernel pair of
`samspec_bench.bench.engines.kernels` (verify kernel once over k+1 query tokens per request,
decode kernel once per query position). Compared: the attention outputs element by element,
and "probe" distributions (the outputs projected by one fixed random matrix onto PROBE_VOCAB
logits), so that the logprob metrics exist at this level too."""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

from samspec_bench.devices import out_of_memory, synchronize
from samspec_bench.errors import UserError
from samspec_bench.results import RunDir
from samspec_bench.suites.op_equivalence.config import CASES_FILE, OpEqConfig
from samspec_bench.suites.op_equivalence.diff_stats import Accumulator

PROBE_VOCAB = 4096
CASE_METRICS = ("output_diff_max", "output_exact_zero_fraction", "logprob_diff_max", "exact_zero_fraction",
                "argmax_flip_rate", "kl_max")


def _dtype(name: str):
    import torch  # kernels run on torch tensors
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def run_kernel_level(cfg: OpEqConfig, bar, pair_names: list[str],
                     run_dir: RunDir | None = None) -> tuple[dict, list[dict], dict]:
    """Returns ({row key: summary}, per-case table rows, {pair: reason} for skipped pairs).
    Each case row is also appended to run_dir's kernel_cases.jsonl as it finishes."""
    from samspec_bench.bench.engines.kernels import PAIRS, make_case  # imports torch

    rows: dict[str, dict] = {}
    table: list[dict] = []
    skipped: dict[str, str] = {}
    grid = list(itertools.product(cfg.dtypes, cfg.block_sizes, cfg.gqa, cfg.head_dims, range(cfg.trials)))
    usable = []
    for name in pair_names:
        reason = PAIRS[name].availability()
        pair = None if reason else PAIRS[name](cfg.device)
        reason = reason or pair.device_mismatch()   # a pair made for another kind of device
        if reason:
            skipped[name] = reason
        else:
            usable.append(pair)
    task = bar.add_task("kernel pairs", total=len(usable) * len(grid))
    for pair in usable:
        accs: dict[str, Accumulator] = {}
        case_skips: dict[str, int] = {}   # reason -> cases skipped for it
        for dt, bs, gqa, hd, trial in grid:
            if cfg.num_heads % gqa:
                raise UserError(f"--gqa {gqa}: --num-heads {cfg.num_heads} is not a multiple of it")
            seed = cfg.seed * 1000003 + trial * 7919 + bs * 31 + gqa * 17 + hd
            try:
                case = make_case(num_seqs=cfg.num_seqs, query_len=cfg.k + 1, min_seq_len=cfg.min_seq_len,
                                 max_seq_len=cfg.max_seq_len, block_size=bs, num_heads=cfg.num_heads,
                                 num_kv_heads=cfg.num_heads // gqa, head_dim=hd, dtype=_dtype(dt), seed=seed)
            except (MemoryError, RuntimeError) as e:
                if not out_of_memory(e):
                    raise
                # the case's size is the user's input: bad input (exit 2), not an internal error
                raise UserError(f"--num-seqs {cfg.num_seqs} x --seq-len {cfg.min_seq_len}:{cfg.max_seq_len} x "
                                f"--num-heads {cfg.num_heads} / --gqa {gqa} x --head-dim {hd}: the paged KV cache "
                                f"does not fit in memory ({e.__class__.__name__}); lower them") from None
            why = pair.supports(case)
            if why:
                case_skips[why] = case_skips.get(why, 0) + 1
                table.append({"pair": pair.name, "dtype": dt, "block_size": bs, "gqa": gqa, "head_dim": hd,
                              "trial": trial, "skipped": why})
                bar.advance(task)
                continue
            t0 = time.perf_counter()
            out_a, out_b = pair.run(case)
            synchronize(pair.device())   # an accelerator's queued kernels count in the case's time
            elapsed = time.perf_counter() - t0
            # the kernels ran on the pair's device; the probe is statistics, on the CPU with its
            # generator, so that it is the same projection and draw on every device
            out_a, out_b = out_a.float().cpu(), out_b.float().cpu()
            lp_a, lp_b, toks = _probe(out_a, out_b, seed)
            acc = accs.setdefault(dt, Accumulator())
            acc.add(lp_a, lp_b, toks)
            acc.add_outputs(out_a, out_b)
            one = Accumulator()
            one.add(lp_a, lp_b, toks)
            one.add_outputs(out_a, out_b)
            s = one.summary()
            table.append({"pair": pair.name, "dtype": dt, "block_size": bs, "gqa": gqa, "head_dim": hd,
                          "trial": trial, "num_seqs": cfg.num_seqs, "query_len": cfg.k + 1,
                          "seq_lens": case.seq_lens, "seconds": elapsed, **{k: s[k] for k in CASE_METRICS}})
            if run_dir is not None:
                run_dir.append_sample(table[-1], CASES_FILE)
            bar.advance(task)
        if case_skips:   # a requested pair runs or says why not: in the terminal and result.json
            n = sum(case_skips.values())
            key = pair.name if n == len(grid) else f"{pair.name} ({n} of {len(grid)} cases)"
            skipped[key] = ("every case skipped: " if n == len(grid) else "") + "; ".join(case_skips)
        for dt, acc in accs.items():
            rows[f"kernel/{pair.name}/{dt}"] = {"level": "kernel", "pair": pair.name, "dtype": dt,
                                                "a": pair.decode_name, "b": pair.verify_name,
                                                "description": pair.description, **acc.summary()}
    return rows, table, skipped


def _probe(out_a, out_b, seed: int) -> tuple[Any, Any, Any]:
    """Project both outputs [T, H, D] by one fixed random matrix onto PROBE_VOCAB logits
    (scaled to a standard deviation of about 3) and return (log p_a, log p_b, tokens drawn
    from p_a)."""
    import torch  # the outputs are torch tensors

    g = torch.Generator().manual_seed(seed + 1)
    a, b = out_a.reshape(out_a.shape[0], -1), out_b.reshape(out_b.shape[0], -1)
    rms = float(a.pow(2).mean().sqrt()) or 1.0
    w = torch.randn((a.shape[1], PROBE_VOCAB), generator=g) * (3.0 / (rms * math.sqrt(a.shape[1])))
    lp_a, lp_b = torch.log_softmax(a @ w, -1), torch.log_softmax(b @ w, -1)
    toks = torch.multinomial(lp_a.exp(), 1, generator=g)[:, 0]
    return lp_a, lp_b, toks
