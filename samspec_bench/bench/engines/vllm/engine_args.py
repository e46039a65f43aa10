"""vLLM engine arguments as users give them (`--engine-arg key=value`, `--engine-args-file`,
`--speculative-config JSON`, vLLM's own `--name value` options: `cli_engine_args`), checked
against the installed vLLM's `EngineArgs` and `SpeculativeConfig` fields (a wrong name is one
line with the nearest real one), the `speculative_config` of each method the adapter builds an
engine for (SAM through `custom_class`, vLLM's own `ngram` and `suffix`; a user's own
speculative_config is used as given for the method it names), the scheduling those methods
need and the default dtype per platform."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from pathlib import Path
from typing import Any, Sequence

from samspec_bench.bench.engines.vllm.platform import on_cpu
from samspec_bench.bench.vllm_proposer.proposer_options import CLASS_PATH, CLASS_PATHS
from samspec_bench.errors import UserError

METHODS = ("sam", "ngram", "suffix")
V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
V2_UNSUPPORTED = ("sam", "suffix")   # custom_class and suffix: vLLM 0.32 config/vllm.py:2927-2933


SPECULATIVE_CONFIG_HELP = ("vLLM's speculative_config as JSON, as `vllm serve --speculative-config` and verl's "
                           "engine kwargs take it, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                           "\"prompt_lookup_max\": 4}': the arm of that method runs it as given (-k fills "
                           "num_speculative_tokens when it is absent)")


def parse_engine_args(pairs: Sequence[str] = (), json_file: str | None = None,
                      speculative_config: str | None = None) -> dict[str, Any]:
    """`--engine-arg key=value` (repeatable; values parsed as JSON when they parse, else kept
    as strings: `tensor_parallel_size=2`, `dtype=bfloat16`, `speculative_config={"...": 1}`)
    over an optional JSON file of the same keys (`--engine-args-file`); `--speculative-config
    JSON` (vLLM's option name) sets speculative_config. A speculative_config given is a JSON
    object (else a one-line error)."""
    out: dict[str, Any] = {}
    if json_file:
        p = Path(json_file)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except OSError:
            raise UserError(f"--engine-args-file {p}: cannot read it; pass a JSON file of vLLM engine arguments") from None
        except ValueError as e:
            raise UserError(f"--engine-args-file {p}: not JSON ({e}); pass an object like "
                            '{"tensor_parallel_size": 2, "max_num_seqs": 128}') from None
        if not isinstance(data, dict):
            raise UserError(f"--engine-args-file {p}: expected a JSON object of vLLM engine arguments")
        out.update(data)
    for item in pairs:
        key, sep, raw = str(item).partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UserError(f"--engine-arg {item!r}: expected key=value (e.g. max_num_seqs=64)")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    if speculative_config is not None:
        if "speculative_config" in out:
            raise UserError("--speculative-config and --engine-arg speculative_config=... both given: give one")
        out["speculative_config"] = speculative_config
    if "speculative_config" in out:
        out["speculative_config"] = speculative_config_object(out["speculative_config"])
    return out


def speculative_config_object(value: Any, option: str = "speculative_config") -> dict[str, Any]:
    """A user's speculative_config as a dict: a JSON object (or its text); else a one-line error."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise UserError(f"{option} {value!r}: not JSON ({e}); give an object like "
                            '\'{"method": "ngram", "num_speculative_tokens": 4}\'') from None
    if not isinstance(value, dict):
        raise UserError(f"{option} {value!r}: give a JSON object of vLLM's SpeculativeConfig fields, e.g. "
                        '\'{"method": "ngram", "num_speculative_tokens": 4}\'')
    return dict(value)


def vllm_fields(kind: str) -> frozenset[str] | None:
    """The field names of the installed vLLM's EngineArgs (kind "engine") or SpeculativeConfig
    ("speculative"); None where vLLM does not import (nothing can be checked then)."""
    try:
        if kind == "engine":
            from vllm.engine.arg_utils import EngineArgs as cls  # imports vLLM
        else:
            from vllm.config import SpeculativeConfig as cls  # imports vLLM
    except Exception:  # noqa: BLE001
        return None
    return frozenset(f.name for f in dataclasses.fields(cls))


def check_names(names: Sequence[str], known: frozenset[str] | set[str], what: str, fix: str) -> None:
    """A one-line UserError for the first name not in `known`, with the nearest real one."""
    bad = [n for n in names if n not in known]
    if bad:
        close = difflib.get_close_matches(bad[0], sorted(known), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"{what} {bad[0]!r} is not a field of the installed vLLM's {fix}{hint}")


def check_engine_args(args: dict[str, Any], known: frozenset[str] | None = None,
                      spec_known: frozenset[str] | None = None) -> None:
    """Refuse a name that is not a field of vLLM's EngineArgs, and a speculative_config key
    that is not a field of its SpeculativeConfig (the installed vLLM's; nothing checked
    without vLLM)."""
    if not args:
        return
    known = known if known is not None else vllm_fields("engine")
    if known is not None:
        check_names(list(args), known, "engine argument",
                    "EngineArgs: see `vllm serve --help` for the names (dashes become underscores)")
    spec = args.get("speculative_config")
    if isinstance(spec, dict):
        spec_known = spec_known if spec_known is not None else vllm_fields("speculative")
        if spec_known is not None:
            check_names(list(spec), spec_known, "speculative_config key", "SpeculativeConfig")


