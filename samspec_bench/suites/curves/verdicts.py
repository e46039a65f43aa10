"""The comparison itself: read the runs, resolve the metrics, compare every run with the
baseline (the first run) metric by metric, and lay the outcome out as result.json holds it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from samspec_bench.errors import UserError
from samspec_bench.evals.curve_stats import DIFFERENT, EQUIVALENT, INCONCLUSIVE, align, combine, compare_curves, compare_ratio
from samspec_bench.evals.training_logs import Series, TrainingRun, default_label, load_run
from samspec_bench.evals.training_logs.console import WANDB_LINE_CUT
from samspec_bench.evals.training_logs.formats import file_format
from samspec_bench.evals.training_logs.runs_folder import lone_log
from samspec_bench.evals.training_logs.series import diverged_kinds
from samspec_bench.evals.training_logs.tensorboard import event_files
from samspec_bench.evals.training_logs.wandb_run import run_files
from samspec_bench.suites.curves.config import CurvesConfig
from samspec_bench.suites.curves.metric_families import (Resolved, check_margin_names, is_validation_tag, requested_text,
                                                         resolve, tag_text)
from samspec_bench.suites.curves.throughput import NOT_NORMALISED, compare_throughput
from samspec_bench.suites.curves.rollout_tail import slowest_share

MEASURED = {"s": "measured: wall seconds from the trainer's timers",
            "ms/token": "measured: the trainer's timer over the tokens generated",
            "tokens/s/GPU": "measured: tokens over the trainer's timed step, per GPU",
            "tokens/s (all GPUs)": "measured: tokens over the trainer's timed step, all GPUs"}


def run_labels(cfg: CurvesConfig) -> list[str]:
    """--labels, or each run's default label, made unique (A:, B: prefixes on clashes)."""
    if cfg.labels:
        return list(cfg.labels)
    labels = [default_label(Path(p)) for p in cfg.runs]
    if len(set(labels)) < len(labels):
        labels = [f"{chr(65 + i) if i < 26 else i}:{lab}" for i, lab in enumerate(labels)]
    return labels


def check_wandb_file(path: Path, fmt: str | None) -> None:
    """A file read as wandb is read through its run folder (the folder holding it, or the run
    folder above `files/`): refuse, naming the file as given, one that is none of the files the
    reader takes from that folder (it would read the folder's other files, or fail naming the folder)."""
    if not path.is_file() or not (fmt == "wandb" or (fmt is None and (path.suffix == ".wandb"
                                                                          or path.name == "wandb-history.jsonl"))):
        return
    used = [f for f in run_files(path.parent).values() if f is not None]
    if any(f.resolve() == path.resolve() for f in used):
        return
    other = file_format(path)
    how = "--format wandb reads" if fmt == "wandb" else "a wandb log is read through"
    where = f" (there it would read {', '.join(str(f) for f in used)})" if used else ""
    fix = (f"pass this file with --format auto (it reads as {other})" if other not in (None, "wandb")
           else "pass a wandb run folder that holds this file (one run-<id>.wandb a folder)")
    raise UserError(f"{path}: {how} its run folder (wandb/run-<date>-<id>/: run-<id>.wandb, files/wandb-history.jsonl "
                    f"or files/output.log), and {path.parent} is no run folder of this file{where}; {fix}")


def load_runs(cfg: CurvesConfig) -> list[TrainingRun]:
    """Read the runs; --gpus RUN=N overrides what a log says of its GPU count."""
    labels = run_labels(cfg)
    bad = [k for k in cfg.gpus if k not in labels]
    if bad:
        raise UserError(f"--gpus {bad[0]}={cfg.gpus[bad[0]]}: no run is named {bad[0]!r}; the runs are "
                        f"{', '.join(labels)}")
    for p in cfg.runs:
        check_wandb_file(Path(p), cfg.format)
    runs = [load_run(p, cfg.format, lab) for p, lab in zip(cfg.runs, labels)]
    for r in runs:
        if r.label in cfg.gpus:
            logged = r.setup.get("gpus")
            if logged is not None and logged != cfg.gpus[r.label]:
                r.notes.append(f"--gpus {r.label}={cfg.gpus[r.label]} overrides {logged} GPUs ({r.setup['gpus_source']})")
            r.setup.update({"gpus": cfg.gpus[r.label], "gpus_source": "--gpus"})
    return runs


