"""Model level of op-equivalence (with --model), on either engine (--engine reference or vllm).

Both engines: a greedy continuation of each prompt without speculation (the decode path, one
query token per step), the same prompts greedily with the drafter (first divergence from the
plain continuation and the logit margin there), and the plain continuation scored through the
verify path (k+1 query tokens per request). What differs, explicitly:

- reference: the verify path is teacher forcing (`ReferenceEngine.score`, chunks of k+1, all
  prompts batched) against scoring token by token, with the full next-token distributions
  compared; plus a control of the same scoring in batch-invariant mode (one GEMV per token in
  every linear layer, fixed-order attention), which shows whether differences come from
  reduction order.
- vllm: vLLM cannot teacher-force, so the verify path is the plain continuation drafted by an
  oracle (`engines.oracle.OracleDrafter`, the SAM proposer's "oracle" mode): vLLM verifies it
  in chunks of k+1 and returns the logprobs of the verify forward. Compared position by
  position (the prefill's first token excluded) up to the first argmax flip (the oracle stops
  drafting there). vLLM returns top-n logprobs only: KL and the full-distribution diffs are not
  available. The greedy comparison drafts with SAM whatever --drafter says (as before the two
  model levels were merged).

Which path an engine takes is its capabilities' answer (teacher_forcing), not its name.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from samspec_bench.bench.engines.base import Engine, GenerationResult, Request, SamplingParams
from samspec_bench.bench.engines.factory import engine_capabilities, make_engine, shared_engine
from samspec_bench.bench.engines.oracle import OracleDrafter
from samspec_bench.data import encode_chat, read_benchmark
from samspec_bench.devices import synchronize
from samspec_bench.errors import UserError
from samspec_bench.metrics import first_divergence, logit_margin
from samspec_bench.models.checkpoints import load_model
from samspec_bench.paths import default_data_dir
from samspec_bench.suites.op_equivalence.config import OpEqConfig
from samspec_bench.suites.op_equivalence.diff_stats import Accumulator, sampled_summary

BLOCK_SIZE = 16            # reference engine's KV block size at this level
ORACLE_LEVEL_DRAFTER = "sam"   # where the verify path is oracle-drafted, the greedy comparison drafts with SAM
SPEC_METRICS = ("tokens_per_step", "acceptance_length", "draft_hit_rate", "acceptance_rate")

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


# --- prompts -------------------------------------------------------------------------------------

def _prompt_texts(cfg: OpEqConfig) -> tuple[list[str], dict]:
    if cfg.prompts_file:
        p = Path(cfg.prompts_file)
        if not p.is_file():
            raise UserError(f"--prompts {p}: no such file; pass a JSONL file with a 'prompt', 'question' or "
                            "'problem' field per line, or a text file with one prompt per line")
        texts = []
        try:
            text = p.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"--prompts {p}: not UTF-8 text (byte {e.start}); pass a UTF-8 JSONL or text file") from None
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            if p.suffix == ".jsonl":
                try:
                    row = json.loads(line)
                    key, value = next((k, row[k]) for k in ("prompt", "question", "problem", "Problem") if k in row)
                except (ValueError, StopIteration, TypeError):
                    raise UserError(f"{p}:{n}: expected a JSON object with a 'prompt', 'question' or 'problem' "
                                    "field") from None
                if not isinstance(value, str) or not value.strip():
                    raise UserError(f"{p}:{n}: '{key}' is {json.dumps(value)[:40]}, not a prompt: give it as a "
                                    "non-empty string")
                texts.append(value)
            else:
                texts.append(line)
        if not texts:
            raise UserError(f"--prompts {p}: no prompts in it (empty or blank lines only); pass a JSONL file with a "
                            "'prompt' field per line, or a text file with one prompt per line")
        return texts, {"prompts": str(p)}
    data_dir = Path(cfg.data_dir) if cfg.data_dir else default_data_dir()
    if data_dir is not None and (data_dir / "benchmarks").is_dir():
        rows = read_benchmark(cfg.benchmark, data_dir)
        return [r["question"] for r in rows], {"benchmark": cfg.benchmark, "data_dir": str(data_dir)}
    where = f"{data_dir} has no benchmarks/" if data_dir is not None else "no shared data found"
    return list(BUILTIN_PROMPTS), {"builtin_prompts": True,
                                   "note": f"{where}: {len(BUILTIN_PROMPTS)} built-in math prompts, not --benchmark "
                                           f"{cfg.benchmark}"}


def load_prompts(cfg: OpEqConfig, tokenizer) -> tuple[list[list[int]], dict]:
    """Token ids of the prompts (through the chat template per --chat-template, else the raw
    text) and where they came from."""
    texts, source = _prompt_texts(cfg)
    if len(texts) < cfg.num_prompts:   # all of them run: fewer than asked, said (command.py prints the note)
        source["note"] = "; ".join(x for x in (source.get("note"), f"--num-prompts {cfg.num_prompts}: the source "
                                   f"holds {len(texts)} prompt(s), all of them run") if x)
    texts = texts[: cfg.num_prompts]
    if not texts:
        raise UserError("no prompts: pass --prompts FILE or --num-prompts >= 1")
    use_chat = cfg.chat_template == "always" or (cfg.chat_template == "auto"
                                                 and getattr(tokenizer, "chat_template", None))
    ids = [encode_chat(tokenizer, t) if use_chat else [int(x) for x in tokenizer(t)["input_ids"]] for t in texts]
    source["chat_template"] = bool(use_chat)
    source["num_prompts"] = len(ids)
    return ids, source


# --- the level -----------------------------------------------------------------------------------

def run_model_level(cfg: OpEqConfig, dtype: str, bar) -> tuple[dict, list[dict], dict]:
    """The model level on cfg.engine in one dtype: ({row key: summary}, per-prompt greedy table
    rows, extra info: prompts, timings, engine)."""
    t = time.perf_counter()
    if not engine_capabilities(cfg.engine).kv_blocks_settable:
        # an engine sized by itself: the process's shared one where start-up takes tens of
        # seconds (vLLM), left open for the next user
        engine = shared_engine(cfg.engine, cfg.model, dtype=dtype, num_spec_tokens=max(cfg.k, 3))
        timings = {"engine_s": time.perf_counter() - t}
        prompts, source = load_prompts(cfg, engine.tokenizer)
        rows, greedy = compare_paths(engine, cfg, dtype, bar, prompts, timings)
        return rows, greedy, {"prompts": source, "timings": timings, "engine": engine.describe()}
    # an engine whose KV blocks are set is sized to hold every prompt at once: the tokenizer comes first
    model, tokenizer = load_model(cfg.model, dtype=dtype, device=cfg.device, progress=cfg.progress)
    timings = {"load_model_s": time.perf_counter() - t}
    prompts, source = load_prompts(cfg, tokenizer)
    check_fits(cfg, prompts, source, getattr(getattr(model, "config", None), "max_position_embeddings", None))
    engine = make_engine(cfg.engine, model, tokenizer=tokenizer, **reference_sizing(cfg, prompts))
    engine.model_spec = cfg.model
    try:
        rows, greedy = compare_paths(engine, cfg, dtype, bar, prompts, timings)
        return rows, greedy, {"prompts": source, "timings": timings, "engine": engine.describe()}
    finally:
        engine.close()


def check_fits(cfg: OpEqConfig, prompts: list[list[int]], source: dict, limit: int | None) -> None:
    """Every prompt with its continuation within the model's positions: reference_sizing would
    otherwise size the engine past them (RoPE beyond its trained range, and a quadratic prefill
    that runs for hours on a CPU)."""
    if not limit:
        return
    room = cfg.max_tokens + cfg.k + 2
    for i, p in enumerate(prompts, start=1):
        if len(p) + room > limit:
            where = (f"--prompts {source['prompts']}" if "prompts" in source
                     else f"--benchmark {source.get('benchmark', 'built-in prompts')}")
            raise UserError(f"{where}: prompt {i} is {len(p)} tokens, {len(p) + room} positions with --max-tokens "
                            f"{cfg.max_tokens} and k {cfg.k}, beyond the model's {limit} (max_position_embeddings): "
                            "shorten the prompt or lower --max-tokens")


def reference_sizing(cfg: OpEqConfig, prompts: list[list[int]]) -> dict[str, Any]:
    """ReferenceEngine options that batch every prompt with its continuation and k+1 lookahead."""
    n = len(prompts)
    longest = max(len(p) for p in prompts) + cfg.max_tokens + cfg.k + 2
    return {"max_num_seqs": n, "max_model_len": longest, "block_size": BLOCK_SIZE,
            "num_blocks": n * (-(-longest // BLOCK_SIZE) + 1)}


def compare_paths(engine: Engine, cfg: OpEqConfig, dtype: str, bar, prompts: list[list[int]],
                  timings: dict[str, float]) -> tuple[dict, list[dict]]:
    """The comparison on an open engine (see the module docstring): teacher forcing where the
    engine can, else oracle-drafted verification. Returns rows {"model/<pair>/<dtype>": summary},
    the first of them with the greedy comparison, and the per-prompt greedy table rows. Adds the
    generation times to `timings`."""
    caps = engine.capabilities
    oracle_level = not caps.teacher_forcing
    if oracle_level and not caps.oracle_drafts:
        raise UserError(f"--engine {engine.name}: it can neither teacher-force nor draft an oracle continuation, so "
                        "it has no verify path to compare; use --engine reference")
    drafter = ORACLE_LEVEL_DRAFTER if oracle_level else cfg.drafter
    task = bar.add_task(f"model {dtype} ({engine.name})" if oracle_level else f"model {dtype}",
                        total=3 if oracle_level else 4 + (2 if cfg.control else 0))
    params = SamplingParams(max_tokens=cfg.max_tokens, logprobs=2)
    reqs = [Request(i, p, params) for i, p in enumerate(prompts)]

    def timed(name: str, **kwargs) -> GenerationResult:
        t = time.perf_counter()
        res = engine.generate(reqs, **kwargs)
        timings[name] = time.perf_counter() - t
        bar.advance(task)
        return res

    base = timed("generate_no_spec_s")
    if oracle_level:
        oracle = timed("generate_oracle_s", drafter=OracleDrafter({o.req_id: o.token_ids for o in base.outputs}),
                       num_spec_tokens=cfg.k)
    spec = timed("generate_spec_s", drafter=drafter, num_spec_tokens=cfg.k)

    greedy = greedy_rows(base, spec, tag_engine=engine.name if oracle_level else None)
    if oracle_level:
        rows = {f"model/{engine.name}/{dtype}": oracle_row(cfg, dtype, base, oracle, engine.name)}
    else:
        rows = teacher_forced_rows(engine, cfg, dtype, base, prompts, lambda: bar.advance(task))
    main = next(iter(rows.values()))
    main["greedy"] = greedy_summary(greedy, base, spec, drafter, cfg.k)
    for r in rows.values():
        r["model"] = cfg.model
    return rows, [{"dtype": dtype, **r} for r in greedy]


# --- greedy with and without speculation ---------------------------------------------------------

def greedy_rows(base: GenerationResult, spec: GenerationResult, tag_engine: str | None = None) -> list[dict]:
    """Per prompt: where the speculative continuation first leaves the plain one, and each
    path's logit margin there. The teacher-forced level's rows also give the largest logprob
    difference before the divergence; the oracle level's rows instead carry "engine": its name
    (tag_engine), as each engine's rows did before the two model levels were merged."""
    out = []
    for o_b, o_s in zip(base.outputs, spec.outputs):
        fd = first_divergence(o_b.token_ids, o_s.token_ids)
        row = {"prompt": o_b.req_id, "prompt_tokens": len(o_b.prompt_ids), "tokens_no_spec": len(o_b.token_ids),
               "tokens_spec": len(o_s.token_ids), "identical": fd is None, "first_divergence": fd,
               "margin_no_spec": None, "margin_spec": None, "tokens_at_divergence": None}
        if fd is not None and fd < len(o_b.token_ids) and fd < len(o_s.token_ids):
            row["margin_no_spec"] = logit_margin(o_b.top_logprobs[fd])
            row["margin_spec"] = logit_margin(o_s.top_logprobs[fd])
            row["tokens_at_divergence"] = [o_b.token_ids[fd], o_s.token_ids[fd]]
        if tag_engine:
            row["engine"] = tag_engine
        else:
            common_len = min(len(o_b.logprobs), len(o_s.logprobs), fd if fd is not None else 10**9)
            if common_len:
                row["logprob_diff_max_before_divergence"] = max(
                    abs(x - y) for x, y in zip(o_b.logprobs[:common_len], o_s.logprobs[:common_len]))
        out.append(row)
    return out


