"""`samspec-bench accuracy`: does SAM change downstream accuracy?

Each task runs twice through lm-eval (`lm_eval.simple_evaluate` with
`samspec_bench.evals.lm_adapter.EngineLM` over the engine): SAM off, then SAM on, with
lm-eval's own prompts, filters and metrics. With `--num-samples K` each arm runs K times
(sample k uses the same per-problem seeds in both arms); pass@1 is the mean over the K
samples, its standard error the sd of the per-problem means / sqrt(n) (clustered by problem;
lm-eval's own stderrs, one per run, are kept beside it). `--apply-chat-template` takes
lm-eval's chat-template path (few-shot examples as chat turns unless
`--no-fewshot-as-multiturn`). The arms are then paired by document
(`samspec_bench.evals.paired.compare`): difference with a paired bootstrap 95% interval, McNemar's exact test (K = 1) or the paired
sign-flip test (K > 1), the minimum detectable difference at 80% power and a verdict. Greedy
runs also report the fraction of identical outputs and the first divergence positions.

Offline data: the task YAMLs of `samspec_bench.evals.tasks` (which include lm-eval's
built-in tasks: their prompts, filters and metrics) read local JSONL files: those of
`--data-dir`, or without it the benchmark sets shipped in the package
(samspec_bench/benchmarks, see its README). With the built-in sets gsm8k's five shots are
the first five train problems (lm-eval's `first_n` sampler; the full train split is not
shipped), with `--data-dir` lm-eval's random draw from the train split.

Run directory: `generations.jsonl` (one line per generated response, appended as each
finishes: what `--resume` reuses), `samples.jsonl` (scored per-sample records, rewritten
after each evaluation), `config.json`, `result.json` (lm-eval's results dicts verbatim under
`lm_eval`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console
from rich.table import Table

from samspec_bench.bench.engines.factory import make_engine
from samspec_bench.data import BUILTIN_BENCHMARKS
from samspec_bench.errors import UserError, int_at_least, number_in
from samspec_bench.evals.paired import agreement, compare
from samspec_bench.evals.tasks import TASKS, parse_tasks, write_task_dir
from samspec_bench.models import BUILTIN_MODEL, model_id, resolve_model
from samspec_bench.results import RunDir, atomic_write_text, emit_json, to_jsonable

SUITE = "accuracy"
GENERATIONS = "generations.jsonl"
SAMPLES = "samples.jsonl"
ARMS = ("off", "on")
ARM_LABEL = {"off": "without SAM", "on": "with SAM"}
# the metric/filter of lm-eval's results scored per problem (others are kept in the results dict)
PRIMARY_FILTER = {"gsm8k": "strict-match"}
# the built-in sets under the file names the task templates read (gsm8k's train split: its
# first rows, the few-shot pool); tasks whose few-shot sampler is switched to first_n there
BUILTIN_FILES = {"gsm8k_test.jsonl": "gsm8k_test.jsonl", "gsm8k_train.jsonl": "gsm8k_fewshot.jsonl",
                 "math500_test.jsonl": "math500_test.jsonl", "aime24.jsonl": "aime24.jsonl",
                 "aime25.jsonl": "aime25.jsonl"}
BUILTIN_FIRST_N = ("gsm8k",)
BUILTIN_DATA = ("built-in benchmark sets (samspec_bench/benchmarks); gsm8k 5-shot from the first five "
                "train problems (lm-eval's first_n sampler)")


def engine_choices() -> list[str]:
    try:
        have = importlib.util.find_spec("samspec_bench.bench.engines.vllm.adapter") is not None
    except (ImportError, ValueError):
        have = False
    return ["reference", "vllm"] if have else ["reference"]


@dataclass
class AccuracyConfig:
    model: str = BUILTIN_MODEL
    engine: str = "reference"
    tasks: list[str] = field(default_factory=lambda: ["gsm8k"])
    data_dir: str | None = None
    limit: int | None = None
    num_samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_gen_toks: int = 1024
    drafter: str = "sam"
    num_spec_tokens: int = 3
    seed: int = 0
    dtype: str = "float32"
    max_num_seqs: int = 64
    threads: int = 1
    alpha: float = 0.05
    bootstrap_iters: int = 10000      # the paired bootstrap
    lm_eval_bootstrap_iters: int = 1000  # lm-eval's own stderr bootstrap (exact_match's stderr is analytic)
    apply_chat_template: bool = False
    fewshot_as_multiturn: bool = True    # with apply_chat_template (lm-eval's default)

    def check(self) -> None:
        if self.num_samples < 1:
            raise UserError(f"--num-samples {self.num_samples}: must be >= 1")
        if self.temperature < 0 or not math.isfinite(self.temperature):
            raise UserError(f"--temperature {self.temperature}: must be a finite number >= 0")
        if self.temperature == 0 and self.num_samples > 1:
            raise UserError("--num-samples > 1 with --temperature 0: greedy samples are all the same; "
                            "use --num-samples 1 or a temperature > 0")
        if self.max_gen_toks < 1:
            raise UserError(f"--max-gen-toks {self.max_gen_toks}: must be >= 1")
        if self.limit is not None and self.limit < 1:
            raise UserError(f"--limit {self.limit}: must be >= 1")
        if self.num_spec_tokens < 1:
            raise UserError(f"--num-spec-tokens {self.num_spec_tokens}: must be >= 1")
        int_at_least(self.max_num_seqs, "--max-num-seqs", 1)
        int_at_least(self.threads, "--threads", 0)
        number_in(self.top_p, "--top-p", 0, 1, lo_open=True)
        number_in(self.alpha, "--alpha", 0, 1, lo_open=True, hi_open=True)


# --- the engine ------------------------------------------------------------------------------

def build_engine(cfg: AccuracyConfig):
    if cfg.engine == "vllm":
        return make_engine("vllm", cfg.model, speculative=cfg.drafter, num_spec_tokens=cfg.num_spec_tokens,
                           dtype=cfg.dtype, seed=cfg.seed)
    return make_engine(cfg.engine, cfg.model, dtype=cfg.dtype, max_num_seqs=cfg.max_num_seqs)


# --- lm-eval results -> per-problem scores ---------------------------------------------------

def primary_metric(task: str, results: dict) -> tuple[str, str]:
    """(metric, filter) scored per problem: the task's first metric, gsm8k's strict-match."""
    keys = [k for k in results if "," in k and "_stderr" not in k]
    if not keys:
        raise RuntimeError(f"lm-eval returned no metric for {task}: {sorted(results)}")
    want = PRIMARY_FILTER.get(task)
    for k in keys:
        m, f = k.split(",", 1)
        if want is None or f == want:
            return m, f
    m, f = keys[0].split(",", 1)
    return m, f


def _score(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


# --- the run ---------------------------------------------------------------------------------

def run(cfg: AccuracyConfig, output: str = "results", resume: str | None = None, progress: bool = True,
        console=None, engine=None) -> tuple[dict, Path]:
    """Run every task with SAM off and on; write the run directory; return (result, path).
    `engine`: an engine to reuse (tests); otherwise one is built from cfg."""
    cfg.check()
    if engine is None and not cfg.model.startswith("builtin:"):
        resolve_model(cfg.model)   # a checkpoint path: checked before any work (built-ins are built on use)
    import torch  # lazy: `samspec-bench --help` and the run planner import this module

    before = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _run(cfg, output, resume, progress, console, engine)
    finally:
        torch.set_num_threads(before)


def _log(console, msg: str) -> None:
    if console is not None:
        console.print(msg)


def _run(cfg, output, resume, progress, console, engine) -> tuple[dict, Path]:
    import lm_eval  # lazy, as torch above: lm-eval imports torch and datasets
    from lm_eval.tasks import TaskManager

    from samspec_bench.evals.lm_adapter import EngineLM  # imports lm-eval

    run_dir = RunDir(output, SUITE, resume=resume)
    saved = run_dir.saved_config() if resume is not None else None
    if saved is not None:
        try:
            saved_cfg = AccuracyConfig(**saved)
        except TypeError:
            raise UserError(f"--resume {resume}: its config.json holds other settings than this version's "
                            f"({', '.join(sorted(set(saved) - set(asdict(cfg))) or ['fields missing'])}); "
                            "start a new run") from None
        if asdict(saved_cfg) != asdict(cfg):
            _log(console, f"resuming {run_dir.path}: using the run's saved configuration (the options given differ)")
        cfg = saved_cfg
    run_dir.write_json("config.json", asdict(cfg))

    # resume: reuse every response generated before (failed ones are generated again)
    cache = {r["key"]: r for r in run_dir.samples(GENERATIONS) if "key" in r and not r.get("error")}
    reused = len(cache)

    if cfg.data_dir is not None:
        lm_names = write_task_dir(run_dir.file("tasks"), cfg.tasks, cfg.data_dir)
    else:
        lm_names = write_builtin_tasks(run_dir.file("tasks"), run_dir.file("builtin_benchmarks"), cfg.tasks)
    # only our task files are indexed (they include lm-eval's by path): indexing all of lm-eval's
    # task YAMLs costs about 13 s of CPU
    tm = TaskManager(include_path=str(run_dir.file("tasks")), include_defaults=False)

    own_engine = engine is None
    t_start = time.perf_counter()
    if own_engine:
        _log(console, f"loading {cfg.model} ({cfg.engine} engine) ...")
        engine = build_engine(cfg)
    startup_s = time.perf_counter() - t_start
    engine_desc = engine.describe() if hasattr(engine, "describe") else None
    if cfg.apply_chat_template and not getattr(engine.tokenizer, "chat_template", None):
        if own_engine:
            engine.close()
        raise UserError(f"--apply-chat-template: the tokenizer of {cfg.model} has no chat template; "
                        "drop the option or use a chat model")

    lm_results: dict[str, dict[str, list]] = {}
    scored: list[dict] = []
    timings: dict[str, dict] = {}
    metrics: dict[str, Any] = {}
    rows = []
    try:
        for task in cfg.tasks:
            lm_task = lm_names[task]
            lm_results[task] = {arm: [] for arm in ARMS}
            per_doc: dict[str, dict[Any, list]] = {arm: {} for arm in ARMS}
            gens: dict[str, dict[Any, dict]] = {arm: {} for arm in ARMS}
            metric = filt = None
            for k in range(cfg.num_samples):
                for arm in ARMS:
                    lm = EngineLM(engine, arm=arm, sample=k, drafter=cfg.drafter if arm == "on" else None,
                                  num_spec_tokens=cfg.num_spec_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                                  seed=cfg.seed, max_gen_toks=cfg.max_gen_toks, cache=cache,
                                  on_record=lambda rec: run_dir.append_sample(rec, GENERATIONS), progress=progress)
                    _log(console, f"{task}: {ARM_LABEL[arm]}" + (f", sample {k + 1}/{cfg.num_samples}" if cfg.num_samples > 1 else ""))
                    t = time.perf_counter()
                    r = lm_eval.simple_evaluate(model=lm, tasks=[lm_task], task_manager=tm, limit=cfg.limit,
                                                gen_kwargs={"max_gen_toks": cfg.max_gen_toks},
                                                bootstrap_iters=cfg.lm_eval_bootstrap_iters, log_samples=True,
                                                random_seed=cfg.seed, numpy_random_seed=cfg.seed,
                                                torch_random_seed=cfg.seed, fewshot_random_seed=cfg.seed,
                                                apply_chat_template=cfg.apply_chat_template,
                                                fewshot_as_multiturn=cfg.apply_chat_template and cfg.fewshot_as_multiturn)
                    dt = time.perf_counter() - t
                    res = r["results"][lm_task]
                    lm_results[task][arm].append({"results": r["results"], "n-samples": r.get("n-samples"),
                                                  "versions": r.get("versions"),
                                                  "higher_is_better": r.get("higher_is_better")})
                    if metric is None:
                        metric, filt = primary_metric(task, res)
                    tm_ = timings.setdefault(task, {})
                    tm_[f"{arm}_s"] = tm_.get(f"{arm}_s", 0.0) + dt
                    tm_[f"{arm}_generated"] = tm_.get(f"{arm}_generated", 0) + lm.generated
                    by_doc = {rec["doc_id"]: rec for rec in lm.records}
                    for s in r["samples"][lm_task]:
                        if s.get("filter") != filt:
                            continue
                        doc = s["doc_id"]
                        g = by_doc.get(doc, {})
                        score = None if g.get("error") else _score(s.get(metric))
                        per_doc[arm].setdefault(doc, []).append(score)
                        if k == 0:
                            gens[arm][doc] = g
                        scored.append({
                            "task": task, "lm_eval_task": lm_task, "doc_id": doc, "arm": arm, "sample": k,
                            "metric": metric, "filter": filt, "score": score,
                            "filtered_resp": s.get("filtered_resps"), "target": s.get("target"),
                            "doc_hash": s.get("doc_hash"), "prompt_hash": s.get("prompt_hash"),
                            "response": g.get("text"), "error": g.get("error"),
                            "num_tokens": g.get("num_tokens"), "kept_tokens": g.get("kept_tokens"),
                            "finish_reason": g.get("finish_reason"), "drafted": g.get("drafted"),
                            "accepted": g.get("accepted"), "steps": g.get("steps"),
                        })
                    _write_samples(run_dir, scored)
            m = compare(per_doc["off"], per_doc["on"], alpha=cfg.alpha, iters=cfg.bootstrap_iters, seed=cfg.seed)
            m["metric"], m["filter"] = metric, filt
            m["lm_eval_task"] = lm_task
            m["errors"] = {arm: sum(v is None for vs in per_doc[arm].values() for v in vs) for arm in ARMS}
            for arm in ARMS:
                key = f"{metric},{filt}"
                m[f"lm_eval_{arm}"] = [x["results"][lm_task].get(key) for x in lm_results[task][arm]]
                m[f"lm_eval_stderr_{arm}"] = [x["results"][lm_task].get(f"{metric}_stderr,{filt}")
                                              for x in lm_results[task][arm]]
                m[f"pass@1_{arm}"] = float(sum(m[f"lm_eval_{arm}"]) / len(m[f"lm_eval_{arm}"])) \
                    if all(isinstance(x, (int, float)) for x in m[f"lm_eval_{arm}"]) else None
            if cfg.temperature == 0:
                # kept: the tokens the scored (cut) text keeps. raw: all generated tokens up to the
                # shorter response (a verify step may run up to k tokens past the stop string that
                # ended the request: a prefix is not a divergence)
                pairs, raw = [], []
                for doc, g_off in gens["off"].items():
                    g_on = gens["on"].get(doc)
                    if g_on is None or g_off.get("error") or g_on.get("error"):
                        continue
                    pairs.append((g_off["token_ids"][:g_off["kept_tokens"]], g_on["token_ids"][:g_on["kept_tokens"]]))
                    n = min(len(g_off["token_ids"]), len(g_on["token_ids"]))
                    raw.append((g_off["token_ids"][:n], g_on["token_ids"][:n]))
                m["agreement"] = agreement(pairs)
                m["agreement_raw"] = agreement(raw)
            on = [g for g in gens["on"].values() if not g.get("error")]
            drafted = sum(g.get("drafted") or 0 for g in on)
            acc = sum(g.get("accepted") or 0 for g in on)
            toks = sum(g.get("num_tokens") or 0 for g in on)
            steps = sum(g.get("steps") or 0 for g in on)
            m["acceptance"] = {"acceptance_rate": acc / drafted if drafted else None,
                               "tokens_per_step": toks / steps if steps else None}
            m["timings"] = timings.get(task)
            metrics[task] = m
            m["stderr_basis"] = "sd of the per-problem mean scores / sqrt(n) (clustered by problem)"
            rows.append({"dataset": task, "n": m["n"], "without_sam": m["acc_off"], "with_sam": m["acc_on"],
                         "without_sam_stderr": m["stderr_off"], "with_sam_stderr": m["stderr_on"],
                         "diff": m["diff"], "ci95_low": m["ci95"][0], "ci95_high": m["ci95"][1],
                         "p_value": m["p_value"], "test": (m.get("test") or {}).get("test"),
                         "identical_fraction": (m.get("agreement") or {}).get("identical_fraction"),
                         "verdict": m["verdict"]})
    finally:
        if own_engine and engine is not None:
            engine.close()
    extra = {"lm_eval": lm_results, "reused_generations": reused, "startup_s": startup_s,
             "wall_time_s": time.perf_counter() - t_start,
             "data": f"local: {cfg.data_dir}" if cfg.data_dir else BUILTIN_DATA,
             "engine": engine_desc,
             "sampling": "temperature/top_p/max_gen_toks from the harness options (the tasks' own "
                         "generation_kwargs other than `until` are not used)"}
    run_dir.write_result(cfg, metrics, {"accuracy": rows}, extra=extra)
    result = json.loads(run_dir.file("result.json").read_text(encoding="utf-8"))
    result["run_dir"] = str(run_dir.path)
    return result, run_dir.path


def write_builtin_tasks(task_dir: Path, data_dir: Path, names: list[str]) -> dict[str, str]:
    """Task YAMLs over the built-in sets: `data_dir` gets links (copies where links fail) under
    the templates' file names; gsm8k's few-shot sampler becomes first_n (its pool is the first
    train problems, not the whole split)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, src in BUILTIN_FILES.items():
        dst = data_dir / name
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        try:
            dst.symlink_to(BUILTIN_BENCHMARKS / src)
        except OSError:
            shutil.copyfile(BUILTIN_BENCHMARKS / src, dst)
    mapping = write_task_dir(task_dir, names, data_dir)
    for name in names:
        if name in BUILTIN_FIRST_N:
            path = Path(task_dir) / f"{TASKS[name].local_task}.yaml"
            spec = yaml.safe_load(path.read_text(encoding="utf-8"))
            spec["fewshot_config"] = {"sampler": "first_n"}
            path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return mapping


