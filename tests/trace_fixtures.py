"""Rollout files in the formats users have, built from the shared real traces.

There is no public verl rollout dump in the shared data, so `write_verl_dump` writes one in
verl's exact schema, following volcengine/verl @ 00401103 : verl/trainer/ppo/ray_trainer.py:
in `RayPPOTrainer.fit`, with `trainer.rollout_data_dir` set, `inputs` and `outputs` are
`self.tokenizer.batch_decode(batch.batch["prompts" | "responses"], skip_special_tokens=True)`,
`scores` the summed token-level scores, `sample_gts` the reward model's ground truth, and
`_dump_generations` writes `{global_steps}.jsonl` with one `json.dumps(entry,
ensure_ascii=False)` per response, keys "input", "output", "gts", "score", "step" and then
every reward-extra key whose list has one value per response, lines joined by "\\n" with a
trailing newline. The batch was reordered by `_balance_batch` before the dump, so the lines of
a group are not adjacent (shuffled here with a fixed seed).

`write_lm_eval_samples` writes lm-eval's `--log_samples` layout (lm_eval/loggers/
evaluation_tracker.py `save_results_samples`, lm_eval/evaluator.py's per-sample dict): one
line per document and filter, arguments as {"gen_args_0": {"arg_0": prompt, "arg_1":
gen_kwargs}}, resps as [[response, ...]] (one request, its repeats), and a results_*.json
beside it naming the model.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from samspec_bench.data import encode_chat


def grouped_rows(trace: Path, prompts: int) -> list[list[dict]]:
    """The first `prompts` groups of a shared trace file, each a list of its rows in file order."""
    groups: dict[str, list[dict]] = {}
    with trace.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row["group"] not in groups and len(groups) == prompts:
                break
            groups.setdefault(row["group"], []).append(row)
    return list(groups.values())


def verl_input(tokenizer, row: dict) -> str:
    """verl's `input`: the chat-templated prompt ids decoded with skip_special_tokens=True."""
    ids = encode_chat(tokenizer, row["prompt"], row.get("system"))
    return tokenizer.decode(ids, skip_special_tokens=True)