def greedy_summary(rows: list[dict], base: GenerationResult, spec: GenerationResult, drafter: str,
                   k: int) -> dict[str, Any]:
    sm = spec.metrics()
    div = [r for r in rows if not r["identical"]]
    identical = len(rows) - len(div)
    return {
        "prompts": len(rows), "identical": identical, "match_rate": identical / len(rows),
        "first_divergence": [r["first_divergence"] for r in div],
        "margin_at_divergence": [r["margin_no_spec"] for r in div],
        "spec_metrics": {m: sm[m] for m in SPEC_METRICS},
        "drafter": drafter, "k": k, "no_spec_steps": len(base.steps), "spec_steps": len(spec.steps),
    }


# --- decode path vs verify path ------------------------------------------------------------------

def teacher_forced_rows(engine: Engine, cfg: OpEqConfig, dtype: str, base: GenerationResult,
                        prompts: list[list[int]], advance) -> dict[str, dict]:
    """Reference engine: the plain continuation scored token by token (a) and in chunks of k+1
    (b), full distributions compared; plus the batch-invariant control with --control."""
    import torch  # score() returns torch tensors

    seqs = [o.prompt_ids + o.token_ids for o in base.outputs]
    starts = [len(o.prompt_ids) for o in base.outputs]
    rows: dict[str, dict] = {}

    def score_pair(eng, key_pair, label):
        t0 = time.perf_counter()
        a = eng.score(seqs, start=starts, chunk_size=1)
        synchronize(str(eng.device))   # an accelerator's queued work counts in the path's time
        t1 = time.perf_counter()
        advance()
        b = eng.score(seqs, start=starts, chunk_size=cfg.k + 1)
        synchronize(str(eng.device))
        t2 = time.perf_counter()
        advance()
        acc = Accumulator()
        for s, st, la, lb in zip(seqs, starts, a, b):
            if la.shape[0]:
                acc.add(la, lb, torch.tensor(s[st:], device=la.device))
        rows[f"model/{key_pair}/{dtype}"] = {
            "level": "model", "pair": key_pair, "dtype": dtype,
            "a": "decode path, token by token", "b": f"verify path (splitfuse), chunks of k+1={cfg.k + 1}",
            "description": label, "score_decode_s": t1 - t0, "score_verify_s": t2 - t1, **acc.summary()}

    score_pair(engine, engine.name, f"{engine.name} engine, BLAS GEMMs (the engine as it runs)")
    if cfg.control:
        ctl = make_engine(engine.name, engine.hf_model, tokenizer=engine.tokenizer,
                          **reference_sizing(cfg, prompts), batch_invariant=True)
        score_pair(ctl, f"{engine.name}-batch-invariant",
                   "control: one GEMV per token in every linear layer and fixed-order attention")
        ctl.close()
    return rows


