"""`samspec-bench drafters` keeps its finished rounds: an interrupted run leaves its folder with
the rounds recorded, `--resume` runs only the missing ones and writes the result an
uninterrupted run writes, another suite's folder or changed settings are refused (exit 2), and
rounds from two sessions are said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samspec_bench import cli
from samspec_bench.data import load_tokenizer, tokenize_traces
from samspec_bench.results import RunDir
from samspec_bench.suites.drafters import running, timing
from samspec_bench.trace_formats import read_any

REPEATS = 3
NAMES = ("sam", "ngram")


@pytest.fixture
def small(traces_dir, tmp_path) -> Path:
    p = tmp_path / "small.jsonl"
    p.write_text("".join((traces_dir / "qwen25math_math_100x8.jsonl").read_text().splitlines(keepends=True)[:6]))
    return p


@pytest.fixture
def calls(monkeypatch):
    """Counts the timed passes, the untimed passes and the sweep points; `stop_at[kind] = n`
    raises KeyboardInterrupt (as Ctrl-C or SIGTERM do) at the n-th call of that kind."""
    monkeypatch.setattr(timing, "MIN_MEASURE_SECONDS", 0.0)   # one pass per measurement: fast
    count = {"timed_pass": 0, "replay_pass": 0, "sweep_point": 0}
    stop_at: dict[str, int] = {}

    def counted(kind, real):
        def wrapper(*a, **kw):
            count[kind] += 1
            if stop_at.get(kind) == count[kind]:
                raise KeyboardInterrupt
            return real(*a, **kw)
        return wrapper

    for kind in count:
        monkeypatch.setattr(timing, kind, counted(kind, getattr(timing, kind)))
    return count, stop_at


def drafters(args, capsys) -> tuple[int, str, str]:
    try:
        cli.main(["drafters", "--drafters", ",".join(NAMES), "--max-tokens", "1500", "--sweep", "64",
                  "--sweep-steps", "5", "--repeats", str(REPEATS), "--no-progress", *map(str, args)])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    out = capsys.readouterr()
    return code, out.out, out.err


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]


class Bar:
    """Stands in for rich's Progress: each task's total, where it started and its advances."""
    tasks: list[dict] = []

    def __init__(self, *a, **kw):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, name, total, completed=0):
        Bar.tasks.append({"name": name, "total": total, "start": completed, "advanced": 0})
        return len(Bar.tasks) - 1

    def advance(self, task, n=1):
        Bar.tasks[task]["advanced"] += n

    def remove_task(self, task):
        pass


def interrupted_run(small, tok, tmp_path, calls, capsys, kind="timed_pass", at=len(NAMES) * 3 + 2):
    """A run stopped at the `at`-th call of `kind` (default: in the second replay round)."""
    count, stop_at = calls
    stop_at[kind] = at
    code, _, err = drafters(["--traces", small, "--tokenizer", tok, "--output", tmp_path / "cut"], capsys)
    (run_dir,) = (tmp_path / "cut").iterdir()
    assert code == 130 and f"continue with --resume {run_dir}" in err, err
    stop_at.clear()
    for k in count:
        count[k] = 0
    return run_dir


def test_an_interrupted_run_keeps_its_rounds_and_resume_runs_only_the_missing_ones(
        small, qwen3_tokenizer_dir, tmp_path, calls, capsys, monkeypatch):
    count, _ = calls
    run_dir = interrupted_run(small, qwen3_tokenizer_dir, tmp_path, calls, capsys)
    assert [(r["kind"], r["round"]) for r in records(run_dir)] == [("replay", 0)]   # the finished round, no more
    assert not (run_dir / "result.json").exists()

    Bar.tasks = []
    monkeypatch.setattr(running, "Progress", Bar)
    code, out, err = drafters(["--traces", small, "--tokenizer", qwen3_tokenizer_dir,
                               "--resume", run_dir, "--json", tmp_path / "resumed.json"], capsys)
    assert code == 0, err
    # the two missing replay rounds (2 drafters x 3 passes each) and every sweep round, nothing more
    assert count["timed_pass"] == (REPEATS - 1) * len(NAMES) * 3
    assert count["sweep_point"] == REPEATS * len(NAMES)
    assert [(r["kind"], r["round"]) for r in records(run_dir)] == (
        [("replay", i) for i in range(REPEATS)] + [("sweep", i) for i in range(REPEATS)])
    # the bars start at what is done (one replay round of three, the warm-up again) and end full
    replay, sweep = Bar.tasks
    assert replay["start"] * (1 + 3 * REPEATS) == replay["total"] * 3 and replay["start"] > 0
    assert sweep["start"] == 0 and all(t["start"] + t["advanced"] == t["total"] for t in Bar.tasks)

    monkeypatch.undo()   # an uninterrupted run beside it, with the real Progress and passes
    monkeypatch.setattr(timing, "MIN_MEASURE_SECONDS", 0.0)
    code, _, err = drafters(["--traces", small, "--tokenizer", qwen3_tokenizer_dir, "--output", tmp_path / "whole",
                             "--json", tmp_path / "whole.json"], capsys)
    assert code == 0, err
    resumed, whole = (json.loads((tmp_path / f).read_text()) for f in ("resumed.json", "whole.json"))
    assert set(resumed) == set(whole)
    # a metric's bound is there only where a drafting cost fell below the timing noise, in either run
    assert ({m for m in resumed["metrics"] if not m.endswith("_at_most")}
            == {m for m in whole["metrics"] if not m.endswith("_at_most")})
    for table in ("replay", "context_sweep"):
        assert [set(r) for r in resumed["tables"][table]] == [set(r) for r in whole["tables"][table]]
    for result in (resumed, whole):
        assert [r["timed_passes"] for r in result["tables"]["replay"]] == [{m: REPEATS for m in timing.MODES}] * 2
        assert [r["timed_rounds"] for r in result["tables"]["context_sweep"]] == [REPEATS] * 2
    assert resumed["resumed_rounds"] == {"replay": 1, "sweep": 0} and whole["resumed_rounds"] == {"replay": 0,
                                                                                                  "sweep": 0}
    # rounds from two processes' starts are said, in the result and under the table
    assert len(resumed["sessions"]) == 2 and [s["replay_rounds"] for s in resumed["sessions"]] == [1, REPEATS - 1]
    assert resumed["sessions_note"].startswith("rounds measured in 2 sessions")
    assert "rounds measured in 2 sessions" in " ".join(out.split())
    assert len(whole["sessions"]) == 1 and whole["sessions_note"] is None


def test_an_interrupted_sweep_keeps_the_replay_and_its_finished_rounds(small, qwen3_tokenizer_dir, tmp_path, calls,
                                                                       capsys):
    count, _ = calls
    run_dir = interrupted_run(small, qwen3_tokenizer_dir, tmp_path, calls, capsys, "sweep_point", len(NAMES) + 1)
    assert [(r["kind"], r["round"]) for r in records(run_dir)] == (
        [("replay", i) for i in range(REPEATS)] + [("sweep", 0)])
    code, _, err = drafters(["--traces", small, "--tokenizer", qwen3_tokenizer_dir, "--resume", run_dir], capsys)
    assert code == 0, err
    # no replay pass at all (not even the warm-up), the two missing sweep rounds
    assert count == {"timed_pass": 0, "replay_pass": 0, "sweep_point": (REPEATS - 1) * len(NAMES)}
    assert "1 of 3 sweep round(s) already recorded" in err


def test_another_suites_folder_or_changed_settings_are_refused_in_one_line(small, qwen3_tokenizer_dir, tmp_path,
                                                                           calls, capsys):
    count, _ = calls
    run_dir = interrupted_run(small, qwen3_tokenizer_dir, tmp_path, calls, capsys)
    before = (run_dir / "rounds.jsonl").read_text()
    base = ["--traces", small, "--tokenizer", qwen3_tokenizer_dir, "--resume"]
    other = RunDir(tmp_path / "other", "accept").path
    for extra, needle in ((["-k", "4"], "the run used k = 8, this call 4"),
                          (["--chat-template", "never"], "chat_template = 'auto', this call 'never'"),
                          ([], None)):   # the trace file edited since: its tokens are not the ones timed
        if needle is None:
            small.write_text(small.read_text() + small.read_text().splitlines(keepends=True)[0])
            needle = f"{small} changed since the run started"
        code, _, err = drafters([*base, run_dir, *extra], capsys)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    code, _, err = drafters([*base, other], capsys)
    assert code == 2 and "a `samspec-bench accept` run folder" in err and len(err.strip().splitlines()) == 1
    assert sum(count.values()) == 0 and (run_dir / "rounds.jsonl").read_text() == before


def test_a_finished_run_resumed_is_said_and_reprinted(small, qwen3_tokenizer_dir, tmp_path, calls, capsys):
    count, _ = calls
    code, _, err = drafters(["--traces", small, "--tokenizer", qwen3_tokenizer_dir, "--output", tmp_path], capsys)
    assert code == 0, err
    (run_dir,) = tmp_path.glob("drafters-*")
    result = (run_dir / "result.json").read_text()
    for k in count:
        count[k] = 0
    code, out, err = drafters(["--traces", small, "--tokenizer", qwen3_tokenizer_dir, "--resume", run_dir], capsys)
    assert code == 0 and "the run is complete" in err and f"result: {run_dir / 'result.json'}" in out
    assert "Per-step cost" in out   # the tables again
    assert sum(count.values()) == 0 and (run_dir / "result.json").read_text() == result


def test_an_interrupt_while_a_resumed_run_loads_its_traces_names_the_folder(small, qwen3_tokenizer_dir, tmp_path,
                                                                              calls, capsys, monkeypatch):
    run_dir = interrupted_run(small, qwen3_tokenizer_dir, tmp_path, calls, capsys)
    kept = records(run_dir)

    def cut(cfg):
        raise KeyboardInterrupt   # Ctrl-C before the first new round: the folder still holds the old ones
    monkeypatch.setattr(running, "load_workload", cut)
    code, _, err = drafters(["--traces", small, "--tokenizer", qwen3_tokenizer_dir, "--resume", run_dir], capsys)
    assert code == 130 and f"continue with --resume {run_dir}" in err, err
    assert "nothing finished was kept" not in err and records(run_dir) == kept


def test_a_sweep_reading_past_max_tokens_is_said(small, qwen3_tokenizer_dir, tmp_path, monkeypatch, capsys):
    """--max-tokens caps the replay; a context sweep that needs more reads its own tokens, and the
    terminal and result.json say how many and why (it is not a replay overshoot)."""
    monkeypatch.setattr(timing, "MIN_MEASURE_SECONDS", 0.0)
    cli.main(["drafters", "--drafters", "sam", "--max-tokens", "500", "--sweep", "1024", "--sweep-steps", "5",
              "--repeats", "1", "--no-progress", "--traces", str(small), "--tokenizer", str(qwen3_tokenizer_dir),
              "--output", str(tmp_path / "out")])   # exit 0 returns
    out = capsys.readouterr().out
    (run_dir,) = (tmp_path / "out").iterdir()
    budget = json.loads((run_dir / "result.json").read_text())["token_budget"]
    sweep = budget["sweep"]
    assert budget["tokens"] <= 500 and sweep["beyond_max_tokens"] and sweep["tokens_needed"] == 1024 + 5
    assert sweep["stream_tokens"] >= 1029
    assert (f"context sweep: its own stream of {sweep['stream_tokens']:,} trace tokens, beyond --max-tokens"
            in " ".join(out.split()))


@pytest.fixture
def short_and_long(traces_dir, tmp_path, qwen3_tokenizer_dir) -> dict:
    """Two real trace files: one line (the shortest GPT-3 solution) and two groups of Qwen2.5-Math
    responses, the second with a long prompt; with their token counts, read as the suite reads them."""
    g3 = (traces_dir / "gpt3_gsm8k_4models.jsonl").read_text().splitlines(keepends=True)
    qm = (traces_dir / "qwen25math_math_100x8.jsonl").read_text().splitlines(keepends=True)
    short, long_ = tmp_path / "short.jsonl", tmp_path / "long.jsonl"
    short.write_text(g3[337])
    long_.write_text("".join(qm[776:792]))
    tok = load_tokenizer(qwen3_tokenizer_dir)
    sizes = {}
    for f in (short, long_):
        resp = tokenize_traces(read_any(f, on_error="stop")[0], tok, chat_template="auto")
        sizes[f] = [(int(r.prompt_ids.size), int(r.response_ids.size)) for r in resp]
    return {"short": short, "long": long_, "sizes": sizes}


def sweep_run(files, sweep: int, tokenizer, out: Path, capsys) -> tuple[int, str, str]:
    try:
        cli.main(["drafters", "--drafters", "sam", "--max-tokens", "400", "--sweep", str(sweep), "--sweep-steps", "5",
                  "--repeats", "1", "--no-progress", "--tokenizer", str(tokenizer), "--output", str(out),
                  *(a for f in files for a in ("--traces", str(f)))])
        code = 0
    except SystemExit as e:
        code = e.code
    got = capsys.readouterr()
    return code, got.out, got.err


def test_a_short_trace_file_gives_all_it_has_to_the_sweep_and_the_others_the_rest(short_and_long, qwen3_tokenizer_dir,
                                                                                  tmp_path, monkeypatch, capsys):
    """The sweep's own stream needs more than an equal share of the short file holds: the short
    file gives all its tokens and the long one the rest, and each file's tokens are said. (With
    equal shares the long file's share ended before its long second-group prompt, and the short
    file could not make up the difference: the run was refused though the files held enough.)"""
    monkeypatch.setattr(timing, "MIN_MEASURE_SECONDS", 0.0)
    short, long_, sizes = short_and_long["short"], short_and_long["long"], short_and_long["sizes"]
    s = sum(p + r for p, r in sizes[short])
    first_group = sum(p + r for p, r in sizes[long_][:8])
    total_long = sum(p + r for p, r in sizes[long_])
    assert s < sizes[long_][8][0]   # the short file is shorter than the prompt an equal share stopped at
    need = first_group + s + 1
    code, out, err = sweep_run([short, long_], need - 5, qwen3_tokenizer_dir, tmp_path / "out", capsys)
    assert code == 0, err
    (run_dir,) = (tmp_path / "out").iterdir()
    sweep = json.loads((run_dir / "result.json").read_text())["token_budget"]["sweep"]
    assert total_long + s >= 2 * need   # the sweep's stream is twice what it needs, where the files hold that
    assert sweep["files"] == [{"file": str(short), "tokens": s}, {"file": str(long_), "tokens": 2 * need - s}]
    assert sweep["stream_tokens"] == 2 * need and sweep["tokens_needed"] == need
    flat = " ".join(out.split())
    assert f"{short} {s:,}" in flat and f"{long_} {2 * need - s:,}" in flat


def test_the_sweep_is_refused_only_where_all_files_together_are_short(short_and_long, qwen3_tokenizer_dir, tmp_path,
                                                                      capsys):
    short, long_, sizes = short_and_long["short"], short_and_long["long"], short_and_long["sizes"]
    s, total_long = (sum(p + r for p, r in sizes[f]) for f in (short, long_))
    need = s + total_long + 1
    code, _, err = sweep_run([short, long_], need - 5, qwen3_tokenizer_dir, tmp_path / "out", capsys)
    assert code == 2
    assert f"needs {need} tokens of traces, found {s + total_long} in all 2 trace file(s) together" in err
    assert f"{short}: {s}, {long_}: {total_long}" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())   # nothing half-made