def _write_samples(run_dir, scored) -> None:
    atomic_write_text(run_dir.file(SAMPLES), "".join(json.dumps(to_jsonable(rec), sort_keys=True) + "\n"
                                                    for rec in scored))


# --- report ----------------------------------------------------------------------------------

def print_report(result: dict, console) -> None:
    def pct(x):
        return "" if x is None else f"{100 * x:.1f}"

    def with_se(x, se):
        ok = isinstance(se, (int, float)) and math.isfinite(se)
        return pct(x) + (f" ± {100 * se:.1f}" if ok else "")

    t = Table(title=f"accuracy: {result['config']['model']} ({result['config']['engine']}), pass@1 "
                    f"over {result['config']['num_samples']} sample(s)")
    for col in ("dataset", "n", "without SAM", "with SAM", "difference (95% CI)", "p-value", "identical"):
        t.add_column(col, justify="left" if col == "dataset" else "right")
    for r in result["tables"]["accuracy"]:
        m = result["metrics"][r["dataset"]]
        diff = "" if r["diff"] is None else (f"{100 * r['diff']:+.1f} [{100 * r['ci95_low']:+.1f}, "
                                             f"{100 * r['ci95_high']:+.1f}]")
        p = "" if r["p_value"] is None else f"{r['p_value']:.3g} ({r['test']})"
        off = with_se(r["without_sam"], m.get("stderr_off"))
        on = with_se(r["with_sam"], m.get("stderr_on"))
        ident = "" if r["identical_fraction"] is None else f"{100 * r['identical_fraction']:.0f}%"
        t.add_row(r["dataset"], str(r["n"]), off, on, diff, p, ident)
    console.print(t)
    for r in result["tables"]["accuracy"]:
        m = result["metrics"][r["dataset"]]
        console.print(f"{r['dataset']} ({m['metric']}, {m['filter']}): {r['verdict']}")
        ag = m.get("agreement")
        if ag and ag["first_divergence"]:
            console.print(f"  greedy: {ag['identical']}/{ag['n']} identical; first divergence at tokens "
                          f"{ag['first_divergence'][:10]}{' ...' if len(ag['first_divergence']) > 10 else ''}")
        if any(m["errors"].values()):
            console.print(f"  failed samples (recorded, excluded from the pairing): {m['errors']}")
    console.print(f"run directory: {result.get('run_dir')}")


