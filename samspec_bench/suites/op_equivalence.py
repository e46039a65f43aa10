"""`samspec-bench op-equivalence`: do the decode path and the verify path compute the same thing?

Speculative decoding is lossless only if the target model scores a token the same way when it
is decoded alone (one query token per request) and when it is verified inside a chunk of k+1
tokens. Two levels:

Kernel level. Random paged inputs (batch, sequence lengths, block size, heads, GQA ratio,
head size, dtype as options) through every available kernel pair of
`samspec_bench.bench.engines.kernels` (the reference engine's two paths, a fixed-order control,
PyTorch's fused SDPA, and where installed torch-npu's `_npu_paged_attention` vs
`_npu_paged_attention_splitfuse` / `npu_fused_infer_attention_score` and vLLM's flash-attention
varlen kernel). The verify kernel runs once over k+1 query tokens per request, the decode
kernel once per query position. Compared: the attention outputs element by element, and
"probe" distributions, the outputs projected by one fixed random matrix onto a 4096-token
vocabulary (so the logprob metrics below exist at this level too).

Model level (with --model). The reference engine generates a greedy continuation for each
prompt (decode path, no speculation); that token sequence is then scored token by token
through the decode path and in chunks of k+1 through the verify path (splitfuse), all prompts
batched, and the full next-token distributions are compared. Greedy generation is also run
with SAM speculation: first divergence position and the logit margin there. A control run of
the same scoring in batch-invariant mode (one GEMV per token in every linear layer,
fixed-order attention reductions) shows whether the differences come from reduction order.

Metrics per level x pair x dtype (a = decode, b = verify; "sampled tokens" are the sequence's
tokens at model level and tokens drawn from a at kernel level):
  logprob_diff_max / mean / p99   |log p_a(x) - log p_b(x)| of the sampled tokens
  exact_zero_fraction             fraction of those differences that are exactly 0
  argmax_flip_rate                positions whose argmax differs
  kl_mean / kl_max                KL(a || b) of the full distributions, nats
  full_logprob_diff_max, full_exact_zero_fraction   over every vocabulary entry
  rollout_probs_diff_max / mean / std, rollout_actor_probs_pearson_corr
                                  verl's names: |p_a(x) - p_b(x)| and Pearson(p_a(x), p_b(x))
  output_diff_max / mean, output_exact_zero_fraction   (kernel level) attention outputs
and a histogram of the sampled-token differences (log10 bins plus an exact-zero bin).

Output: results/op-equivalence-<timestamp>/ with result.json (metrics.pairs keyed
"level/pair/dtype", metrics.gate, tables.kernel_cases, tables.greedy), kernel_cases.jsonl and
greedy.jsonl (written as cases finish) and logprob_diff_hist.png. `--tolerance X` fails the run
(exit 1, one line on stderr) when any row's logprob_diff_max (or --tolerance-metric) exceeds X.

    samspec-bench op-equivalence                                  # kernel level, seconds
    samspec-bench op-equivalence --model builtin:smollm2-135m --dtype float32,bfloat16
    samspec-bench op-equivalence --pairs npu --dtype bfloat16 --tolerance 0   # on an Ascend box
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from samspec_bench.errors import UserError, int_list

SUITE = "op-equivalence"
FIGURE = "logprob_diff_hist.png"
CASES_FILE = "kernel_cases.jsonl"
GREEDY_FILE = "greedy.jsonl"
LEVELS = ("kernel", "model")
DTYPE_NAMES = ("float32", "bfloat16", "float16")
HIST_EDGES = [float(x) for x in range(-10, 1)]   # log10 |diff| bin edges: 1e-10 .. 1
PROBE_VOCAB = 4096
GATE_METRICS = ("logprob_diff_max", "logprob_diff_p99", "logprob_diff_mean", "kl_max", "kl_mean",
                "argmax_flip_rate", "output_diff_max", "rollout_probs_diff_max")

# Used when no benchmark file is found (no shared data): short math word problems.
BUILTIN_PROMPTS = (
    "A baker made 48 muffins. She sold 3/4 of them in the morning and half of the rest in the afternoon. "
    "How many muffins are left?",
    "Tom reads 12 pages a day. How many days does he need to finish a 300-page book?",
    "What is 17 times 23? Show your work step by step.",
    "A rectangle has a perimeter of 30 cm and a length of 9 cm. What is its area?",
    "A train travels 180 km in 2.5 hours. What is its average speed in km per hour?",
    "If 5 pencils cost $1.35, how much do 12 pencils cost?",
    "Sara has twice as many marbles as Ben. Together they have 57 marbles. How many does Sara have?",
    "The sum of three consecutive integers is 96. What are the integers?",
)


@dataclass
class OpEqConfig:
    model: str | None = None
    engine: str = "reference"    # model level: reference (PyTorch) or vllm (samspec_bench.bench.engines.vllm.adapter)
    levels: list[str] = field(default_factory=lambda: list(LEVELS))
    pairs: list[str] | None = None                 # None: every registered pair that runs here
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    k: int = 3
    device: str = "cpu"
    seed: int = 0
    # kernel level
    num_seqs: int = 8
    min_seq_len: int = 16
    max_seq_len: int = 1024
    block_sizes: list[int] = field(default_factory=lambda: [16])
    num_heads: int = 8
    gqa: list[int] = field(default_factory=lambda: [1, 4])
    head_dims: list[int] = field(default_factory=lambda: [64])
    trials: int = 2
    # model level
    benchmark: str = "gsm8k"
    prompts_file: str | None = None
    data_dir: str | None = None
    num_prompts: int = 8
    max_tokens: int = 128
    chat_template: str = "auto"
    drafter: str = "sam"
    control: bool = True
    # gate
    tolerance: float | None = None
    tolerance_metric: str = "logprob_diff_max"
    threads: int = 1


# --- comparing two sets of distributions ----------------------------------------------------------

class Accumulator:
    """Collects the per-position comparison of two paths and summarises it."""

    def __init__(self):
        import numpy as np
        self._np = np
        self.tok_diff: list = []      # |lp_a(x) - lp_b(x)| float64
        self.pa: list = []            # p_a(x)
        self.pb: list = []
        self.kl: list = []
        self.flips = 0
        self.rows = 0
        self.full_zero = 0
        self.full_total = 0
        self.full_max = 0.0
        self.out_diff: list = []      # kernel level: per-element output differences (sampled summary)
        self.out_max = 0.0
        self.out_sum = 0.0
        self.out_zero = 0
        self.out_total = 0

    def add(self, lp_a, lp_b, tokens) -> None:
        """lp_a, lp_b: float32 log-probabilities [N, V] of the two paths; tokens [N]."""
        import torch
        a, b = lp_a.double(), lp_b.double()
        idx = tokens.reshape(-1, 1).to(torch.long)
        ta, tb = a.gather(1, idx)[:, 0], b.gather(1, idx)[:, 0]
        self.tok_diff.append((ta - tb).abs().numpy())
        self.pa.append(ta.exp().numpy())
        self.pb.append(tb.exp().numpy())
        # KL in float64 on renormalised rows: float32 normalisation error (~1e-7) would otherwise
        # dominate the second-order KL of nearly equal distributions.
        na, nb = a - torch.logsumexp(a, -1, keepdim=True), b - torch.logsumexp(b, -1, keepdim=True)
        pa_full = na.exp()
        both = torch.isfinite(a) & torch.isfinite(b)
        term = torch.where(pa_full > 0, pa_full * (na - torch.where(both, nb, na)), torch.zeros_like(a))
        kl = term.sum(-1).clamp_min(0)
        # mass of a where b is -inf (impossible under b): KL is infinite there
        kl = torch.where(((pa_full > 0) & ~torch.isfinite(b)).any(-1), torch.full_like(kl, math.inf), kl)
        self.kl.append(kl.numpy())
        self.flips += int((a.argmax(-1) != b.argmax(-1)).sum())
        self.rows += a.shape[0]
        same = (lp_a == lp_b)
        self.full_zero += int(same.sum())
        self.full_total += same.numel()
        d = (a - b).abs()
        d = torch.where(both, d, torch.where(torch.isinf(a) & torch.isinf(b) & (a == b), torch.zeros_like(d),
                                             torch.full_like(d, math.inf)))
        self.full_max = max(self.full_max, float(d.max())) if d.numel() else self.full_max

    def add_outputs(self, out_a, out_b) -> None:
        d = (out_a.double() - out_b.double()).abs()
        self.out_max = max(self.out_max, float(d.max()))
        self.out_sum += float(d.sum())
        self.out_zero += int((d == 0).sum())
        self.out_total += d.numel()

    def summary(self) -> dict[str, Any]:
        np = self._np
        if not self.rows:
            return {"positions": 0}
        d = np.concatenate(self.tok_diff)
        pa, pb = np.concatenate(self.pa), np.concatenate(self.pb)
        kl = np.concatenate(self.kl)
        pdiff = np.abs(pa - pb)
        if pa.size > 1 and pa.std() > 0 and pb.std() > 0:
            pearson = float(np.corrcoef(pa, pb)[0, 1])
        else:
            pearson = 1.0 if np.array_equal(pa, pb) else None
        finite_kl = kl[np.isfinite(kl)]
        out = {
            "positions": int(d.size),
            "logprob_diff_max": float(d.max()),
            "logprob_diff_mean": float(d.mean()),
            "logprob_diff_p99": float(np.quantile(d, 0.99)),
            "exact_zero_fraction": float((d == 0).mean()),
            "argmax_flip_rate": self.flips / self.rows,
            "kl_mean": float(kl.mean()) if np.all(np.isfinite(kl)) else math.inf,
            "kl_max": float(kl.max()),
            "kl_infinite_positions": int((~np.isfinite(kl)).sum()),
            "kl_mean_finite": float(finite_kl.mean()) if finite_kl.size else None,
            "full_logprob_diff_max": self.full_max,
            "full_exact_zero_fraction": self.full_zero / self.full_total,
            "rollout_probs_diff_max": float(pdiff.max()),
            "rollout_probs_diff_mean": float(pdiff.mean()),
            "rollout_probs_diff_std": float(pdiff.std(ddof=1)) if pdiff.size > 1 else 0.0,
            "rollout_actor_probs_pearson_corr": pearson,
            "histogram": histogram(d),
        }
        if self.out_total:
            out.update({"output_diff_max": self.out_max, "output_diff_mean": self.out_sum / self.out_total,
                        "output_exact_zero_fraction": self.out_zero / self.out_total})
        return out


def histogram(d) -> dict[str, Any]:
    """Counts of |diff| in log10 bins (HIST_EDGES; below the first edge goes to the first bin,
    above the last to the last) plus the exact zeros apart."""
    import numpy as np
    d = np.asarray(d, dtype=np.float64)
    zero = int((d == 0).sum())
    nz = d[d > 0]
    logs = np.clip(np.log10(nz), HIST_EDGES[0], HIST_EDGES[-1] - 1e-12) if nz.size else nz
    counts, _ = np.histogram(logs, bins=HIST_EDGES)
    return {"zero": zero, "log10_edges": HIST_EDGES, "counts": [int(c) for c in counts]}


# --- kernel level --------------------------------------------------------------------------------

def _dtype(name: str):
    import torch
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def run_kernel_level(cfg: OpEqConfig, bar, pair_names: list[str], run_dir=None) -> tuple[dict, list[dict], dict]:
    """Returns ({row key: summary}, per-case table rows, {pair: reason} for skipped pairs)."""
    from samspec_bench.bench.engines.kernels import PAIRS, make_case

    rows: dict[str, dict] = {}
    table: list[dict] = []
    skipped: dict[str, str] = {}
    grid = list(itertools.product(cfg.dtypes, cfg.block_sizes, cfg.gqa, cfg.head_dims, range(cfg.trials)))
    usable = []
    for name in pair_names:
        reason = PAIRS[name].availability()
        if reason:
            skipped[name] = reason
        else:
            usable.append(PAIRS[name]())
    task = bar.add_task("kernel pairs", total=len(usable) * len(grid))
    for pair in usable:
        accs: dict[str, Accumulator] = {}
        for dt, bs, gqa, hd, trial in grid:
            if cfg.num_heads % gqa:
                raise UserError(f"--gqa {gqa}: --num-heads {cfg.num_heads} is not a multiple of it")
            seed = cfg.seed * 1000003 + trial * 7919 + bs * 31 + gqa * 17 + hd
            case = make_case(num_seqs=cfg.num_seqs, query_len=cfg.k + 1, min_seq_len=cfg.min_seq_len,
                             max_seq_len=cfg.max_seq_len, block_size=bs, num_heads=cfg.num_heads,
                             num_kv_heads=cfg.num_heads // gqa, head_dim=hd, dtype=_dtype(dt), seed=seed)
            why = pair.supports(case)
            if why:
                table.append({"pair": pair.name, "dtype": dt, "block_size": bs, "gqa": gqa, "head_dim": hd,
                              "trial": trial, "skipped": why})
                bar.advance(task)
                continue
            t0 = time.perf_counter()
            out_a, out_b = pair.run(case)
            elapsed = time.perf_counter() - t0
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
                          "seq_lens": case.seq_lens, "seconds": elapsed,
                          **{k: s[k] for k in ("output_diff_max", "output_exact_zero_fraction", "logprob_diff_max",
                                               "exact_zero_fraction", "argmax_flip_rate", "kl_max")}})
            if run_dir is not None:
                run_dir.append_sample(table[-1], CASES_FILE)
            bar.advance(task)
        for dt, acc in accs.items():
            rows[f"kernel/{pair.name}/{dt}"] = {"level": "kernel", "pair": pair.name, "dtype": dt,
                                                "a": pair.decode_name, "b": pair.verify_name,
                                                "description": pair.description, **acc.summary()}
    return rows, table, skipped


def _probe(out_a, out_b, seed: int):
    """Project both outputs [T, H, D] by one fixed random matrix onto PROBE_VOCAB logits
    (scaled to a standard deviation of about 3) and return (log p_a, log p_b, tokens drawn
    from p_a)."""
    import torch
    g = torch.Generator().manual_seed(seed + 1)
    a, b = out_a.reshape(out_a.shape[0], -1), out_b.reshape(out_b.shape[0], -1)
    rms = float(a.pow(2).mean().sqrt()) or 1.0
    w = torch.randn((a.shape[1], PROBE_VOCAB), generator=g) * (3.0 / (rms * math.sqrt(a.shape[1])))
    lp_a, lp_b = torch.log_softmax(a @ w, -1), torch.log_softmax(b @ w, -1)
    toks = torch.multinomial(lp_a.exp(), 1, generator=g)[:, 0]
    return lp_a, lp_b, toks


# --- model level ---------------------------------------------------------------------------------

def load_prompts(cfg: OpEqConfig, tokenizer) -> tuple[list[list[int]], dict]:
    """Token ids of the prompts and where they came from."""
    texts: list[str]
    if cfg.prompts_file:
        p = Path(cfg.prompts_file)
        if not p.is_file():
            raise UserError(f"--prompts {p}: no such file; pass a JSONL file with a 'prompt', 'question' or "
                            "'problem' field per line, or a text file with one prompt per line")
        texts = []
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            if p.suffix == ".jsonl":
                try:
                    row = json.loads(line)
                    texts.append(next(row[k] for k in ("prompt", "question", "problem", "Problem") if k in row))
                except (ValueError, StopIteration, TypeError):
                    raise UserError(f"{p}:{n}: expected a JSON object with a 'prompt', 'question' or 'problem' "
                                    "field") from None
            else:
                texts.append(line)
        source = {"prompts": str(p)}
    else:
        from samspec_bench.data import read_benchmark
        from samspec_bench.paths import default_data_dir
        data_dir = Path(cfg.data_dir) if cfg.data_dir else default_data_dir()
        if data_dir is not None and (data_dir / "benchmarks").is_dir():
            rows = read_benchmark(cfg.benchmark, data_dir)
            texts = [r["question"] for r in rows]
            source = {"benchmark": cfg.benchmark, "data_dir": str(data_dir)}
        else:
            texts = list(BUILTIN_PROMPTS)
            source = {"builtin_prompts": True, "note": "no shared data found: built-in math prompts"}
    texts = texts[: cfg.num_prompts]
    if not texts:
        raise UserError("no prompts: pass --prompts FILE or --num-prompts >= 1")
    use_chat = cfg.chat_template == "always" or (cfg.chat_template == "auto"
                                                 and getattr(tokenizer, "chat_template", None))
    ids = []
    for t in texts:
        if use_chat:
            enc = tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                                tokenize=True)
            if hasattr(enc, "keys"):
                enc = enc["input_ids"]
        else:
            enc = tokenizer(t)["input_ids"]
        ids.append([int(x) for x in enc])
    source["chat_template"] = bool(use_chat)
    source["num_prompts"] = len(ids)
    return ids, source


def _first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _margin(top: list[tuple[int, float]] | None) -> float | None:
    if not top or len(top) < 2:
        return None
    return float(top[0][1] - top[1][1])


def run_model_level(cfg: OpEqConfig, dtype: str, bar) -> tuple[dict, list[dict], dict]:
    """Rows {key: summary}, per-prompt greedy table rows, extra info."""
    import torch

    from samspec_bench.bench.engines.base import Request, SamplingParams
    from samspec_bench.bench.engines.reference import ReferenceEngine
    from samspec_bench.models import load_model

    t_load = time.perf_counter()
    model, tokenizer = load_model(cfg.model, dtype=dtype, device=cfg.device)
    load_s = time.perf_counter() - t_load
    prompts, source = load_prompts(cfg, tokenizer)
    n = len(prompts)
    longest = max(len(p) for p in prompts) + cfg.max_tokens + cfg.k + 2
    block_size = 16
    common = dict(tokenizer=tokenizer, max_num_seqs=n, max_model_len=longest, block_size=block_size,
                  num_blocks=n * (-(-longest // block_size) + 1))
    eng = ReferenceEngine(model, **common)
    eng.model_spec = cfg.model
    task = bar.add_task(f"model {dtype}", total=4 + (2 if cfg.control else 0))
    params = SamplingParams(max_tokens=cfg.max_tokens, logprobs=2)
    reqs = [Request(i, p, params) for i, p in enumerate(prompts)]
    timings: dict[str, float] = {"load_model_s": load_s}

    t = time.perf_counter()
    base = eng.generate(reqs)
    timings["generate_no_spec_s"] = time.perf_counter() - t
    bar.advance(task)
    t = time.perf_counter()
    spec = eng.generate(reqs, drafter=cfg.drafter, num_spec_tokens=cfg.k)
    timings["generate_spec_s"] = time.perf_counter() - t
    bar.advance(task)

    greedy_rows = []
    for o_b, o_s in zip(base.outputs, spec.outputs):
        fd = _first_divergence(o_b.token_ids, o_s.token_ids)
        row = {"prompt": o_b.req_id, "prompt_tokens": len(o_b.prompt_ids), "tokens_no_spec": len(o_b.token_ids),
               "tokens_spec": len(o_s.token_ids), "identical": fd is None, "first_divergence": fd,
               "margin_no_spec": None, "margin_spec": None, "tokens_at_divergence": None}
        if fd is not None and fd < len(o_b.token_ids) and fd < len(o_s.token_ids):
            row["margin_no_spec"] = _margin(o_b.top_logprobs[fd])
            row["margin_spec"] = _margin(o_s.top_logprobs[fd])
            row["tokens_at_divergence"] = [o_b.token_ids[fd], o_s.token_ids[fd]]
        common_len = min(len(o_b.logprobs), len(o_s.logprobs), fd if fd is not None else 10**9)
        if common_len:
            row["logprob_diff_max_before_divergence"] = max(abs(x - y) for x, y in
                                                           zip(o_b.logprobs[:common_len], o_s.logprobs[:common_len]))
        greedy_rows.append(row)
    sm = spec.metrics()

    # teacher-forced scoring of the no-spec continuation: decode path vs verify path
    seqs = [o.prompt_ids + o.token_ids for o in base.outputs]
    starts = [len(o.prompt_ids) for o in base.outputs]
    rows: dict[str, dict] = {}

    def score_pair(engine, key_pair, label):
        t0 = time.perf_counter()
        a = engine.score(seqs, start=starts, chunk_size=1)
        t1 = time.perf_counter()
        bar.advance(task)
        b = engine.score(seqs, start=starts, chunk_size=cfg.k + 1)
        t2 = time.perf_counter()
        bar.advance(task)
        acc = Accumulator()
        for s, st, la, lb in zip(seqs, starts, a, b):
            if la.shape[0]:
                acc.add(la, lb, torch.tensor(s[st:]))
        rows[f"model/{key_pair}/{dtype}"] = {
            "level": "model", "pair": key_pair, "dtype": dtype,
            "a": "decode path, token by token", "b": f"verify path (splitfuse), chunks of k+1={cfg.k + 1}",
            "description": label, "score_decode_s": t1 - t0, "score_verify_s": t2 - t1, **acc.summary()}

    score_pair(eng, "reference", "reference engine, BLAS GEMMs (the engine as it runs)")
    if cfg.control:
        ctl = ReferenceEngine(model, **common, batch_invariant=True)
        score_pair(ctl, "reference-batch-invariant",
                   "control: one GEMV per token in every linear layer and fixed-order attention")
        ctl.close()
    main = rows[f"model/reference/{dtype}"]
    identical = sum(1 for r in greedy_rows if r["identical"])
    div = [r for r in greedy_rows if not r["identical"]]
    main["greedy"] = {
        "prompts": len(greedy_rows), "identical": identical, "match_rate": identical / len(greedy_rows),
        "first_divergence": [r["first_divergence"] for r in div],
        "margin_at_divergence": [r["margin_no_spec"] for r in div],
        "spec_metrics": {k: sm[k] for k in ("tokens_per_step", "acceptance_length", "draft_hit_rate",
                                            "acceptance_rate")},
        "drafter": cfg.drafter, "k": cfg.k,
        "no_spec_steps": len(base.steps), "spec_steps": len(spec.steps),
    }
    for key in rows:
        rows[key]["model"] = cfg.model
    info = {"prompts": source, "timings": timings, "engine": eng.describe()}
    eng.close()
    del model
    return rows, [{"dtype": dtype, **r} for r in greedy_rows], info


# --- the figure ----------------------------------------------------------------------------------

def draw_histograms(rows: dict[str, dict], path: Path) -> bool:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k, r in rows.items() if r.get("histogram")]
    if not keys:
        return False
    ncol = 2 if len(keys) > 1 else 1
    nrow = math.ceil(len(keys) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 2.6 * nrow), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        r = rows[key]
        h = r["histogram"]
        labels = ["0"] + [f"1e{int(e)}" for e in h["log10_edges"][:-1]]
        counts = [h["zero"]] + h["counts"]
        total = max(sum(counts), 1)
        colors = ["tab:green"] + ["tab:blue"] * len(h["counts"])
        ax.bar(range(len(counts)), [c / total for c in counts], color=colors)
        ax.set_xticks(range(len(counts)))
        ax.set_xticklabels(labels, rotation=60, fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_title(f"{key}  (max {r['logprob_diff_max']:.2g}, zero {r['exact_zero_fraction']:.1%})", fontsize=8)
        ax.set_ylabel("fraction", fontsize=7)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.suptitle("|logprob(decode) - logprob(verify)| of the sampled tokens (bin: lower edge; 0 = exactly equal)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --- orchestration -------------------------------------------------------------------------------

def run(cfg: OpEqConfig, output: str, progress: bool = True, console=None) -> tuple[dict, Path]:
    """Run the levels, write the run directory (result.json, the figure, per-case JSONL written
    as cases finish) and return (result, run directory). torch's thread count is restored."""
    import torch

    before = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _run(cfg, output, progress, console)
    finally:
        torch.set_num_threads(before)


