"""`samspec-bench step-model`: check a step-time model against measured engine steps, the model
a rollout replay would be priced with (bench/simulation/step_models.py computes):

    samspec-bench step-model --step-model roofline:hardware=cpu,model=Qwen3-0.6B --steps RUN_DIR|profile.json|points.jsonl
    samspec-bench step-model --step-model roofline:hardware=H100,model=Qwen3-8B --steps points.jsonl \
        [--also Qwen3-32B=points_32b.jsonl] --calibrate my_h100.json

`--calibrate OUT.json` first fits the roofline row's per-operator-class parameters on the measured
points (one GPU, tp=1; roofline_calibration.calibrate_to_file) and writes them to OUT.json, then
checks the calibrated model on the same points (fitted, not held out: check other files with
`--step-model roofline:...,calibration=OUT.json`, which every command that takes a step model
reads). Two model sizes (`--also`) tell the fixed time per GEMM kernel from the weight stream.

Output (one run directory): result.json (metrics: the overall errors, the model's bounding terms
and what it is; tables: the errors per group of steps: batch size, speculative or not; for a
JSONL file of {B, q, C, ms} points also metrics.points (median / max |error|, max verify/decode
ratio error) and tables.points, one row per point). A check
takes seconds: no --resume. The old `python -m samspec_bench.bench.simulation.step_model_spec` runs
this command.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from samspec_bench.bench.simulation.roofline_calibration import calibrate_to_file
from samspec_bench.bench.simulation.step_model_spec import (ROOFLINE_HELP, check_step_model, format_report,
                                                            load_step_model, spec_with)
from samspec_bench.errors import UserError
from samspec_bench.results import RunDir
from samspec_bench.suites.run_output import print_and_emit

SUITE = "step-model"
METRIC_KEYS = ("step_model", "units", "overall", "context_known", "terms", "describe", "step_model_spec", "steps_from",
               "points_meta", "points_shape", "points_device", "points_tp", "points_dtype", "calibration_keys",
               "calibration_tp", "context_unknown_steps", "extrapolation")


@dataclass(frozen=True)
class StepModelConfig:
    step_model: str
    steps: str
    calibrate: str | None
    also: tuple[str, ...]


def build_config(*, step_model: str, steps: str, calibrate: str | None, also) -> StepModelConfig:
    if not str(step_model).strip():
        raise UserError(f"--step-model: give a profile JSON or {ROOFLINE_HELP}")
    if also and not calibrate:
        raise UserError("--also adds points to a calibration: give --calibrate OUT.json too")
    if calibrate and Path(calibrate).expanduser().is_dir():   # refused before the fit (tens of seconds), not after
        raise UserError(f"--calibrate {calibrate}: a folder; give the path of the calibration file to write "
                        f"(e.g. {Path(calibrate) / 'calibration.json'})")
    return StepModelConfig(step_model=str(step_model).strip(), steps=str(steps),
                           calibrate=str(calibrate) if calibrate else None, also=tuple(also or ()))


def execute(config: StepModelConfig, *, output: str, resume: str | None = None, json_path: str | None = None) -> int:
    """Price the measured steps with the model, print the report, write result.json."""
    if resume is not None:
        raise UserError(f"--resume {resume}: `samspec-bench step-model` has no resume (a check takes seconds); "
                        "run it again")
    spec, calibration, lines = config.step_model, None, []
    if config.calibrate:   # fit, write the file, then check the calibrated model on the same points
        model = load_step_model(spec)
        calibration = calibrate_to_file(model, config.steps, config.also, config.calibrate,
                                        say=lambda s: click.echo(s, err=True))
        spec = spec_with(spec, "calibration", config.calibrate)
        fit = calibration["fit"]
        lines.append(f"calibration written: {config.calibrate} ({', '.join(calibration['fitted'])} fitted on "
                     f"{fit['points']} points of {', '.join(calibration['measured_on']) or 'an unnamed device'}; "
                     f"|error| median {fit['median_abs_error']:.1%} max {fit['max_abs_error']:.1%}, FITTED, not held "
                     f"out); price with --step-model {spec}")
    rep = check_step_model(spec, config.steps)   # bad input fails before a folder is made
    run_dir = RunDir(output, SUITE)
    metrics = {k: rep[k] for k in METRIC_KEYS if k in rep}
    if calibration is not None:
        metrics["calibration"] = calibration
    tables = {"groups": rep.get("groups", [])}
    if rep.get("points"):   # measured {B, q, C, ms} points: per-point and verify/decode ratio errors
        metrics["points"] = {"basis": rep["points"]["basis"], **rep["points"]["summary"]}
        tables["points"] = rep["points"]["points"]
    path = run_dir.write_result(asdict(config), metrics, tables)
    print_and_emit(lines + [format_report(rep)], path, json_path)
    return 0


@click.command(SUITE)
@click.option("--step-model", required=True, help=f"The model checked: a profile JSON (`rollout profile`) or {ROOFLINE_HELP}.")
@click.option("--steps", required=True, type=click.Path(),
              help="Measured steps: a profile JSON (format 3), a rollout run folder or its steps.csv, or a JSONL "
                   "file of {B, q, C, ms} points (a meta first line allowed).")
@click.option("--calibrate", default=None, type=click.Path(),
              help="Fit the roofline row on the --steps points (one GPU, tp=1) and write the calibration here; "
                   "then price with --step-model roofline:...,calibration=THIS.json.")
@click.option("--also", multiple=True, metavar="MODEL=POINTS.jsonl",
              help="More points for --calibrate, of another model size (repeatable).")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_path", default=None, help="Also write the result JSON here ('-' for stdout).")
def command(output, json_path, **params):
    """Check a step-time model against measured engine steps: per-step and total-time errors,
    per batch size, and (roofline) which term bounds the steps."""
    code = execute(build_config(**params), output=output, json_path=json_path)
    if code:
        sys.exit(code)