def user_method(cfg: dict[str, Any]) -> str:
    """The adapter's method a user's speculative_config runs: ngram (method "ngram", or vLLM's
    older model "ngram" / "[ngram]" without a method), suffix, or sam (custom_class with SAM's
    proposer); another method is a one-line error (vLLM infers the method as these do)."""
    method, model = cfg.get("method"), cfg.get("model")
    if method is None and model in ("ngram", "[ngram]"):
        method = "ngram"
    if method in ("ngram", "suffix"):
        return method
    if method == "custom_class" or (method is None and model in CLASS_PATHS):
        if model in CLASS_PATHS:
            return "sam"
        raise UserError(f"speculative_config custom_class {model!r}: the vLLM engine here measures SAM's proposer "
                        f"({CLASS_PATH}), vLLM's ngram and suffix; a custom class of your own cannot be measured")
    raise UserError(f"speculative_config method {method!r}: the vLLM engine here measures ngram, suffix and SAM "
                    f"(custom_class {CLASS_PATH}); a draft-model method ({method}) cannot be measured here")


def speculative_config(method: str | None, k: int, options: dict[str, Any] | None = None,
                       user: dict[str, Any] | None = None) -> dict | None:
    """The `speculative_config` for a method: SAM through custom_class, vLLM's ngram / suffix;
    a user's own config (`user`) as given when it names this method (num_speculative_tokens
    from k where it has none; another k than its own is a one-line error); then the arm's
    `options` (what defines the arm, e.g. suffix-own's max cached requests)."""
    if method is None:
        return None
    if method not in METHODS:
        raise UserError(f"speculative method {method!r}: use one of {', '.join(METHODS)} (or none)")
    if user is not None and user_method(user) == method:
        given = user.get("num_speculative_tokens")
        if given is not None and int(given) != int(k):
            raise UserError(f"speculative_config num_speculative_tokens={given} but this run drafts k={k}: pass "
                            f"-k {given}, or drop num_speculative_tokens from speculative_config")
        cfg = {**user, "num_speculative_tokens": int(k)}
    elif method == "sam":
        cfg = {"method": "custom_class", "model": CLASS_PATH, "num_speculative_tokens": k}
    elif method == "ngram":
        cfg = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    else:
        cfg = {"method": "suffix", "num_speculative_tokens": k}
    cfg.update(options or {})
    return cfg


def check_scheduling(args: dict[str, Any], method: str | None) -> None:
    """What vLLM refuses for a drafter that runs on the CPU after each step's bookkeeping
    (SAM, ngram, suffix), as a one-line error before the engine starts: async scheduling (the
    engine sets async_scheduling=False for them), and the V2 model runner for SAM and suffix."""
    if method is None:
        return
    if args.get("async_scheduling") not in (None, False, "false", "False", 0):
        raise UserError(f"engine argument async_scheduling={args['async_scheduling']}: the {method} drafter runs on "
                        "the CPU after each step's bookkeeping, which vLLM allows only with synchronous scheduling; "
                        "drop it (the engine sets async_scheduling=False)")
    v2 = os.environ.get(V2_RUNNER_ENV, "").strip()
    if method in V2_UNSUPPORTED and v2 not in ("", "0"):
        raise UserError(f"{V2_RUNNER_ENV}={v2}: vLLM's V2 model runner does not run the {method} drafter (vLLM "
                        f"refuses it at start-up); unset {V2_RUNNER_ENV} for this run")


def engine_dtype(dtype: str | None) -> str:
    """The dtype given to vLLM: `auto` (or None) is float32 on vLLM's CPU platform (the CPU
    runs compare with the reference engine in float32) and vLLM's own `auto` on a GPU or NPU
    (the checkpoint's dtype, half precision for a float32 checkpoint); any other value as given."""
    if dtype in (None, "auto"):
        return "float32" if on_cpu() else "auto"
    return str(dtype)


def cli_engine_args(tokens: Sequence[str], *, command: str, refused: dict[str, str] | None = None,
                    own: Sequence[str] = (), known: frozenset[str] | None = None) -> dict[str, Any]:
    """vLLM's own command-line options left over by a command (`--max-model-len 2048`,
    `--enforce-eager`, `--no-enable-prefix-caching`, `--name=value`) as engine arguments, values
    parsed as JSON when they parse. `refused`: options of `vllm bench` with no meaning here ->
    what to use instead (one-line error); a name that is neither one of the command's own
    options (`own`) nor an EngineArgs field of the installed vLLM is a one-line error with the
    nearest name. Without vLLM the names cannot be checked: they pass (the engine needs vLLM)."""
    refused = refused or {}
    if known is None and tokens:
        known = vllm_fields("engine")
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = str(tokens[i])
        if not tok.startswith("--") or tok == "--":
            raise UserError(f"{command}: unexpected argument {tok!r}: give vLLM's options by their long names "
                            "(--tensor-parallel-size 2, not -tp 2)")
        name, eq, raw = tok[2:].partition("=")
        value: Any = raw
        if not eq:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            flag = nxt is None or str(nxt).startswith("--")
            value, i = (None, i) if flag else (str(nxt), i + 1)
        i += 1
        if f"--{name}" in refused:
            raise UserError(f"--{name}: {refused[f'--{name}']}")
        key = name.replace("-", "_")
        if value is None and key.startswith("no_") and (known is None or key not in known):
            key, value = key[3:], False   # vLLM's --no-NAME of a boolean option
        elif value is None:
            value = True
        else:
            try:
                value = json.loads(value)
            except ValueError:
                pass
        if known is not None and key not in known:
            names = sorted({*own, *(f"--{k.replace('_', '-')}" for k in known)})
            close = difflib.get_close_matches(f"--{name}", names, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UserError(f"--{name}: not an option of `samspec-bench {command}` nor an engine argument of the "
                            f"installed vLLM{hint}")
        out[key] = value
    return out
