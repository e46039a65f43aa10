"""`samspec-bench rollout profile --engine torch`: step times of a model on this machine's device
with no serving engine (bench.simulation.torch_step_profiler: random weights, one forward step per
B x q x C point, device time), written twice:

- the JSONL rows {"B", "q", "C", "ms"} with a {"meta": ...} first line (`--out-jsonl`), which
  `samspec-bench step-model --steps` checks any step model against;
- a profile JSON (format 3, suites.rollout.profile) whose step-time model is fitted on those points
  (each point a step of B decoding requests verifying q - 1 drafts over C context tokens each), so
  that `rollout --step-model` prices with it. Its `engine.name` is "torch", its `grid` the B / q / C
  lists, its `timer` what measured the points.

With `tree_paths` > 1 the rows also carry the tree verify's time (torch_step_profiler) and the
profile JSON a `tree` entry: tree_ms / ms as median, min, max over the points timed both ways.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

from samspec_bench.bench.simulation.fitted_step_model import fit_from_steps
from samspec_bench.bench.simulation.step_model_spec import points_as_steps
from samspec_bench.bench.simulation.torch_step_profiler import (build_model, check_grid, measure, model_config,
                                                                row_appender, tree_ratios, write_rows)
from samspec_bench.devices import device_info
from samspec_bench.errors import UserError
from samspec_bench.suites.rollout.profile import profile_document, write_profile

PROFILER = "torch"   # the `--engine` value of this profiler: not an engine of the factory, no serving engine


def torch_profile(model: str, batches: Sequence[int], qs: Sequence[int], contexts: Sequence[int], *, device: str,
                  dtype: str, layers: int | None, repeats: int, seed: int, threads: int, out_jsonl: str | Path,
                  output: str | Path, tree_paths: int = 1, attention: str | None = None,
                  log: Callable[[str], None] | None = None) -> tuple[Path, Path, dict | None]:
    """Measure the grid on `device` (resolved), write the JSONL rows and the profile JSON; returns
    their paths and the tree / chain summary (None without trees)."""
    check_grid(batches, qs, contexts, repeats, tree_paths)
    cfg = model_config(model, layers)
    import torch  # the profiler runs on it

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    net = build_model(cfg, dtype, device, seed, attention)
    info = device_info(device)
    meta = {"profiler": PROFILER, "model": model, "layers": int(cfg["num_hidden_layers"]), "dtype": dtype,
            "attention": net.config._attn_implementation, "device": info, "repeats": repeats, "seed": seed,
            "ms": "device time of one forward step (median of the repeats); CPU: wall clock",
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **({"tree_paths": tree_paths} if tree_paths > 1 else {})}
    rows, how = measure(net, batches, qs, contexts, device=device, repeats=repeats, seed=seed,
                        tree_paths=tree_paths, log=log, on_row=row_appender(out_jsonl, meta))
    jsonl = write_rows(out_jsonl, rows, {**meta, "timer": how["timer"], "mode": how["mode"], "complete": True})
    good = [r for r in rows if "ms" in r]
    if len(good) < 2:
        raise UserError(f"--grid-*: {len(good)} point(s) measured (the rest out of memory); a profile needs at "
                        f"least 2; the rows are in {jsonl}")
    table = points_as_steps(good, None)
    grid = {"batch_sizes": list(batches), "query_tokens": list(qs), "contexts": list(contexts)}
    fitted = fit_from_steps([table], source=f"rollout profile --engine torch: {model}, {meta['layers']} layers, "
                                            f"{dtype} on {info.get('name')}, grid {grid}")
    engine = {"name": PROFILER, "version": info["torch"], "device": f"{device}: {info.get('name')}", "model": model,
              "dtype": dtype, "tp": 1, "threads": threads, "attention": meta["attention"]}
    doc_meta = {"engine": engine, "grid": grid, "seconds": time.perf_counter() - t0, "device": info,
                "timer": f"{how['timer']} ({how['mode']})"}
    tree = tree_ratios(good)
    if tree:
        tree["what"] = ("tree verify / chain verify of as many tokens, device time (measured; one SDPA call with "
                        "a 4-D mask, not a serving engine's tree kernel)")
    path = write_profile(output, {**profile_document(fitted, [table], doc_meta), "points": str(jsonl),
                                  **({"tree": tree} if tree else {})})
    return jsonl, path, tree
