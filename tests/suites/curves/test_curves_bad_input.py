"""`samspec-bench curves` on bad input found by an audit: a step past int64 (1e20) in CSV, verl's
file-logger JSONL and the console log; a ragged CSV row; a repeated CSV column; a console line cut
mid-number that is shorter than wandb's 4096 bytes (colour codes stripped after the cut); a NaN
wall time and a negative step. Each: skipped and counted (shown in the output and the JSON), or
one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs import load_run
from samspec_bench.suites import curves

REPO = Path(__file__).resolve().parents[3]
TAGS = ("critic/score/mean", "response_length/mean", "actor/entropy")
BASE = {"critic/score/mean": 0.5, "response_length/mean": 300.0, "actor/entropy": 0.3}


def _value(tag: str, step: int, seed: int = 0) -> float:
    return BASE[tag] * (1 + 0.01 * (((step * 7 + seed * 3) % 11) - 5) / 5)


def _rows(steps, seed: int = 0) -> list[str]:
    return [",".join([str(s)] + [repr(_value(t, s, seed)) for t in TAGS])
            for s in steps]


def _csv(path: Path, lines: list[str], header: str = "step," + ",".join(TAGS)) -> Path:
    path.write_text("\n".join([header] + lines) + "\n")
    return path


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "samspec_bench.cli", "curves", *args], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def _execute(tmp_path: Path, *runs: Path, capsys) -> tuple[str, dict]:
    """The printed report and result.json of `curves RUNS`."""
    params = curves.command.make_context("curves", [], resilient_parsing=True).params
    params = {k: v for k, v in params.items() if k not in ("output", "json_path")}
    params["runs"] = tuple(str(r) for r in runs)
    cfg = curves.build_config(**params)
    curves.execute(cfg, output=str(tmp_path / "out"), json_path=str(tmp_path / "r.json"))
    return capsys.readouterr().out, json.loads((tmp_path / "r.json").read_text())


def _run_json(result: dict, label: str) -> dict:
    return next(r for r in result["runs"] if r["label"] == label)


# --- 1. a step past int64 ------------------------------------------------------------------------

def test_csv_step_past_int64_is_skipped_and_counted_not_a_crash(tmp_path, capsys):
    a = _csv(tmp_path / "a.csv", _rows(range(1, 21)))
    lines = _rows(range(1, 21), seed=1)
    lines[5] = "1e20," + lines[5].split(",", 1)[1]           # step 6 written as 1e20
    b = _csv(tmp_path / "b.csv", lines)
    run = load_run(b)
    assert run.counts["out_of_range_steps"] == 1
    assert run.series["critic/score/mean"].steps.tolist() == [s for s in range(1, 21) if s != 6]
    assert any("1 row(s) with a step past 2^63-1" in n for n in run.notes)
    printed, result = _execute(tmp_path, a, b, capsys=capsys)
    assert "out_of_range_steps 1" in printed and "step past 2^63-1" in printed
    assert _run_json(result, "b")["skipped"]["out_of_range_steps"] == 1


def test_jsonl_step_past_int64_is_skipped_and_counted(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("".join(json.dumps({"step": s, "data": {"x": float(i)}}) + "\n"
                         for i, s in enumerate((1, 2, 1e20, 3, 10 ** 20))))
    run = load_run(p)
    assert run.counts["out_of_range_steps"] == 2 and run.read["records"] == 5
    assert run.series["x"].steps.tolist() == [1, 2, 3] and run.series["x"].values.tolist() == [0, 1, 3]
    assert any("2 record(s) with a step past 2^63-1" in n for n in run.notes)


def test_console_step_past_int64_is_skipped_and_counted(tmp_path):
    p = tmp_path / "c.log"
    p.write_text("".join(f"step:{s} - x:{i}.5 - y:np.float64(0.{i})\n"
                         for i, s in enumerate((1, 2, 99999999999999999999, 3))))
    run = load_run(p)
    assert run.counts["out_of_range_steps"] == 1 and run.read["step_lines"] == 4
    assert run.series["x"].steps.tolist() == [1, 2, 3] and run.series["x"].values.tolist() == [0.5, 1.5, 3.5]
    assert any("1 step line(s) with a step past 2^63-1" in n for n in run.notes)


def test_wandb_history_step_past_int64_or_negative_is_skipped_and_counted(tmp_path):
    files = tmp_path / "wb" / "files"
    files.mkdir(parents=True)
    (files / "wandb-history.jsonl").write_text("".join(json.dumps({"_step": s, "x": float(i)}) + "\n"
                                                       for i, s in enumerate((1, 2, 1e20, -3, 3))))
    run = load_run(tmp_path / "wb")
    assert run.counts["out_of_range_steps"] == 1 and run.counts["negative_steps"] == 1
    assert run.series["x"].steps.tolist() == [1, 2, 3] and run.series["x"].values.tolist() == [0, 1, 4]
    assert any("1 history row(s) with a negative step" in n for n in run.notes)


# --- 2. a ragged CSV row --------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["8,0,5,328.0,0.484",        # one cell written 0,5 unquoted: a cell too many
                                 "8,0.5,328.0"])             # a cell too few
def test_ragged_csv_row_is_skipped_whole_and_counted(tmp_path, capsys, bad):
    a = _csv(tmp_path / "a.csv", _rows(range(1, 21)))
    lines = _rows(range(1, 21), seed=1)
    lines[7] = bad
    b = _csv(tmp_path / "b.csv", lines)
    run = load_run(b)
    assert run.counts["ragged_rows"] == 1
    for t in TAGS:                                   # no value of the row under any column
        assert 8 not in run.series[t].steps.tolist() and len(run.series[t]) == 19
    assert run.series["actor/entropy"].values.max() < 1      # 328 never lands in actor/entropy
    assert any("1 ragged row(s)" in n and "line 9" in n for n in run.notes)
    printed, result = _execute(tmp_path, a, b, capsys=capsys)
    assert "ragged_rows 1" in printed and "ragged row(s)" in printed
    assert _run_json(result, "b")["skipped"]["ragged_rows"] == 1


def test_trailing_empty_cells_past_the_header_are_no_ragged_row(tmp_path):
    lines = [r + "," for r in _rows(range(1, 6))]             # a writer that ends each row with a comma
    run = load_run(_csv(tmp_path / "a.csv", lines))
    assert "ragged_rows" not in run.counts and len(run.series["actor/entropy"]) == 5


# --- 3. a repeated CSV column ---------------------------------------------------------------------

def test_repeated_csv_column_is_exit_2_naming_file_and_column(tmp_path):
    a = _csv(tmp_path / "a.csv", _rows(range(1, 21)))
    b = _csv(tmp_path / "b.csv", [r + ",0.1" for r in _rows(range(1, 21), seed=1)],
             header="step," + ",".join(TAGS) + ",critic/score/mean")
    proc = _cli(str(a), str(b), "--output", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert f"{b}:1" in proc.stderr and "'critic/score/mean'" in proc.stderr and "columns 2 and 5" in proc.stderr
    assert not (tmp_path / "out").exists()


# --- 4. a console line cut mid-number, shorter than 4096 bytes ------------------------------------

def _console_lines(steps) -> list[str]:
    return [f"step:{s} - val/acc:np.float64(0.{s}5) - global_seqlen/min:{1000 + s} - "
            f"actor/entropy:np.float64(0.3{s}) - perf/throughput:{600 + s}.25" for s in steps]


@pytest.mark.parametrize("cut, gone", [
    ("actor/entropy:np.float64(0.2320", "actor/entropy"),      # an unclosed np.float64(
    ("actor/entropy:np.float64", "actor/entropy"),             # cut inside the wrapper's name
    ("global_seqlen/min:15", "global_seqlen/min"),             # a plain number: the line ends unlike whole lines
    ("actor/entr", None)])                                     # cut inside a key
def test_console_line_visibly_cut_is_truncated_whatever_its_length(tmp_path, cut, gone):
    lines = _console_lines(range(1, 11))
    head = lines[4].split(" - " + cut.split(":")[0])[0]
    pad = " - pad:0." + "1" * (4087 - len(head) - len(cut) - 3 - 9)   # colour codes stripped after wandb's cut
    lines[4] = head + pad + " - " + cut                           # step 5: 4087 bytes, not 4096
    assert len(lines[4].encode()) == 4087
    p = tmp_path / "c.log"
    p.write_text("\n".join(lines) + "\n")
    run = load_run(p)
    assert run.counts["truncated_lines"] == 1 and run.counts["dropped_fields"] == 1
    assert "non_numeric_fields" not in run.counts and not run.non_numeric
    if gone:
        assert 5 not in run.series[gone].steps.tolist() and len(run.series[gone]) == 9
    assert 5 not in run.series["perf/throughput"].steps.tolist()
    assert run.series["val/acc"].steps.tolist() == list(range(1, 11))
    assert any("1 step line(s) cut" in n and "1 shorter than that" in n for n in run.notes)


def test_a_short_whole_line_ending_under_another_key_is_not_cut(tmp_path):
    # far shorter than wandb's 4096 bytes: it never met the cut, whatever key it ends with
    lines = _console_lines(range(1, 11))
    lines[4] = "step:5 - val/acc:np.float64(0.55) - global_seqlen/min:1005"
    p = tmp_path / "c.log"
    p.write_text("\n".join(lines) + "\n")
    run = load_run(p)
    assert "truncated_lines" not in run.counts
    assert 5 in run.series["global_seqlen/min"].steps.tolist()


def _cut_at(step: int, tail: str, length: int) -> str:
    """A validation step's line cut at `length` bytes just after `tail` (padded in front to fit)."""
    head = f"step:{step} - pad:0."
    return head + "1" * (length - len(head) - len(tail) - 3) + " - " + tail


