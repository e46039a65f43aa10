"""Running accuracy: every task through lm-eval with SAM off and on (each arm `--num-samples`
times), per-problem scores, the paired comparison, the run folder (`generations.jsonl` appended
as responses finish, what `--resume` reuses; `samples.jsonl`; `result.json`)."""

from __future__ import annotations

import functools
import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from samspec_bench.bench.engines.base import FINISH_LENGTH
from samspec_bench.bench.engines.engine_device import device_record
from samspec_bench.errors import UserError, one_line
from samspec_bench.evals.paired import agreement, compare
from samspec_bench.evals.tasks import parse_tasks, resolve_task, write_task_dir
from samspec_bench.models.checkpoints import progress_bars, resolve_model
from samspec_bench.results import RunDir, atomic_write_text, to_jsonable
from samspec_bench.suites.accuracy.config import ARM_LABEL, ARMS, SUITE, AccuracyConfig, build_engine
from samspec_bench.suites.accuracy.lm_outputs import LM_EVAL_DIR, arm_dir, copy_out, model_args, new_tracker, \
    quiet_git_hash, write_arm_files
from samspec_bench.suites.accuracy.tasks import BUILTIN_DATA, write_builtin_tasks

GENERATIONS = "generations.jsonl"
SAMPLES = "samples.jsonl"
# the metric/filter of lm-eval's results scored per problem (others are kept in the results dict)
PRIMARY_FILTER = {"gsm8k": "strict-match"}


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


def run(cfg: AccuracyConfig, output: str = "results", resume: str | None = None, progress: bool = True,
        console=None, engine=None, output_path: str | None = None, log_samples: bool = False,
        notes: tuple[str, ...] = ()) -> tuple[dict, Path]:
    """Run every task with SAM off and on; write the run directory (lm-eval's own files of each
    arm under lm_eval/, copied to `output_path`: lm_outputs); return (result, path).
    `engine`: an engine to reuse (tests); otherwise one is built from cfg. `notes`: lines about
    the options (AccuracyRun.notes), kept in result.json's "notes"."""
    cfg.check()
    if engine is None and not cfg.model.startswith("builtin:"):
        resolve_model(cfg.model)   # a checkpoint path: checked before any work (built-ins are built on use)
    import torch  # lazy: `samspec-bench --help` and the run planner import this module

    before = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        with progress_bars(progress):   # --no-progress: no "Loading weights" bar from transformers
            return _run(cfg, output, resume, progress, console, engine, (output_path, log_samples), notes)
    finally:
        torch.set_num_threads(before)


def _log(console, msg: str) -> None:
    if console is not None:
        console.print(msg)


def _run(cfg, output, resume, progress, console, engine, lm_out, notes=()) -> tuple[dict, Path]:
    # a bad --resume is named before lm-eval loads (opening it to resume writes nothing)
    resumed = RunDir(output, SUITE, resume=resume) if resume is not None else None
    try:
        import lm_eval  # lazy, as torch above: lm-eval imports torch and datasets
        from lm_eval.tasks import TaskManager
    except ImportError as e:
        raise UserError(f"accuracy: lm-eval does not import here ({e.name}); pip install 'lm-eval>=0.4.13'") from None

    run_dir = resumed or RunDir(output, SUITE)
    try:
        return _run_in(run_dir, cfg, resume, progress, console, engine, lm_out, lm_eval, TaskManager, notes)
    except Exception:
        # a new run that stopped before any response was generated leaves nothing half-made (its
        # folder holds settings, task files and links to the built-in sets, none of it work)
        if resumed is None and not any(True for _ in run_dir.samples(GENERATIONS)):
            shutil.rmtree(run_dir.path, ignore_errors=True)
        raise