def run_record(run: TrainingRun) -> dict:
    """A run as result.json holds it: the reader's summary, where what was skipped is apart from
    what was replaced (and which value was kept), so a re-logged step is never shown as lost."""
    return {**run.summary(), "slowest_sample_share": slowest_share(run)}


def speed_change(ratio: float | None, ci: list | None, higher_is_faster: bool) -> str:
    """'faster' / 'slower' / 'no detectable change' for run B against the baseline."""
    if ratio is None or ci is None:
        return "not computed"
    lo, hi = ci
    faster = lo > 1 if higher_is_faster else hi < 1
    slower = hi < 1 if higher_is_faster else lo > 1
    return "faster" if faster else "slower" if slower else "no detectable change"


_NO_STEPS = Series(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))


def _resolution_limited(res: dict, *runs) -> dict:
    """EQUIVALENT only where the logs resolve the margin: a console log that printed 3 decimals
    (verl <= 0.4) knows each value to +-0.0005, so two runs may differ by up to one print step
    (0.001) and read the same; a margin below that cannot be shown to hold."""
    places = [r.read.get("decimals") for r in runs if isinstance(r.read.get("decimals"), int)]
    if res.get("verdict") != EQUIVALENT or not places:
        return res
    step = 10.0 ** -min(places)
    margin = (res.get("whole") or {}).get("margin")   # absolute, as the test used it
    if isinstance(margin, (int, float)) and margin < step:
        return {**res, "verdict": INCONCLUSIVE, "resolution": step,
                "reason": f"the log prints {min(places)} decimals: values known to +-{step / 2:g}, finer than the "
                          f"margin {margin:g} can show; compare logs that print more digits (verl >= 0.5)"}
    return res


def _series(run: TrainingRun, tag: str) -> Series:
    """The finite steps of a tag (none when every logged value was NaN or inf)."""
    return run.series.get(tag) or _NO_STEPS


def _describe_steps(run: TrainingRun, tag: str) -> dict:
    s = _series(run, tag)
    return {"n": len(s), "first": int(s.steps[0]) if len(s) else None, "last": int(s.steps[-1]) if len(s) else None,
            "non_finite": int(run.non_finite.get(tag, {}).get("count", 0))}


def _in_range(steps: np.ndarray, rng: tuple[int | None, int | None] | None) -> np.ndarray:
    if rng is None:
        return steps
    lo, hi = rng
    keep = np.ones(steps.size, dtype=bool)
    if lo is not None:
        keep &= steps >= lo
    if hi is not None:
        keep &= steps <= hi
    return steps[keep]


def divergence(base: TrainingRun, run: TrainingRun, ta: str, tb: str,
               rng: tuple[int | None, int | None] | None = None) -> str | None:
    """Why a metric is DIFFERENT because a run logged NaN/inf (or a huge value) there ('run B diverged: N of M
    steps non-finite ...'), or None: neither did, or both at the same steps (compared on the
    finite ones)."""
    bad = {lab: _in_range(r.non_finite_steps.get(t, np.zeros(0, dtype=np.int64)), rng)
           for lab, r, t in ((base.label, base, ta), (run.label, run, tb))}
    if np.array_equal(bad[base.label], bad[run.label]):
        return None
    parts = []
    for who, r, t in (("run", run, tb), ("baseline", base, ta)):
        at = bad[r.label]
        if at.size:
            logged = _in_range(_series(r, t).steps, rng).size + at.size
            parts.append(f"{who} {r.label} diverged: {at.size} of {logged} steps non-finite "
                         f"({diverged_kinds(r.non_finite.get(t))}, first at step {int(at[0])})")
    return "; ".join(parts)


def uncompared_divergence(base: TrainingRun, run: TrainingRun, compared: set[str],
                          rng: tuple[int | None, int | None] | None = None) -> list[str]:
    """Tags outside the comparison that went NaN/inf in one run and not (at the same steps) in the
    other, as 'tag: run B diverged: ...' lines."""
    tags = (set(base.non_finite_steps) | set(run.non_finite_steps)) - compared
    out = []
    for tag in sorted(tags):
        why = divergence(base, run, tag, tag, rng)
        if why:
            out.append(f"{tag}: {why}")
    return out


