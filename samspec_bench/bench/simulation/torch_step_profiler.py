"""Step times of a model on the user's device with no serving engine: a transformers model built
from a config (random weights), one forward step timed per grid point (B requests, q query tokens
each, C context tokens each), written as {"B", "q", "C", "ms"} rows (measured_points' format).

The model: a catalogue name (`Qwen3-8B`), `builtin:<name>` or a config.json path; `layers`
overrides num_hidden_layers to keep it small. Each point gets a transformers StaticCache of
exactly C + q slots whose first C hold random K/V (the values do not change the work); the step
writes its q tokens' K/V in place at C..C+q-1 and attends over all C + q, as an engine's verify
step does. The write position is reset before every step, so repeats measure the same step.

Timing: `devices.time_ms` (device events on an accelerator, the wall clock on the CPU), the
median of the repeats. On CUDA the step is captured in a CUDA graph and the replay is timed (no
launch overhead, as vLLM decodes); where capture fails the eager step is timed and `mode` says
why. torch and transformers are imported inside the functions (`--help` stays light).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from samspec_bench import devices
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import DTYPES, resolve_model
from samspec_bench.models.rl_names import CATALOGUE, SAME_SHAPE, resolve_alias
from samspec_bench.models.shapes import shape_from_config

DEFAULT_REPEATS = 10


def model_config(spec: str, layers: int | None = None) -> dict[str, Any]:
    """The config.json dict of a catalogue name, `builtin:<name>` or a config.json path (or its
    folder), with num_hidden_layers set to `layers` when given; checked by shape_from_config."""
    spec = str(spec).strip()
    mid = resolve_alias(spec)
    if mid in CATALOGUE or mid in SAME_SHAPE:
        cfg = dict(CATALOGUE[SAME_SHAPE.get(mid, mid)])
    else:
        path = resolve_model(spec) / "config.json" if spec.startswith("builtin:") else Path(spec).expanduser()
        path = path / "config.json" if path.is_dir() else path
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"--model {spec!r}: not a catalogue name and not a readable config.json ({e}); pass a "
                            "catalogue name (e.g. Qwen3-8B) or the path of a Hugging Face config.json") from None
        if not isinstance(cfg, dict):
            raise UserError(f"--model {spec!r}: the config.json is not a JSON object")
    if layers is not None:
        if layers < 1:
            raise UserError(f"--layers {layers}: give an integer >= 1")
        cfg["num_hidden_layers"] = int(layers)
        cfg.pop("layer_types", None)   # per-layer lists follow the layer count (transformers rebuilds them)
    shape_from_config(cfg, name=spec)   # missing or bad shape fields -> UserError here, before torch
    if not cfg.get("model_type"):
        raise UserError(f"--model {spec!r}: the config has no model_type; transformers needs it to build the model")
    return cfg


def build_model(cfg: dict[str, Any], dtype: str, device: str, seed: int = 0):
    """A transformers causal LM of `cfg` with random weights, in `dtype` on `device`, in eval mode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    conf = AutoConfig.for_model(**{**cfg, "use_cache": True})
    torch.manual_seed(seed)
    with torch.device(device):   # weights are created on the device: no host copy of a large model
        model = AutoModelForCausalLM.from_config(conf, dtype=getattr(torch, dtype), attn_implementation="sdpa")
    return model.eval()


