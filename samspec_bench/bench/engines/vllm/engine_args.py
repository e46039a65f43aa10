"""vLLM engine arguments as users give them (`--engine-arg key=value`, `--engine-args-file`),
checked against vLLM's `EngineArgs`, the `speculative_config` of each method the adapter
builds an engine for (SAM through `custom_class`, vLLM's own `ngram` and `suffix`), the
scheduling those methods need and the default dtype per platform."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from pathlib import Path
from typing import Any, Sequence

from samspec_bench.bench.engines.vllm.platform import on_cpu
from samspec_bench.bench.vllm_proposer.proposer_options import CLASS_PATH
from samspec_bench.errors import UserError

METHODS = ("sam", "ngram", "suffix")
V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
V2_UNSUPPORTED = ("sam", "suffix")   # custom_class and suffix: vLLM 0.32 config/vllm.py:2927-2933


def parse_engine_args(pairs: Sequence[str] = (), json_file: str | None = None) -> dict[str, Any]:
    """`--engine-arg key=value` (repeatable; values parsed as JSON when they parse, else kept
    as strings: `tensor_parallel_size=2`, `dtype=bfloat16`, `speculative_config={"...": 1}`)
    over an optional JSON file of the same keys (`--engine-args-file`)."""
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
    return out


def check_engine_args(args: dict[str, Any]) -> None:
    """Refuse a name that is not a field of vLLM's EngineArgs (nothing checked without vLLM)."""
    try:
        from vllm.engine.arg_utils import EngineArgs  # imports vLLM
    except Exception:  # noqa: BLE001
        return
    known = {f.name for f in dataclasses.fields(EngineArgs)}
    bad = [k for k in args if k not in known]
    if bad:
        close = difflib.get_close_matches(bad[0], sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"engine argument {bad[0]!r} is not a vLLM EngineArgs field{hint}: see "
                        "`vllm serve --help` for the names (dashes become underscores)")


def speculative_config(method: str | None, k: int, options: dict[str, Any] | None = None) -> dict | None:
    """The `speculative_config` for a method: SAM through custom_class, vLLM's ngram / suffix."""
    if method is None:
        return None
    if method == "sam":
        cfg = {"method": "custom_class", "model": CLASS_PATH, "num_speculative_tokens": k}
    elif method == "ngram":
        cfg = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    elif method == "suffix":
        cfg = {"method": "suffix", "num_speculative_tokens": k}
    else:
        raise UserError(f"speculative method {method!r}: use one of {', '.join(METHODS)} (or none)")
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
