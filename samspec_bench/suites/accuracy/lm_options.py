"""lm-eval's own options as `accuracy` takes them (lm-eval 0.4.x, `lm_eval run`):

- the spellings: `--model_args` and `--model-args` alike, `--tasks a b` as `--tasks a,b`
  (`lm_eval_argv`, applied to the command line before click parses it);
- `--model_args` / `--gen_kwargs`: `key=value,key=value` or a JSON object, values converted as
  lm-eval converts them (true/false, numbers, Python literals, else text: `parse_kv`);
- `--gen_kwargs` merged into the run's sampling settings; a key that contradicts one of our own
  options given away from its default is refused (`merge_gen_kwargs`);
- `--model_args pretrained=...,dtype=...` and lm-eval's backend names (`--model hf|vllm`) mapped
  onto --model / --engine / --dtype / --device / --max-num-seqs (`merge_model_args`);
- `--limit`: a count, or below 1 the fraction of each task (lm-eval: ceil(n * limit));
- lm-eval's other options (`lm_eval_only`): `--batch_size N` / `--max_batch_size N` as the engine's
  batch (--max-num-seqs), `auto` left to the engine's batching with a note; `--seed` in lm-eval's
  one-or-four form (this suite uses one seed for all four draws); `--verbosity` noted and not
  used; the rest (caching, W&B / hub logging, --system_instruction, ...) refused in one line with
  what to use instead.
"""

from __future__ import annotations

import ast
import json
import math
import sys
from typing import Any, Iterable

from samspec_bench.errors import UserError, nearest

# lm-eval's options that take several words (argparse nargs="+"): the words are joined with commas
LIST_OPTIONS = ("--tasks", "--model-args", "--gen-kwargs")
# lm-eval's optional-value booleans -> our flag pairs
BOOL_VALUE_FLAGS = {"--fewshot-as-multiturn": ("--fewshot-as-multiturn", "--no-fewshot-as-multiturn")}


def lm_eval_argv(args: Iterable[str], options: set[str]) -> list[str]:
    """The command line with lm-eval's spellings turned into ours: `--x_y` -> `--x-y` where that is
    one of `options`; the bare words after a list option joined to its value with commas
    (`--tasks gsm8k aime24`); `--fewshot_as_multiturn false` -> `--no-fewshot-as-multiturn`."""
    args = list(args)
    out: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if tok == "-b":   # lm-eval's short form of --batch_size
            tok = "--batch-size"
        if not tok.startswith("--") or tok == "--":
            out.append(tok)
            continue
        name, eq, value = tok.partition("=")
        if "_" in name and name.replace("_", "-") in options:
            name = name.replace("_", "-")
        if name in BOOL_VALUE_FLAGS and not eq and i < len(args) and args[i].lower() in ("true", "false", "1", "0",
                                                                                        "yes", "no"):
            out.append(BOOL_VALUE_FLAGS[name][0 if args[i].lower() in ("true", "1", "yes") else 1])
            i += 1
            continue
        key = name.replace("_", "-")
        seed_list = key == "--seed" and "," in (value if eq else (args[i] if i < len(args) else ""))
        if key in LM_EVAL_ONLY and (name not in options or seed_list):   # --seed N is ours, --seed a,b,c,d lm-eval's
            if not eq and i < len(args) and not args[i].startswith("-") and LM_EVAL_ONLY[key]:
                value, i = args[i], i + 1
            out += lm_eval_only(name, value)
            continue
        if name not in LIST_OPTIONS:
            out.append(name + eq + value)
            continue
        words = [value] if eq else []
        if not eq and i < len(args):
            words.append(args[i])
            i += 1
        while i < len(args) and not args[i].startswith("-"):
            words.append(args[i])
            i += 1
        out += [name, ",".join(words)]
    return out


# lm-eval's options (lm-eval 0.4.x `lm_eval run`) that are not ours: whether each takes a value
LM_EVAL_ONLY = {"--batch-size": True, "--max-batch-size": True, "--seed": True, "--verbosity": True,
                "--system-instruction": True, "--write-out": False, "--show-config": False, "--include-path": True,
                "--predict-only": False, "--cache-requests": True, "--use-cache": True, "--check-integrity": False,
                "--wandb-args": True, "--wandb-config-args": True, "--hf-hub-log-args": True, "--trackio-args": True,
                "--metadata": True, "--config": True, "--samples": True, "--trust-remote-code": False,
                "--confirm-run-unsafe-code": False}