def test_console_lines_of_the_cut_length_are_cut_even_after_a_closed_value(tmp_path):
    lines = _console_lines(range(1, 10))
    lines[2] = _cut_at(3, "val/acc:np.float64(0.2320", 200)      # visibly cut
    lines[5] = _cut_at(6, "val/ac", 200)                         # visibly cut
    lines[8] = _cut_at(9, "val/acc:np.float64(0.25)", 200)       # cut right after a whole value: the same length
    p = tmp_path / "c.log"
    p.write_text("\n".join(lines) + "\n")
    run = load_run(p)
    assert run.counts["truncated_lines"] == 3 and not run.non_numeric
    assert run.series["val/acc"].steps.tolist() == [1, 2, 4, 5, 7, 8]
    assert run.series["pad"].steps.tolist() == [3, 6, 9]
    assert any("3 shorter than that" in n and "1 of the same length as the visibly cut ones (200 bytes)" in n
               for n in run.notes)


def test_console_whole_lines_ending_with_a_closed_value_are_not_cut(tmp_path):
    # step 0: validation only (ends with a closed np.float64(...)); the rest end with perf/throughput
    lines = ["step:0 - val/acc:np.float64(0.05)"] + _console_lines(range(1, 6))
    p = tmp_path / "c.log"
    p.write_text("\n".join(lines) + "\n")
    run = load_run(p)
    assert not run.counts and run.series["val/acc"].steps.tolist() == [0, 1, 2, 3, 4, 5]
    assert run.series["perf/throughput"].values.tolist() == [601.25, 602.25, 603.25, 604.25, 605.25]