def compare_runs(cfg: CurvesConfig, runs: list[TrainingRun]) -> dict:
    """{"metrics": [...resolved...], "comparisons": {label: {...}}, "verdict", "tables"}."""
    margins = cfg.margin_objects()
    metrics = resolve(runs, cfg.families, margins, cfg.metrics, cfg.speed_metrics)
    check_margin_names(margins, metrics, cfg.families, cfg.margin_args)
    for r in runs:   # a validation source no other run validates on is listed as absent, not compared
        if not any(m.tags.get(r.label) and (m.spec.family != "validation" or sum(map(bool, m.tags.values())) > 1)
                   for m in metrics):
            raise UserError(no_metric_text(r, requested_text(cfg.families, cfg.metrics, cfg.speed_metrics)))
    base = runs[0]
    for run in runs[1:]:
        check_common_steps(base, run, metrics, cfg.step_range)
    comparisons: dict[str, dict] = {}
    verdict_rows, speed_rows = [], []
    gpus = {r.label: (r.setup.get("gpus"), r.setup.get("gpus_source")) for r in runs}
    for run in runs[1:]:
        learning, speed, absent, caveats = {}, {}, [], []
        for m in metrics:
            ta, tb = m.tags.get(base.label), m.tags.get(run.label)
            if not ta or not tb:
                absent.append(absent_text(m, base if not ta else run, ta or tb))
                continue
            a, b = _series(base, ta), _series(run, tb)
            al = align(a.steps, a.values, b.steps, b.values, cfg.step_range)
            diverged = divergence(base, run, ta, tb, cfg.step_range)
            info = {"metric": tag_text(ta, tb), "family": m.spec.family, "tag_a": ta, "tag_b": tb,
                    "unit": m.spec.unit, "what": m.spec.what,
                    "steps_a": _describe_steps(base, ta), "steps_b": _describe_steps(run, tb)}
            if m.spec.kind == "learning":
                res = compare_curves(al, m.spec.margin, alpha=cfg.alpha, min_steps=cfg.min_steps,
                                     final_fraction=cfg.final_fraction)
                if diverged:   # a diverged run is a finding, whatever its finite steps say
                    res = {**res, "verdict": DIFFERENT, "reason": diverged, "diverged": True}
                res = _resolution_limited(res, base, run)
                learning[m.name] = {**info, "margin": m.spec.margin.describe(), **res}
                verdict_rows.append(_verdict_row(run.label, m, learning[m.name]))
            else:
                if ta == "perf/throughput" and tb == "perf/throughput":
                    res = compare_throughput(base, run, ta, tb, gpus, cfg.step_range, cfg.alpha)
                    info["unit"] = res.pop("unit")
                else:
                    res = compare_ratio(al, alpha=cfg.alpha)
                # no ratio (too few steps) is "not computed", whatever the GPU counts
                res["change"] = NOT_NORMALISED if res.get("normalised") is False and res.get("ratio") is not None \
                    else speed_change(res.get("ratio"), res.get("ci"), m.spec.higher_is_faster)
                if res.get("caveat"):
                    caveats.append(res["caveat"])
                if diverged:
                    res.update({"change": "non-finite", "reason": diverged, "diverged": True})
                res["higher_is_faster"] = m.spec.higher_is_faster
                res["source"] = MEASURED.get(info["unit"], "as logged by the trainer")
                speed[m.name] = {**info, **res}
                speed_rows.append(_speed_row(run.label, m, speed[m.name]))
        verdicts = [v["verdict"] for v in learning.values()]
        comparisons[run.label] = {"baseline": base.label, "learning": learning, "speed": speed, "absent": absent,
                                  "verdict": combine(verdicts) if verdicts else "INCONCLUSIVE",
                                  "counts": {v: verdicts.count(v) for v in ("EQUIVALENT", "DIFFERENT", "INCONCLUSIVE")},
                                  "speed_caveats": caveats,
                                  "not_normalised": sum(x.get("change") == NOT_NORMALISED for x in speed.values())}
        if same_file(_source(base), _source(run)):
            comparisons[run.label]["note"] = (f"same file as the baseline ({run.path}): a self-comparison, every "
                                              "metric trivially equivalent")
        compared = {t for m in metrics for t in (m.tags.get(base.label), m.tags.get(run.label)) if t}
        elsewhere = uncompared_divergence(base, run, compared, cfg.step_range)
        if elsewhere:
            comparisons[run.label]["diverged_elsewhere"] = elsewhere
            if comparisons[run.label]["verdict"] == "EQUIVALENT":   # never EQUIVALENT beside a diverged run
                comparisons[run.label]["verdict"] = "INCONCLUSIVE"
        length = learning.get("length")
        # not where the lengths went unjudged for want of steps: that is no difference in work
        unjudged = length is None or not length["whole"].get("steps") or \
            length["reason"].startswith(("too few", "no common"))
        if speed and not unjudged and length["verdict"] != "EQUIVALENT":
            rel = length["whole"].get("relative_diff")
            comparisons[run.label]["speed_note"] = (
                "response lengths are not equivalent" + (f" (B - A: {rel:+.0%} of the baseline)" if rel is not None else "")
                + ": time per step compares different amounts of work; timing_per_token_ms/gen does not")
        if not learning and not speed:
            raise UserError(f"{run.path}: shares no requested metric with the baseline {base.path} "
                            f"({', '.join(absent) or 'none requested'}); compare runs that log the same metrics, "
                            "or name one both have with --metric")
    overall = combine([c["verdict"] for c in comparisons.values()])
    return {"baseline": base.label, "runs": [run_record(r) for r in runs],
            "metrics": [{"name": m.name, "metric": tag_text(*_pair(m, base, runs)), "family": m.spec.family,
                         "kind": m.spec.kind, "unit": m.spec.unit,
                         "margin": m.spec.margin.describe() if m.spec.margin else None, "tags": m.tags}
                        for m in metrics],
            "comparisons": comparisons, "verdict": overall,
            "tables": {"verdicts": verdict_rows, "speed": speed_rows}}


