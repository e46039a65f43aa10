"""`samspec-bench curves` on awkward input (a robustness sweep): a restarted TensorBoard run, a
corrupt record of unknown cost, wandb's string and null values, empty step windows, fractional
steps, folders with unreadable files, wandb's line cut, ragged CSV rows, unparseable metrics,
--margin errors and a self-comparison. Each: counted and shown, or one line and exit 2."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs import expand_runs, load_run
from samspec_bench.evals.training_logs.tensorboard import masked_crc32c
from samspec_bench.suites import curves
from samspec_bench.suites.curves import build_config, compare_runs, load_runs

REPO = Path(__file__).resolve().parents[3]
TAGS = ("critic/score/mean", "response_length/mean", "actor/entropy")


def params(**over) -> dict:
    ctx = curves.command.make_context("curves", [], resilient_parsing=True)
    p = {k: v for k, v in ctx.params.items() if k not in ("output", "json_path")}
    p.update(over)
    return p


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "samspec_bench.cli", "curves", *args], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def _value(tag: str, step: int, seed: int = 0) -> float:
    rng = np.random.default_rng(int(step * 14) + seed)
    base = {"critic/score/mean": 0.5, "response_length/mean": 300.0, "actor/entropy": 0.3}[tag]
    return base * (1 + rng.normal(0, 0.01))


def write_csv(path: Path, steps, seed: int = 0, step_col: str = "step") -> Path:
    rows = [",".join((step_col,) + TAGS)] + [",".join([str(s)] + [f"{_value(t, s, seed):.6g}" for t in TAGS])
                                             for s in steps]
    path.write_text("\n".join(rows) + "\n")
    return path


def write_console(path: Path, steps, seed: int = 0) -> Path:
    path.write_text("".join(f"step:{s} - " + " - ".join(f"{t}:{_value(t, s, seed)!r}" for t in TAGS) + "\n"
                            for s in steps))
    return path


# --- a minimal TensorBoard writer (TFRecord framing, Event/Summary protobuf) ----------------------

def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _ld(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _event(step: int, tag: str, value: float) -> bytes:
    val = _ld(1, _ld(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", value))
    return _varint(1 << 3 | 1) + struct.pack("<d", 1.7e9) + _varint(2 << 3) + _varint(step) + _ld(5, val)


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc32c(length)) + data
            + struct.pack("<I", masked_crc32c(data)))


def write_events(path: Path, points: list[tuple[int, str, float]], corrupt: int | None = None) -> Path:
    """One record per point (as torch's SummaryWriter.add_scalar writes them); `corrupt`: the index
    of a point whose record gets a bad data CRC."""
    version = _varint(1 << 3 | 1) + struct.pack("<d", 1.7e9) + _ld(3, b"brain.Event:2")
    recs = [_record(version)]
    for i, (s, t, v) in enumerate(points):
        rec = bytearray(_record(_event(s, t, v)))
        if i == corrupt:
            rec[-1] ^= 0xFF
        recs.append(bytes(rec))
    path.write_bytes(b"".join(recs))
    return path


def _tb_points(steps, seed: int = 0) -> list[tuple[int, str, float]]:
    return [(s, t, _value(t, s, seed)) for s in steps for t in TAGS]


# --- 1. a restarted TensorBoard run in its own folder ---------------------------------------------

@pytest.mark.parametrize("prefix", ["", "run_"])
def test_restarted_tensorboard_run_in_its_own_folder_is_one_run(tmp_path, prefix):
    d = tmp_path / "tb"
    d.mkdir()
    # SummaryWriter's names: events.out.tfevents.{time}.{hostname}.{pid}.{global_uid}; the restart
    # resumes from a checkpoint at step 10 and re-logs steps 10-12
    write_events(d / f"{prefix}events.out.tfevents.1753500620.host.site.111.0", _tb_points(range(1, 13)))
    write_events(d / f"{prefix}events.out.tfevents.1753600000.host.site.222.0", _tb_points(range(10, 31), seed=1))
    assert expand_runs(d) == [d]
    other = write_csv(tmp_path / "other.csv", range(1, 31))
    cfg = build_config(**params(runs=(str(other), str(d))))
    runs = load_runs(cfg)
    run = runs[1]
    assert run.read["files"] == 2 and run.series["critic/score/mean"].steps.tolist() == list(range(1, 31))
    assert run.counts["duplicate_steps"] == 3 * len(TAGS)
    # the later file's value wins at a re-logged step
    assert run.series["critic/score/mean"].values[9] == pytest.approx(_value("critic/score/mean", 10, 1), rel=1e-6)
    out = compare_runs(cfg, runs)
    assert out["comparisons"][run.label]["learning"]["reward"]["whole"]["steps"] == 30


def test_re_logged_steps_are_shown_as_replaced_not_skipped(tmp_path, capsys):
    # a resumed run re-logs steps 21-30 after its checkpoint: the later values replace the earlier,
    # nothing is lost, so they are counted as replaced (the later value kept), never as skipped
    base = write_console(tmp_path / "a.log", range(1, 31))
    resumed = tmp_path / "b.log"
    resumed.write_text(write_console(tmp_path / "first.log", range(1, 31), seed=1).read_text()
                       + write_console(tmp_path / "again.log", range(21, 31), seed=2).read_text())
    cfg = build_config(**params(runs=(str(base), str(resumed))))
    assert curves.execute(cfg, output=str(tmp_path / "out"), json_path=str(tmp_path / "r.json")) == 0
    printed = " ".join(capsys.readouterr().out.split())     # the console wraps long lines
    line = printed[printed.index("b (console"):printed.index("curves: learning metrics")]
    assert "skipped:" not in line and "replaced: 30 value(s)" in line and "the later value kept" in line, line
    run = next(r for r in json.loads((tmp_path / "r.json").read_text())["runs"] if r["label"] == "b")
    assert "duplicate_steps" not in run["skipped"], run["skipped"]
    assert run["replaced"] == {"duplicate_steps": {"points": 10 * len(TAGS), "kept": "later"}}


def test_side_by_side_runs_one_of_them_restarted_is_still_refused_naming_it(tmp_path):
    d = tmp_path / "tb"
    d.mkdir()
    write_events(d / "a.events.out.tfevents.1.h.1.0", _tb_points(range(1, 5)))
    write_events(d / "a.events.out.tfevents.2.h.2.0", _tb_points(range(5, 9)))
    write_events(d / "b.events.out.tfevents.1.h.3.0", _tb_points(range(1, 9)))
    with pytest.raises(UserError, match=r"prefix a\. .*restarted"):
        expand_runs(d)


# --- 2. a corrupt record whose cost cannot be told ------------------------------------------------

def test_corrupt_record_of_unknown_cost_says_unknown(tmp_path):
    pts = _tb_points(range(1, 21))
    pts += [(s, "val-core/x/acc/mean@1", 0.5) for s in (5, 10, 15, 20)]     # a tag logged every 5th step
    pts.sort(key=lambda p: p[0])
    lost = next(i for i, p in enumerate(pts) if p[0] == 10 and p[1].startswith("val"))
    run = load_run(write_events(tmp_path / "events.out.tfevents.1.h.1.0", pts, corrupt=lost))
    assert run.counts["corrupt_records"] == 1
    note = next(n for n in run.notes if "corrupt" in n)
    assert "points lost: unknown" in note and "0 point(s)" not in note
    assert not note.rstrip().endswith(":")
    assert run.counts["damage_cost_unknown"] == 1


# --- 3. wandb history: strings and nulls ----------------------------------------------------------

def test_wandb_history_counts_string_and_null_values(tmp_path):
    files = tmp_path / "run-1" / "files"
    files.mkdir(parents=True)
    rows = []
    for s in range(1, 11):
        row = {"_step": s, **{t: _value(t, s) for t in TAGS}}
        if s == 2:
            row["critic/score/mean"] = "0.52"
        if s == 3:
            row["actor/entropy"] = None
        rows.append(json.dumps(row))
    (files / "wandb-history.jsonl").write_text("\n".join(rows) + "\n")
    run = load_run(tmp_path / "run-1")
    assert run.counts["non_numeric_fields"] == 1 and run.counts["null_values"] == 1
    assert 2 not in run.series["critic/score/mean"].steps and 3 not in run.series["actor/entropy"].steps
    assert any("null" in n for n in run.notes) and any("not a number" in n for n in run.notes)


# --- 4. no common step ----------------------------------------------------------------------------

def test_no_common_step_is_one_line_exit_2(tmp_path):
    a = write_csv(tmp_path / "a.csv", range(1, 41))
    b = write_csv(tmp_path / "b.csv", range(1, 41), seed=1)
    far = write_csv(tmp_path / "far.csv", range(100, 141), seed=2)
    proc = _cli(str(a), str(b), "--steps", "500:600", "--output", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "--steps 500:600" in proc.stderr and "1-40" in proc.stderr
    proc = _cli(str(a), str(far), "--output", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "share no step" in proc.stderr and "1-40" in proc.stderr and "100-140" in proc.stderr
    assert not (tmp_path / "out").exists()


# --- 5. fractional steps --------------------------------------------------------------------------

def test_fractional_steps_are_counted_never_relabelled(tmp_path):
    p = write_csv(tmp_path / "a.csv", [1, 2, 3, 3.5, 4])
    run = load_run(p)
    assert run.counts["non_integer_steps"] == 1 and run.series["critic/score/mean"].steps.tolist() == [1, 2, 3, 4]
    assert run.series["critic/score/mean"].values[2] == pytest.approx(_value("critic/score/mean", 3), rel=1e-5)
    assert "duplicate_steps" not in run.counts
    files = tmp_path / "wb" / "files"
    files.mkdir(parents=True)
    (files / "wandb-history.jsonl").write_text("".join(json.dumps({"_step": s, "x": float(s)}) + "\n"
                                                       for s in (6, 7, 7.5, 8)))
    wb = load_run(tmp_path / "wb")
    assert wb.counts["non_integer_steps"] == 1 and wb.series["x"].values.tolist() == [6, 7, 8]
    jl = tmp_path / "m.jsonl"
    jl.write_text("".join(json.dumps({"step": s, "data": {"x": float(s)}}) + "\n" for s in (1, 2, 2.5, 3)))
    fl = load_run(jl)
    assert fl.counts["non_integer_steps"] == 1 and fl.series["x"].values.tolist() == [1, 2, 3]


# --- 6. a folder of runs with unreadable files ----------------------------------------------------

def test_folder_of_runs_lists_every_file_it_ignores(tmp_path, capsys):
    d = tmp_path / "sweep"
    d.mkdir()
    write_console(d / "a_off.log", range(1, 31))
    write_console(d / "b_on.log", range(1, 31), seed=1)
    (d / "empty.log").write_text("")
    write_csv(d / "nostep.csv", range(1, 5), step_col="iteration")
    (d / "header_only.csv").write_text("step," + ",".join(TAGS) + "\n")
    (d / "junk.txt").write_text("hello\n")
    ignored: list[str] = []
    assert [p.name for p in expand_runs(d, ignored)] == ["a_off.log", "b_on.log"]
    why = dict(line.split(": ", 1) for line in ignored)
    assert set(why) == {str(d / n) for n in ("empty.log", "nostep.csv", "header_only.csv", "junk.txt")}
    assert why[str(d / "empty.log")] == "empty file" and "no step column" in why[str(d / "nostep.csv")]
    assert "no data rows" in why[str(d / "header_only.csv")]
    cfg = build_config(**params(runs=(str(d),)))
    assert cfg.ignored == ignored
    assert curves.execute(cfg, output=str(tmp_path / "out"), json_path=str(tmp_path / "r.json")) == 0
    printed = capsys.readouterr().out
    assert all(f"ignored {d / n}: " in printed for n in ("empty.log", "nostep.csv", "header_only.csv", "junk.txt"))
    assert json.loads((tmp_path / "r.json").read_text())["ignored_files"] == ignored


# --- 7. wandb's 4096-byte cut took the requested metrics -------------------------------------------

def test_cut_lines_are_named_when_they_took_every_requested_metric(tmp_path):
    a = write_console(tmp_path / "a.log", range(1, 21))
    lines = []
    for s in range(1, 21):
        pad = " - ".join(f"val-aux/x/m{i}:{0.5 + i / 1000:.6f}" for i in range(200))
        line = (f"step:{s} - {pad} - " + " - ".join(f"{t}:{_value(t, s)!r}" for t in TAGS)).encode()
        lines.append(line[:4096])                 # wandb's console capture cuts here
    b = tmp_path / "b.log"
    b.write_bytes(b"\n".join(lines) + b"\n")
    proc = _cli(str(a), str(b), "--output", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "20 step line(s) cut at 4096 bytes" in proc.stderr and "pick some with --metric" not in proc.stderr


# --- 8. ragged CSV rows ---------------------------------------------------------------------------

def test_csv_rows_with_more_or_fewer_cells_than_the_header_are_skipped_and_counted(tmp_path):
    p = write_csv(tmp_path / "a.csv", range(1, 11))
    lines = p.read_text().splitlines()
    lines[3] += ",9.9,8.8"                     # step 3: two cells past the header
    lines[5] = ",".join(lines[5].split(",")[:2])   # step 5: only the first metric
    p.write_text("\n".join(lines) + "\n")
    run = load_run(p)
    assert run.counts["ragged_rows"] == 2      # skipped whole: their cells may sit under the wrong columns
    for t in TAGS:
        assert run.series[t].steps.tolist() == [1, 2, 4, 6, 7, 8, 9, 10]
    assert any("2 ragged row(s)" in n and "line 4" in n for n in run.notes)


# --- 9. a metric present but never a number -------------------------------------------------------

def test_unparseable_metric_is_said_present_but_not_numeric(tmp_path):
    a = write_console(tmp_path / "a.log", range(1, 21))
    b = tmp_path / "b.log"
    b.write_text("".join(f"step:{s} - critic/score/mean:{_value('critic/score/mean', s)!r} - "
                         f"actor/entropy:tensor([0.30, 0.31], device='cuda:0')\n" for s in range(1, 21)))
    cfg = build_config(**params(runs=(str(a), str(b))))
    out = compare_runs(cfg, load_runs(cfg))
    absent = " ".join(out["comparisons"]["b"]["absent"])
    assert "actor/entropy (entropy; present but not numeric in b: 20 values)" in absent
    assert "response_length/mean (length; absent in b)" in absent


def test_pre_existing_parseable_tensor_values_stay_numbers(tmp_path):
    p = tmp_path / "t.log"
    p.write_text("".join(f"step:{s} - actor/entropy:tensor(0.30, device='cuda:0')\n" for s in (1, 2)))
    assert load_run(p).series["actor/entropy"].values.tolist() == [0.3, 0.3]


# --- 10. --margin errors echo the argument ---------------------------------------------------------

@pytest.mark.parametrize("arg, needle", [("foo=3", "--margin foo=3:"), ("reward=abc", "--margin reward=abc:"),
                                         ("reward = 5x", "--margin 'reward = 5x':")])
def test_margin_errors_echo_the_argument_as_typed(tmp_path, arg, needle):
    a = write_csv(tmp_path / "a.csv", range(1, 21))
    b = write_csv(tmp_path / "b.csv", range(1, 21), seed=1)
    proc = _cli(str(a), str(b), "--margin", arg, "--output", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert needle in proc.stderr, proc.stderr


# --- 11. the same log twice -----------------------------------------------------------------------

def test_same_file_twice_is_noted_as_a_self_comparison(tmp_path, capsys):
    a = write_csv(tmp_path / "a.csv", range(1, 21))
    link = tmp_path / "link.csv"
    link.symlink_to(a)
    for second in (a, link):
        cfg = build_config(**params(runs=(str(a), str(second))))
        assert curves.execute(cfg, output=str(tmp_path / "out"), json_path=str(tmp_path / "r.json")) == 0
        printed = capsys.readouterr().out
        assert "same file as the baseline" in printed and "self-comparison" in printed
        assert "\U0001F170" not in printed                  # 'A:a' + ':' is no emoji code
        comp = next(iter(json.loads((tmp_path / "r.json").read_text())["metrics"]["comparisons"].values()))
        assert "self-comparison" in comp["note"]


def test_a_metric_with_no_common_step_beside_others_shows_0_steps_not_none():
    from samspec_bench.suites.curves.command import steps_text
    assert steps_text({"steps": 0, "first_step": None, "last_step": None}) == "0"
    assert steps_text({"steps": 40, "first_step": 1, "last_step": 40}) == "40 (1-40)"


def test_a_run_with_no_scalars_is_said_so_not_pointed_at_metric(tmp_path):
    (tmp_path / "a").mkdir()
    a = write_events(tmp_path / "a" / "events.out.tfevents.1700000000.h.1.0", _tb_points(range(1, 21)))
    empty = tmp_path / "b"
    empty.mkdir()
    write_events(empty / "events.out.tfevents.1700000000.h.2.0", [])       # the version record only
    cfg = build_config(**params(runs=(str(a.parent), str(empty))))
    with pytest.raises(UserError) as e:
        compare_runs(cfg, load_runs(cfg))
    assert "holds no scalar metric" in str(e.value) and "records 1" in str(e.value)
    assert "--metric" not in str(e.value)


def test_validation_logged_by_one_run_only_is_named_as_such(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write_events(tmp_path / "a" / "events.out.tfevents.1700000000.h.1.0", _tb_points(range(1, 21)))
    val = write_events(tmp_path / "b" / "events.out.tfevents.1700000000.h.2.0",
                       [(s, "val-core/gsm8k/acc/mean@1", 0.5) for s in range(0, 21, 5)])
    cfg = build_config(**params(runs=(str(a.parent), str(val.parent))))
    with pytest.raises(UserError, match=r"validation metrics \(val-core/gsm8k/acc/mean@1\) are logged by no other run"):
        compare_runs(cfg, load_runs(cfg))


def test_a_run_folder_and_the_file_it_is_read_from_are_a_self_comparison(tmp_path):
    (tmp_path / "a").mkdir()
    ev = write_events(tmp_path / "a" / "events.out.tfevents.1700000000.h.1.0", _tb_points(range(1, 21)))
    (tmp_path / "c").mkdir()
    log = write_console(tmp_path / "c" / "console.log", range(1, 21))
    other = write_console(tmp_path / "other.log", range(1, 21))
    for first, second, same in ((ev.parent, ev, True), (log.parent, log, True), (log, other, False)):
        cfg = build_config(**params(runs=(str(first), str(second))))
        comp = next(iter(compare_runs(cfg, load_runs(cfg))["comparisons"].values()))
        assert ("self-comparison" in (comp.get("note") or "")) is same


def test_a_margin_finer_than_a_rounded_logs_print_step_is_not_called_equivalent():
    # verl <= 0.4 printed 3 decimals: a KL of 0.0002 and one of 0.0004 both read 0.000
    from types import SimpleNamespace

    from samspec_bench.suites.curves.verdicts import _resolution_limited
    rounded, exact = SimpleNamespace(read={"decimals": 3}), SimpleNamespace(read={})
    equivalent = {"verdict": "EQUIVALENT", "reason": "inside the margin", "whole": {"margin": 0.0001}}
    out = _resolution_limited(equivalent, exact, rounded)
    assert out["verdict"] == "INCONCLUSIVE" and "3 decimals" in out["reason"] and out["resolution"] == 0.001
    wide = {**equivalent, "whole": {"margin": 0.02}}
    assert _resolution_limited(wide, exact, rounded)["verdict"] == "EQUIVALENT"
    assert _resolution_limited(equivalent, exact, exact)["verdict"] == "EQUIVALENT"   # logs print every digit
    different = {**equivalent, "verdict": "DIFFERENT"}
    assert _resolution_limited(different, rounded, rounded)["verdict"] == "DIFFERENT"