def _run_in(run_dir: RunDir, cfg, resume, progress, console, engine, lm_out, lm_eval, TaskManager,
            notes) -> tuple[dict, Path]:
    cfg = _saved_config(cfg, run_dir, resume, console)
    run_dir.write_json("config.json", asdict(cfg))
    # resume: reuse every response generated before (failed ones are generated again)
    cache, damaged = reusable_generations(run_dir)
    reused = len(cache)
    if resume is not None:   # what the resume keeps, said before the first generation
        bad = (f"; {damaged} line(s) of {GENERATIONS} are not whole records (damaged or cut) and are skipped: a "
               "response without a whole record is generated again") if damaged else ""
        _log(console, f"resuming {run_dir.path}: {reused} generation(s) already recorded are reused, not generated "
                      f"again{bad}")
    if cfg.data_dir is not None:
        lm_names = write_task_dir(run_dir.file("tasks"), cfg.tasks, cfg.data_dir)
    else:
        lm_names = write_builtin_tasks(run_dir.file("tasks"), run_dir.file("builtin_benchmarks"), cfg.tasks)
    # only our task files are indexed (they include lm-eval's by path): indexing all of lm-eval's
    # task YAMLs costs about 13 s of CPU, paid only for a task read from the hub
    hub = any(not resolve_task(t).offline for t in cfg.tasks)
    tm = TaskManager(include_path=str(run_dir.file("tasks")), include_defaults=hub)
    # lm-eval's files are written again from this run's evaluations (a resume re-scores every task)
    shutil.rmtree(run_dir.file(LM_EVAL_DIR), ignore_errors=True)
    lm_files: dict[str, list[str]] = {}

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
    scored: list[dict] = []
    lm_results: dict[str, dict[str, list]] = {}
    metrics: dict[str, Any] = {}
    try:
        for task in cfg.tasks:
            note = sampling_note(cfg, task)
            if note:
                _log(console, note)
            evaluate = functools.partial(_evaluate, lm_eval, tm, cfg, engine, lm_names[task], cache, run_dir,
                                         progress, (task, lm_files, *lm_out))
            arms = _run_task(cfg, task, lm_names[task], evaluate, scored, run_dir, console)
            metrics[task] = _task_metrics(cfg, task, lm_names[task], arms)
            lm_results[task] = arms.lm_results
    finally:
        if own_engine and engine is not None:
            engine.close()
    extra = {"lm_eval": lm_results, "reused_generations": reused, "damaged_generations": damaged,
             "startup_s": startup_s,
             "wall_time_s": time.perf_counter() - t_start,
             "data": f"local: {cfg.data_dir}" if cfg.data_dir else BUILTIN_DATA,
             "engine": engine_desc,
             "lm_eval_files": {"run": lm_files, "output_path": lm_out[0], "log_samples": lm_out[1]},
             "sampling": "temperature/top_p/top_k/max_gen_toks of this run, handed to lm-eval as gen_kwargs: "
                         "they replace the tasks' own; `until` is the task's unless --gen_kwargs until=... is given"}
    if notes:
        extra["notes"] = list(notes)
    run_dir.write_result(cfg, metrics, {"accuracy": [_table_row(t, m) for t, m in metrics.items()]}, extra=extra,
                         device=device_record(cfg.engine, cfg.device))
    result = json.loads(run_dir.file("result.json").read_text(encoding="utf-8"))
    result["run_dir"] = str(run_dir.path)
    return result, run_dir.path


def _whole(rec: Any) -> bool:
    """A generations record a resume can reuse as lm-eval's response: a key and, unless it
    failed, its text, token ids and the count the cut text keeps."""
    if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
        return False
    if rec.get("error"):
        return True
    ids, kept = rec.get("token_ids"), rec.get("kept_tokens")
    return (isinstance(rec.get("text"), str) and isinstance(ids, list) and all(isinstance(t, int) for t in ids)
            and isinstance(kept, int) and not isinstance(kept, bool) and 0 <= kept <= len(ids))


def reusable_generations(run_dir: RunDir) -> tuple[dict[str, dict], int]:
    """The responses a resume reuses (key -> record; failed ones are generated again) and the
    number of lines that are not whole records (damaged: generated again; a line torn by a stop
    is expected and not counted)."""
    cache: dict[str, dict] = {}
    damaged = 0
    for rec in run_dir.samples(GENERATIONS, said=False):   # said with the resume line
        if not _whole(rec):
            damaged += 1
        elif not rec.get("error"):
            cache[rec["key"]] = rec
    return cache, damaged + run_dir.damaged_lines.get(GENERATIONS, 0)


