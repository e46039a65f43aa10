"""Nothing silent (issue 32): inputs that used to give exit 0 with a wrong or empty answer.

Each case states the bad input and what it must give: non-finite values counted per metric and
shown (a diverged run is a DIFFERENT metric, never `absent`); a damaged TensorBoard file costs
only the records its damaged bytes touched; a folder of traces is read whole (each file by its
own reader, counts per format printed) or refused naming the files not understood; a name that
matches nothing is one line listing the nearest, exit 2; a torn JSONL line is cut before a
resume appends.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from samspec_bench.cli import main
from samspec_bench.evals.training_logs import load_run
from samspec_bench.evals.training_logs.tensorboard import masked_crc32c, parse_event
from samspec_bench.suites import curves
from samspec_bench.suites.curves import build_config

BASE = {"critic/score/mean": 0.6, "response_length/mean": 300.0, "actor/entropy": 0.3, "timing_s/gen": 30.0}


def _series(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: v * (1 + 0.01 * rng.standard_normal(n)) for k, v in BASE.items()}


def write_console(path: Path, data: dict[str, np.ndarray]) -> Path:
    n = len(next(iter(data.values())))
    lines = [" - ".join([f"step:{i + 1}"] + [f"{k}:np.float64({float(v[i])!r})" for k, v in data.items()])
             for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def cli(argv: list, capsys) -> tuple[int, str, str]:
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    out = capsys.readouterr()
    return code, out.out, out.err


def params(**over) -> dict:
    ctx = curves.command.make_context("curves", [], resilient_parsing=True)
    p = {k: v for k, v in ctx.params.items() if k not in ("output", "json_path")}
    p.update(over)
    return p


# --- non-finite values: counted per metric, a finding in curves ----------------------------------

def test_a_run_whose_reward_is_nan_everywhere_is_different_not_absent(tmp_path, capsys):
    a = write_console(tmp_path / "A.log", _series(60, 1))
    b_data = _series(60, 2)
    b_data["critic/score/mean"][:] = np.nan
    b = write_console(tmp_path / "B.log", b_data)
    code, out, err = cli(["curves", a, b, "--output", tmp_path / "out", "--json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    comp = json.loads((tmp_path / "r.json").read_text())["metrics"]["comparisons"]["B"]
    assert comp["learning"]["reward"]["verdict"] == "DIFFERENT"
    assert comp["learning"]["reward"]["reason"] == "run B diverged: 60 of 60 steps non-finite (NaN/inf, first at step 1)"
    assert not any(x.startswith("reward") for x in comp["absent"])
    assert comp["verdict"] == "DIFFERENT"
    assert "B vs A: learning DIFFERENT" in out and "run B diverged: 60 of 60 steps" in out
    assert "learning EQUIVALENT" not in out


def test_a_run_that_diverges_late_is_different_with_its_count(tmp_path):
    a = write_console(tmp_path / "A.log", _series(80, 1))
    b_data = _series(80, 1)                       # the same curve: equivalent until it diverges
    b_data["actor/entropy"][60:] = np.inf
    b = write_console(tmp_path / "B.log", b_data)
    result, _ = curves.run(build_config(**params(runs=(str(a), str(b)))), str(tmp_path / "out"))
    comp = result["metrics"]["comparisons"]["B"]
    assert comp["learning"]["reward"]["verdict"] == "EQUIVALENT"
    assert comp["learning"]["entropy"]["verdict"] == "DIFFERENT"
    assert comp["learning"]["entropy"]["reason"].startswith("run B diverged: 20 of 80 steps non-finite")
    b_run = next(r for r in result["runs"] if r["label"] == "B")
    assert b_run["non_finite"]["actor/entropy"] == {"count": 20, "steps": 80, "first_step": 61, "nan": 0, "inf": 20}
    # only steps the comparison keeps count: before the divergence there is none
    early, _ = curves.run(build_config(**params(runs=(str(a), str(b)), step_range="1:60")), str(tmp_path / "o2"))
    assert early["metrics"]["comparisons"]["B"]["learning"]["entropy"]["verdict"] == "EQUIVALENT"


def test_nan_at_the_same_steps_in_both_runs_is_no_finding(tmp_path):
    da, db = _series(60, 1), _series(60, 1)
    for d in (da, db):
        d["critic/score/mean"][10] = np.nan
    a, b = write_console(tmp_path / "A.log", da), write_console(tmp_path / "B.log", db)
    result, _ = curves.run(build_config(**params(runs=(str(a), str(b)), families="reward")), str(tmp_path / "out"))
    reward = result["metrics"]["comparisons"]["B"]["learning"]["reward"]
    assert reward["verdict"] == "EQUIVALENT" and reward["whole"]["steps"] == 59


def test_divergence_in_a_tag_not_compared_keeps_the_headline_from_equivalent(tmp_path):
    da, db = _series(60, 1), _series(60, 1)
    da["actor/grad_norm"] = np.ones(60)
    db["actor/grad_norm"] = np.where(np.arange(60) >= 50, np.nan, 1.0)
    a, b = write_console(tmp_path / "A.log", da), write_console(tmp_path / "B.log", db)
    result, _ = curves.run(build_config(**params(runs=(str(a), str(b)), families="reward")), str(tmp_path / "out"))
    comp = result["metrics"]["comparisons"]["B"]
    assert comp["learning"]["reward"]["verdict"] == "EQUIVALENT"
    assert comp["verdict"] == "INCONCLUSIVE"
    assert comp["diverged_elsewhere"] == ["actor/grad_norm: run B diverged: 10 of 60 steps non-finite (NaN/inf, "
                                          "first at step 51)"]


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def _event(step: int, tag: str, value: float) -> bytes:
    """Event {wall_time = 1, step = 2, summary = 5 {value = 1 {tag = 1, simple_value = 2}}}."""
    tag_b = tag.encode()
    val = b"\x0a" + bytes([len(tag_b)]) + tag_b + b"\x15" + struct.pack("<f", value)
    summ = b"\x0a" + bytes([len(val)]) + val
    return b"\x09" + struct.pack("<d", 1.7e9) + b"\x10" + bytes([step]) + b"\x2a" + bytes([len(summ)]) + summ


def test_every_reader_counts_non_finite_values_per_tag(tmp_path):
    vals = {1: 0.5, 2: float("nan"), 3: 0.7, 4: float("inf"), 5: 0.9}
    tb = tmp_path / "x.events.out.tfevents.1"
    tb.write_bytes(b"".join(_record(_event(s, "r", v)) for s, v in vals.items()))
    csv = tmp_path / "x.csv"
    csv.write_text("_step,r\n" + "".join(f"{s},{v}\n" for s, v in vals.items()))
    con = tmp_path / "x.log"
    con.write_text("".join(f"step:{s} - r:np.float64({v})\n" for s, v in vals.items()))
    wb = tmp_path / "wandb" / "files"
    wb.mkdir(parents=True)
    (wb / "wandb-history.jsonl").write_text("".join(json.dumps({"_step": s, "r": v}) + "\n" for s, v in vals.items()))
    for path in (tb, csv, con, wb.parent):
        run = load_run(path)
        assert run.non_finite["r"] == {"count": 2, "steps": 5, "first_step": 2, "nan": 1, "inf": 1}, path
        assert list(run.series["r"].steps) == [1, 3, 5]
        assert any("2 of 5 steps non-finite" in n for n in run.notes), run.notes


# --- TensorBoard damage costs only the records it touched ----------------------------------------

def _frames(blob: bytes) -> list[tuple[int, int, list[tuple[int, str]]]]:
    """(start, end, [(step, tag)]) of each record of an intact file, walked by its framing."""
    out, pos = [], 0
    while pos < len(blob):
        (n,) = struct.unpack_from("<Q", blob, pos)
        _, step, values = parse_event(blob[pos + 12:pos + 12 + n])
        out.append((pos, pos + 16 + n, [(step, tag) for tag, v in values if v is not None]))
        pos += 16 + n
    return out


def _points(run) -> set[tuple[int, str]]:
    return {(int(s), tag) for tag, ser in run.series.items() for s in ser.steps}


@pytest.mark.parametrize("offsets", [(5000,), (100_000,), (300_000,), (5000, 100_000, 300_000)])
def test_tensorboard_damage_costs_only_the_damaged_records(shared_data, tmp_path, offsets):
    src = sorted((shared_data / "training_logs" / "verl_pr2854_tensorboard").glob("q3b_fsdp_base.*"))[0]
    blob = src.read_bytes()
    damaged = bytearray(blob)
    hit: list[tuple[int, str]] = []
    for off in offsets:
        for i in range(off, off + 200):
            damaged[i] ^= 0x5A
        hit += [p for start, end, pts in _frames(blob) if start < off + 200 and end > off for p in pts]
    copy = tmp_path / src.name
    copy.write_bytes(bytes(damaged))
    intact, run = load_run(src), load_run(copy)
    assert _points(run) == _points(intact) - set(hit)     # reading went on past every damaged record
    assert run.counts["lost_points"] == len(hit)
    assert run.counts["steps_lost"] == len({s for s, _ in hit})
    assert run.steps == intact.steps


def test_tensorboard_damage_at_the_start_is_read_past_and_said_unattributed(shared_data, tmp_path):
    src = sorted((shared_data / "training_logs" / "verl_pr2854_tensorboard").glob("q3b_fsdp_base.*"))[0]
    blob = bytearray(src.read_bytes())
    for i in range(12, 212):                               # the version record and both step-0 validation points
        blob[i] ^= 0x5A
    copy = tmp_path / src.name
    copy.write_bytes(bytes(blob))
    intact, run = load_run(src), load_run(copy)
    lost = _points(intact) - _points(run)
    assert lost == {(0, "val-core/openai/gsm8k/reward/mean@1"), (0, "val-aux/openai/gsm8k/score/mean@1")}
    assert any("before a file's first intact record" in n for n in run.notes)


def test_tensorboard_bad_length_crc_resynchronises_at_the_next_record(tmp_path):
    recs = [_record(_event(s, "r", float(s))) for s in range(1, 11)]
    blob = bytearray(b"".join(recs))
    third = sum(len(r) for r in recs[:2])
    blob[third + 9] ^= 0xFF                                # the length CRC of step 3's record
    p = tmp_path / "x.events.out.tfevents.1"
    p.write_bytes(bytes(blob))
    run = load_run(p)
    assert list(run.series["r"].steps) == [1, 2, 4, 5, 6, 7, 8, 9, 10]
    assert run.counts["corrupt_records"] == 1 and run.counts["skipped_bytes"] == len(recs[2])
    assert run.counts["lost_points"] == 1 and run.counts["steps_lost"] == 1


# --- a folder of traces: read whole, or refused naming what is not understood ----------------------

@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Path:
    from samspec_bench.models.checkpoints import _byte_tokenizer   # a tokenizer without a model

    d = tmp_path_factory.mktemp("tok")
    _byte_tokenizer().save_pretrained(d)
    return d


def _mixed_folder(d: Path) -> Path:
    d.mkdir()
    text = "the answer is 42. the answer is 42. so the answer is 42."
    (d / "1.jsonl").write_text("".join(json.dumps({"input": f"q{i % 2}", "output": text, "score": 1.0, "step": 1})
                                       + "\n" for i in range(4)))
    (d / "a.jsonl").write_text("".join(json.dumps({"id": f"s{i}", "group": f"g{i // 3}", "prompt": "q", "response": text})
                                       + "\n" for i in range(6)))
    (d / "plain.jsonl").write_text("".join(json.dumps({"prompt": f"p{i % 3}", "response": text}) + "\n"
                                           for i in range(6)))
    return d


def test_accept_reads_every_format_of_a_mixed_folder(tmp_path, tok, capsys):
    d = _mixed_folder(tmp_path / "traces")
    code, out, err = cli(["accept", "--traces", d, "--tokenizer", tok, "--output", tmp_path / "out", "--workers", "1",
                          "--no-progress", "--json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "r.json").read_text())
    assert sorted(Path(f).name for f in result["inputs"]["trace_formats"]) == ["1.jsonl", "a.jsonl", "plain.jsonl"]
    printed = (out + err).replace("\n", " ")
    assert "plain 1 file(s), 6 response(s)" in printed and "samspec 1 file(s), 6 response(s)" in printed
    assert "verl 1 file(s), 4 response(s)" in printed


def test_accept_refuses_a_folder_with_a_file_it_does_not_understand(tmp_path, tok, capsys):
    d = _mixed_folder(tmp_path / "traces")
    (d / "notes.jsonl").write_text(json.dumps({"title": "my notes", "body": "..."}) + "\n")
    (d / "empty.jsonl").write_text("")
    code, out, err = cli(["accept", "--traces", d, "--tokenizer", tok, "--output", tmp_path / "out", "--workers", "1",
                          "--no-progress"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert "2 of 5 file(s) not understood as traces: empty.jsonl (no JSON object" in lines[0]
    assert "notes.jsonl (keys body, title)" in lines[0]
    assert not (tmp_path / "out").exists()


# --- names that match nothing: one line with the nearest, exit 2 -----------------------------------

@pytest.mark.parametrize("extra, needle", [
    (["--metric", "actor/entropyy"], "--metric 'actor/entropyy': matches no tag logged at 2+ steps by any run "
                                     "(nearest: actor/entropy"),
    (["--metric", "nothing/*"], "--metric 'nothing/*': matches no tag"),
    (["--speed-metric", "timing_s/genn"], "(nearest: timing_s/gen"),
    (["--margin", "rewrd=0.1"], "--margin rewrd=0.1: names no compared family, metric or tag (nearest: reward"),
    (["--families", "rewrd"], "(nearest: reward)"),
])
def test_curves_names_that_match_nothing(tmp_path, capsys, extra, needle):
    a = write_console(tmp_path / "A.log", _series(30, 1))
    b = write_console(tmp_path / "B.log", _series(30, 2))
    code, _, err = cli(["curves", a, b, "--output", tmp_path / "out", *extra], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("yaml_text, needle", [
    ("acept: {}\n", "unknown key 'acept' (nearest: accept)"),
    ("accept:\n  sorces: own\n", "has no option --sorces (nearest: sources"),
])
def test_run_config_keys_that_match_nothing(tmp_path, capsys, yaml_text, needle):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml_text)
    code, _, err = cli(["run", "--config", cfg, "--output", tmp_path / "out"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


@pytest.mark.parametrize("extra, needle", [
    (["--drafter", "samm"], "--drafter 'samm': unknown drafter (nearest: sam"),
    (["--sources", "ownn"], "--sources 'ownn' (nearest: own)"),
])
def test_accept_names_that_match_nothing(tmp_path, tok, capsys, extra, needle):
    d = _mixed_folder(tmp_path / "traces")
    code, _, err = cli(["accept", "--traces", d, "--tokenizer", tok, "--output", tmp_path / "out", *extra], capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


# --- a torn JSONL line is cut before --resume appends ----------------------------------------------

def test_accept_resume_cuts_a_torn_last_record(tmp_path, tok, capsys):
    d = _mixed_folder(tmp_path / "traces")
    args = ["accept", "--traces", d, "--tokenizer", tok, "--workers", "1", "--no-progress"]
    code, _, err = cli([*args, "--output", tmp_path / "out"], capsys)
    assert code == 0, err
    (run,) = (tmp_path / "out").iterdir()
    resp = run / "responses.jsonl"
    lines = resp.read_text().splitlines()
    n = len(lines)
    resp.write_text("\n".join(lines[:-2]) + "\n" + lines[-2][: len(lines[-2]) // 2])   # a crash mid-record
    (run / "result.json").unlink()
    code, _, err = cli([*args, "--resume", run], capsys)
    assert code == 0, err
    again = resp.read_text().splitlines()
    assert len(again) == n and all(json.loads(x) for x in again)   # every line a whole record, none lost
    assert sorted(again) == sorted(lines)
