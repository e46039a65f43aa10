"""Result folders in the shapes the suites write, for the report tests (the renderers, the
answers screen and the browser checks share them; pytest's pythonpath holds tests/)."""

from __future__ import annotations

import html as _html
import re
from pathlib import Path

from samspec_bench.reports.answers import answer_sets
from samspec_bench.reports.collect import collect
from samspec_bench.results import RunDir


# --- synthetic run directories ----------------------------------------------------------------------

def _png(path: Path, value: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1, 2], [1, value, 2])
    fig.savefig(path, dpi=40)
    plt.close(fig)


def _svg(path: Path) -> None:
    path.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="120" height="60" viewBox="0 0 120 60">'
                    '<rect x="5" y="5" width="110" height="50" fill="#2952a3"/></svg>', encoding="utf-8")


def make_run(root: Path, suite: str, metrics: dict, config: dict | None = None, tables: dict | None = None,
             figures: tuple[str, ...] = (), extra: dict | None = None) -> Path:
    rd = RunDir(root, suite)
    for name in figures:
        if name.endswith(".png") or name.startswith("mpl"):   # mpl*.svg: a matplotlib SVG
            _png(rd.file(name), 1.5)
        else:
            _svg(rd.file(name))
    rd.write_result(config or {}, metrics, tables or {}, list(figures), extra)
    return rd.path


# --- result folders in the shapes the suites write -----------------------------------------------------------


def run(root: Path, suite: str, metrics: dict, config: dict | None = None, tables: dict | None = None,
        extra: dict | None = None) -> Path:
    rd = RunDir(root, suite)
    rd.write_result(config or {}, metrics, tables or {}, [], extra)
    return rd.path


OPEQ = {"kernel/reference/float32": {"level": "kernel", "pair": "reference", "dtype": "float32", "positions": 300,
                                     "logprob_diff_max": 4.2e-06, "exact_zero_fraction": 0.6, "argmax_flip_rate": 0.0},
        "model/reference/float32": {"level": "model", "pair": "reference", "dtype": "float32", "positions": 100,
                                    "logprob_diff_max": 7.5e-06, "exact_zero_fraction": 0.2, "argmax_flip_rate": 0.0},
        # a control row (bit-exact by construction) is not part of the answer
        "model/reference-batch-invariant/float32": {"level": "model", "pair": "reference-batch-invariant",
                                                    "dtype": "float32", "positions": 100, "logprob_diff_max": 0.0,
                                                    "exact_zero_fraction": 1.0, "argmax_flip_rate": 0.0}}


def opeq(root: Path, gate: dict | None = None, pairs: dict | None = None, greedy: list | None = None) -> Path:
    return run(root, "op-equivalence", {"pairs": pairs or OPEQ, "gate": gate},
               {"pairs": ["reference"], "dtypes": ["float32"], "k": 3, "model": "builtin:smollm2-135m",
                "engine": "reference", "device": "cpu"},
               {"greedy": greedy if greedy is not None else [{"identical": True}, {"identical": True}]})


def sampler(root: Path, verdict: str = "EXACT", control: str = "LOSSY") -> Path:
    audits = [{"name": "samspec", "verdict": verdict, "tests": 98, "negative_control": False},
              {"name": "vllm", "verdict": "SKIPPED", "reason": "vllm is not installed", "negative_control": False},
              {"name": "block-verify-demo", "verdict": control, "tests": 78, "negative_control": True}]
    return run(root, "sampler", {"verdicts": {a["name"]: a["verdict"] for a in audits}},
               {"alpha": 0.001, "device": "cpu",
                "battery": [{"case": "flat", "vocab": 6, "trials": 300}, {"case": "big", "vocab": 151936, "trials": 90}]},
               extra={"audits": audits})


def accuracy(root: Path, off: float = 0.62, on: float = 0.6, p: float = 0.5, mdd: float = 0.04, n: int = 900) -> Path:
    return run(root, "accuracy", {"gsm8k": {"n": n, "pass@1_off": off, "pass@1_on": on, "diff": on - off,
                                            "ci95": [on - off - 0.05, on - off + 0.04], "p_value": p, "alpha": 0.05,
                                            "mdd": mdd}},
               {"model": "builtin:smollm2-135m", "engine": "reference", "drafter": "sam", "num_spec_tokens": 3,
                "temperature": 0.0, "max_gen_toks": 256})


def accept_row(drafter: str, k: int, sources: str, tokens: int, steps: int, drafted: int, accepted: int) -> dict:
    return {"drafter": drafter, "k": k, "sources": sources, "tokens_per_step": tokens / steps,
            "acceptance_rate": accepted / drafted, "counts": {"tokens": tokens, "steps": steps, "drafted": drafted,
                                                              "accepted": accepted}}


ACCEPT = {"sam k=3 own": accept_row("sam", 3, "own", 9000, 6000, 12000, 3000),
          "sam k=5 own+group(concurrent)": accept_row("sam", 5, "own+group", 9000, 4000, 15000, 5000),
          "ngram k=3 own": accept_row("ngram", 3, "own", 9000, 7000, 6000, 2000)}


def accept(root: Path, metrics: dict | None = None) -> Path:
    return run(root, "accept", metrics or ACCEPT, {"engine": "replay", "limit_groups": 5},
               extra={"inputs": {"traces": [{"file": "/data/traces/qwen25math_math_100x8.jsonl", "sha256": "ab"}],
                                 "responses": 40, "response_tokens": 9000},
                      "engine": {"name": "replay"}})


def arm(total: float, tail: float, steps: int, tail_steps: int, base: dict, threshold: int = 4) -> dict:
    return {"total_s": total, "tail_s": tail, "steps": steps, "tail_steps": tail_steps, "tail_threshold": threshold,
            "speedup_overall": base["total_s"] / total, "speedup_tail": base["tail_s"] / tail,
            "baseline_phases": {"total_s": base["total_s"], "tail_s": base["tail_s"], "tail_steps": base["tail_steps"]}}


def rollout(root: Path, extra_metrics: dict | None = None, constant: bool = False, config: dict | None = None) -> Path:
    off = {"total_s": 900.0, "tail_s": 200.0, "steps": 900, "tail_steps": 200}
    arms = {"off": off, "always k=3": arm(1200.0, 120.0, 500, 90, off), "threshold<=4 k=3": arm(800.0, 100.0, 820, 95, off)}
    m = {"arms": arms, "best_setting": "threshold<=4 k=3",
         "workload": {"prompts": 10, "group_size": 8},
         "step_model": {"intercept": 1.0, "fit": {"source": "constant"}} if constant else
         {"intercept": 0.01, "fit": {"source": "rollout profile: builtin:smollm2-135m"}},
         "step_model_fitted_on": "none: constant 1 s per step (times are step counts)" if constant else "/p/profile.json"}
    m.update(extra_metrics or {})
    return run(root, "rollout", m, {"engine": "replay", "max_num_seqs": 64, **(config or {})})


def answers_of(paths) -> dict:
    (s,) = answer_sets(collect(paths))
    return {a.key: a for a in s.answers}


def answers_html(html: str) -> str:
    """The answers section of a rendered report, as text."""
    sec = re.search(r'<section class="answers" id="answers">(.*?)</section>', html, re.S).group(1)
    return _html.unescape(re.sub(r"<[^>]+>", " ", sec))