def _saved_config(cfg: AccuracyConfig, run_dir: RunDir, resume, console) -> AccuracyConfig:
    """--resume continues with the run's own saved configuration, on this call's device (where the
    model runs is not a setting of the run: it may continue on another machine)."""
    saved = run_dir.saved_config() if resume is not None else None
    if saved is None:
        return cfg
    other = sorted(set(saved) - set(asdict(cfg))) + [f"{k} missing" for k in sorted(set(asdict(cfg)) - set(saved))]
    if other:   # a setting missing would silently take today's default, not the run's
        raise UserError(f"--resume {resume}: its config.json holds other settings than this version's "
                        f"({', '.join(other)}); start a new run")
    try:
        saved_cfg = replace(AccuracyConfig(**saved), device=cfg.device)
        if not (isinstance(saved_cfg.tasks, list) and saved_cfg.tasks and all(isinstance(t, str) for t in
                                                                                saved_cfg.tasks)):
            raise UserError(f"tasks {saved_cfg.tasks!r} is not a list of task names")
        parse_tasks(",".join(saved_cfg.tasks))
        saved_cfg.check()   # this call's options were checked, the saved ones never were
    except (UserError, TypeError, ValueError) as e:
        raise UserError(f"--resume {resume}: its config.json holds settings that cannot run ({one_line(e)}); "
                        "start a new run") from None
    given, used = asdict(cfg), asdict(saved_cfg)
    differ = [f"{k} {given[k]!r} (the run's: {used[k]!r})" for k in given if given[k] != used.get(k)]
    if differ:   # each setting given here and not used, named
        _log(console, f"resuming {run_dir.path}: using the run's saved configuration; not used from this call: "
                      f"{', '.join(differ)} (start a new run to change them)")
    return saved_cfg


@dataclass
class _TaskArms:
    """One task's evaluations: lm-eval's results per arm and run, per-problem scores per arm
    (one per sample), the first sample's generations per arm, time and counts per arm."""
    lm_results: dict[str, list] = field(default_factory=lambda: {arm: [] for arm in ARMS})
    per_doc: dict[str, dict[Any, list]] = field(default_factory=lambda: {arm: {} for arm in ARMS})
    gens: dict[str, dict[Any, dict]] = field(default_factory=lambda: {arm: {} for arm in ARMS})
    timings: dict[str, Any] = field(default_factory=dict)
    truncated: dict[str, int] = field(default_factory=lambda: {arm: 0 for arm in ARMS})
    metric: str | None = None
    filt: str | None = None


def lm_gen_kwargs(cfg: AccuracyConfig) -> dict[str, Any]:
    """The generation settings handed to lm-eval (they update each task's generation_kwargs, so its
    samples record what the engine used): the run's sampling, token limit and stop strings."""
    g: dict[str, Any] = {"max_gen_toks": cfg.max_gen_toks, "do_sample": cfg.temperature > 0,
                         "temperature": cfg.temperature, "top_p": cfg.top_p}
    if cfg.top_k:
        g["top_k"] = cfg.top_k
    if cfg.until is not None:
        g["until"] = list(cfg.until)
    return g


def sampling_note(cfg: AccuracyConfig, task: str) -> str | None:
    """A line when the task's own YAML samples differently from this run (its settings are replaced)."""
    own = resolve_task(task).config.get("generation_kwargs") or {}
    temp = own.get("temperature", 0.0 if own.get("do_sample") is False else None)
    if not isinstance(temp, (int, float)) or isinstance(temp, bool) or float(temp) == cfg.temperature:
        return None
    return (f"{task}: the task's own temperature {temp:g} is replaced by this run's {cfg.temperature:g} "
            f"(--gen_kwargs temperature={temp:g},do_sample={'true' if temp > 0 else 'false'} for the task's)")