def _step(model, B: int, q: int, C: int, device: str, dtype, gen, kv_layers=None, ids=None) -> Callable[[], Any]:
    """A function running one forward step of B x q tokens over a filled KV cache of C tokens:
    random K/V, or `kv_layers` ([(keys, values)] per layer, B x heads x C x head_dim) and token
    `ids` (B x q) where given (tests compare the step with a full forward)."""
    import inspect

    import torch
    from transformers import StaticCache

    conf = model.config
    cache = StaticCache(config=conf, max_cache_len=C + q)
    heads = conf.num_key_value_heads or conf.num_attention_heads
    hd = getattr(conf, "head_dim", None) or conf.hidden_size // conf.num_attention_heads
    fill = torch.arange(C, device=device)
    for i in range(conf.num_hidden_layers):
        if C:
            kv = (kv_layers[i] if kv_layers
                  else torch.randn(2, B, heads, C, hd, device=device, dtype=dtype, generator=gen))
            cache.update(kv[0], kv[1], i, {"cache_position": fill})
    layers = getattr(cache, "layers", [])
    ids = torch.randint(0, conf.vocab_size, (B, q), device=device, generator=gen) if ids is None else ids
    pos = torch.arange(C, C + q, device=device)
    # transformers 5 names the cache argument `cache` (`past_key_values` deprecated); 4.x past_key_values
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    kw = {"input_ids": ids, "position_ids": pos.expand(B, q), "cache_position": pos, cache_arg: cache,
          "use_cache": True, "logits_to_keep": 0}

    def run():
        for layer in layers:   # the write position back to C (transformers 5 keeps it in the layer)
            if hasattr(layer, "cumulative_length"):
                layer.cumulative_length.fill_(C)
        with torch.inference_mode():
            return model(**kw).logits
    return run


def _graphed(run: Callable[[], Any], device: str) -> tuple[Callable[[], Any], str]:
    """The step as a CUDA graph replay where the device is CUDA and capture works, else eager."""
    if devices.device_kind(device) != "cuda":
        return run, "eager"
    import torch
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                run()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run()
        return graph.replay, "cuda graph"
    except Exception as e:  # noqa: BLE001 - any capture failure: time the eager step and say so
        torch.cuda.synchronize()
        return run, f"eager (CUDA graph capture failed: {type(e).__name__}: {str(e).splitlines()[0][:160]})"


def check_grid(batches: Sequence[int], qs: Sequence[int], contexts: Sequence[int], repeats: int) -> None:
    for opt, vals, lo in (("--grid-batches", batches, 1), ("--grid-q", qs, 1), ("--grid-contexts", contexts, 0)):
        if not vals or min(vals) < lo:
            raise UserError(f"{opt} {','.join(map(str, vals))}: give comma-separated integers >= {lo}")
    if repeats < 1:
        raise UserError(f"--repeats {repeats}: give an integer >= 1")


def measure(model, batches: Sequence[int], qs: Sequence[int], contexts: Sequence[int], *, device: str,
            repeats: int = DEFAULT_REPEATS, seed: int = 0,
            log: Callable[[str], None] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows {"B", "q", "C", "ms"} (median of `repeats`; an {"error": "oom"} row where the point does
    not fit) over every C x B x q, and what timed them ({"timer", "mode"})."""
    import torch

    check_grid(batches, qs, contexts, repeats)
    dtype = next(model.parameters()).dtype
    gen = torch.Generator(device=device).manual_seed(seed)
    rows, modes, timers = [], set(), set()
    for C in contexts:
        for B in batches:
            for q in qs:
                try:
                    fn, mode = _graphed(_step(model, B, q, C, device, dtype, gen), device)
                    ms, label = devices.time_ms(fn, device, repeats=repeats, warmup=1)
                except torch.OutOfMemoryError:
                    rows.append({"B": B, "q": q, "C": C, "error": "oom"})
                    torch.cuda.empty_cache()
                    continue
                modes.add(mode)
                timers.add(label)
                rows.append({"B": B, "q": q, "C": C, "ms": round(float(np.median(ms)), 4)})
                if log:
                    log(f"profile: B={B} q={q} C={C}: {rows[-1]['ms']} ms ({mode})")
                del fn
    return rows, {"timer": "; ".join(sorted(timers)), "mode": "; ".join(sorted(modes))}


def write_rows(path: str | Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """The JSONL file: a {"meta": ...} first line, then one row a line."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(json.dumps(r) + "\n" for r in [{"meta": meta}] + rows), encoding="utf-8")
    return p