def oracle_row(cfg: OpEqConfig, dtype: str, base: GenerationResult, oracle: GenerationResult,
               pair: str = "vllm") -> dict[str, Any]:
    """An engine without teacher forcing (vLLM): the sampled tokens' logprobs of the plain
    decode (a) against the oracle-drafted verification of the same tokens (b), up to each
    request's first flip."""
    lp_a, lp_b = [], []
    flips = compared = 0
    for o_b, o_v in zip(base.outputs, oracle.outputs):
        fd = first_divergence(o_b.token_ids, o_v.token_ids)
        end = min(len(o_b.logprobs), len(o_v.logprobs), fd if fd is not None else 1 << 30)
        lp_a.append(o_b.logprobs[1:end])     # [0] comes from the prefill, not from a decode step
        lp_b.append(o_v.logprobs[1:end])
        flipped = fd is not None and fd < min(len(o_b.token_ids), len(o_v.token_ids))
        compared += len(lp_a[-1]) + int(flipped)
        flips += int(flipped)
    om = oracle.metrics()
    return {
        "level": "model", "pair": pair, "dtype": dtype,
        "a": "vLLM decode path (no speculation, one query token per step)",
        "b": f"vLLM verify path (oracle drafts, chunks of k+1={cfg.k + 1})",
        "description": "vLLM as it runs: logprobs of the sampled tokens, decode vs speculative verification",
        **sampled_summary(lp_a, lp_b, flips, compared),
        "kl_mean": None, "kl_max": None,
        "not_available": "KL and full-distribution diffs: vLLM returns top-n logprobs only",
        "oracle_tokens_per_step": om["tokens_per_step"], "oracle_acceptance_rate": om["acceptance_rate"],
    }