def _run(cfg: OpEqConfig, output: str, progress: bool, console) -> tuple[dict, Path]:
    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from samspec_bench.bench.engines.kernels import PAIRS
    from samspec_bench.results import RunDir

    pair_names = list(PAIRS) if cfg.pairs is None else cfg.pairs
    for p in pair_names:
        if p not in PAIRS:
            raise UserError(f"--pairs {p!r}: unknown kernel pair; choose from {', '.join(PAIRS)}")
    if "model" in cfg.levels and not cfg.model:
        cfg.levels = [lv for lv in cfg.levels if lv != "model"]
    run_dir = RunDir(output, SUITE)
    rows: dict[str, dict] = {}
    tables: dict[str, list] = {}
    extra: dict[str, Any] = {"torch_threads": torch.get_num_threads()}
    t0 = time.perf_counter()
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=not progress, transient=True) as bar:
        if "kernel" in cfg.levels:
            t = time.perf_counter()
            krows, ktable, skipped = run_kernel_level(cfg, bar, pair_names, run_dir)
            rows.update(krows)
            tables["kernel_cases"] = ktable
            extra["skipped_pairs"] = skipped
            extra["kernel_level_s"] = time.perf_counter() - t
        if "model" in cfg.levels:
            tables["greedy"] = []
            extra["model_level"] = {}
            for dt in cfg.dtypes:
                t = time.perf_counter()
                if cfg.engine == "vllm":
                    from samspec_bench.bench.engines.vllm.adapter import op_equivalence_model_level
                    mrows, gtable, info = op_equivalence_model_level(cfg, dt, bar)
                else:
                    mrows, gtable, info = run_model_level(cfg, dt, bar)
                for r in gtable:
                    run_dir.append_sample(r, GREEDY_FILE)
                rows.update(mrows)
                tables["greedy"].extend(gtable)
                info["seconds"] = time.perf_counter() - t
                extra["model_level"][dt] = info
    extra["wall_time_s"] = time.perf_counter() - t0
    figures = []
    if draw_histograms(rows, run_dir.file(FIGURE)):
        figures.append(FIGURE)
    gate = apply_gate(cfg, rows)
    metrics = {"pairs": rows, "gate": gate}
    run_dir.write_result(cfg, metrics, tables, figures, extra)
    result = json.loads(run_dir.file("result.json").read_text())
    result["run_dir"] = str(run_dir.path)
    return result, run_dir.path