# --- the suite contract: options -> AccuracyRun -> the run ------------------------------------

OUTPUT_PARAMS = ("output", "resume", "json_path")   # where results go: execute's keywords, not settings


@dataclass(frozen=True)
class AccuracyRun:
    """What build_config returns: the measured settings (config.json and result.json record
    exactly these) and the display option that is not one of them."""
    config: AccuracyConfig
    progress: bool


def build_config(*, model, engine, tasks, data_dir, limit, num_samples, temperature, top_p, max_gen_toks, drafter,
                 num_spec_tokens, seed, dtype, max_num_seqs, apply_chat_template, fewshot_as_multiturn, alpha,
                 threads, progress) -> AccuracyRun:
    """The command's options (click's values; the click options hold the defaults), checked."""
    cfg = AccuracyConfig(model=model_id(model), engine=engine, tasks=parse_tasks(tasks),
                         data_dir=str(Path(data_dir).resolve()) if data_dir else None, limit=limit,
                         num_samples=num_samples, temperature=temperature, top_p=top_p, max_gen_toks=max_gen_toks,
                         drafter=drafter, num_spec_tokens=num_spec_tokens, seed=seed, dtype=dtype,
                         max_num_seqs=max_num_seqs, threads=threads, alpha=alpha,
                         apply_chat_template=apply_chat_template, fewshot_as_multiturn=fewshot_as_multiturn)
    cfg.check()
    return AccuracyRun(cfg, progress)


