"""lm-eval's own options as `accuracy` takes them (lm-eval 0.4.x, `lm_eval run`):

- the spellings: `--model_args` and `--model-args` alike, `--tasks a b` as `--tasks a,b`
  (`lm_eval_argv`, applied to the command line before click parses it);
- `--model_args` / `--gen_kwargs`: `key=value,key=value` or a JSON object, values converted as
  lm-eval converts them (true/false, numbers, Python literals, else text: `parse_kv`);
- `--gen_kwargs` merged into the run's sampling settings; a key that contradicts one of our own
  options given away from its default is refused (`merge_gen_kwargs`);
- `--model_args pretrained=...,dtype=...` and lm-eval's backend names (`--model hf|vllm`) mapped
  onto --model / --engine / --dtype / --device / --max-num-seqs (`merge_model_args`);
- `--limit`: a count, or below 1 the fraction of each task (lm-eval: ceil(n * limit)).
"""

from __future__ import annotations

import ast
import json
import math
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
