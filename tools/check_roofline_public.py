"""Roofline predictions vs public batch-1 generation benchmarks (no fitting: the model as committed).

    python tools/check_roofline_public.py

Sources: Qwen2.5 speed benchmark (A100 80GB, vLLM 0.6.3) and Qwen3 speed benchmark (H20 96GB,
SGLang 0.4.6.post1), both in the QwenLM/Qwen3 repository's docs (speed_benchmark.rst / .md)."""
import numpy as np
from samspec_bench.bench.simulation.step_model_spec import load_step_model

GEN = 2048
# (model id, hardware, tp, mode, chunk, speed definition, {input length: published tokens/s})
ROWS = [
  # Qwen2.5 speed benchmark, A100 80GB, vLLM 0.6.3, batch 1, 2048 generated tokens; speed = 2048 / time
  ("Qwen/Qwen2.5-1.5B-Instruct", "A100", 1, "graph", None, "gen", {1: 183.33, 6144: 176.68, 14336: 168.69, 30720: 152.04}),
  ("Qwen/Qwen2.5-3B-Instruct", "A100", 1, "graph", None, "gen", {1: 127.61, 6144: 123.15, 14336: 117.35, 30720: 105.88}),
  ("Qwen/Qwen2.5-7B-Instruct", "A100", 1, "graph", None, "gen", {1: 84.28, 6144: 80.70, 14336: 77.69, 30720: 70.33}),
  ("Qwen/Qwen2.5-14B-Instruct", "A100", 1, "graph", None, "gen", {1: 46.30, 6144: 43.83, 14336: 41.91, 30720: 37.18}),
  ("Qwen/Qwen2.5-32B-Instruct", "A100", 1, "eager", None, "gen", {1: 22.13, 6144: 21.05, 14336: 19.91}),
  ("Qwen/Qwen2.5-32B-Instruct", "A100", 2, "graph", None, "gen", {30720: 31.82}),
  ("Qwen/Qwen2.5-72B-Instruct", "A100", 2, "eager", None, "gen", {1: 18.19}),
  ("Qwen/Qwen2.5-72B-Instruct", "A100", 4, "graph", None, "gen", {1: 31.37, 6144: 29.90, 14336: 30.10, 30720: 27.53}),
  # Qwen3 speed benchmark, H20 96GB, SGLang 0.4.6.post1, batch 1, 2048 generated; speed = (prompt + 2048) / time
  ("Qwen/Qwen3-0.6B", "H20", 1, "graph", 8192, "all", {1: 414.17, 6144: 1426.46, 14336: 2478.02, 30720: 3577.42}),
  ("Qwen/Qwen3-1.7B", "H20", 1, "graph", 8192, "all", {1: 227.80, 6144: 838.28, 14336: 1525.71, 30720: 2439.03}),
  ("Qwen/Qwen3-4B", "H20", 1, "graph", 8192, "all", {1: 133.13, 6144: 466.19, 14336: 789.25, 30720: 1165.75}),
  ("Qwen/Qwen3-8B", "H20", 1, "graph", 8192, "all", {1: 81.73, 6144: 296.25, 14336: 524.70, 30720: 832.67}),
  ("Qwen/Qwen3-14B", "H20", 1, "graph", 8192, "all", {1: 47.10, 6144: 174.85, 14336: 317.56, 30720: 525.80}),
  ("Qwen/Qwen3-32B", "H20", 1, "graph", 8192, "all", {1: 20.72, 6144: 77.82, 14336: 143.08, 30720: 240.75}),
  ("Qwen/Qwen3-30B-A3B", "H20", 1, "graph", 8192, "all", {1: 137.18, 6144: 490.10, 14336: 849.62, 30720: 1283.94}),
  ("Qwen/Qwen3-235B-A22B", "H20", 8, "graph", 8192, "all", {1: 74.50, 6144: 289.03, 14336: 546.73, 30720: 979.41}),
]

def predicted_time(m, n, chunk):
    chunks = [n] if chunk is None else [min(chunk, n - i) for i in range(0, n, chunk)]
    done, t = 0, 0.0
    for c in chunks:
        t += m.predict(prefill_tokens=c, running=1, context_tokens=done)
        done += c
    j = np.arange(1, GEN)
    t += float(np.sum(m.predict(decode_tokens=np.ones(GEN - 1), running=np.ones(GEN - 1), context_tokens=n + j)))
    return t

errs = {}
print(f"{'model':28s} {'hw':5s} tp mode  input  measured_s predicted_s  error   decode_ms meas/pred")
for mid, hw, tp, mode, chunk, kind, speeds in ROWS:
    m = load_step_model(f"roofline:hardware={hw},model={mid},tp={tp},mode={mode}")
    for n, sp in speeds.items():
        meas = (GEN if kind == "gen" else n + GEN) / sp
        pred = predicted_time(m, n, chunk)
        e = pred / meas - 1
        errs.setdefault(hw, []).append(e)
        extra = ""
        if n == 1:
            extra = f"{meas / GEN * 1e3:8.2f} / {m.predict(decode_tokens=1, running=1, context_tokens=1024) * 1e3:6.2f}"
        print(f"{mid.split('/')[1]:28s} {hw:5s} {tp:2d} {mode:5s} {n:6d} {meas:10.2f} {pred:11.2f} {e:+7.1%}  {extra}")
for hw, e in errs.items():
    e = np.abs(np.array(e))
    print(f"{hw}: {len(e)} rows, |error| median {np.median(e):.1%}, max {e.max():.1%}")
