"""The built-in workload: a small GRPO-like trace generated on this machine, so that the
trace-based suites (accept, drafters) run without any shared data.

A handful of math word problems (written for this project; no benchmark data), each sampled
`samples` times (a group, as in GRPO) with the built-in model through the reference engine,
written in the trace format (`id`, `group`, `prompt_ids`, `response_ids`, `logprobs`, plus the
question and the decoded response for reading). The generation itself speculates with SAM
(k=3; exact under rejection sampling, so the outputs are distributed as without it) and
records its on-model acceptance and throughput.

Run directory `workload-<timestamp>/`: trace.jsonl (sorted by prompt, then sample),
responses.partial.jsonl (appended as requests finish: a resumed run skips them),
prompts.jsonl, config.json (a resumed run must use the same settings), result.json.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.engine_device import device_record
from samspec_bench.data import encode_chat, load_tokenizer
from samspec_bench.devices import parse_device, resolve_device
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import BUILTIN_MODEL, model_id, resolve_model
from samspec_bench.results import RunDir, atomic_write_text, file_sha256

SUITE = "workload"
TRACE_FILE = "trace.jsonl"
PARTIAL_FILE = "responses.partial.jsonl"
PROMPTS_FILE = "prompts.jsonl"
CONFIG_FILE = "config.json"
DATASET = "samspec-builtin-math"

SYSTEM_PROMPT = "Solve the problem step by step. End with a line of the form 'Answer: <number>'."

# Written for samspec-bench. Short multi-step arithmetic word problems: the kind of prompt an
# RL math run samples many responses for.
PROMPTS: tuple[str, ...] = (
    "A library has 7 shelves with 38 books each. It lends out 59 books and receives 24 new ones. "
    "How many books does it have now?",
    "Mina saves 15 dollars every week. After how many weeks will she have saved 240 dollars?",
    "A farmer plants 12 rows of 14 tomato plants. Each plant gives 3 kilograms of tomatoes. "
    "How many kilograms does the farmer harvest?",
    "A bus leaves with 46 passengers. At the first stop 13 get off and 8 get on; at the second stop "
    "half of the passengers get off. How many passengers are left on the bus?",
    "The price of a jacket is 80 dollars. It is reduced by 25 percent, and then a 10 dollar coupon is "
    "applied. What is the final price?",
    "Three friends share 5 pizzas cut into 8 slices each. They eat 31 slices. How many slices are "
    "left, and how many whole pizzas could be made from them?",
    "A cyclist rides at 18 kilometres per hour for 2 hours and then at 12 kilometres per hour for "
    "1.5 hours. How far does she ride in total?",
    "A square garden has a side of 9 metres. A path 1 metre wide runs around the outside of it. "
    "What is the area of the path?",
    "Leo is 4 times as old as his daughter. In 20 years he will be twice as old as her. How old is "
    "his daughter now?",
    "A tank holds 1200 litres. A pipe fills it at 30 litres per minute while a leak drains 6 litres "
    "per minute. How many minutes does it take to fill the empty tank?",
    "The average of five numbers is 17. Four of them are 12, 15, 20 and 22. What is the fifth number?",
    "A school orders 9 boxes of pencils with 24 pencils in each box and gives every one of its "
    "27 students the same number of pencils. How many pencils does each student get?",
)


@dataclass
class WorkloadConfig:
    model: str = BUILTIN_MODEL
    num_prompts: int = 6
    samples: int = 4            # responses per prompt (one GRPO group)
    max_tokens: int = 128
    temperature: float = 0.7
    top_p: float = 1.0          # < 1 sorts the vocabulary every step: slow on a CPU
    seed: int = 0
    drafter: str | None = "sam"  # speculation during generation (None: plain decoding)
    num_spec_tokens: int = 3
    dtype: str = "float32"
    device: str = "auto"         # where the model runs (devices.resolve_device; `run` passes its own)
    max_num_seqs: int = 32
    threads: int = 0             # torch threads (0: choose_threads(), from what is free now)

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "WorkloadConfig":
        """From a config-file section (keys with '-' or '_')."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in options.items():
            name = str(key).replace("-", "_")
            if name not in fields:
                raise UserError(f"config section workload: unknown option {key!r}; use one of "
                                f"{', '.join(sorted(n.replace('_', '-') for n in fields))}")
            kwargs[name] = value
        cfg = cls(**kwargs)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if not 1 <= int(self.num_prompts) <= len(PROMPTS):
            raise UserError(f"workload num-prompts {self.num_prompts}: use 1..{len(PROMPTS)} (the built-in prompts)")
        if int(self.threads) < 0:
            raise UserError(f"workload threads {self.threads}: must be >= 0 (0: chosen from the free cores)")
        for name in ("samples", "max_tokens", "num_spec_tokens", "max_num_seqs"):
            if int(getattr(self, name)) < 1:
                raise UserError(f"workload {name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        if not float(self.temperature) >= 0:
            raise UserError(f"workload temperature {self.temperature}: must be >= 0")
        if not 0 < float(self.top_p) <= 1:
            raise UserError(f"workload top-p {self.top_p}: must be in (0, 1]")
        parse_device(self.device, "workload device")


def choose_threads() -> dict[str, Any]:
    """torch intra-op threads from what is free now: the cores this process may run on
    (os.sched_getaffinity) minus the 1-minute load average, rounded, at least 1. Several
    threads on cores other work is using stall each other (small GEMMs wait for the slowest
    thread): on a loaded machine one thread is faster. Returns the choice and its inputs."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    threads = max(1, min(cores, int(cores - min(load, cores) + 0.5)))
    return {"threads": threads, "cores": cores, "load_avg_1m": round(load, 2),
            "rule": "cores available to this process - 1-minute load average, rounded, at least 1"}


def write_prompts_file(path: str | Path, n: int | None = None) -> Path:
    """The built-in prompts as JSONL ({"id", "prompt"}), the format op-equivalence's --prompts reads."""
    path = Path(path)
    rows = [{"id": f"builtin-{i}", "prompt": p} for i, p in enumerate(PROMPTS[:n] if n else PROMPTS)]
    return atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def question_ids(tokenizer, question: str) -> list[int]:
    """A built-in question as the model sees it: through its chat template when it has one."""
    if getattr(tokenizer, "chat_template", None):
        return encode_chat(tokenizer, question, SYSTEM_PROMPT)
    return [int(t) for t in tokenizer(f"{SYSTEM_PROMPT}\n\n{question}\n")["input_ids"]]


def generate_trace(cfg: WorkloadConfig, output: str | Path, resume: str | Path | None = None,
                   progress: bool = True) -> tuple[dict, Path]:
    """Generate the built-in trace; returns (result dict, run directory)."""

    cfg.validate()
    # a short name -> its Hugging Face id; a device that is not there stops here, before the run folder
    cfg = dataclasses.replace(cfg, model=model_id(cfg.model), device=resolve_device(cfg.device, "workload device"))
    rd = RunDir(output, SUITE, resume)
    identity = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("device", "max_num_seqs", "threads")}
    before = rd.saved_config(CONFIG_FILE) if resume is not None else None
    if before is not None:
        diff = sorted(k for k in identity if before.get(k) != identity[k])
        if diff:
            raise UserError(f"--resume {resume}: the workload used {diff[0]} = {before.get(diff[0])!r}, this call "
                            f"{identity[diff[0]]!r}; repeat the original settings to continue it")
    rd.write_json(CONFIG_FILE, identity)
    model_dir = resolve_model(cfg.model)
    tok = load_tokenizer(model_dir)
    questions = list(PROMPTS[: cfg.num_prompts])
    write_prompts_file(rd.file(PROMPTS_FILE), cfg.num_prompts)
    prompt_ids = [question_ids(tok, q) for q in questions]
    import torch

    threads_before = torch.get_num_threads()
    threads = {"threads": int(cfg.threads), "rule": "given"} if cfg.threads else choose_threads()
    torch.set_num_threads(threads["threads"])   # restored below: `run` calls the next suites in this process
    try:
        return _generate(cfg, rd, model_dir, tok, questions, prompt_ids, progress, threads)
    finally:
        torch.set_num_threads(threads_before)


