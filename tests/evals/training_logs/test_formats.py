"""Format detection of a log file (formats.file_format): a verl console log whose first step line
lies past the sniffed head (long start-up output) is still a console log."""

from __future__ import annotations

from samspec_bench.evals.training_logs import detect_format, expand_runs, load_run
from samspec_bench.evals.training_logs.formats import SNIFF_BYTES, file_format


def _long_head_console(path, head_bytes: int):
    """vLLM's periodic stats lines (as Ray prints them) before verl's first step line."""
    line = ("(WorkerDict pid=2011) INFO 12-02 12:00:00 [metrics.py:42] Avg prompt throughput: 0.0 tokens/s, "
            "Avg generation throughput: 1234.5 tokens/s, Running: 64 reqs, GPU KV cache usage: 42.1%.\n")
    steps = "".join(f"step:{s} - critic/score/mean:np.float64({s / 10}) - timing_s/gen:{30 + s}\n" for s in range(1, 6))
    path.write_text(line * (head_bytes // len(line) + 1) + steps)
    return path


def test_console_log_with_long_start_up_output_is_detected(tmp_path):
    p = _long_head_console(tmp_path / "sam_on.log", SNIFF_BYTES + 50_000)
    assert p.stat().st_size > SNIFF_BYTES
    assert file_format(p) == "console"
    assert detect_format(p) == "console"
    run = load_run(p)
    assert run.read["step_lines"] == 5 and len(run.series["critic/score/mean"]) == 5


def test_long_head_console_log_in_a_folder_of_runs_is_a_run(tmp_path):
    (tmp_path / "runs").mkdir()
    _long_head_console(tmp_path / "runs" / "a.log", SNIFF_BYTES * 2)
    _long_head_console(tmp_path / "runs" / "b.log", 100)
    ignored: list[str] = []
    assert [r.name for r in expand_runs(tmp_path / "runs", ignored)] == ["a.log", "b.log"]
    assert ignored == []


def test_long_text_file_without_step_lines_is_no_log(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("step: not a verl step line\n" * (SNIFF_BYTES // 20))
    assert file_format(p) is None
