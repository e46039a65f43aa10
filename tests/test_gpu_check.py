"""tools/gpu_check.sh's verdicts (tools/gpu_check_report.py): a row passes only when the step's
output says it ran where it was asked, with the labels and bounds it must meet; and the script
refuses a device it does not check. (The whole script runs with `bash tools/gpu_check.sh
--device cpu`, minutes: not part of the test suite.)"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"
_spec = importlib.util.spec_from_file_location("gpu_check_report", TOOLS / "gpu_check_report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

CUDA_TIMER = "cuda device time (cuda events, synchronised)"


def sampler_result(ms=1.9, timer=CUDA_TIMER, device="cuda:0", equal=True, verdict="EXACT", fastest=1.7):
    point = {"vocab": 151936, "batch": 256, "k": 8, "vectorised_ms": ms, "vectorised_min_ms": fastest,
             "loop_ms": 1900.0, "timer": timer, "device": device}
    return {"environment": {"device": {"type": device.split(":")[0], "device": device, "name": "NVIDIA H100"}},
            "metrics": {"speed_largest": point, "speed_outputs_equal": equal, "verdicts": {"samspec": verdict}}}


LOG_END = "error: --device cuda: torch sees no CUDA device on this machine"


def verdict(step, data, tmp_path, device="cuda", rc=0):
    """The row of `step` whose output is `data` (the tests step: its log; others: their JSON)."""
    log, path = tmp_path / "log", tmp_path / "r.json"
    log.write_text(data if step == "tests" else f"...\n{LOG_END}\n")
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return report.row(step, device, rc, 1.0, "cmd", str(log), None if step == "tests" else str(path))


def test_the_sampler_row_needs_device_time_within_the_bound(tmp_path, monkeypatch):
    monkeypatch.delenv(report.BOUND_ENV, raising=False)
    ok = verdict("sampler", sampler_result(), tmp_path)
    assert ok["result"] == "PASS" and "1.9 ms (fastest 1.7" in ok["figure"] and CUDA_TIMER in ok["figure"]
    assert verdict("sampler", sampler_result(ms=4.9), tmp_path)["result"] == "PASS"   # a slower host, within 5 ms
    slow = verdict("sampler", sampler_result(ms=5.4, fastest=2.0), tmp_path)   # the bound reads the median
    assert slow["result"] == "FAIL" and "5.4 ms > 5.0 ms" in slow["figure"]
    monkeypatch.setenv(report.BOUND_ENV, "6.0")   # another card, another bound
    assert verdict("sampler", sampler_result(ms=5.4), tmp_path)["result"] == "PASS"
    cpu_timed = verdict("sampler", sampler_result(timer="CPU time of the calling thread"), tmp_path)
    assert cpu_timed["result"] == "FAIL" and "not device time" in cpu_timed["figure"]
    assert verdict("sampler", sampler_result(equal=False), tmp_path)["result"] == "FAIL"
    assert verdict("sampler", sampler_result(device="cpu"), tmp_path)["result"] == "FAIL"   # ran elsewhere
    # on the CPU (the dry run) the CPU's timer is the right one and there is no bound
    assert verdict("sampler", sampler_result(ms=40, timer="CPU time", device="cpu"), tmp_path,
                   device="cpu")["result"] == "PASS"


@pytest.mark.parametrize("log, result", [
    ("12 passed, 1 skipped in 30.0s", "PASS"),
    ("0 passed, 13 skipped in 2.0s", "FAIL"),          # nothing ran: the GPU was not seen
    ("11 passed, 1 failed in 30.0s", "FAIL"),
    ("test_x.py:3: 99 passed as text\n2 passed, 1 error in 3.0s", "FAIL"),   # the last summary line counts
])
def test_the_tests_row_counts_the_pytest_summary(log, result, tmp_path):
    assert verdict("tests", log, tmp_path)["result"] == result


def test_timeouts_exit_codes_and_skips(tmp_path):
    timed_out = verdict("accept", {}, tmp_path, rc=124)
    assert timed_out["result"] == "FAIL" and timed_out["figure"].startswith("timed out")
    failed = verdict("accept", {}, tmp_path, rc=2)
    assert failed["result"] == "FAIL" and failed["figure"] == f"exit 2: {LOG_END}"   # why, from the log
    assert verdict("accept", "not json", tmp_path)["result"] == "FAIL"
    assert verdict("accept", {}, tmp_path, rc=-2)["figure"].startswith("not run")   # the budget was spent
    skip = report.row("accuracy", "cuda", -1, 0, "cmd", "skipped: lm-eval absent")
    assert verdict("checkpoint", "", tmp_path)["figure"] == LOG_END   # a set-up step: its log's last line
    assert skip["result"] == "SKIP" and skip["figure"] == "skipped: lm-eval absent"


def test_op_equivalence_row_needs_equal_float32_greedy(tmp_path):
    pairs = {f"model/reference/{d}": {"level": "model", "logprob_diff_max": x}
             for d, x in (("float32", 4e-6), ("bfloat16", 0.06))}
    r = {"environment": {"device": {"type": "cuda", "device": "cuda:0", "name": "H100"}},
         "metrics": {"pairs": pairs}, "tables": {"greedy": [{"dtype": "float32", "identical": True}]}}
    assert verdict("op-equivalence", r, tmp_path)["result"] == "PASS"
    r["tables"]["greedy"].append({"dtype": "float32", "identical": False})
    assert verdict("op-equivalence", r, tmp_path)["result"] == "FAIL"


def test_the_table_exits_1_when_a_row_failed_and_writes_json(tmp_path):
    rows = tmp_path / "rows.jsonl"
    good = {"step": "a", "command": "x", "device": "cuda", "seconds": 1.0, "result": "PASS", "figure": "f"}
    rows.write_text(json.dumps(good) + "\n" + json.dumps({**good, "step": "b", "result": "SKIP"}) + "\n")
    assert report.main(["table", str(rows), "--json", str(tmp_path / "t.json")]) == 0
    assert [r["step"] for r in json.loads((tmp_path / "t.json").read_text())["rows"]] == ["a", "b"]
    rows.write_text(rows.read_text() + json.dumps({**good, "step": "c", "result": "FAIL"}) + "\n")
    assert report.main(["table", str(rows)]) == 1


@pytest.mark.parametrize("args, message", [(["--device", "npu"], "--device npu"), (["--fast"], "--fast")])
def test_the_script_refuses_what_it_does_not_check(args, message):
    res = subprocess.run(["bash", str(TOOLS / "gpu_check.sh"), *args], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1


def torch_profile_doc(device="cuda", tree=True):
    return {"device": {"type": device, "device": f"{device}:0", "name": "NVIDIA H100"},
            "timer": f"{CUDA_TIMER} (cuda graph)",
            "measured_steps": {"time_s": [0.008, 0.007, 0.009]},
            **({"tree": {"median": 1.02, "min": 0.99, "max": 1.08, "points": 6, "paths": [3, 4]}} if tree else {})}


def test_the_torch_profile_row_needs_device_time_and_the_trees(tmp_path):
    ok = verdict("torch profile", torch_profile_doc(), tmp_path)
    assert ok["result"] == "PASS" and "1.020x [0.990, 1.080] over 6 points" in ok["figure"]
    assert "NVIDIA H100" in ok["figure"]
    assert verdict("torch profile long", torch_profile_doc(tree=False), tmp_path)["result"] == "FAIL"
    assert verdict("torch profile", torch_profile_doc(device="cpu"), tmp_path)["result"] == "FAIL"


_cspec = importlib.util.spec_from_file_location("compare_step_points", TOOLS / "compare_step_points.py")
compare_points = importlib.util.module_from_spec(_cspec)
_cspec.loader.exec_module(compare_points)


def _points(path, rows, meta=None):
    path.write_text("".join(json.dumps(r) + "\n" for r in ([{"meta": meta}] if meta else []) + rows))
    return str(path)


def test_compare_step_points_pairs_by_point_and_counts_the_rest(tmp_path, capsys):
    ours = _points(tmp_path / "a.jsonl", [
        {"B": 1, "q": 1, "C": 1024, "ms": 8.0}, {"B": 8, "q": 4, "C": 1024, "ms": 9.0},
        {"B": 2, "q": 1, "C": 64, "ms": 1.0}, {"B": 4, "q": 1, "C": 64, "error": "oom"}],
        meta={"device": {"type": "cuda", "name": "H100"}})
    theirs = _points(tmp_path / "b.jsonl", [
        {"B": 1, "q": 1, "C": 1024, "ms": 7.0}, {"B": 8, "q": 4, "C": 1024, "ms": 10.0},
        {"B": 128, "q": 9, "C": 1024, "ms": 42.0}], meta={"device": "H100"})
    assert compare_points.main([ours, "--against", theirs, "--json", str(tmp_path / "o.json")]) == 0
    res = json.loads((tmp_path / "o.json").read_text())
    assert [(p["B"], p["ratio"]) for p in res["points"]] == [(1, round(8 / 7, 4)), (8, 0.9)]
    assert res["ratio"]["min"] == 0.9 and (res["only_ours"], res["only_theirs"]) == (1, 1)
    assert res["devices"] == {"ours": ["H100"], "theirs": "H100", "same": True}
    assert "only ours 1, only theirs 1" in capsys.readouterr().out
    other = _points(tmp_path / "h200.jsonl", [{"B": 1, "q": 1, "C": 1024, "ms": 5.0}], meta={"device": "H200"})
    assert compare_points.main([ours, "--against", other, "--json", str(tmp_path / "o2.json")]) == 0
    assert json.loads((tmp_path / "o2.json").read_text())["devices"]["same"] is False
    assert "NOT the same device" in capsys.readouterr().out
    row = verdict("points vs H100 file", res, tmp_path)
    assert row["result"] == "PASS" and "over 2 points" in row["figure"] and "same device" in row["figure"]
    # nothing in common, or a file that is not points: one line, exit 2
    none = _points(tmp_path / "c.jsonl", [{"B": 3, "q": 1, "C": 5, "ms": 1.0}])
    assert compare_points.main([none, "--against", theirs]) == 2
    assert compare_points.main([str(tmp_path / "missing.jsonl"), "--against", theirs]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no (B, q, C) point in common" in err[0] and "missing.jsonl" in err[1]