def _generate(cfg: WorkloadConfig, rd, model_dir, tok, questions, prompt_ids, progress,
              threads: dict[str, Any]) -> tuple[dict, Path]:
    from samspec_bench.bench.engines.reference_engine import ReferenceEngine  # imports torch

    done = {rec["id"]: rec for rec in rd.samples(PARTIAL_FILE) if "id" in rec}
    # a KV cache sized for this workload, not for the model's longest context
    max_len = max(len(p) for p in prompt_ids) + int(cfg.max_tokens) + int(cfg.num_spec_tokens) + 16
    t_load = time.perf_counter()
    engine = ReferenceEngine(cfg.model, dtype=cfg.dtype, device=cfg.device, max_num_seqs=cfg.max_num_seqs,
                             max_model_len=max_len)
    load_s = time.perf_counter() - t_load
    requests, meta = [], {}
    for i, ids in enumerate(prompt_ids):
        for j in range(cfg.samples):
            rid = f"p{i:02d}-s{j:02d}"
            meta[rid] = (i, j)
            if rid in done:
                continue
            params = SamplingParams(temperature=float(cfg.temperature), top_p=float(cfg.top_p),
                                    seed=int(cfg.seed) * 1_000_003 + i * 1000 + j, max_tokens=int(cfg.max_tokens))
            requests.append(Request(rid, ids, params, group=f"p{i:02d}"))

    def on_output(out) -> None:
        i, j = meta[out.req_id]
        c = out.counts
        rec = {"id": out.req_id, "group": f"p{i:02d}", "dataset": DATASET, "model": cfg.model,
               "question": questions[i], "system": SYSTEM_PROMPT,
               "prompt_ids": list(out.prompt_ids), "response_ids": list(out.token_ids),
               "logprobs": [float(x) for x in out.logprobs],
               "response_text": tok.decode(out.token_ids, skip_special_tokens=True),
               "finish_reason": out.finish_reason,
               "steps": c.steps, "step_tokens": c.tokens, "drafts": c.drafts, "drafted": c.drafted,
               "accepted": c.accepted}
        rd.append_sample(rec, PARTIAL_FILE)
        done[out.req_id] = rec

    gen = None
    if requests:
        gen = engine.generate(requests, drafter=cfg.drafter or None, num_spec_tokens=cfg.num_spec_tokens,
                              progress=progress, on_output=on_output)
    engine_info = engine.describe()
    engine.close()

    records = sorted((done[r] for r in meta if r in done), key=lambda r: meta[r["id"]])
    if len(records) != len(meta):
        raise UserError(f"workload: {len(meta) - len(records)} responses are missing from {rd.path}; "
                        f"run again with --resume {rd.path}")
    trace_keys = ("id", "group", "dataset", "model", "question", "system", "prompt_ids", "response_ids",
                  "logprobs", "response_text", "finish_reason")
    atomic_write_text(rd.file(TRACE_FILE), "".join(json.dumps({k: r[k] for k in trace_keys}, sort_keys=True) + "\n"
                                                   for r in records))

    steps = sum(r["steps"] for r in records)
    step_tokens = sum(r["step_tokens"] for r in records)
    drafts = sum(r["drafts"] for r in records)
    accepted = sum(r["accepted"] for r in records)
    out_tokens = sum(len(r["response_ids"]) for r in records)
    prompt_tokens = sum(len(r["prompt_ids"]) for r in records)
    finish: dict[str, int] = {}
    for r in records:
        finish[r["finish_reason"]] = finish.get(r["finish_reason"], 0) + 1
    metrics: dict[str, Any] = {
        "prompts": len(questions), "responses": len(records), "output_tokens": out_tokens,
        "prompt_tokens": prompt_tokens, "total_tokens": out_tokens + prompt_tokens,
        "finish_reasons": dict(sorted(finish.items())),
    }
    if cfg.drafter:
        metrics.update({
            "tokens_per_step": step_tokens / steps if steps else None,
            "acceptance_length": (1 + accepted / drafts) if drafts else None,
            "draft_hit_rate": drafts / steps if steps else None,
        })
    if gen is not None:
        metrics["wall_time_s"] = gen.wall_time_s
        metrics["output_tokens_per_s"] = gen.num_output_tokens / gen.wall_time_s if gen.wall_time_s > 0 else None
        metrics["generated_this_session"] = len(gen.outputs)
    metrics["model_load_s"] = load_s
    table = [{"id": r["id"], "group": r["group"], "prompt_tokens": len(r["prompt_ids"]),
              "response_tokens": len(r["response_ids"]), "finish_reason": r["finish_reason"],
              "tokens_per_step": (r["step_tokens"] / r["steps"]) if r["steps"] else None}
             for r in records]
    trace_path = rd.file(TRACE_FILE)
    extra = {"trace": TRACE_FILE, "tokenizer": str(model_dir), "engine": engine_info, "torch_threads": threads,
             "data_files": {str(trace_path): file_sha256(trace_path)},
             "note": "tokens_per_step counts the model's own decode steps with SAM (k = num_spec_tokens); "
                     "trace replay (accept) measures other drafters and k on the same tokens"}
    rd.write_result(cfg, metrics, {"responses": table}, [], extra, device=device_record("reference", cfg.device))
    return json.loads(rd.file("result.json").read_text(encoding="utf-8")), rd.path
