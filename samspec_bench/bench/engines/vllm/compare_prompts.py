"""The prompts of the vLLM method comparison, named as `vllm bench` names its datasets
(`--dataset-name`, `--dataset-path`, `--input-len`, `--seed`):

  math500, gsm8k, aime24, aime25  a benchmark of the shared data (`--data-dir`), in file order
  custom     vLLM's custom dataset: a JSONL file of {"prompt": ...} rows (`--dataset-path`)
  sharegpt   vLLM's ShareGPT JSON: a list of {"conversations": [{"value": prompt}, ...]}, entries
             of at least two turns, the first turn's value (`--dataset-path`)
  random     `--input-len` token ids drawn uniformly from the tokenizer's vocabulary less its
             special tokens, seeded (`--seed`), as vLLM's random dataset draws them (without its
             decode / re-encode round trip: the lengths are exact)

custom and sharegpt rows are shuffled with the seed as vLLM shuffles them (Python's random,
the same permutation); text prompts go through the model's chat template (encode_chat), as
vLLM's custom dataset does. Other vLLM dataset names are a one-line error saying what to use.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from samspec_bench.data import BENCHMARKS, read_benchmark
from samspec_bench.errors import UserError

FILE_DATASETS = ("custom", "sharegpt")
DATASETS = (*BENCHMARKS, *FILE_DATASETS, "random")
RANDOM_INPUT_LEN = 1024   # vLLM's random dataset default
USE = (f"use one of {', '.join(DATASETS)} (custom: a JSONL of {{\"prompt\": ...}} rows, sharegpt: a ShareGPT "
       "JSON, both with --dataset-path; random: --input-len tokens)")


@dataclass(frozen=True)
class PromptSpec:
    dataset: str
    path: str | None = None
    input_len: int | None = None
    seed: int = 0


def check_prompt_spec(dataset: str, path: str | None, input_len: int | None, seed: int) -> PromptSpec:
    """The prompts asked for, checked before anything runs (a one-line error names the option)."""
    if dataset not in DATASETS:
        raise UserError(f"--dataset-name {dataset!r}: vLLM's {dataset} dataset is not read here: {USE}")
    if dataset in FILE_DATASETS:
        if path is None:
            raise UserError(f"--dataset-name {dataset}: give its file with --dataset-path")
        if not Path(path).is_file():
            raise UserError(f"--dataset-path {path}: no such file; give the {dataset} dataset file")
    elif path is not None:
        raise UserError(f"--dataset-path {path}: goes with --dataset-name custom or sharegpt; the benchmark "
                        f"{dataset} is read from --data-dir" if dataset != "random" else
                        f"--dataset-path {path}: --dataset-name random draws its prompts; drop --dataset-path")
    if input_len is not None and dataset != "random":
        raise UserError(f"--input-len {input_len}: sets the prompt length of --dataset-name random only (the "
                        f"{dataset} prompts have their own lengths)")
    if dataset == "random":
        input_len = RANDOM_INPUT_LEN if input_len is None else input_len
        if input_len < 1:
            raise UserError(f"--input-len {input_len}: give an integer >= 1")
    return PromptSpec(dataset, path, input_len, int(seed))


def prompt_texts(spec: PromptSpec, num_prompts: int, data_dir: str | None) -> list[str] | None:
    """The first num_prompts text prompts (None for random: drawn as token ids)."""
    if spec.dataset == "random":
        return None
    if spec.dataset in BENCHMARKS:
        return [r["question"] for r in read_benchmark(spec.dataset, data_dir)[:num_prompts]]
    rows = _custom_rows(spec.path) if spec.dataset == "custom" else _sharegpt_rows(spec.path)
    random.Random(spec.seed).shuffle(rows)   # vLLM: random.seed(seed); random.shuffle(data)
    return rows[:num_prompts]


def _custom_rows(path: str) -> list[str]:
    out = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append(str(row["prompt"]))
        except (ValueError, KeyError, TypeError):
            raise UserError(f"--dataset-path {path}:{lineno}: not a custom dataset row; each line is a JSON object "
                            'with a "prompt" (vLLM\'s custom dataset)') from None
    if not out:
        raise UserError(f"--dataset-path {path}: no rows; give a JSONL file of {{\"prompt\": ...}} rows")
    return out


def _sharegpt_rows(path: str) -> list[str]:
    try:
        data: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"--dataset-path {path}: not JSON ({e}); give a ShareGPT JSON file") from None
    if not isinstance(data, list):
        raise UserError(f"--dataset-path {path}: a ShareGPT file is a JSON list of {{\"conversations\": [...]}}")
    out = []
    for entry in data:   # vLLM keeps entries of at least two turns
        conv = entry.get("conversations") if isinstance(entry, dict) else None
        if isinstance(conv, list) and len(conv) >= 2 and isinstance(conv[0], dict) and "value" in conv[0]:
            out.append(str(conv[0]["value"]))
    if not out:
        raise UserError(f"--dataset-path {path}: no entry with two or more conversation turns (ShareGPT format)")
    return out


def random_prompt_ids(tokenizer: Any, num_prompts: int, input_len: int, seed: int) -> list[list[int]]:
    """num_prompts prompts of input_len token ids, uniform over the vocabulary less the special
    tokens (vLLM's random dataset's draw), from numpy's generator seeded with `seed`."""
    special = set(int(t) for t in (getattr(tokenizer, "all_special_ids", None) or []))
    allowed = np.array([t for t in range(int(tokenizer.vocab_size)) if t not in special])
    rng = np.random.default_rng(seed)
    return [allowed[rng.integers(0, len(allowed), size=input_len)].tolist() for _ in range(num_prompts)]