def _source(run: TrainingRun) -> str:
    """What a run was read from: a wandb file given as the run stands for its run folder."""
    p = Path(run.path)
    return str(p.parent) if run.format == "wandb" and p.is_file() else run.path


def _read_files(path: str) -> set[tuple[int, int]]:
    """(device, inode) of the files a run is read from: a TensorBoard folder's event files, a
    wandb run folder's logs, the one log a folder holds, else the path itself."""
    p = Path(path)
    wandb = [f for f in run_files(p).values() if f is not None] if p.is_dir() else []
    files = (event_files(p) or wandb or [lone_log(p) or p]) if p.is_dir() else [p]
    return {(st.st_dev, st.st_ino) for st in (os.stat(f) for f in files)}


def same_file(a: str, b: str) -> bool:
    """Two runs read from one file or folder (a path given twice, a link to it, or a folder and
    the file in it that the folder is read from)."""
    try:
        return os.path.samefile(a, b) or _read_files(a) == _read_files(b)
    except OSError:
        return False


def no_metric_text(r: TrainingRun, requested: str) -> str:
    """Why a run has none of the requested metrics: wandb's line cut where it cut step lines,
    values that were never numbers, else the tags it has."""
    sample = ", ".join(r.tags[:5]) + (", ..." if len(r.tags) > 5 else "")
    head = f"{r.path}: none of the requested metrics ({requested}) with 2+ steps"
    if r.format == "csv" and r.read.get("rows") == 0:
        return f"{r.path}: a CSV header with no data rows; export the run's history with its rows"
    if not r.series and not r.non_finite and not r.non_numeric:
        read = ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in r.read.items())
        other = r.counts.get("non_scalar_values")
        return (f"{r.path}: holds no scalar metric (read: {read or 'nothing'}"
                + (f"; {other} non-scalar value(s): text, histograms, images" if other else "")
                + "); pass a run that logged its metrics as scalars (verl's trainer.logger)")
    cut = r.counts.get("truncated_lines")
    if cut:
        return (f"{head}: {cut} step line(s) cut at {WANDB_LINE_CUT} bytes (of its {r.read.get('step_lines', cut)}; "
                "wandb's console capture), which drops every key after the cut; read the run's history instead "
                "(its run-<id>.wandb or files/wandb-history.jsonl, or verl's file-logger JSONL), or compare tags "
                f"it kept with --metric (e.g. {sample or 'none'})")
    val = sorted(t for t in r.tags if is_validation_tag(t))
    if val:
        return (f"{head}; its validation metrics ({', '.join(val[:2])}{', ...' if len(val) > 2 else ''}) are logged by "
                "no other run at 2+ steps; compare it with runs that validate on the same data sources")
    if r.non_numeric:
        bad = ", ".join(f"{t} ({n})" for t, n in sorted(r.non_numeric.items())[:4])
        return f"{head}; values present but not numeric: {bad}; its numeric tags: {sample or 'none'}"
    return f"{head}; its tags: {sample or 'none'}; pick some with --metric"


