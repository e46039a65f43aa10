"""What `samspec-bench sampler` does once its options are a config: `run` audits the samplers
and times the vectorised one, writing the run directory as it goes (resumable); `execute`
prints the tables, emits the JSON and returns the exit code (0, or 1 with a one-line finding).
Loaded by `command.execute` when the command runs: everything from here down imports torch."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys
import threading
from pathlib import Path
from typing import Optional

import click
import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from samspec_bench.devices import device_info, resolve_device
from samspec_bench.errors import UserError
from samspec_bench.results import (CONFIG_FILE, RunDir, build_result, check_resume, created_mark, discard_unfinished,
                                   emit_json)
from samspec_bench.suites.sampler.adapters import resolve_audit
from samspec_bench.suites.sampler.audit import audit, where
from samspec_bench.suites.sampler.audit_worker import AuditWorker, isolated
from samspec_bench.suites.sampler.battery import build_battery
from samspec_bench.suites.sampler.config import (EXPECTED_EXACT, IDENTITY_FIELDS, MAX_VOCAB, NEGATIVE_CONTROLS,
                                                 PER_TOKEN_ACCEPTANCE, SUITE, SamplerConfig)
from samspec_bench.suites.sampler.figures import plot_speed, plot_tv_curves
from samspec_bench.suites.sampler.power import fmt, headline, mark_not_applicable, planned_power
from samspec_bench.suites.sampler.speed import speed_benchmark, speed_timer


def run(cfg: SamplerConfig, output: str = "results", resume: Optional[str] = None, console=None) -> dict:
    """Run audits and the speed benchmark, write the run directory, return the result dict.
    The device is resolved (a missing one: UserError) before the run folder exists. Interrupted
    (Ctrl-C, SIGTERM): the workers are stopped and the folder is kept for --resume when an audit
    or speed row finished, else removed."""
    requested = cfg.device
    cfg = dataclasses.replace(cfg, device=resolve_device(cfg.device))
    timer = speed_timer(cfg.device, cfg.speed_threads)
    if resume is not None and (Path(resume) / CONFIG_FILE).is_file():   # older runs saved no settings
        check_resume(resume, SUITE, dataclasses.asdict(cfg), IDENTITY_FIELDS)
    cases = build_battery(cfg)
    # the largest case's vocabulary is the larger of 32000 and --large-vocab: below it, count what is left out
    dropped = (len(build_battery(dataclasses.replace(cfg, max_vocab=MAX_VOCAB))) - len(cases)
               if cfg.max_vocab < max(32000, cfg.large_vocab) else 0)
    if not cases and (cfg.builtin or cfg.audits):   # an audit of no case would read EXACT
        raise UserError(f"--max-vocab {cfg.max_vocab}: every battery case has a larger vocabulary, so no sampler "
                        "would be tested; raise it (e.g. 1000, or 151936 for all)")
    mark = created_mark()
    rd = RunDir(output, SUITE, resume)
    rd.write_json(CONFIG_FILE, dataclasses.asdict(cfg))
    done_audits, done_speed, damaged = saved_records(rd, cfg.device, timer)
    if any(damaged.values()):   # nothing silent: a damaged record is redone, and said so
        (console or Console(stderr=True)).print(
            "--resume: " + ", ".join(f"{n} damaged record(s) in {name}" for name, n in damaged.items() if n)
            + " ignored (not whole audit / speed records); redone", soft_wrap=True)
    specs = []
    if cfg.builtin:
        specs += [(s, False) for s in cfg.builtins]
    specs = list(_dedup(specs + [(s, True) for s in cfg.audits]))
    if dropped:   # nothing silent: the cases --max-vocab leaves out
        (console or Console(stderr=True)).print(f"--max-vocab {cfg.max_vocab}: {dropped} battery case(s) with a "
                                                "larger vocabulary skipped", soft_wrap=True)
    power = planned_power(cases, cfg)
    workers: dict = {}
    try:
        # a sampler's prints (in-process: built-ins, --audit-timeout 0) to stderr, as a worker's: stdout
        # may carry --json -
        with _sigterm_as_interrupt(), contextlib.redirect_stdout(sys.stderr):
            loaded = _load([(s, e) for s, e in specs if s not in done_audits], cfg, cases, workers)
            with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                          TimeElapsedColumn(), console=console, transient=True) as progress:
                records = _audit_all(specs, done_audits, loaded, workers, cfg, cases, rd, progress)
                speed_rows = []
                if cfg.speed:
                    speed_rows = speed_benchmark(cfg, progress, done_speed,
                                                 on_row=lambda key, row: rd.append_sample({"key": key, "row": row},
                                                                                          "speed.jsonl"))
    except KeyboardInterrupt:
        _interrupted(rd, mark, console)
        raise
    finally:
        for w in workers.values():
            w.close()
    figure_names = []
    fig = plot_tv_curves(records, rd.file("tv_vs_samples.png"))
    if fig:
        figure_names.append(fig.name)
    if speed_rows:
        fig = plot_speed(speed_rows, rd.file("speed_ratio.png"))
        if fig:
            figure_names.append(fig.name)
    metrics = summarise(records, speed_rows, cfg)
    metrics["power_detects_1pct_loss_at_every_position"] = power["detects_target_everywhere"]
    metrics["power_mdd_by_position"] = {str(p["position"]): p["mdd"] for p in power["positions"]}
    tables = {"audits": [_audit_row(r) for r in records],
              "audit_tests": [dict(sampler=r["name"], **t) for r in records for t in r.get("table", [])],
              "speed": speed_rows}
    config = dataclasses.asdict(cfg)
    config["battery"] = [{"case": c.name, "vocab": c.vocab, "templates": [t.label for t in c.templates],
                          "draft_probs": c.with_probs, "k": [t.k for t in c.templates],
                          "trials": c.trials(cfg)} for c in cases]
    config["battery_skipped_by_max_vocab"] = dropped
    config["torch_threads"] = torch.get_num_threads()
    config["device_requested"] = requested
    power = mark_not_applicable(power, records)   # the logits-path rows: which samplers did not run them
    extra = {"audits": [{k: v for k, v in r.items() if k != "table"} for r in records], "power": power}
    if any(damaged.values()):
        extra["resume_damaged_records"] = damaged
    device = device_info(cfg.device)
    rd.write_result(config, metrics, tables, figure_names, extra=extra, device=device)
    result = build_result(SUITE, config, metrics, tables, figure_names, extra, device)
    result["run_dir"] = str(rd.path)
    return result


VERDICTS = ("EXACT", "LOSSY", "ERROR", "SKIPPED")
SPEED_NUMBERS = ("vocab", "k", "batch", "loop_ms", "vectorised_ms", "ratio", "loop_lazy_ms", "ratio_vs_loop_lazy",
                 "ratio_min", "acceptance_rate")


def saved_records(rd: RunDir, device: str, timer: str) -> tuple[dict, dict, dict]:
    """A resumed run's finished work: (audit records by sampler name, speed rows by grid key
    measured on this device with this timer, {file: damaged records ignored}). A record that
    is JSON but not a whole audit or speed row (edited, from another version) is counted as
    damaged and redone, not a crash later."""
    audits, speed = {}, {}
    damaged = {"audits.jsonl": 0, "speed.jsonl": 0}
    for r in rd.samples("audits.jsonl"):
        if isinstance(r.get("name"), str) and r.get("verdict") in VERDICTS:
            audits[r["name"]] = r
        else:
            damaged["audits.jsonl"] += 1
    for r in rd.samples("speed.jsonl"):
        row = r.get("row")
        if not (isinstance(row, dict) and isinstance(r.get("key"), str)
                and all(isinstance(row.get(f), (int, float)) and not isinstance(row.get(f), bool)
                        for f in SPEED_NUMBERS)
                and isinstance(row.get("outputs_equal"), bool)
                and r["key"] == f"{row['vocab']}/{row['k']}/{row['batch']}"):
            damaged["speed.jsonl"] += 1
        elif row.get("device") == device and row.get("timer") == timer:
            speed[r["key"]] = row
    return audits, speed, damaged


def _load(todo: list, cfg: SamplerConfig, cases: list, workers: dict) -> dict:
    """A worker per user sampler (they load side by side, into `workers`), the built-ins resolved
    here; then each worker's load awaited: a sampler that does not load is a UserError before any
    audit runs. Returns the in-process samplers by spec."""
    for s, explicit in todo:
        if isolated(s, cfg):
            workers[s] = AuditWorker(s, explicit, cfg, cases)
    loaded = {s: resolve_audit(s, explicit) for s, explicit in todo if s not in workers}
    for w in workers.values():
        w.loaded()
    return loaded


def _audit_all(specs, done: dict, loaded: dict, workers: dict, cfg: SamplerConfig, cases: list, rd: RunDir,
               progress) -> list[dict]:
    """Every sampler's record in spec order: a resumed run's finished ones as saved, the others
    audited (in their worker, or here) and appended to audits.jsonl as each finishes."""
    records = []
    for s, explicit in specs:
        if s in done:
            records.append(done[s])
            continue
        rec = workers[s].run(progress) if s in workers else audit(loaded[s], cfg, cases, progress)
        rec["explicit"] = explicit
        rd.append_sample(rec, "audits.jsonl")
        records.append(rec)
    return records


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM (`timeout`, `kill`) handled as Ctrl-C while the run works, so that it ends the
    same way: workers stopped, the run folder kept for --resume or removed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupted(rd: RunDir, mark: int, console) -> None:
    """Say what an interrupted run left: nothing (a folder it made with nothing finished is
    removed), or the finished audits and speed rows that --resume continues from."""
    if discard_unfinished(mark):
        msg = f"interrupted before any audit finished: {rd.path} removed"
    else:
        n = sum(1 for _ in rd.samples("audits.jsonl"))
        m = sum(1 for _ in rd.samples("speed.jsonl"))
        msg = (f"interrupted: {n} finished audit(s) and {m} speed row(s) kept in {rd.path}; continue with "
               f"--resume {rd.path} and the same options")
    (console or Console(stderr=True)).print(msg, soft_wrap=True)


def _dedup(specs):
    seen = set()
    for s, e in specs:
        if s not in seen:
            seen.add(s)
            yield s, e


def _audit_row(r: dict) -> dict:
    w = r.get("evidence", [None])[0] if r.get("verdict") == "LOSSY" and r.get("evidence") else r.get("worst")
    return {"sampler": r["name"], "verdict": r["verdict"], "tests": r.get("tests"), "failed": r.get("failed"),
            "where": where(w) if w and "case" in w else (w or {}).get("kind"),
            "tv": (w or {}).get("tv"), "bound": (w or {}).get("bound"), "p_value": (w or {}).get("p_value"),
            "greedy_mismatches": (r.get("greedy") or {}).get("mismatches"),
            "acceptance_matches_token_rule": r.get("acceptance_matches_token_rule"), "shape": r.get("shape"),
            "seeded_reproducible": (r.get("seeded") or {}).get("reproducible"),
            "mutated_inputs": list(r.get("mutated_inputs") or []),
            "note": "; ".join(filter(None, [r.get("reason") or r.get("error"),
                                            (r.get("platform_check") or {}).get("finding"),
                                            "no logits battery: probabilities in" if r.get("not_applicable") else None]))
            or None}


def summarise(records: list[dict], speed_rows: list[dict], cfg: SamplerConfig) -> dict:
    verdicts = {r["name"]: r["verdict"] for r in records}
    acc = {r["name"]: r.get("acceptance_matches_token_rule") for r in records if "acceptance_matches_token_rule" in r}
    m = {"verdicts": verdicts, "acceptance_matches_token_rule": acc,
         "exact_builtins_pass": all(verdicts.get(n) == "EXACT"
                                    and (n not in PER_TOKEN_ACCEPTANCE or acc.get(n) is not False)
                                    for n in EXPECTED_EXACT if n in verdicts),
         "negative_controls_flagged": all(verdicts.get(n) == "LOSSY" for n in NEGATIVE_CONTROLS if n in verdicts)}
    if speed_rows:
        ratios = [r["ratio"] for r in speed_rows]
        m["speed_ratio_min"] = float(min(ratios))
        m["speed_ratio_median"] = float(np.median(ratios))
        m["speed_outputs_equal"] = all(r["outputs_equal"] for r in speed_rows)
        m["speed_device"], m["speed_timer"] = speed_rows[0].get("device"), speed_rows[0].get("timer")
        head = [r for r in speed_rows if r["batch"] == 64 and r["k"] == 3]
        big = max(head, key=lambda r: r["vocab"]) if head else None
        if big:
            m["speed_headline"] = {key: big.get(key) for key in (
                "batch", "k", "vocab", "loop_ms", "vectorised_ms", "ratio", "loop_lazy_ms", "ratio_vs_loop_lazy",
                "vectorised_logits_ms", "vllm_ms", "ratio_vs_vllm", "ratio_min", "acceptance_rate", "timer")}
            m["speed_target_10x_met"] = big["ratio"] >= 10 if big["vocab"] >= 151936 else None
        # the largest point (Qwen3's vocabulary, batch 256, k 8 in the default grid)
        top = max(speed_rows, key=lambda r: (r["vocab"], r["batch"], r["k"]))
        m["speed_largest"] = {key: top.get(key) for key in (
            "vocab", "batch", "k", "vectorised_ms", "vectorised_min_ms", "loop_ms", "ratio", "device", "timer")}
    return m


def print_report(result: dict, console) -> None:
    t = Table(title="Sampler audits (alpha = family-wise false-alarm rate per sampler)")
    for col in ("sampler", "verdict", "tests", "failed", "evidence / worst test", "TV", "bound", "p-value",
                "greedy", "acceptance", "seeded"):
        t.add_column(col)
    styles = {"EXACT": "green", "LOSSY": "red", "ERROR": "magenta", "SKIPPED": "dim"}
    for r in result["tables"]["audits"]:
        fmt = (lambda v, f: "" if v is None else f.format(v))
        t.add_row(r["sampler"], f"[{styles.get(r['verdict'], '')}]{r['verdict']}[/]", fmt(r["tests"], "{}"),
                  fmt(r["failed"], "{}"), r["where"] or (r["note"] or ""), fmt(r["tv"], "{:.4f}"),
                  fmt(r["bound"], "{:.4f}"), fmt(r["p_value"], "{:.2e}"),
                  "" if r["greedy_mismatches"] is None else ("exact" if r["greedy_mismatches"] == 0
                                                             else f"{r['greedy_mismatches']} mismatches"),
                  "" if r.get("acceptance_matches_token_rule") is None else
                  ("per-token" if r["acceptance_matches_token_rule"] else "differs"),
                  "" if r["seeded_reproducible"] is None else ("yes" if r["seeded_reproducible"] else "no"))
    console.print(t)
    for r in result["tables"]["audits"]:
        if r.get("mutated_inputs"):   # not a verdict (the outputs decide that), but the caller's tensors change
            console.print(f"{r['sampler']} wrote into its input tensors (case(s) {', '.join(r['mutated_inputs'])}): "
                          "a caller reusing them (vLLM's logprobs) sees the changed values", soft_wrap=True)
    print_power(result.get("power"), console)
    speed = result["tables"].get("speed") or []
    if speed:
        print_speed(speed, result["environment"].get("device") or {}, console)
    console.print(f"run directory: {result.get('run_dir')}")


def print_speed(speed: list[dict], device: dict, console) -> None:
    """The speed table, titled with the device and what its milliseconds are (the rows' timer)."""
    timer, fastest = speed[0].get("timer"), speed[0].get("fastest_timer")
    on = f"{speed[0].get('device')}" + (f" ({device['name']})" if device.get("name") else "")
    vllm = any(r.get("vllm_ms") for r in speed)
    s = Table(title=f"Speed on {on}: vectorised vs both loop references (same inputs and uniforms)"
                    f"{' and vLLM' if vllm else ''}; ms = {timer}; fastest = {fastest}")
    cols = ["vocab", "k", "batch", "loop ms", "vectorised ms", "ratio", "loop(lazy) ms", "ratio vs lazy"]
    cols += ["vLLM ms", "ratio vs vLLM"] if vllm else []
    for col in cols + ["fastest ratio", "accept", "equal"]:
        s.add_column(col, justify="right")
    for r in speed:
        row = [str(r["vocab"]), str(r["k"]), str(r["batch"]), f"{r['loop_ms']:.2f}", f"{r['vectorised_ms']:.3f}",
               f"{r['ratio']:.1f}x", f"{r['loop_lazy_ms']:.2f}", f"{r['ratio_vs_loop_lazy']:.1f}x"]
        if vllm:
            row += ["" if r.get("vllm_ms") is None else f"{r['vllm_ms']:.3f}",
                    "" if r.get("ratio_vs_vllm") is None else f"{r['ratio_vs_vllm']:.2f}x"]
        s.add_row(*row, f"{r['ratio_min']:.1f}x", f"{r['acceptance_rate']:.2f}", "yes" if r["outputs_equal"] else "NO")
    console.print(s)
    notes = ["ratio: eager loop (a recovered token drawn at every position) / vectorised; ratio vs lazy: loop "
             "drawing only at the first rejection / vectorised"]
    if vllm:
        notes.append("vLLM: its own rejection_sample from processed logits (softmax inside), against the "
                     "vectorised sampler timed from the same logits")
    console.print("; ".join(notes) + f". Measured on {speed[0].get('device')}: {timer}.")


def print_power(power: Optional[dict], console) -> None:
    """The power statement: per template (seeded twins left out: same numbers), the smallest
    loss each position test detects with 80 % power, and the over-acceptance test's smallest
    detected excess of P(A >= j) over its bound (largest over j). A row of a case some audited
    samplers did not run (the logits-path cases, for probability-only samplers) is marked with
    them and why; one that no audited sampler ran is left out, counted."""
    if not power:
        return
    shown = [r for r in power["templates"] if not r["seeded"]]
    rows = [r for r in shown if r.get("run", True)]
    K = max((len(r["positions"]) - 1 for r in rows), default=0)
    t = Table(title=f"Power: smallest loss (one token's probability, = total variation) detected with "
                    f"{power['power']:.0%} power at this run's sample counts (alpha per criterion "
                    f"{power['alpha_per_test']:.1e})")
    for col in ["case/template", "trials"] + [f"pos {j}" for j in range(K)] + ["bonus", "over-accept."]:
        t.add_column(col, justify="right" if col != "case/template" else "left")
    for r in rows:
        by = {p["position"]: p for p in r["positions"] if p["kind"] == "token"}
        bonus = next(p for p in r["positions"] if p["kind"] == "bonus")
        over = [o["mdd"] for o in r["over_acceptance"] if o["mdd"] is not None]
        t.add_row(f"{r['case']}/{r['template']}" + (" *" if r.get("not_applicable_to") else ""), str(r["trials"]),
                  *[fmt(by[j]["mdd"]) if j in by else "" for j in range(K)], fmt(bonus["mdd"]),
                  fmt(max(over)) if over else "-")
    console.print(t)
    marked = [r for r in rows if r.get("not_applicable_to")]
    if marked:
        names = sorted({n for r in marked for n in r["not_applicable_to"]})
        console.print(f"* {len(marked)} row(s) n/a for {', '.join(names)}: "
                      f"{'; '.join(sorted({w for r in marked for w in r['not_applicable_to'].values()}))}",
                      soft_wrap=True)
    left_out = [r for r in shown if not r.get("run", True)]
    if left_out:
        cases = sorted({r["case"] for r in left_out})
        why = sorted({w for r in left_out for w in r["not_applicable_to"].values()})
        console.print(f"{len(left_out)} row(s) left out ({', '.join(cases)}): no audited sampler runs them: "
                      f"{'; '.join(why)}", soft_wrap=True)
    console.print(headline(power))


def findings(result: dict) -> list[str]:
    """What makes the run fail (exit 1): a built-in expected exact that is not, a negative
    control the battery did not catch, an explicit --audit that is LOSSY or ERROR."""
    problems = []
    for r in result.get("audits", []):
        if r["name"] in EXPECTED_EXACT and r["verdict"] not in ("EXACT", "SKIPPED"):
            problems.append(f"{r['name']} is {r['verdict']}")
        if r["name"] in PER_TOKEN_ACCEPTANCE and r.get("acceptance_matches_token_rule") is False:
            problems.append(f"{r['name']}: acceptance counts differ from the per-token rule")
        if r["name"] in NEGATIVE_CONTROLS and r["verdict"] not in ("LOSSY", "SKIPPED"):
            problems.append(f"negative control {r['name']} is {r['verdict']} (the battery lost its power)")
        if r.get("explicit") and r["name"] not in NEGATIVE_CONTROLS and r["verdict"] in ("LOSSY", "ERROR"):
            problems.append(f"{r['name']} is {r['verdict']}" + (f" ({r['error']})" if r.get("error") else ""))
    return list(dict.fromkeys(problems))


def execute(config: SamplerConfig, *, output: str, resume: Optional[str] = None,
            json_path: Optional[str] = None) -> int:
    """Everything the command does after parsing its options (the suite contract): run, print
    the tables, write the run directory, emit the JSON; 0, or 1 with a one-line finding."""
    console = Console(stderr=json_path == "-")
    if not console.is_terminal:
        console = Console(stderr=json_path == "-", width=150)
    result = run(config, output, resume, console)
    print_report(result, console)
    emit_json(result, json_path)
    problems = findings(result)
    if problems:
        # Shown as click shows a ClickException: "Error: ..." on stderr, exit 1 (a finding, not bad input).
        err = click.ClickException("; ".join(problems) + f" (evidence in {result.get('run_dir')}/result.json)")
        err.show()
        return err.exit_code
    return 0
