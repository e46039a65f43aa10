"""A TensorBoard event file's scalar record with a negative step (an int64 allows it; no training
step is negative) is skipped and counted as negative_steps, with the note the CSV, file-logger,
console and wandb readers give, and `curves` shows the count (printed and in result.json)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from samspec_bench.evals.training_logs import detect_format, load_run
from samspec_bench.evals.training_logs.tensorboard import masked_crc32c
from samspec_bench.suites import curves

TAGS = ("critic/score/mean", "response_length/mean")

# --- a small TFRecord / Event encoder (as in tests/evals/test_training_logs.py, which a test module
# cannot import: see test_architecture.test_no_test_module_imports_another) -------------------------


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1          # a negative int64 is its two's complement, ten bytes
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _ld(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _event(step: int, values: dict[str, float], wall: float) -> bytes:
    """Event{wall_time = 1, step = 2, summary = 5 {value = 1 {tag = 1, simple_value = 2}}}."""
    vals = b"".join(_ld(1, _ld(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", v))
                    for tag, v in values.items())
    return _varint(1 << 3 | 1) + struct.pack("<d", wall) + _varint(2 << 3) + _varint(step) + _ld(5, vals)


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def _write(path: Path, steps: list[int], seed: int) -> Path:
    version = _varint(1 << 3 | 1) + struct.pack("<d", 1.7e9) + _ld(3, b"brain.Event:2")
    events = [_event(s, {t: 0.5 + 0.01 * ((i * 7 + seed) % 5) for t in TAGS}, 1.7e9 + 60 * i)
              for i, s in enumerate(steps)]
    path.mkdir(parents=True)
    f = path / "events.out.tfevents.1700000000.host.1.0"
    f.write_bytes(_record(version) + b"".join(_record(e) for e in events))
    return path


def test_tensorboard_negative_step_is_skipped_counted_and_shown_by_curves(tmp_path, capsys):
    a = _write(tmp_path / "a", list(range(1, 21)), 0)
    b = _write(tmp_path / "b", [s if s != 5 else -3 for s in range(1, 21)], 1)   # step 5 written as -3
    f = next(b.iterdir())
    assert detect_format(f) == "tensorboard"
    run = load_run(b)
    assert run.counts.get("negative_steps") == 1, run.counts
    assert any(n == "1 record(s) with a negative step (e.g. -3): skipped, no training step is negative"
               for n in run.notes), run.notes
    steps = run.series["critic/score/mean"].steps.tolist()
    assert -3 not in steps and 5 not in steps and len(steps) == 19
    params = curves.command.make_context("curves", [], resilient_parsing=True).params
    params = {k: v for k, v in params.items() if k not in ("output", "json_path")}
    params["runs"] = (str(a), str(b))
    curves.execute(curves.build_config(**params), output=str(tmp_path / "out"), json_path=str(tmp_path / "r.json"))
    printed = capsys.readouterr().out
    assert "negative_steps 1" in printed and "negative step" in printed, printed
    result = json.loads((tmp_path / "r.json").read_text())
    skipped = next(r for r in result["runs"] if r["label"] == "b")["skipped"]
    assert skipped.get("negative_steps") == 1, skipped


def _scalar_records(steps, tags_at) -> bytes:
    """One record per scalar, as verl's SummaryWriter.add_scalar writes them."""
    return b"".join(_record(_event(s, {t: 0.5}, 1.7e9 + s)) for s in steps for t in tags_at(s))


def test_torn_tail_before_a_restart_is_bounded_by_the_restart_not_the_runs_end(tmp_path):
    # a crash tears file 1's last record at step 10; the restart re-logs from its step-8
    # checkpoint to step 20. timing_s/gen is never logged at the last step (a pipelined run's
    # final step), so it lacks step 20 in an intact run as well: no point of it was lost
    def tags_at(s):
        return ("critic/score/mean",) + (("timing_s/gen",) if s != 20 else ())
    version = _record(_varint(1 << 3 | 1) + struct.pack("<d", 1.7e9) + _ld(3, b"brain.Event:2"))
    run_dir = tmp_path / "sam_on"
    run_dir.mkdir()
    first = version + _scalar_records(range(1, 11), tags_at)
    (run_dir / "events.out.tfevents.1700000000.host.1.0").write_bytes(first[:-9])
    (run_dir / "events.out.tfevents.1700009000.host.2.0").write_bytes(version + _scalar_records(range(8, 21), tags_at))
    run = load_run(run_dir)
    assert run.counts["truncated_records"] == 1
    assert "lost_points" not in run.counts, run.notes
    assert run.series["timing_s/gen"].steps.tolist() == list(range(1, 20))


def _restarted_with_a_corrupt_step_7(tmp_path, restart_from: int) -> Path:
    # file 1 logs steps 1-10 with step 7's record corrupt (data CRC); the restart logs from `restart_from` to 15
    version = _record(_varint(1 << 3 | 1) + struct.pack("<d", 1.7e9) + _ld(3, b"brain.Event:2"))
    recs = [bytearray(_record(_event(s, {t: 0.5 for t in TAGS}, 1.7e9 + s))) for s in range(1, 11)]
    recs[6][20] ^= 0xFF
    run_dir = tmp_path / "sam_on"
    run_dir.mkdir()
    (run_dir / "events.out.tfevents.1700000000.host.1.0").write_bytes(version + b"".join(map(bytes, recs)))
    later = b"".join(_record(_event(s, {t: 0.6 for t in TAGS}, 1.8e9 + s)) for s in range(restart_from, 16))
    (run_dir / "events.out.tfevents.1700009000.host.2.0").write_bytes(version + later)
    return run_dir


def test_corrupt_record_at_a_step_the_restart_logs_again_is_replaced_not_unknown(tmp_path):
    run = load_run(_restarted_with_a_corrupt_step_7(tmp_path, 5))
    assert run.counts["corrupt_records"] == 1
    assert "damage_cost_unknown" not in run.counts and "lost_points" not in run.counts, run.notes
    assert run.replaced()["damaged_points_relogged"] == {"points": len(TAGS), "kept": "later file's"}
    note = next(n for n in run.summary()["notes"] if n.startswith("1 corrupt"))
    assert "unknown" not in note and f"{len(TAGS)} point(s) the damage cost logged again" in note
    assert run.series[TAGS[0]].steps.tolist() == list(range(1, 16))


def test_corrupt_record_at_a_step_the_restart_does_not_reach_is_still_lost(tmp_path):
    run = load_run(_restarted_with_a_corrupt_step_7(tmp_path, 9))
    assert run.counts["lost_points"] == len(TAGS) and run.counts["steps_lost"] == 1
    assert "damaged_points_relogged" not in run.counts