def apply_gate(cfg: OpEqConfig, rows: dict[str, dict]) -> dict[str, Any] | None:
    if cfg.tolerance is None:
        return None
    failed = []
    for key, r in rows.items():
        v = r.get(cfg.tolerance_metric)
        if v is not None and not (v <= cfg.tolerance):
            failed.append({"row": key, "value": v})
    return {"metric": cfg.tolerance_metric, "tolerance": cfg.tolerance, "passed": not failed, "failed": failed}


def print_report(result: dict, console) -> None:
    from rich.table import Table

    rows = result["metrics"]["pairs"]

    def f(v, spec="{:.3g}"):
        if v is None:
            return ""
        return spec.format(v) if isinstance(v, (int, float)) else str(v)

    t = Table(title="op-equivalence: decode path (a) vs verify path (b)")
    for col in ("level/pair/dtype", "positions", "logprob diff max", "mean", "p99", "exact 0",
                "argmax flips", "KL mean", "KL max", "probs diff max", "pearson", "output diff max"):
        t.add_column(col, justify="right" if col != "level/pair/dtype" else "left")
    for key, r in rows.items():
        t.add_row(key, f(r.get("positions"), "{}"), f(r.get("logprob_diff_max")), f(r.get("logprob_diff_mean")),
                  f(r.get("logprob_diff_p99")), f(r.get("exact_zero_fraction"), "{:.1%}"),
                  f(r.get("argmax_flip_rate"), "{:.2%}"), f(r.get("kl_mean")), f(r.get("kl_max")),
                  f(r.get("rollout_probs_diff_max")), f(r.get("rollout_actor_probs_pearson_corr"), "{:.9f}"),
                  f(r.get("output_diff_max")))
    console.print(t)
    for key, r in rows.items():
        g = r.get("greedy")
        if g:
            div = ", ".join(f"pos {p} (margin {m:.3g})" if m is not None else f"pos {p}"
                            for p, m in zip(g["first_divergence"], g["margin_at_divergence"]))
            console.print(f"{key}: greedy with/without {g['drafter']} (k={g['k']}): {g['identical']}/{g['prompts']} "
                          f"identical" + (f"; first divergence at {div}" if div else "")
                          + f"; tokens/step with {g['drafter']}: {f(g['spec_metrics']['tokens_per_step'])}")
    for name, why in (result.get("skipped_pairs") or {}).items():
        console.print(f"skipped pair {name}: {why}")
    gate = result["metrics"].get("gate")
    if gate:
        console.print(f"gate: {gate['metric']} <= {gate['tolerance']}: {'PASSED' if gate['passed'] else 'FAILED'}")
    console.print(f"run directory: {result.get('run_dir')}")