def write_verl_dump(out: Path, tokenizer, groups: list[list[dict]], *, batch: int, n: int, epochs: int,
                    seed: int = 0) -> dict:
    """{global_step}.jsonl files: `batch` prompts per step, `n` responses each; epoch e takes
    responses e*n .. e*n+n-1 of each group. Returns {"steps": [...], "lines": {step: count}}."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    step, lines = 0, {}
    for epoch in range(epochs):
        for start in range(0, len(groups), batch):
            step += 1
            entries = []
            for g in groups[start: start + batch]:
                inp = verl_input(tokenizer, g[0])
                for row in g[epoch * n: epoch * n + n]:
                    ids = tokenizer(row["response"], add_special_tokens=False)["input_ids"]
                    acc = bool(row["correct"])
                    entries.append({"input": inp, "output": tokenizer.decode(ids, skip_special_tokens=True),
                                    "gts": None, "score": 1.0 if acc else 0.0, "step": step,
                                    "acc": acc, "pred": "[answer]"})
            rng.shuffle(entries)   # _balance_batch reorders the batch before the dump
            (out / f"{step}.jsonl").write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in entries) + "\n",
                                               encoding="utf-8")
            lines[step] = len(entries)
    return {"steps": list(range(1, step + 1)), "lines": lines}


def write_lm_eval_samples(out: Path, groups: list[list[dict]], *, task: str = "hendrycks_math500",
                          model: str = "Qwen/Qwen2.5-Math-7B-Instruct", repeats: int = 4,
                          filters: tuple[str, ...] = ("strict-match", "flexible-extract")) -> Path:
    """An lm-eval --output_path with --log_samples: <out>/<model sanitized>/samples_<task>_<date>.jsonl
    and results_<date>.json."""
    d = out / model.replace("/", "__")
    d.mkdir(parents=True, exist_ok=True)
    date = "2025-06-01T12-00-00.000000"
    rows = []
    for doc_id, g in enumerate(groups):
        prompt = f"Problem:\n{g[0]['prompt']}\n\nSolution:"
        for flt in filters:
            rows.append({"doc_id": doc_id, "doc": {"problem": g[0]["prompt"]}, "target": "x",
                         "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": {"until": ["Problem:"],
                                                                                  "do_sample": True}}},
                         "resps": [[r["response"] for r in g[:repeats]]],
                         "filtered_resps": [r["response"][-8:] for r in g[:repeats]], "filter": flt,
                         "metrics": ["exact_match"], "doc_hash": "h", "prompt_hash": "p", "target_hash": "t",
                         "exact_match": 0.0})
    path = d / f"samples_{task}_{date}.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (d / f"results_{date}.json").write_text(json.dumps({"results": {}, "model_name": model}), encoding="utf-8")
    return out


# --- multi-turn rollouts and validation generations -----------------------------------------------

def verl_tool_turn(tokenizer, content: str) -> str:
    """A tool turn as verl's agent loop appends it (verl/experimental/agent_loop/tool_agent_loop.py:
    `apply_chat_template([{"role": "tool", ...}], add_generation_prompt=True)` less the template's
    own system prompt), as the dump writes it: decoded with skip_special_tokens=True."""
    def ids(messages, gen):
        enc = tokenizer.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True)
        return list(enc["input_ids"] if hasattr(enc, "keys") else enc)
    system = ids([{}], False)
    turn = ids([{"role": "tool", "content": content}], True)[len(system):]
    return tokenizer.decode(turn, skip_special_tokens=True)


def tool_rollout(tokenizer, value: int, words: str, sample: int, printed: str | None = None
                 ) -> tuple[str, list[tuple[str, bool]]]:
    """One multi-turn response (three model turns, two tool calls) as verl dumps it: its
    `output` text and its pieces (text, is_tool) in order. The second turn repeats `words`, the
    first tool's result (or, given `printed`, the tool printed that instead)."""
    call = '<tool_call>\n{"name": "python", "arguments": {"code": "print(%s)"}}\n</tool_call>'
    turns = [f"<think>\nI will compute it with the tool (try {sample}).\n</think>\n\n" + call % f"{value} + 0",
             f"<think>\nThe tool printed {value} and the checksum {words}. Let me check it.\n</think>\n\n"
             + call % f"{value} == {value}",
             f"The tool confirmed it. The answer is \\boxed{{{value}}}."]
    tools = [f"{value}\nchecksum {printed or words}", "True"]
    pieces = [(turns[0], False), (verl_tool_turn(tokenizer, tools[0]), True), (turns[1], False),
              (verl_tool_turn(tokenizer, tools[1]), True), (turns[2], False)]
    return "".join(text for text, _ in pieces), pieces


def piece_tokens(tokenizer, pieces: list[tuple[str, bool]]) -> tuple[int, int]:
    """(generated, tool) token counts of a response's pieces, each tokenized on its own as the
    rollout built it (the model's turns, the tool turns from the chat template)."""
    n = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text, _ in pieces]
    return (sum(k for k, (_, tool) in zip(n, pieces) if not tool), sum(k for k, (_, tool) in zip(n, pieces) if tool))


def write_tool_dump(out: Path, tokenizer, *, steps: list[int], prompts: int = 2, n: int = 2,
                    echo: bool = True) -> dict:
    """verl {global_step}.jsonl files of multi-turn tool rollouts: `prompts` prompts (the same in
    every step) x `n` responses a step. echo False: the tool prints other words than the second
    turn repeats. Returns per step the responses, generated and tool tokens, and every
    response's pieces by (step, line)."""
    out.mkdir(parents=True, exist_ok=True)
    words = ["alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima",
             "mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray"]
    info: dict = {"steps": {}, "pieces": {}}
    for step in steps:
        entries, gen, tool = [], 0, 0
        for p in range(prompts):
            inp = verl_input(tokenizer, {"prompt": f"What is {17 + p} times {23 + p}? Use the python tool."})
            for j in range(n):
                text, pieces = tool_rollout(tokenizer, (17 + p) * (23 + p), words[p % 2], step * 10 + j,
                                            None if echo else words[1 - p % 2])
                g, t = piece_tokens(tokenizer, pieces)
                gen, tool = gen + g, tool + t
                entry = {"input": inp, "output": text, "gts": str((17 + p) * (23 + p)), "score": 1.0, "step": step}
                info["pieces"][(step, len(entries) + 1)] = pieces
                entries.append(entry)
        (out / f"{step}.jsonl").write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in entries) + "\n",
                                           encoding="utf-8")
        info["steps"][step] = {"responses": len(entries), "generated": gen, "tool": tool}
    return info