# --- 5. a NaN wall time, a negative step ----------------------------------------------------------

def test_csv_nan_wall_time_and_negative_step_are_counted_and_shown(tmp_path, capsys):
    header = "_step,_timestamp," + ",".join(TAGS)
    a = _csv(tmp_path / "a.csv", [f"{r.split(',')[0]},{1.7e9 + 60 * i}," + r.split(",", 1)[1]
                                  for i, r in enumerate(_rows(range(1, 21)))], header=header)
    lines = [f"{r.split(',')[0]},{1.7e9 + 60 * i}," + r.split(",", 1)[1] for i, r in enumerate(_rows(range(1, 21), 1))]
    lines[2] = lines[2].replace(f",{1.7e9 + 120},", ",nan,")            # step 3: NaN wall time
    lines[4] = "-3" + lines[4][1:]                                     # step 5 written as -3
    b = _csv(tmp_path / "b.csv", lines, header=header)
    run = load_run(b)
    assert run.counts["bad_wall_times"] == 1 and run.counts["negative_steps"] == 1
    steps = run.series["critic/score/mean"].steps.tolist()
    assert 3 in steps and 5 not in steps and -3 not in steps and len(steps) == 19
    printed, result = _execute(tmp_path, a, b, capsys=capsys)
    assert "bad_wall_times 1" in printed and "negative_steps 1" in printed
    assert "wall time" in printed and "negative step" in printed
    skipped = _run_json(result, "b")["skipped"]
    assert skipped["bad_wall_times"] == 1 and skipped["negative_steps"] == 1


# --- a file given where wandb reads a run folder ----------------------------------------------------

def test_format_wandb_on_a_file_names_the_file_not_its_folder(tmp_path):
    a = _csv(tmp_path / "a.csv", _rows(range(1, 21)))
    b = _csv(tmp_path / "b.csv", _rows(range(1, 21), seed=1))
    out = tmp_path / "out"
    r = _cli(str(a), str(b), "--format", "wandb", "--output", str(out))
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: {a}: --format wandb reads its run folder"), line
    assert "--format auto (it reads as csv)" in line, line
    assert not out.exists()