# --- the command ---------------------------------------------------------------------------------

def _seq_range(value: str) -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in value.split(":")) if ":" in value else (1, int(value))
    except ValueError:
        raise UserError(f"--seq-len {value!r}: expected MIN:MAX (e.g. 16:1024) or MAX") from None
    if lo < 1 or hi < lo:
        raise UserError(f"--seq-len {value!r}: need 1 <= MIN <= MAX")
    return lo, hi


@click.command("op-equivalence")
@click.option("--engine", type=click.Choice(["reference", "vllm"]), default="reference", show_default=True,
              help="Model level engine: reference (PyTorch) or vllm (decode vs verify inside vLLM).")
@click.option("--model", default=None, help="Also run the model level on this model (builtin:smollm2-135m, "
              "builtin:tiny-qwen3 or a checkpoint directory). Without it only the kernel level runs.")
@click.option("--level", "levels", default="kernel,model", show_default=True, help="Levels to run (comma list).")
@click.option("--pairs", default=None, help="Kernel pairs (comma list). Default: every registered pair that runs here.")
@click.option("--dtype", "dtypes", default="float32", show_default=True,
              help="Comma list of float32, bfloat16, float16 (both levels).")
@click.option("-k", "--num-spec-tokens", "k", default=3, show_default=True, type=int,
              help="Draft tokens: the verify path scores k+1 query tokens per request.")
