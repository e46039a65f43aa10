"""Training-log readers (samspec_bench.evals.training_logs): TensorBoard event files written here
by a small encoder (TFRecord framing, Event protobuf), verl console logs in the current and
older formats, wandb run folders (console capture, history JSONL, the binary .wandb log), CSV
exports, format detection; damaged input is skipped and counted; the shared real logs."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs import detect_format, load_run
from samspec_bench.evals.training_logs.console import WANDB_LINE_CUT, parse_number
from samspec_bench.evals.training_logs.tensorboard import crc32c, masked_crc32c
from samspec_bench.evals.training_logs.wandb_run import BLOCK

# --- a protobuf / TFRecord encoder (the inverse of the readers, written independently) ------


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _key(num: int, wt: int) -> bytes:
    return _varint(num << 3 | wt)


def _ld(num: int, payload: bytes) -> bytes:
    return _key(num, 2) + _varint(len(payload)) + payload


def _tensor(dtype: int, *, content: bytes | None = None, float_val=None, double_val=None, int64_val=None,
            dims=()) -> bytes:
    msg = _key(1, 0) + _varint(dtype)
    shape = b"".join(_ld(2, _key(1, 0) + _varint(d)) for d in dims)
    msg += _ld(2, shape)
    if content is not None:
        msg += _ld(4, content)
    if float_val is not None:
        msg += _ld(5, struct.pack("<f", float_val))
    if double_val is not None:
        msg += _ld(6, struct.pack("<d", double_val))
    if int64_val is not None:
        msg += _ld(10, _varint(int64_val))
    return msg


def event(step: int, values: list[tuple[str, object]], wall: float = 1.7e9) -> bytes:
    """An Event: wall_time = 1, step = 2, summary = 5 {value = 1 {tag = 1, simple_value = 2 | tensor = 8}}."""
    vals = b""
    for tag, v in values:
        body = _ld(1, tag.encode())
        if isinstance(v, bytes):       # a prepared TensorProto
            body += _ld(8, v)
        else:
            body += _key(2, 5) + struct.pack("<f", float(v))
        vals += _ld(1, body)
    return _key(1, 1) + struct.pack("<d", wall) + _key(2, 0) + _varint(step) + _ld(5, vals)


def record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def write_events(path: Path, events: list[bytes]) -> Path:
    version = _key(1, 1) + struct.pack("<d", 1.7e9) + _ld(3, b"brain.Event:2")
    path.write_bytes(record(version) + b"".join(record(e) for e in events))
    return path


# --- TensorBoard --------------------------------------------------------------------------------------

def test_crc32c_check_value():
    # CRC-32C's published check value (RFC 3720, appendix B.4 test vectors; "123456789" -> 0xE3069283)
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


def test_tensorboard_simple_and_tensor_scalars(tmp_path):
    evs = [event(s, [("critic/score/mean", 0.1 * s), ("timing_s/gen", 10 + s)], wall=1.7e9 + s) for s in range(1, 6)]
    evs.append(event(6, [("t/float_content", _tensor(1, content=struct.pack("<f", 2.5))),
                         ("t/double_val", _tensor(2, double_val=-1.25)),
                         ("t/float_val", _tensor(1, float_val=0.75)),
                         ("t/int64", _tensor(9, int64_val=-3 & ((1 << 64) - 1))),
                         ("t/text", _tensor(7, content=b"hello")),
                         ("t/vector", _tensor(1, content=struct.pack("<2f", 1, 2), dims=(2,)))]))
    p = write_events(tmp_path / "events.out.tfevents.1700000000.host.1.0", evs)
    assert detect_format(p) == "tensorboard"
    run = load_run(p)
    s = run.series["critic/score/mean"]
    assert list(s.steps) == [1, 2, 3, 4, 5]
    assert np.allclose(s.values, np.float32([0.1 * k for k in range(1, 6)]))
    assert s.wall_time is not None and s.wall_time[0] == pytest.approx(1.7e9 + 1)
    assert run.series["t/float_content"].values[0] == 2.5
    assert run.series["t/double_val"].values[0] == -1.25
    assert run.series["t/float_val"].values[0] == 0.75
    assert run.series["t/int64"].values[0] == -3
    assert "t/text" not in run.series and "t/vector" not in run.series
    assert run.read["records"] == 7
    assert run.counts == {"non_scalar_values": 2}   # the text and the vector: not curves, but counted


def test_tensorboard_corrupt_record_is_skipped_and_counted(tmp_path):
    evs = [event(s, [("critic/score/mean", s)]) for s in range(1, 11)]
    p = write_events(tmp_path / "a.tfevents.1", evs)
    blob = bytearray(p.read_bytes())
    # flip one byte inside the data of the 5th event record (the file starts with a version record)
    recs, pos = [], 0
    while pos < len(blob):
        (n,) = struct.unpack_from("<Q", blob, pos)
        recs.append(pos)
        pos += 12 + n + 4
    blob[recs[5] + 12 + 3] ^= 0xFF
    p.write_bytes(bytes(blob) + b"\x07\x00\x00")        # and a torn tail
    run = load_run(p)
    assert run.counts["corrupt_records"] == 1 and run.counts["truncated_records"] == 1
    assert list(run.series["critic/score/mean"].steps) == [1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert any("corrupt" in n for n in run.notes)


def test_tensorboard_folder_one_run_or_error(tmp_path):
    d = tmp_path / "tb"
    d.mkdir()
    write_events(d / "events.out.tfevents.100.h.1.0", [event(s, [("x", s)]) for s in (1, 2)])
    # a restart of the same run: a later file re-logs step 2 and goes on; the later value wins
    write_events(d / "events.out.tfevents.200.h.1.0", [event(s, [("x", 10 * s)]) for s in (2, 3)])
    run = load_run(d)
    assert list(run.series["x"].steps) == [1, 2, 3] and list(run.series["x"].values) == [1, 20, 30]
    assert run.counts["duplicate_steps"] == 1 and run.read["files"] == 2
    (d / "other").mkdir()
    write_events(d / "other" / "events.out.tfevents.300.h.2.0", [event(1, [("x", 1)])])
    with pytest.raises(UserError, match="2 TensorBoard runs"):
        load_run(d)


def test_tensorboard_damaged_from_the_start_is_a_user_error(tmp_path):
    p = tmp_path / "x.tfevents.1"
    p.write_bytes(b"\x00" * 40)
    with pytest.raises(UserError, match="no readable TensorBoard record"):
        load_run(p)


# --- damage before a file's first intact record (#32) ---------------------------------------------
# write_events' version record is 40 bytes (16 framing, wall_time 9, file_version 15); an event
# of one one-letter tag at a step below 128 is 39 bytes: smaller than the version record, so a
# bound that forgot to leave the version record out would claim a point too many.
VERSION_BYTES, R_BYTES = 40, 39


def _r_events(path: Path, steps) -> Path:
    return write_events(path, [event(s, [("r", float(s))]) for s in steps])


def test_junk_in_front_of_the_version_record_is_counted_and_costs_nothing(tmp_path):
    intact = _r_events(tmp_path / "a.tfevents.1", range(1, 11))
    junk = bytes(range(7, 44))                                      # 37 bytes, NULs absent, no record
    p = tmp_path / "restored.bin"                                   # no tfevents in the name: sniffed
    p.write_bytes(junk + intact.read_bytes())
    assert detect_format(p) == "tensorboard"
    run = load_run(p)
    assert run.series["r"].steps.tolist() == list(range(1, 11))
    assert run.counts == {"corrupt_records": 1, "skipped_bytes": 37}
    assert any("37 byte(s) of damage before a file's first intact record" in n and "no record lost" in n
               for n in run.notes), run.notes


def test_damage_over_the_version_record_is_bounded_by_its_bytes(tmp_path):
    p = _r_events(tmp_path / "b.tfevents.1", range(1, 11))
    blob = bytearray(p.read_bytes())
    assert len(blob) == VERSION_BYTES + 10 * R_BYTES
    for i in range(VERSION_BYTES + 2 * R_BYTES + 1):              # the version record, steps 1, 2, a byte of 3
        blob[i] ^= 0xA5
    p.write_bytes(bytes(blob))
    run = load_run(p)
    assert run.series["r"].steps.tolist() == list(range(4, 11))
    # 40 + 3 x 39 bytes passed over; less the version record, room for 3 one-point records
    assert run.counts["skipped_bytes"] == VERSION_BYTES + 3 * R_BYTES and run.counts["lost_points_at_most"] == 3
    assert "lost_points" not in run.counts                         # which steps cannot be told
    assert any("at most 3 point(s) lost at steps up to 4" in n for n in run.notes), run.notes


def test_damage_at_a_restarted_files_head_is_placed_after_the_earlier_file(tmp_path):
    d = tmp_path / "tb"
    d.mkdir()
    _r_events(d / "events.out.tfevents.100.h.1.0", range(1, 6))
    later = _r_events(d / "events.out.tfevents.200.h.1.0", range(6, 11))
    blob = bytearray(later.read_bytes())
    for i in range(VERSION_BYTES + R_BYTES + 1):                   # its version record, step 6, a byte of 7
        blob[i] ^= 0xA5
    later.write_bytes(bytes(blob))
    run = load_run(d)
    assert run.series["r"].steps.tolist() == [1, 2, 3, 4, 5, 8, 9, 10]
    assert run.counts["lost_points"] == 2 and run.counts["steps_lost"] == 2
    assert "lost_points_at_most" not in run.counts
    assert any("step 6 (r)" in n and "step 7 (r)" in n for n in run.notes), run.notes


def test_real_event_file_behind_junk_reads_whole(shared_data, tmp_path):
    src = sorted((shared_data / "training_logs" / "verl_pr2854_tensorboard").glob("q3b_fsdp_base.*"))[0]
    p = tmp_path / "copy.bin"
    p.write_bytes(b"\x00\x01junk" * 50 + src.read_bytes())
    intact, run = load_run(src), load_run(p)
    assert {t: s.steps.tolist() for t, s in run.series.items()} == {t: s.steps.tolist() for t, s in intact.series.items()}
    assert run.counts == {"corrupt_records": 1, "skipped_bytes": 300}


# --- verl console logs ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, value", [("0.5", 0.5), ("np.float64(-0.25)", -0.25), ("np.int32(7)", 7.0),
                                         ("1e-05", 1e-5), ("nan", None), ("abc", None), ("tensor(0.5)", 0.5),
                                         ("numpy.float32(3)", 3.0)])
def test_parse_number(text, value):
    got = parse_number(text)
    if value is None:
        assert got is None or np.isnan(got)
    else:
        assert got == pytest.approx(value)


def _step_line(step: int, pairs: list[tuple[str, str]]) -> str:
    return " - ".join([f"step:{step}"] + [f"{k}:{v}" for k, v in pairs])


def test_console_current_format_with_a_wandb_cut_line(tmp_path):
    lines = ["Training from scratch", "wandb: some banner"]
    for s in range(1, 6):
        lines.append(_step_line(s, [("actor/entropy", f"np.float64({0.3 - 0.01 * s})"), ("critic/score/mean", str(0.1 * s)),
                                    ("num_turns/max", f"np.int32({s})")]))
    # step 6: validation keys first, then the training keys; wandb cuts the line at 4096 bytes
    pairs = [("actor/entropy", "np.float64(0.24)")] + [(f"val-aux/x/reward/k{i}", f"np.float64({i}.123456789)")
                                                       for i in range(400)]
    pairs.append(("critic/score/mean", "0.6"))
    line = _step_line(6, pairs)
    cut = line.encode()[:WANDB_LINE_CUT].decode()
    lines.append(cut)
    p = tmp_path / "train.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert detect_format(p) == "console"
    run = load_run(p)
    assert list(run.series["actor/entropy"].steps) == [1, 2, 3, 4, 5, 6]
    assert run.series["num_turns/max"].values[-1] == 5
    assert list(run.series["critic/score/mean"].steps) == [1, 2, 3, 4, 5]     # absent at the cut step
    last_field = cut.split(" - ")[-1].split(":")[0]
    assert last_field not in run.series                                     # the broken field was dropped
    assert run.counts["truncated_lines"] == 1 and run.read["step_lines"] == 6


def test_console_old_format_ray_prefix_and_ansi(tmp_path):
    esc = "\x1b[36m(main_task pid=4242)\x1b[0m "
    lines = [esc + _step_line(s, [("timing/gen", str(20 + s)), ("critic/score/mean", f"{0.05 * s:.3f}")])
             for s in range(0, 4)]
    lines.insert(2, "\x1b[36m(main_task pid=4242)\x1b[0m some unrelated output: step:notanumber")
    p = tmp_path / "old.txt"
    p.write_text("\n".join(lines), encoding="utf-8")
    run = load_run(p)
    assert list(run.series["timing/gen"].values) == [20, 21, 22, 23]
    assert list(run.series["critic/score/mean"].steps) == [0, 1, 2, 3]


def test_console_initial_validation_block_fills_a_cut_step(tmp_path):
    block = ['("Initial validation metrics: {\'val-core/aime/acc/mean@16\': "',
             '"np.float64(0.125), \'val-aux/aime/reward/mean@16\': np.float64(-0.75)}")']
    lines = block + [_step_line(0, [("val-aux/aime/reward/mean@16", "np.float64(-0.75)")]),
                     _step_line(1, [("critic/score/mean", "0.1")])]
    p = tmp_path / "v.log"
    p.write_text("\n".join(lines), encoding="utf-8")
    run = load_run(p)
    assert run.series["val-core/aime/acc/mean@16"].values.tolist() == [0.125]
    assert run.series["val-core/aime/acc/mean@16"].steps.tolist() == [0]


def test_console_forced_on_a_file_without_step_lines(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello\nworld\n")
    with pytest.raises(UserError, match="not a known training log format"):
        load_run(p)
    with pytest.raises(UserError, match="no verl step lines"):
        load_run(p, format="console")


# --- CSV ------------------------------------------------------------------------------------------

def test_csv_wandb_history_export(tmp_path):
    p = tmp_path / "hist.csv"
    p.write_text("_step,_runtime,_timestamp,critic/score/mean,timing_s/gen,note\n"
                 "1,5,1700000001,0.5,10,a\n2,9,1700000002,,11,b\n3,14,1700000003,0.7,12,c\n")
    assert detect_format(p) == "csv"
    run = load_run(p)
    assert run.series["critic/score/mean"].steps.tolist() == [1, 3]
    assert run.series["timing_s/gen"].values.tolist() == [10, 11, 12]
    assert "_runtime" not in run.series and run.counts["non_numeric_cells"] == 3
    assert run.series["timing_s/gen"].wall_time.tolist() == [1700000001, 1700000002, 1700000003]


def test_csv_wandb_chart_export_and_tensorboard_download(tmp_path):
    p = tmp_path / "chart.csv"
    p.write_text('"Step","sam-on - critic/score/mean","sam-on - critic/score/mean__MIN","sam-on - critic/score/mean__MAX"\n'
                 "1,0.5,0.4,0.6\n2,0.6,0.5,0.7\n")
    run = load_run(p)
    assert list(run.series) == ["critic/score/mean"]
    q = tmp_path / "critic_score_mean.csv"
    q.write_text("Wall time,Step,Value\n1700000000.5,1,0.25\n1700000010.5,2,0.5\n")
    assert load_run(q).series["critic_score_mean"].values.tolist() == [0.25, 0.5]
    two = tmp_path / "two.csv"
    two.write_text("Step,a - x,b - x\n1,1,2\n")
    with pytest.raises(UserError, match="2 runs"):
        load_run(two)
    nostep = tmp_path / "nostep.csv"
    nostep.write_text("epoch,loss\n1,2\n")
    with pytest.raises(UserError, match="no step column"):
        load_run(nostep, format="csv")


# --- wandb run folders ----------------------------------------------------------------------------

def _wandb_chunk(kind: int, data: bytes) -> bytes:
    return struct.pack("<IHB", zlib.crc32(bytes([kind]) + data), len(data), kind) + data


def _history_record(step: int, items: dict) -> bytes:
    """Record {history = 2 {item = 1 {key = 1, value_json = 16}, step = 2 {num = 1}}}."""
    body = b""
    for k, v in items.items():
        body += _ld(1, _ld(1, k.encode()) + _ld(16, json.dumps(v).encode()))
    body += _ld(2, _key(1, 0) + _varint(step))
    return _key(1, 0) + _varint(step) + _ld(2, body)


def write_wandb_log(path: Path, records: list[bytes]) -> None:
    """The leveldb log framing: 7-byte header, chunks within 32 KiB blocks, long records split."""
    out = bytearray(b":W&B" + struct.pack("<HB", 0xBEE1, 0))
    for rec in records:
        first = True
        while True:
            left = BLOCK - len(out) % BLOCK
            if left < 7:
                out += b"\x00" * left
                continue
            room = left - 7
            part, rec = rec[:room], rec[room:]
            kind = (1 if not rec else 2) if first else (4 if not rec else 3)
            out += _wandb_chunk(kind, part)
            first = False
            if not rec:
                break
    path.write_bytes(bytes(out))


def test_wandb_binary_log_history(tmp_path):
    d = tmp_path / "wandb" / "run-20250101_000000-abc"
    (d / "files").mkdir(parents=True)
    recs = [_history_record(s, {"_step": s, "_timestamp": 1.7e9 + s, "critic/score/mean": 0.01 * s,
                                "actor": {"entropy": 0.5 - 0.001 * s}, "blob": "x" * (3000 if s % 7 else 40000)})
            for s in range(1, 31)]
    write_wandb_log(d / "run-abc.wandb", recs)
    # the console capture has one value the history lacks (step 31) and a different one at step 1
    (d / "files" / "output.log").write_text(_step_line(1, [("critic/score/mean", "9.0")]) + "\n"
                                            + _step_line(31, [("critic/score/mean", "0.31")]) + "\n")
    assert detect_format(d) == "wandb"
    run = load_run(d)
    s = run.series["critic/score/mean"]
    assert s.steps.tolist() == list(range(1, 32))
    assert s.values[0] == pytest.approx(0.01) and s.values[-1] == pytest.approx(0.31)   # history wins; console fills
    assert run.series["actor/entropy"].values[2] == pytest.approx(0.497)
    assert run.read["history_rows"] == 30 and not run.counts.get("corrupt_records")


def test_wandb_binary_log_corrupt_chunk_is_counted(tmp_path):
    d = tmp_path / "run-x"
    d.mkdir()
    recs = [_history_record(s, {"_step": s, "loss": float(s)}) for s in range(1, 6)]
    write_wandb_log(d / "run-x.wandb", recs)
    blob = bytearray((d / "run-x.wandb").read_bytes())
    blob[7 + 7 + 2] ^= 0xFF      # inside the first record's data
    (d / "run-x.wandb").write_bytes(bytes(blob))
    with pytest.raises(UserError, match="no scalars"):
        load_run(d)            # the damage sends the reader to the next block: nothing left in this small file
    write_wandb_log(d / "run-x.wandb", recs)
    (d / "files").mkdir()
    (d / "files" / "wandb-history.jsonl").write_text("")
    assert load_run(d).series["loss"].values.tolist() == [1, 2, 3, 4, 5]


def test_wandb_history_jsonl_and_console_only(tmp_path):
    d = tmp_path / "run-old"
    (d / "files").mkdir(parents=True)
    (d / "files" / "wandb-history.jsonl").write_text(
        "\n".join(json.dumps({"_step": s, "critic/score/mean": s / 10, "media": {"_type": "image"}})
                  for s in range(3)) + "\n{broken\n")
    run = load_run(d)
    assert run.series["critic/score/mean"].steps.tolist() == [0, 1, 2] and run.counts["broken_history_lines"] == 1
    e = tmp_path / "run-console" / "files"
    e.mkdir(parents=True)
    (e / "output.log").write_text(_step_line(1, [("critic/score/mean", "0.5")]) + "\n")
    assert load_run(e.parent).format == "wandb" and load_run(e).series["critic/score/mean"].values.tolist() == [0.5]


def test_unknown_inputs_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_run(tmp_path / "missing.log")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not a wandb run folder"):
        load_run(tmp_path / "empty")
    b = tmp_path / "bin.dat"
    b.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(UserError, match="--format"):
        load_run(b)
    with pytest.raises(UserError, match="--format 'xml'"):
        load_run(b, format="xml")


# --- the shared real logs -------------------------------------------------------------------------

def test_real_tensorboard_runs(shared_data):
    files = sorted((shared_data / "training_logs" / "verl_pr2854_tensorboard").glob("*tfevents*"))
    assert len(files) == 3
    for f in files:
        run = load_run(f)
        assert run.format == "tensorboard" and not run.counts
        score = run.series["critic/score/mean"]
        # one summary value per logged step: count the tag's protobuf field (1, 17 bytes long) in the raw file
        logged = f.read_bytes().count(b"\x0a\x11critic/score/mean")
        assert logged > 50 and score.steps.tolist() == list(range(1, logged + 1))
        assert ((score.values >= 0) & (score.values <= 1)).all()
        val = run.series["val-core/openai/gsm8k/reward/mean@1"]
        assert val.steps[0] == 0 and len(val) < len(score)
        assert "timing_s/gen" in run.series and "actor/entropy" in run.series


def test_real_console_logs_cut_lines(shared_data):
    for f in sorted((shared_data / "training_logs" / "open_agentrl_console").glob("*.output.log")):
        raw = f.read_bytes().split(b"\n")
        cut_steps = {int(b.split(b" - ")[0].split(b":")[1]) for b in raw if b.startswith(b"step:")
                     and len(b) == WANDB_LINE_CUT}
        run = load_run(f)
        assert run.format == "console" and cut_steps
        assert run.counts["truncated_lines"] == len(cut_steps)
        score_steps = set(run.series["critic/score/mean"].steps.tolist())
        assert not (score_steps & cut_steps)                    # the keys after a cut are absent
        assert set(run.series["actor/entropy"].steps.tolist()) >= cut_steps - {0}