def execute(job: AccuracyRun, *, output, resume=None, json_path=None) -> int:
    """Run both arms, print the table, write the run directory and `json_path` ('-': stdout,
    the table then goes to stderr). Returns the exit code (0: the comparison has no gate)."""
    cfg = job.config
    # local task files (--data-dir or the built-in sets): lm-eval and datasets must not reach for the hub
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    console = Console(stderr=json_path == "-")
    if not console.is_terminal:
        console = Console(stderr=json_path == "-", width=200)
    result, _ = run(cfg, output, resume=resume, progress=job.progress, console=console)
    print_report(result, console)
    emit_json(result, json_path)
    return 0


@click.command("accuracy")
@click.option("--model", default=BUILTIN_MODEL, show_default=True,
              help="builtin:smollm2-135m, builtin:tiny-qwen3, a checkpoint directory, a Hugging Face id (from the "
                   "local cache) or a short name (Qwen3-8B).")
@click.option("--engine", type=click.Choice(engine_choices()), default="reference", show_default=True)
@click.option("--tasks", default="gsm8k", show_default=True, help="Comma list of gsm8k, aime24, aime25, math500.")
@click.option("--data-dir", default=None, type=click.Path(),
              help="Read the tasks from DIR/benchmarks/*.jsonl (hub field names); without it, the benchmark "
                   "sets built into the package.")