@click.option("--device", default="cpu", show_default=True, help="Torch device of the model level (cpu, cuda, npu).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--num-seqs", default=8, show_default=True, type=int, help="Kernel level: requests per case.")
@click.option("--seq-len", default="16:1024", show_default=True, help="Kernel level: context lengths MIN:MAX.")
@click.option("--block-size", default="16", show_default=True, help="Kernel level: KV block sizes (comma list).")
@click.option("--num-heads", default=8, show_default=True, type=int, help="Kernel level: query heads.")
@click.option("--gqa", default="1,4", show_default=True, help="Kernel level: query heads per KV head (comma list).")
@click.option("--head-dim", default="64", show_default=True, help="Kernel level: head sizes (comma list).")
@click.option("--trials", default=2, show_default=True, type=int, help="Kernel level: random cases per shape.")
@click.option("--benchmark", default="gsm8k", show_default=True,
              help="Model level: prompts from this benchmark of the shared data (gsm8k, math500, aime24, aime25).")
@click.option("--prompts", "prompts_file", default=None, type=click.Path(),
              help="Model level: prompts file instead (JSONL with prompt/question/problem, or one per line).")
@click.option("--data-dir", default=None, type=click.Path(), help="Shared data directory.")
@click.option("--num-prompts", default=8, show_default=True, type=int)
@click.option("--max-tokens", default=128, show_default=True, type=int, help="Model level: greedy tokens per prompt.")
@click.option("--chat-template", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True)
@click.option("--drafter", default="sam", show_default=True, help="Drafter of the greedy with/without comparison.")
@click.option("--control/--no-control", default=True, show_default=True,
              help="Model level: also score in batch-invariant mode (shows where differences come from).")