REFUSED = {
    "--system-instruction": "the built-in tasks use lm-eval's own prompts; put the instruction into a task YAML "
                            "under --data-dir, or pass --apply-chat-template",
    "--write-out": "the prompts sent are in the samples files: pass --log_samples",
    "--show-config": "the task configs are in the results file (results_*.json, configs)",
    "--include-path": "pass the folder of your task YAMLs as --data-dir",
    "--predict-only": "this suite exists to score the two arms; use `samspec-bench accept` for generations only",
    "--cache-requests": "every call generates (two arms must not share a cache); leave it out",
    "--use-cache": "every call generates (two arms must not share a cache); use --resume DIR to continue a run",
    "--check-integrity": "run the task's own tests with lm-eval itself",
    "--wandb-args": "the results and samples files are lm-eval's: log them to W&B from there",
    "--wandb-config-args": "the results and samples files are lm-eval's: log them to W&B from there",
    "--hf-hub-log-args": "the results and samples files are lm-eval's: push them from there",
    "--trackio-args": "the results and samples files are lm-eval's: log them from there",
    "--metadata": "the task's metadata comes from its YAML (--data-dir)",
    "--config": "use `samspec-bench run --config FILE` (an accuracy: section) for a file of options",
    "--samples": "use --limit (a count or a fraction of each task)",
    "--trust-remote-code": "models load with transformers' own classes and never run a checkpoint's code; "
                           "leave it out",
    "--confirm-run-unsafe-code": "tasks that execute generated code are not run here",
}


def lm_eval_only(name: str, value: str) -> list[str]:
    """Our arguments for one of lm-eval's options that is not ours (LM_EVAL_ONLY): mapped, noted
    on stderr when it changes nothing, or refused in one line naming what to use."""
    key = name.replace("_", "-")
    if key in ("--batch-size", "--max-batch-size"):
        if str(value).startswith("auto"):
            print(f"note: lm-eval's {name} {value}: the engine batches up to --max-num-seqs requests itself",
                  file=sys.stderr)
            return []
        try:
            return ["--max-num-seqs", str(int(value))]
        except ValueError:
            raise UserError(f"{name} {value!r}: give a whole number of requests per batch, or auto") from None
    if key == "--seed":
        seeds = {s.strip() for s in str(value).split(",")} - {"None", "none", ""}
        if len(seeds) == 1:
            return ["--seed", seeds.pop()]
        raise UserError(f"--seed {value}: accuracy uses one seed for python, numpy, torch and the few-shot draw; "
                        "pass one number, e.g. --seed 1234")
    if key == "--verbosity":
        print(f"note: lm-eval's {name} {value} is not used: accuracy prints its own progress", file=sys.stderr)
        return []
    raise UserError(f"lm-eval's {name} is not taken by accuracy: {REFUSED[key]}")


