"""Which model wrote the traces: the `model` field checked against --model."""

from __future__ import annotations

from typing import Any

from samspec_bench.data import TraceSet
from samspec_bench.errors import UserError
from samspec_bench.models.rl_names import resolve_alias


def same_model(trace_model: str, spec: str) -> bool:
    """Whether a trace's `model` field names the model `spec`: equal after resolving short
    names, or equal repository / directory names (Qwen/Qwen3-8B ~ Qwen3-8B ~ /ckpt/Qwen3-8B)."""
    def names(x: str) -> set[str]:
        x = x.strip().rstrip("/")
        out = {x.lower(), x.lower().rsplit("/", 1)[-1]}
        if not x.startswith("builtin:"):
            alias = resolve_alias(x)
            out |= {alias.lower(), alias.lower().rsplit("/", 1)[-1]}
        return out
    return bool(names(trace_model) & names(spec))


def trace_models(traces: TraceSet) -> dict[str, list[str]]:
    """The `model` values of each file (files without one are left out)."""
    out: dict[str, set[str]] = {}
    for r in traces.records:
        if r.model:
            out.setdefault(str(r.source), set()).add(r.model)
    return {f: sorted(m) for f, m in out.items()}


def check_models(traces: TraceSet, model: str | None, any_model: bool = False) -> dict[str, Any]:
    """Refuse traces of another model than `model` (the `model` field; records without one
    are of an unstated model), and token-id traces written with different models' tokenizers.
    `any_model` lets both through. Returns what was found, for result.json."""
    models = trace_models(traces)
    unstated = sorted({str(r.source) for r in traces.records if not r.model})
    id_models: dict[str, str] = {}
    for r in traces.records:
        if r.model and (r.prompt_ids is not None or r.response_ids is not None):
            id_models.setdefault(r.model, str(r.source))
    if not any_model:
        if len(id_models) > 1:
            (m1, f1), (m2, f2) = list(id_models.items())[:2]
            raise UserError(f"--traces: {f1} and {f2} hold token ids from different models ({m1!r}, {m2!r}), so from "
                            "different tokenizers: replay them separately (or pass --any-model)")
        if model is not None:
            for f, names in models.items():
                other = [m for m in names if not same_model(m, model)]
                if other:
                    raise UserError(f"--traces {f}: responses of {other[0]!r}, not of --model {model}: pass traces "
                                    "written by that model, or --any-model to replay them with its tokenizer anyway")
    return {"models": models, "unstated": unstated, "any_model": any_model}