def _evaluate(lm_eval, tm, cfg: AccuracyConfig, engine, lm_task: str, cache: dict, run_dir: RunDir, progress: bool,
              out: tuple, arm: str, k: int):
    """One lm-eval run of a task in one arm and sample: (its results, the EngineLM that generated).
    lm-eval's results and samples files are written for it (run folder, --output_path)."""
    from samspec_bench.evals.lm_adapter import EngineLM  # imports lm-eval

    task, lm_files, output_path, log_samples = out
    lm = EngineLM(engine, arm=arm, sample=k, drafter=cfg.drafter if arm == "on" else None,
                  num_spec_tokens=cfg.num_spec_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                  top_k=cfg.top_k, seed=cfg.seed, max_gen_toks=cfg.max_gen_toks, cache=cache,
                  on_record=lambda rec: run_dir.append_sample(rec, GENERATIONS), progress=progress)
    root = run_dir.file(LM_EVAL_DIR)
    tracker = new_tracker(root / arm_dir(arm, k, cfg.num_samples))
    with quiet_git_hash():
        r = lm_eval.simple_evaluate(model=lm, model_args=model_args(cfg, arm), tasks=[lm_task], task_manager=tm,
                                    limit=cfg.limit, num_fewshot=cfg.num_fewshot, gen_kwargs=lm_gen_kwargs(cfg),
                                    bootstrap_iters=cfg.lm_eval_bootstrap_iters, log_samples=True,
                                    evaluation_tracker=tracker, random_seed=cfg.seed, numpy_random_seed=cfg.seed,
                                    torch_random_seed=cfg.seed, fewshot_random_seed=cfg.seed,
                                    apply_chat_template=cfg.apply_chat_template,
                                    fewshot_as_multiturn=cfg.apply_chat_template and cfg.fewshot_as_multiturn)
    files = write_arm_files(tracker, r, lm_task, resolve_task(task).lm_name)
    copy_out(files, root, output_path, log_samples)
    lm_files.setdefault(task, []).extend(str(f.relative_to(run_dir.path)) for f in files)
    return r, lm


def _run_task(cfg: AccuracyConfig, task: str, lm_task: str, evaluate, scored: list[dict], run_dir: RunDir,
              console) -> _TaskArms:
    """Every sample of both arms of one task; the scored records are appended to `scored` and
    samples.jsonl rewritten after each evaluation."""
    arms = _TaskArms()
    for k in range(cfg.num_samples):
        for arm in ARMS:
            _log(console, f"{task}: {ARM_LABEL[arm]}" + (f", sample {k + 1}/{cfg.num_samples}" if cfg.num_samples > 1 else ""))
            t = time.perf_counter()
            r, lm = evaluate(arm, k)
            dt = time.perf_counter() - t
            arms.lm_results[arm].append({"results": r["results"], "n-samples": r.get("n-samples"),
                                         "n-shot": r.get("n-shot"), "versions": r.get("versions"),
                                         "higher_is_better": r.get("higher_is_better")})
            if arms.metric is None:
                arms.metric, arms.filt = primary_metric(task, r["results"][lm_task])
            arms.timings[f"{arm}_s"] = arms.timings.get(f"{arm}_s", 0.0) + dt
            arms.timings[f"{arm}_generated"] = arms.timings.get(f"{arm}_generated", 0) + lm.generated
            by_doc: dict[Any, dict] = {}
            for rec in lm.records:   # a task with repeats: the first response of each problem
                by_doc.setdefault(rec["doc_id"], rec)
            for s in r["samples"][lm_task]:
                if s.get("filter") != arms.filt:
                    continue
                doc = s["doc_id"]
                g = by_doc.get(doc, {})
                score = None if g.get("error") else _score(s.get(arms.metric))
                arms.per_doc[arm].setdefault(doc, []).append(score)
                arms.truncated[arm] += cut_at_limit(g)
                if k == 0:
                    arms.gens[arm][doc] = g
                scored.append({
                    "task": task, "lm_eval_task": lm_task, "doc_id": doc, "arm": arm, "sample": k,
                    "metric": arms.metric, "filter": arms.filt, "score": score,
                    "filtered_resp": s.get("filtered_resps"), "target": s.get("target"),
                    "doc_hash": s.get("doc_hash"), "prompt_hash": s.get("prompt_hash"),
                    "response": g.get("text"), "error": g.get("error"),
                    "num_tokens": g.get("num_tokens"), "kept_tokens": g.get("kept_tokens"),
                    "finish_reason": g.get("finish_reason"), "stop": g.get("stop"), "drafted": g.get("drafted"),
                    "accepted": g.get("accepted"), "steps": g.get("steps"),
                })
            _write_samples(run_dir, scored)
    return arms


def cut_at_limit(gen: dict) -> bool:
    """The response ended at the token limit (--max-gen-toks) before any stop string: the scored
    text is unfinished. (An engine that runs on past a stop string also says "length".)"""
    return gen.get("finish_reason") == FINISH_LENGTH and not gen.get("stop") and not gen.get("error")