def test_a_wandb_log_beside_another_is_refused_not_read_as_the_other(tmp_path):
    run = tmp_path / "run-20250101_000000-abc"
    (run / "files").mkdir(parents=True)
    (run / "files" / "wandb-history.jsonl").write_text(
        "".join(json.dumps({"_step": s, **{t: _value(t, s) for t in TAGS}}) + "\n" for s in range(1, 21)))
    assert curves.load_runs(curves.build_config(**{**_params(), "runs": (str(run / "files" / "wandb-history.jsonl"),
                                                                          str(run)), "format": "wandb"}))
    other = run / "run-zzz.wandb"           # a second run's log copied into the folder
    other.write_bytes(b":W&B\x00\x01\x02")
    (run / "run-abc.wandb").write_bytes(b":W&B\x00\x01\x02")
    with pytest.raises(UserError) as e:
        curves.load_runs(curves.build_config(**{**_params(), "runs": (str(other), str(run))}))
    assert str(e.value).startswith(f"{other}: a wandb log is read through its run folder"), e.value
    assert str(run / "run-abc.wandb") in str(e.value)


def _params() -> dict:
    params = curves.command.make_context("curves", [], resilient_parsing=True).params
    return {k: v for k, v in params.items() if k not in ("output", "json_path")}


# --- a finite value too large to compute with -------------------------------------------------------

def test_a_value_near_float_max_is_counted_as_non_finite_not_exit_3(tmp_path):
    a = _csv(tmp_path / "a.csv", _rows(range(1, 31)))
    lines = _rows(range(1, 31), seed=1)
    lines[19] = "20,1.7e308," + lines[19].split(",", 2)[2]        # step 20's reward: finite, near float max
    b = _csv(tmp_path / "b.csv", lines)
    out = tmp_path / "out"
    r = _cli(str(a), str(b), "--output", str(out), "--json", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    assert "huge (|value| > 1e100)" in r.stdout and "1.7e308" in r.stdout, r.stdout
    result = json.loads((tmp_path / "r.json").read_text())
    assert _run_json(result, "b")["non_finite"]["critic/score/mean"]["huge"] == 1
    reward = result["metrics"]["comparisons"]["b"]["learning"]["reward"]
    assert reward["verdict"] == "DIFFERENT" and "run b diverged: 1 of 30 steps non-finite (huge" in reward["reason"]
    assert (next(out.iterdir()) / "curves_learning.png").stat().st_size > 0


# --- a wandb history file given with --format wandb -------------------------------------------------

def test_format_wandb_on_a_history_file_names_that_file_in_the_output_and_errors(tmp_path):
    runs = []
    for name, rows in (("run-a", range(1, 21)), ("run-b", range(1, 21)), ("run-empty", ())):
        (tmp_path / name / "files").mkdir(parents=True)
        runs.append(tmp_path / name / "files" / "wandb-history.jsonl")
        runs[-1].write_text("".join(json.dumps({"_step": s, **{t: _value(t, s) for t in TAGS}}) + "\n" for s in rows))
    cfg = curves.build_config(**{**_params(), "runs": (str(runs[0]), str(runs[1])), "format": "wandb"})
    loaded = curves.load_runs(cfg)
    assert [r.path for r in loaded] == [str(runs[0]), str(runs[1])]           # not their files/ folders
    record = curves.compare_runs(cfg, loaded)["runs"]
    assert [r["path"] for r in record] == [str(runs[0]), str(runs[1])]
    with pytest.raises(UserError) as e:
        curves.load_runs(curves.build_config(**{**_params(), "runs": (str(runs[2]), str(runs[0])), "format": "wandb"}))
    assert str(e.value).startswith(f"{runs[2]} (read through its folder {runs[2].parent}): "), e.value


def test_a_wandb_run_folder_and_its_history_file_are_a_self_comparison(tmp_path):
    run = tmp_path / "run-20250101_000000-abc"
    (run / "files").mkdir(parents=True)
    hist = run / "files" / "wandb-history.jsonl"
    hist.write_text("".join(json.dumps({"_step": s, **{t: _value(t, s) for t in TAGS}}) + "\n" for s in range(1, 21)))
    cfg = curves.build_config(**{**_params(), "runs": (str(run), str(hist)), "format": "wandb"})
    comp = next(iter(curves.compare_runs(cfg, curves.load_runs(cfg))["comparisons"].values()))
    assert "self-comparison" in (comp.get("note") or "")
