"""Step times of a model on the user's device with no serving engine: a transformers model built
from a config (random weights), one forward step timed per grid point (B requests, q query tokens
each, C context tokens each), written as {"B", "q", "C", "ms"} rows (measured_points' format).

The model: a catalogue name (`Qwen3-8B`), `builtin:<name>` or a config.json path; `layers`
overrides num_hidden_layers to keep it small. Each point gets a transformers StaticCache of
exactly C + q slots whose first C hold random K/V (the values do not change the work); the step
writes its q tokens' K/V in place at C..C+q-1 and attends over all C + q, as an engine's verify
step does. The write position is reset before every step, so repeats measure the same step.

Trees: with `tree_paths` W > 1, every point with q > 2 is also timed as a tree verify of the same
q tokens (the last accepted token, then min(W, q - 1) branches off it, the q - 1 draft tokens
shared out as evenly as the counts allow): each token attends to the context and its own ancestors
(a boolean 4-D mask) at the position of its depth. The row gets `tree_ms` beside the chain's `ms`,
so what a tree costs over a chain of as many tokens is measured, not assumed. This is one SDPA
call with an explicit mask, not a serving engine's tree kernel.

Attention: gqa_attention's grouped-query SDPA (each KV head read once, as serving engines do);
transformers' own implementation where `attention` names one (`sdpa` copies the KV heads per
query head whenever a mask is given).

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
from samspec_bench.bench.simulation.gqa_attention import CONTEXT_KWARG, NAME as GQA_NAME, register
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import DTYPES, resolve_model
from samspec_bench.models.rl_names import CATALOGUE, SAME_SHAPE, resolve_alias
from samspec_bench.models.shapes import shape_from_config

DEFAULT_REPEATS = 10
ONE_GPU = 1   # one process on one device: the points meta says tp=1 (a step model at tp > 1 warns against them)


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


def build_model(cfg: dict[str, Any], dtype: str, device: str, seed: int = 0, attention: str | None = None):
    """A transformers causal LM of `cfg` with random weights, in `dtype` on `device`, in eval mode;
    its attention reads each KV head once (gqa_attention), or transformers' `attention` if named."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    conf = AutoConfig.for_model(**{**cfg, "use_cache": True})
    torch.manual_seed(seed)
    try:
        with torch.device(device):   # weights are created on the device: no host copy of a large model
            model = AutoModelForCausalLM.from_config(conf, dtype=getattr(torch, dtype),
                                                     attn_implementation=attention or register())
    except (ValueError, ImportError) as e:
        if not attention:
            raise
        raise UserError(f"--attention {attention!r}: transformers cannot build the model with it "
                        f"({str(e).splitlines()[0][:160]}); use sdpa or eager, or leave it out") from None
    return model.eval()


def tree_parents(q: int, paths: int) -> list[int]:
    """Parent index of each of q query tokens: token 0 (the last accepted) has none (-1); the other
    q - 1 form min(paths, q - 1) chains hanging off token 0, the longer chains first."""
    if q < 1 or paths < 1:
        raise UserError(f"--tree-paths {paths}: give an integer >= 1 (q = {q})")
    w = min(paths, q - 1)
    parents = [-1]
    for b in range(w):
        depth = (q - 1) // w + (1 if b < (q - 1) % w else 0)
        parents += [0] + list(range(len(parents), len(parents) + depth - 1))
    return parents


def _tree_inputs(parents: Sequence[int], C: int, device: str):
    """The (q, C + q) boolean mask (context, ancestors and self) and the positions C + depth."""
    import torch

    q = len(parents)
    mask = torch.zeros(q, C + q, dtype=torch.bool)
    mask[:, :C] = True
    depth = [0] * q
    for i, p in enumerate(parents):
        depth[i] = depth[p] + 1 if p >= 0 else 0
        j = i
        while j >= 0:
            mask[i, C + j] = True
            j = parents[j]
    return mask.to(device), torch.tensor(depth, device=device) + C


def _step(model, B: int, q: int, C: int, device: str, dtype, gen, kv_layers=None, ids=None,
          parents: Sequence[int] | None = None) -> Callable[[], Any]:
    """A function running one forward step of B x q tokens over a filled KV cache of C tokens:
    random K/V, or `kv_layers` ([(keys, values)] per layer, B x heads x C x head_dim) and token
    `ids` (B x q) where given (tests compare the step with a full forward). With `parents`
    (tree_parents) the q tokens are a tree: each sees the context and its ancestors only."""
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
    if conf._attn_implementation == GQA_NAME and C:   # every query token sees the C filled slots
        kw[CONTEXT_KWARG] = C
    if parents is not None:   # K/V still go to slots C..C+q-1; positions and visibility follow the tree
        mask, tree_pos = _tree_inputs(parents, C, device)
        kw.update(position_ids=tree_pos.expand(B, q), attention_mask=mask.expand(B, 1, q, C + q))

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