def _task_metrics(cfg: AccuracyConfig, task: str, lm_task: str, arms: _TaskArms) -> dict[str, Any]:
    """The paired comparison of one task's arms, lm-eval's own numbers beside it, greedy
    agreement and the 'on' arm's acceptance."""
    metric, filt = arms.metric, arms.filt
    m = compare(arms.per_doc["off"], arms.per_doc["on"], alpha=cfg.alpha, iters=cfg.bootstrap_iters, seed=cfg.seed)
    m["metric"], m["filter"] = metric, filt
    m["lm_eval_task"] = lm_task
    m["errors"] = {arm: sum(v is None for vs in arms.per_doc[arm].values() for v in vs) for arm in ARMS}
    m["responses"] = {arm: sum(len(vs) for vs in arms.per_doc[arm].values()) for arm in ARMS}
    m["truncated"] = dict(arms.truncated)   # scored as cut: a wrong answer may only be unfinished
    for arm in ARMS:
        key = f"{metric},{filt}"
        m[f"lm_eval_{arm}"] = [x["results"][lm_task].get(key) for x in arms.lm_results[arm]]
        m[f"lm_eval_stderr_{arm}"] = [x["results"][lm_task].get(f"{metric}_stderr,{filt}")
                                      for x in arms.lm_results[arm]]
        m[f"pass@1_{arm}"] = float(sum(m[f"lm_eval_{arm}"]) / len(m[f"lm_eval_{arm}"])) \
            if all(isinstance(x, (int, float)) for x in m[f"lm_eval_{arm}"]) else None
    if cfg.temperature == 0:
        m["agreement"], m["agreement_raw"] = _agreement(arms.gens)
    on = [g for g in arms.gens["on"].values() if not g.get("error")]
    drafted = sum(g.get("drafted") or 0 for g in on)
    acc = sum(g.get("accepted") or 0 for g in on)
    toks = sum(g.get("num_tokens") or 0 for g in on)
    steps = sum(g.get("steps") or 0 for g in on)
    m["acceptance"] = {"acceptance_rate": acc / drafted if drafted else None,
                       "tokens_per_step": toks / steps if steps else None}
    m["timings"] = arms.timings or None
    m["stderr_basis"] = "sd of the per-problem mean scores / sqrt(n) (clustered by problem)"
    return m


def _agreement(gens: dict[str, dict[Any, dict]]) -> tuple[dict, dict]:
    """Greedy outputs of the two arms compared. kept: the tokens the scored (cut) text keeps.
    raw: all generated tokens up to the shorter response (a verify step may run up to k tokens
    past the stop string that ended the request: a prefix is not a divergence)."""
    pairs, raw = [], []
    for doc, g_off in gens["off"].items():
        g_on = gens["on"].get(doc)
        if g_on is None or g_off.get("error") or g_on.get("error"):
            continue
        pairs.append((g_off["token_ids"][:g_off["kept_tokens"]], g_on["token_ids"][:g_on["kept_tokens"]]))
        n = min(len(g_off["token_ids"]), len(g_on["token_ids"]))
        raw.append((g_off["token_ids"][:n], g_on["token_ids"][:n]))
    return agreement(pairs), agreement(raw)


def _table_row(task: str, m: dict[str, Any]) -> dict[str, Any]:
    return {"dataset": task, "n": m["n"], "without_sam": m["acc_off"], "with_sam": m["acc_on"],
            "without_sam_stderr": m["stderr_off"], "with_sam_stderr": m["stderr_on"],
            "diff": m["diff"], "ci95_low": m["ci95"][0], "ci95_high": m["ci95"][1],
            "p_value": m["p_value"], "test": (m.get("test") or {}).get("test"),
            "identical_fraction": (m.get("agreement") or {}).get("identical_fraction"),
            "truncated_without_sam": m["truncated"]["off"], "truncated_with_sam": m["truncated"]["on"],
            "verdict": m["verdict"]}


def _write_samples(run_dir, scored) -> None:
    atomic_write_text(run_dir.file(SAMPLES), "".join(json.dumps(to_jsonable(rec), sort_keys=True) + "\n"
                                                    for rec in scored))