def absent_text(m: Resolved, missing: TrainingRun, tag: str) -> str:
    """'tag (metric; absent in RUN)', or why it is not compared where the run logged it."""
    bad = sum(missing.non_numeric.get(t, 0) for t in {tag, *m.spec.aliases})
    if bad:
        return f"{tag} ({m.name}; present but not numeric in {missing.label}: {bad} values)"
    one = next((t for t in (tag, *m.spec.aliases) if t in missing.series), None)
    if one:
        return f"{tag} ({m.name}; logged at only {len(missing.series[one])} step in {missing.label})"
    return f"{tag} ({m.name}; absent in {missing.label})"


def _logged(run: TrainingRun, tag: str) -> np.ndarray:
    """Every step a tag was logged at, finite or not."""
    return np.union1d(_series(run, tag).steps, run.non_finite_steps.get(tag, np.zeros(0, dtype=np.int64)))


def _span(run: TrainingRun) -> str:
    return f"steps {run.steps[0]}-{run.steps[1]}" if run.steps else "no steps"


def check_common_steps(base: TrainingRun, run: TrainingRun, metrics: list[Resolved],
                       rng: tuple[int | None, int | None] | None) -> None:
    """A UserError when the two runs share no step of any metric both log, or none inside
    --steps: nothing could be compared (every row would be empty)."""
    common = np.zeros(0, dtype=np.int64)
    for m in metrics:
        ta, tb = m.tags.get(base.label), m.tags.get(run.label)
        if ta and tb:
            common = np.union1d(common, np.intersect1d(_logged(base, ta), _logged(run, tb)))
    both = f"{base.label} ({_span(base)}) and {run.label} ({_span(run)})"
    if not common.size:
        if any(m.tags.get(base.label) and m.tags.get(run.label) for m in metrics):
            raise UserError(f"{both} share no step of the metrics both log; compare runs over the same steps")
        return       # no metric in common: said below, with the metrics each lacks
    if not _in_range(common, rng).size:
        lo, hi = rng
        raise UserError(f"--steps {'' if lo is None else lo}:{'' if hi is None else hi}: selects none of the steps "
                        f"that {both} both logged ({common.size} common steps, {int(common[0])}-{int(common[-1])}); "
                        "pick a window inside them")


def _pair(m: Resolved, base: TrainingRun, runs: list[TrainingRun]) -> tuple[str | None, str | None]:
    """The baseline's tag and the first other tag a run gives this metric (for its name as logged)."""
    ta = m.tags.get(base.label)
    return ta, next((t for r in runs[1:] if (t := m.tags.get(r.label)) and t != ta), ta)


def _verdict_row(label: str, m: Resolved, r: dict) -> dict:
    w, f = r["whole"], r.get("final") or {}
    return {"run": label, "metric": r["metric"], "name": m.name, "family": m.spec.family, "unit": m.spec.unit,
            "steps": w.get("steps"), "first_step": w.get("first_step"), "last_step": w.get("last_step"),
            "mean_a": w.get("mean_a"), "mean_b": w.get("mean_b"), "diff": w.get("diff"),
            "ci_lo": (w.get("ci_tost") or [None, None])[0], "ci_hi": (w.get("ci_tost") or [None, None])[1],
            "margin": w.get("margin"), "n_eff": w.get("n_eff"),
            "final_diff": f.get("diff"), "final_ci_lo": (f.get("ci_tost") or [None, None])[0],
            "final_ci_hi": (f.get("ci_tost") or [None, None])[1], "final_steps": f.get("steps"),
            "verdict": r["verdict"], "reason": r["reason"]}


def _speed_row(label: str, m: Resolved, r: dict) -> dict:
    ci = r.get("ci") or [None, None]
    return {"run": label, "metric": r["metric"], "name": m.name, "unit": r["unit"],
            "steps": r.get("steps"), "mean_a": r.get("mean_a"), "mean_b": r.get("mean_b"), "ratio_b_over_a": r.get("ratio"),
            "ci_lo": ci[0], "ci_hi": ci[1], "change": r.get("change"),
            "source": r.get("how") or r.get("source")}