@click.option("--tolerance", default=None, type=float,
              help="Fail (exit 1) when a row's --tolerance-metric exceeds this.")
@click.option("--tolerance-metric", default="logprob_diff_max", show_default=True, type=click.Choice(GATE_METRICS))
@click.option("--threads", default=1, show_default=True, type=int,
              help="torch threads; 0 = torch's default (all cores). 1 is the default because multi-threaded small "
                   "GEMMs stall on a machine shared with other jobs (OpenMP spin-waits): 11 min vs 3 min measured "
                   "for the SmolLM2 run on a busy 2-core machine.")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.option("--progress/--no-progress", default=True, show_default=True)
def command(engine, model, levels, pairs, dtypes, k, device, seed, num_seqs, seq_len, block_size, num_heads, gqa, head_dim,
            trials, benchmark, prompts_file, data_dir, num_prompts, max_tokens, chat_template, drafter, control,
            tolerance, tolerance_metric, threads, output, json_path, progress):
    """Are the decode and verify paths numerically equivalent? Kernel pairs on random paged
    inputs, and (with --model) a model scored token by token vs in chunks of k+1."""
    from rich.console import Console

    lv = [x.strip() for x in levels.split(",") if x.strip()]
    if not lv or any(x not in LEVELS for x in lv):
        raise UserError(f"--level {levels!r}: use kernel, model or both (comma list)")
    dts = [x.strip() for x in dtypes.split(",") if x.strip()]
    if not dts or any(x not in DTYPE_NAMES for x in dts):
        raise UserError(f"--dtype {dtypes!r}: use float32, bfloat16 and/or float16 (comma list)")
    if k < 1 or k > 32:
        raise UserError(f"-k {k}: draft length must be in 1..32")
    if lv == ["model"] and not model:
        raise UserError("--level model needs --model (e.g. --model builtin:smollm2-135m)")
    if num_prompts < 1 or max_tokens < 1 or trials < 1 or num_seqs < 1:
        raise UserError("--num-prompts, --max-tokens, --trials and --num-seqs must be >= 1")
    lo, hi = _seq_range(seq_len)
    cfg = OpEqConfig(model=model, engine=engine, levels=lv, pairs=[p.strip() for p in pairs.split(",")] if pairs else None,
                     dtypes=dts, k=k, device=device, seed=seed, num_seqs=num_seqs, min_seq_len=lo, max_seq_len=hi,
                     block_sizes=int_list(block_size, "--block-size"), num_heads=num_heads, gqa=int_list(gqa, "--gqa"),
                     head_dims=int_list(head_dim, "--head-dim"), trials=trials, benchmark=benchmark,
                     prompts_file=prompts_file, data_dir=data_dir, num_prompts=num_prompts, max_tokens=max_tokens,
                     chat_template=chat_template, drafter=drafter, control=control, tolerance=tolerance,
                     tolerance_metric=tolerance_metric, threads=threads)
    console = Console(stderr=json_path == "-")
    if not console.is_terminal:
        console = Console(stderr=json_path == "-", width=200)
    result, _ = run(cfg, output, progress=progress, console=console)
    print_report(result, console)
    from samspec_bench.results import emit_json
    emit_json(result, json_path)
    gate = result["metrics"].get("gate")
    if gate and not gate["passed"]:
        worst = max(gate["failed"], key=lambda r: r["value"])
        click.echo(f"op-equivalence: {len(gate['failed'])} row(s) exceed {gate['metric']} <= {gate['tolerance']} "
                   f"(worst: {worst['row']} = {worst['value']:.3g})", err=True)
        # SystemExit, not click's Exit: with standalone_mode=False click returns Exit's code
        # from main() instead of exiting, and the CLI entry point would exit 0.
        sys.exit(1)