def check_grid(batches: Sequence[int], qs: Sequence[int], contexts: Sequence[int], repeats: int,
               tree_paths: int = 1) -> None:
    for opt, vals, lo in (("--grid-batches", batches, 1), ("--grid-q", qs, 1), ("--grid-contexts", contexts, 0)):
        if not vals or min(vals) < lo:
            raise UserError(f"{opt} {','.join(map(str, vals))}: give comma-separated integers >= {lo}")
    if repeats < 1:
        raise UserError(f"--repeats {repeats}: give an integer >= 1")
    if tree_paths < 1:
        raise UserError(f"--tree-paths {tree_paths}: give an integer >= 1 (1: chains only)")
    if tree_paths > 1 and max(qs) < 3:
        raise UserError(f"--tree-paths {tree_paths}: no --grid-q value is >= 3, so no point has a tree to time; "
                        "add one (e.g. --grid-q 1,4,9)")


def tree_ratios(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """What a tree verify costs over a chain of as many tokens: tree_ms / ms over the rows timed both
    ways (median, min, max, the points), None when no row has a tree."""
    r = [row["tree_ms"] / row["ms"] for row in rows if "tree_ms" in row and row.get("ms")]
    if not r:
        return None
    return {"median": round(float(np.median(r)), 4), "min": round(min(r), 4), "max": round(max(r), 4),
            "points": len(r), "paths": sorted({row["tree_paths"] for row in rows if "tree_paths" in row})}


def _timed(model, B, q, C, device, dtype, gen, repeats, parents=None) -> tuple[float, str, str]:
    """Median device ms of one step (chain, or the tree of `parents`), its mode and timer label."""
    fn, mode = _graphed(_step(model, B, q, C, device, dtype, gen, parents=parents), device)
    ms, label = devices.time_ms(fn, device, repeats=repeats, warmup=1)
    return round(float(np.median(ms)), 4), mode, label


def measure(model, batches: Sequence[int], qs: Sequence[int], contexts: Sequence[int], *, device: str,
            repeats: int = DEFAULT_REPEATS, seed: int = 0, tree_paths: int = 1,
            log: Callable[[str], None] | None = None,
            on_row: Callable[[dict[str, Any]], None] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows {"B", "q", "C", "ms"} (median of `repeats`; an {"error": "oom"} row where the point does
    not fit) over every C x B x q, and what timed them ({"timer", "mode"}). With tree_paths > 1 a
    row with q > 2 also has "tree_ms" and "tree_paths" (module docstring). `on_row`: called with
    each row as it is measured."""
    import torch

    check_grid(batches, qs, contexts, repeats, tree_paths)
    dtype = next(model.parameters()).dtype
    gen = torch.Generator(device=device).manual_seed(seed)
    rows, modes, timers = [], set(), set()
    for C in contexts:
        for B in batches:
            for q in qs:
                row: dict[str, Any] = {"B": B, "q": q, "C": C}
                try:
                    row["ms"], mode, label = _timed(model, B, q, C, device, dtype, gen, repeats)
                    if tree_paths > 1 and q > 2:
                        parents = tree_parents(q, tree_paths)
                        row["tree_ms"], mode, label = _timed(model, B, q, C, device, dtype, gen, repeats, parents)
                        row["tree_paths"] = min(tree_paths, q - 1)
                except torch.OutOfMemoryError:
                    rows.append({"B": B, "q": q, "C": C, "error": "oom"})
                    torch.cuda.empty_cache()
                    if on_row:
                        on_row(rows[-1])
                    continue
                modes.add(mode)
                timers.add(label)
                rows.append(row)
                if on_row:   # each point kept as it is measured (a long grid that stops loses none)
                    on_row(row)
                if log:
                    tree = f", tree of {row['tree_paths']} paths {row['tree_ms']} ms" if "tree_ms" in row else ""
                    log(f"profile: B={B} q={q} C={C}: {row['ms']} ms{tree} ({mode})")
    return rows, {"timer": "; ".join(sorted(timers)), "mode": "; ".join(sorted(modes))}


def write_rows(path: str | Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """The JSONL file: a {"meta": ...} first line, then one row a line (written whole, replacing
    what `row_appender` kept during the run)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in [{"meta": {"tp": ONE_GPU, **meta}}] + rows), encoding="utf-8")
    tmp.replace(p)
    return p


def row_appender(path: str | Path, meta: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """Start the JSONL file with `meta` (marked "complete": false) and return a function that
    appends one row and flushes it: a run stopped halfway keeps the points it measured."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"meta": {"tp": ONE_GPU, **meta, "complete": False}}) + "\n", encoding="utf-8")

    def append(row: dict[str, Any]) -> None:
        with p.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    return append