def _split_top_level(text: str) -> list[str]:
    """Split on the commas outside brackets and quotes (`until=["a","b"],top_p=0.9`)."""
    parts, buf, depth, quote = [], [], 0, None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[({":
            depth += 1
        elif ch in "])}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append("".join(buf))
            buf = []
            continue
        buf.append(ch)
    parts.append("".join(buf))
    return [p.strip() for p in parts if p.strip()]


def _value(text: str) -> Any:
    """A value as lm-eval's command line converts it: true/false, integers, floats, Python literals
    (lists, quoted strings), else the text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if text.isnumeric():
        return int(text)
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def parse_kv(text: str | dict | None, option: str) -> dict[str, Any]:
    """`key=value,key=value` (or a JSON object) -> dict; a later key overwrites an earlier one."""
    if text is None or text == "":
        return {}
    if isinstance(text, dict):
        return dict(text)
    text = str(text).strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise UserError(f"{option} {text!r}: not a JSON object ({e.args[0] if e.args else e}); use double "
                            "quotes, or key=value,key=value") from None
        if not isinstance(obj, dict):
            raise UserError(f"{option} {text!r}: give a JSON object or key=value,key=value")
        return obj
    out: dict[str, Any] = {}
    for item in _split_top_level(text):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            example = "temperature=0,max_gen_toks=256" if "gen" in option else "pretrained=MODEL,dtype=float32"
            raise UserError(f"{option} {text!r}: {item!r} is not key=value; write e.g. {option} {example}")
        out[key.strip()] = _value(raw.strip())
    return out


def parse_limit(value: Any) -> int | float | None:
    """--limit as lm-eval reads it: below 1 a fraction of each task, else a count of problems."""
    if value is None or value == "":
        return None
    hint = "give a count of problems (10) or a fraction of each task below 1 (0.1)"
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise UserError(f"--limit {value!r}: {hint}") from None
    if isinstance(value, bool) or not math.isfinite(x) or x <= 0:
        raise UserError(f"--limit {value}: {hint}")
    if x < 1:
        return x
    if x != int(x):
        raise UserError(f"--limit {value}: a count is a whole number (nearest: {math.floor(x)} or {math.ceil(x)}); "
                        "a fraction is below 1 (0.1)")
    return int(x)


def limited_count(n_docs: int, limit: int | float | None) -> int:
    """How many of a task's n_docs problems --limit keeps (lm-eval: ceil(n * fraction), else the count)."""
    if limit is None:
        return n_docs
    return min(n_docs, math.ceil(n_docs * limit) if limit < 1 else int(limit))


# --- --gen_kwargs ---------------------------------------------------------------------------------------

GEN_KEYS = ("temperature", "top_p", "top_k", "max_gen_toks", "do_sample", "until")
GEN_ALIASES = {"max_new_tokens": "max_gen_toks", "max_tokens": "max_gen_toks", "stop": "until"}
OUR_OPTION = {"temperature": "--temperature", "top_p": "--top-p", "top_k": "--top-k", "max_gen_toks": "--max-gen-toks"}


def _gen_value(key: str, v: Any, given: str) -> Any:
    """`v` checked as the value of setting `key` (`given`: the name the user wrote)."""
    bad = f"--gen_kwargs {given}={v!r}"
    if key == "do_sample":
        if not isinstance(v, bool):
            raise UserError(f"{bad}: give true or false")
        return v
    if key == "until":
        vals = [v] if isinstance(v, str) else v
        if not isinstance(vals, (list, tuple)) or not all(isinstance(s, str) for s in vals):
            raise UserError(f"{bad}: give a stop string or a list of them, e.g. until=[\"\\n\\n\",\"Question:\"]")
        return list(vals)
    if key in ("top_k", "max_gen_toks"):
        lo = 1 if key == "max_gen_toks" else 0
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < lo:
            raise UserError(f"{bad}: give an integer >= {lo}")
        return int(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise UserError(f"{bad}: give a number")
    if key == "temperature" and v < 0:
        raise UserError(f"{bad}: give a number >= 0")
    if key == "top_p" and not 0 < v <= 1:
        raise UserError(f"{bad}: give a number in (0, 1]")
    return float(v)


def merge_gen_kwargs(gen: dict[str, Any], current: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The settings --gen_kwargs gives (temperature, top_p, top_k, max_gen_toks, until), checked
    against `current` (our options' values): one of ours set away from its default to another
    value is a conflict. do_sample=false is greedy (temperature 0); do_sample=true without a
    temperature samples at 1.0 (what lm-eval's hf and vllm models then use)."""
    out: dict[str, Any] = {}
    for key, v in gen.items():
        canon = GEN_ALIASES.get(key, key)
        if canon not in GEN_KEYS:
            raise UserError(f"--gen_kwargs {key}: not a generation setting accuracy uses{nearest(key, GEN_KEYS)}; "
                            f"use {', '.join(GEN_KEYS)}")
        v = _gen_value(canon, v, key)
        if canon in out and out[canon] != v:
            raise UserError(f"--gen_kwargs: {key} and {canon} give two values ({v!r}, {out[canon]!r}); give one")
        out[canon] = v
    for key, opt in OUR_OPTION.items():
        if key in out and current[key] != defaults[key] and current[key] != out[key]:
            raise UserError(f"--gen_kwargs {key}={out[key]} conflicts with {opt} {current[key]}: give one of them")
    sample = out.pop("do_sample", None)
    temp = out.get("temperature", current["temperature"])
    if sample is False and temp > 0:
        raise UserError(f"--gen_kwargs do_sample=false with temperature {temp}: greedy decoding has temperature 0; "
                        "drop one of them")
    if sample is True and temp == 0:
        if "temperature" in out:
            raise UserError("--gen_kwargs do_sample=true with temperature=0: sampling needs a temperature > 0")
        out["temperature"] = 1.0
    return out


# --- --model_args and lm-eval's backend names -------------------------------------------------------------

BACKENDS = {"hf": "reference", "hf-auto": "reference", "huggingface": "reference", "vllm": "vllm"}
OTHER_BACKENDS = ("sglang", "local-completions", "local-chat-completions", "openai-completions",
                  "openai-chat-completions", "anthropic-chat", "gguf", "ggml", "mamba_ssm", "nemo_lm", "neuronx",
                  "openvino", "textsynth", "vllm-vlm", "hf-multimodal", "steered", "dummy", "ipex")
MODEL_KEYS = ("pretrained", "dtype", "device", "max_num_seqs", "batch_size", "trust_remote_code")


def merge_model_args(margs: dict[str, Any], current: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """--model / --model_args as lm-eval users write them -> {model, engine, dtype, device,
    max_num_seqs, engine_args}. `--model hf|vllm` names lm-eval's backend: the checkpoint is then
    `pretrained`; with the vllm engine the other keys are vLLM engine arguments."""
    out: dict[str, Any] = {}
    model = str(current["model"])
    backend = BACKENDS.get(model)
    if model in OTHER_BACKENDS:
        raise UserError(f"--model {model}: lm-eval's {model} backend; accuracy runs the model on its own engines: "
                        "--model hf (reference) or --model vllm with --model_args pretrained=MODEL")
    if backend is not None:
        if "pretrained" not in margs:
            raise UserError(f"--model {model}: lm-eval's backend name; give the checkpoint with --model_args "
                            "pretrained=MODEL (or --model MODEL)")
        if current["engine"] != defaults["engine"] and current["engine"] != backend:
            raise UserError(f"--model {model} (lm-eval's backend: the {backend} engine) conflicts with --engine "
                            f"{current['engine']}: give one of them")
        out["engine"] = backend
    engine = out.get("engine", current["engine"])
    engine_args: dict[str, Any] = {}
    for key, v in margs.items():
        if key == "pretrained":
            if backend is None and model != str(defaults["model"]) and model != str(v):
                raise UserError(f"--model_args pretrained={v} conflicts with --model {model}: give one of them")
            out["model"] = str(v)
        elif key in ("dtype", "device"):
            if current[key] != defaults[key] and str(current[key]) != str(v):
                raise UserError(f"--model_args {key}={v} conflicts with --{key} {current[key]}: give one of them")
            out[key] = str(v)
        elif key in ("max_num_seqs", "batch_size"):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"--model_args {key}={v!r}: give an integer >= 1 (requests decoded together)")
            if current["max_num_seqs"] != defaults["max_num_seqs"] and current["max_num_seqs"] != v:
                raise UserError(f"--model_args {key}={v} conflicts with --max-num-seqs {current['max_num_seqs']}: "
                                "give one of them")
            out["max_num_seqs"] = v
        elif key == "trust_remote_code":
            if engine == "vllm":
                engine_args[key] = v
            # the reference engine loads local checkpoints of known architectures: nothing to allow
        elif engine == "vllm":
            engine_args[key] = v
        else:
            raise UserError(f"--model_args {key}: not a setting of the {engine} engine{nearest(key, MODEL_KEYS)}; "
                            f"use {', '.join(MODEL_KEYS)} (other keys are vLLM engine arguments with --model vllm)")
    if engine_args:
        out["engine_args"] = engine_args
    return out