@click.option("--limit", default=None, type=int, help="First N problems of each task.")
@click.option("--num-samples", "num_samples", default=1, show_default=True, type=int,
              help="Samples per problem (pass@1 = their mean); 1 for greedy.")
@click.option("--temperature", default=0.0, show_default=True, type=float)
@click.option("--top-p", default=1.0, show_default=True, type=float)
@click.option("--max-gen-toks", default=1024, show_default=True, type=int,
              help="Token limit per response (always set: lm-eval's gsm8k default of 256 truncates reasoning).")
@click.option("--drafter", default="sam", show_default=True, help="Drafter of the 'with SAM' arm.")
@click.option("-k", "--num-spec-tokens", default=3, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--dtype", default="float32", show_default=True)
@click.option("--max-num-seqs", default=64, show_default=True, type=int, help="Reference engine batch size.")
@click.option("--apply-chat-template", is_flag=True, default=False,
              help="Prompt through the model's chat template (lm-eval's apply_chat_template).")
@click.option("--fewshot-as-multiturn/--no-fewshot-as-multiturn", default=True, show_default=True,
              help="With --apply-chat-template: few-shot examples as chat turns.")
@click.option("--alpha", default=0.05, show_default=True, type=float, help="Test level.")
@click.option("--threads", default=1, show_default=True, type=int,
              help="torch threads; 0 = torch's default. 1 because small GEMMs stall with several threads "
                   "on a machine shared with other jobs.")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--resume", default=None, type=click.Path(), help="Continue this run directory (finished samples are kept).")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
@click.option("--progress/--no-progress", default=True, show_default=True)
def command(model, engine, tasks, data_dir, limit, num_samples, temperature, top_p, max_gen_toks, drafter,
            num_spec_tokens, seed, dtype, max_num_seqs, apply_chat_template, fewshot_as_multiturn, alpha,
            threads, output, resume, json_path, progress):
    """Accuracy with SAM off vs on through lm-eval, paired by problem (difference with a
    bootstrap interval, McNemar / sign-flip test, minimum detectable difference)."""
    params = {name: v for name, v in click.get_current_context().params.items() if name not in OUTPUT_PARAMS}
    code = execute(build_config(**params), output=output, resume=resume, json_path=json_path)
    if code:
        sys.exit(code)
