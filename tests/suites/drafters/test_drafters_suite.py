"""`samspec-bench drafters` end to end on a slice of the real traces, and its bad-input paths."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from samspec_bench.cli import group, main
from samspec_bench.data import TokenizedResponse
from samspec_bench.errors import UserError
from samspec_bench.reports.suite_headlines import SUITE_SUMMARIZERS
from samspec_bench.suites import drafters as suite
from samspec_bench.suites.drafters import DraftersConfig, summarize, timing
from samspec_bench.suites.drafters.inputs import within_share


def run_cli(args):
    return CliRunner().invoke(group, args, catch_exceptions=True, standalone_mode=False)


@pytest.fixture(scope="module")
def small_result(tmp_path_factory, traces_dir, qwen3_tokenizer_dir):
    out = tmp_path_factory.mktemp("drafters")
    json_path = out / "r.json"
    res = run_cli(["drafters", "--traces", str(traces_dir / "qwen25math_math_100x8.jsonl"),
                      "--traces", str(traces_dir / "gpt3_gsm8k_4models.jsonl"),
                      "--tokenizer", str(qwen3_tokenizer_dir), "--max-tokens", "6000",
                      "--sweep", "256,4096", "--sweep-steps", "50", "--repeats", "1",
                      "--drafters", "sam,sam-evidence-py,sam-group,ngram,sam-python,sam-public,suffix",
                      "--output", str(out), "--json", str(json_path), "--no-progress"])
    assert res.exception is None, res.output
    return json.loads(json_path.read_text()), out


def test_every_drafter_replays_the_same_tokens(small_result):
    result, _ = small_result
    rows = result["tables"]["replay"]
    names = [r["drafter"] for r in rows]
    assert {"sam", "sam-group", "ngram", "sam-python", "sam-public"} <= set(names)
    assert len({r["tokens"] for r in rows}) == 1  # same tokens for every drafter
    # the evidence policy is measured on its compiled path, its Python specification beside it
    path = {r["drafter"]: r["policy_path"] for r in rows}
    assert path["sam"] == "c" and path["sam-evidence-py"] == "python"
    # a draft after every response token, none after prompt tokens (which are indexed too)
    assert len({r["drafts"] for r in rows}) == 1 and 0 < rows[0]["drafts"] < rows[0]["tokens"]
    # suffix is either measured or reported as unavailable, never silently missing
    assert ("suffix" in names) != ("suffix" in result["unavailable_drafters"])


def test_sweep_covers_every_drafter_and_length(small_result):
    result, _ = small_result
    pts = {(r["drafter"], r["context_tokens"]) for r in result["tables"]["context_sweep"]}
    names = {r["drafter"] for r in result["tables"]["replay"]}
    assert pts == {(n, L) for n in names for L in (256, 4096)}
    growth = result["metrics"]["step_cost_growth_longest_vs_shortest_context"]
    assert set(growth) == names
    assert set(result["metrics"]["build_speedup_vs_sam_public_by_context"]) == {"256", "4096"}


def test_result_directory_is_complete(small_result):
    result, out = small_result
    run_dirs = list(out.glob("drafters-*"))
    assert len(run_dirs) == 1
    on_disk = json.loads((run_dirs[0] / "result.json").read_text())
    assert on_disk["suite"] == "drafters" and on_disk["schema_version"] == 1
    assert (run_dirs[0] / on_disk["figures"][0]).stat().st_size > 10_000  # a real PNG, not empty
    assert on_disk["metrics"]["append_speedup_vs_sam_python"] > 1   # the C automaton against pure Python
    assert len(on_disk["data_files"]) == 2


@pytest.mark.parametrize("args, needle", [
    (["-k", "0"], "-k 0"),
    (["--drafters", "medusa"], "medusa"),
    (["--sweep", "1,x"], "--sweep"),
])
def test_bad_options_exit_2_with_one_line(args, needle, traces_dir, qwen3_tokenizer_dir, tmp_path, capfd):
    with pytest.raises(SystemExit) as exc:
        main(["drafters", "--traces", str(traces_dir / "tora70b_gsm8k.jsonl"), "--tokenizer",
              str(qwen3_tokenizer_dir), "--output", str(tmp_path), "--max-tokens", "1000", "--sweep", "64",
              "--no-progress", *args])
    assert exc.value.code == 2
    err = capfd.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) <= 2


def test_malformed_trace_line_is_named(tmp_path, qwen3_tokenizer_dir, capfd):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "group": "g", "prompt": "1+1=", "response": "2"}\n{not json\n')
    with pytest.raises(SystemExit) as exc:
        main(["drafters", "--traces", str(bad), "--tokenizer", str(qwen3_tokenizer_dir),
              "--output", str(tmp_path), "--no-progress"])
    assert exc.value.code == 2
    err = capfd.readouterr().err
    assert f"{bad}:2" in err and "--on-error skip" in err


def test_short_passes_are_repeated_until_the_measurement_lasts_long_enough(monkeypatch):
    """A pass shorter than MIN_MEASURE_SECONDS is repeated and the mean per pass kept; a long
    one runs once. Only the first pass reports progress (the repeats are short)."""
    calls = []

    def fake_pass(drafter, groups, k, mode, on_group=None):
        calls.append(on_group)
        return (0.03 if mode == "bulk" else 0.5), 100, 7, 4000

    monkeypatch.setattr(timing, "replay_pass", fake_pass)
    monkeypatch.setattr(timing, "build_drafter", lambda name: object())
    secs, tokens, drafts, mem, loops = timing.timed_pass("sam", [], 8, "bulk", on_group="progress")
    assert loops == 7 and secs == pytest.approx(0.03)  # 7 x 0.03 s is the first total >= 0.2 s
    assert (tokens, drafts, mem) == (100, 7, 4000)
    assert calls == ["progress"] + [None] * 6
    assert timing.timed_pass("sam", [], 8, "stream")[4] == 1


def test_sweep_builds_distinct_windows_the_same_for_every_drafter(monkeypatch):
    """The build cost is averaged over consecutive windows (64k tokens' worth), each built
    once; the steps run on the first window. Any drafter sees exactly the same windows."""
    seen = []

    class Recorder:
        def start(self, rid, prompt, group=None):
            seen.append(np.asarray(prompt).copy())

        def extend(self, rid, toks):
            pass

        def propose(self, rid, k):
            return []

        def stop(self, rid):
            pass

        def memory_bytes(self):
            return 0

    monkeypatch.setattr(timing, "build_drafter", lambda name: Recorder())
    stream = np.arange(300_000, dtype=np.int32)
    row = timing.sweep_point("any", stream, 1024, 10, 8)
    assert row["build_windows"] == len(seen) == 65_536 // 1024   # 64k tokens' worth of 1k windows
    assert all(np.array_equal(w, stream[i * 1024:(i + 1) * 1024]) for i, w in enumerate(seen))
    first = list(seen)
    seen.clear()
    timing.sweep_point("other", stream, 1024, 10, 8)
    assert all(np.array_equal(a, b) for a, b in zip(first, seen)) and len(seen) == len(first)
    seen.clear()
    assert timing.sweep_point("any", stream, 262_144, 10, 8)["build_windows"] == 1 and len(seen) == 1


def test_build_config_checks_before_loading_and_execute_checks_the_resume_folder(tmp_path):
    """The suite contract: build_config checks the options (no file is read); execute refuses a
    --resume folder that is not a drafters run (before reading the traces)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"prompt": "p", "response": "r"}\n')
    opts = dict(traces=(str(trace),), tokenizer="tok", data_dir=None, drafters="sam", k=8,
                max_tokens=100, sweep=[64], sweep_steps=10, repeats=1, chat_template="auto", on_error="stop",
                no_progress=True)
    job = suite.build_config(**opts)
    assert job.config.traces == [str(trace)] and job.progress is False
    with pytest.raises(UserError, match="does not exist"):
        suite.build_config(**{**opts, "traces": (str(tmp_path / "missing.jsonl"),)})
    with pytest.raises(UserError, match="-k 0"):
        suite.build_config(**{**opts, "k": 0})
    with pytest.raises(UserError, match="^--repeats 0: give an integer >= 1$"):
        suite.build_config(**{**opts, "repeats": 0})
    with pytest.raises(UserError, match="medusa"):
        suite.build_config(**{**opts, "drafters": "sam,medusa"})
    with pytest.raises(UserError, match="not a samspec-bench run folder"):
        suite.execute(job, output=str(tmp_path), resume=str(tmp_path))


def test_a_verl_folder_is_read_in_step_order(tmp_path):
    """A rollout_data_dir stands for its step files in step order (1, 2, 10), as accept reads it,
    and a file beside them that is not a step file is not one of them."""
    line = json.dumps({"input": "q", "output": "a", "score": 1.0, "step": 1}) + "\n"
    for step in (10, 2, 1):
        (tmp_path / f"{step}.jsonl").write_text(line)
    opts = dict(traces=(str(tmp_path),), tokenizer="tok", data_dir=None, drafters="sam", k=8, max_tokens=100,
                sweep=[64], sweep_steps=10, repeats=1, chat_template="auto", on_error="stop", no_progress=True)
    assert [Path(f).name for f in suite.build_config(**opts).config.traces] == ["1.jsonl", "2.jsonl", "10.jsonl"]


def _row(name, draft, mem, token=100.0):
    return {"drafter": name, "ns_per_token": token, "ns_per_token_stream": 2 * token, "ns_per_draft": draft,
            "bytes_per_token": mem}


def test_library_figures_come_from_the_fixed_lookup_and_the_policy_is_beside_them():
    """The speed / memory headlines (and the report's gates) describe the automaton with
    SAM-Decoding's lookup (sam-fixed); the evidence policy's own cost is reported next to them."""
    row = _row
    cfg = DraftersConfig(traces=[], tokenizer="t", sweep=[256])
    m = summarize([row("sam-fixed", 500.0, 60.0), row("sam", 9000.0, 70.0), row("sam-python", 3000.0, 900.0)], [], cfg)
    assert (m["sam_library_drafter"], m["sam_ns_per_draft"], m["sam_bytes_per_token"]) == ("sam-fixed", 500.0, 60.0)
    assert (m["evidence_ns_per_draft"], m["evidence_bytes_per_token"]) == (9000.0, 70.0)
    assert m["draft_speedup_vs_sam_python"] == pytest.approx(6.0)
    assert "evidence_draft_speedup_vs_python_policy" not in m   # no Python-policy row: no ratio
    m = summarize([row("sam-fixed", 500.0, 60.0), dict(row("sam", 1000.0, 70.0), policy_path="c"),
                   dict(row("sam-evidence-py", 9000.0, 70.0), policy_path="python")], [], cfg)
    assert m["evidence_policy_path"] == "c" and m["evidence_ns_per_draft"] == 1000.0
    assert m["evidence_draft_speedup_vs_python_policy"] == pytest.approx(9.0)
    assert m["evidence_draft_cost_vs_fixed_lookup"] == pytest.approx(2.0)
    # the report says which path
    heads = {h["name"]: h for h in SUITE_SUMMARIZERS["drafters"]({"metrics": m, "config": {}})[0]}
    assert "c path" in heads["sam evidence policy ns/draft"]["note"]
    assert heads["sam evidence policy: ns/draft speedup vs its Python specification"]["value"] == pytest.approx(9.0)
    only_sam = summarize([row("sam", 9000.0, 70.0)], [], cfg)   # --drafters sam: its own figures, nothing beside
    assert only_sam["sam_ns_per_draft"] == 9000.0 and "evidence_ns_per_draft" not in only_sam


def test_each_sweep_point_keeps_its_fastest_round_and_slow_points_run_once(monkeypatch):
    """The sweep's points are timed in `repeats` rounds round the drafters; each keeps its
    fastest steps and its fastest build (a millisecond of steps is at the mercy of the
    machine's other jobs), and a point slower than SWEEP_REPEAT_SECONDS runs once."""
    steps = {("a", 64): iter([900.0, 300.0, 600.0]), ("slow", 64): iter([5000.0, 1.0, 1.0])}
    builds = itertools.count(10, -1)
    calls, clock = [], [0.0]

    def point(name, stream, length, n, k):
        calls.append(name)
        clock[0] += 2.0 if name == "slow" else 0.01     # seconds the point took
        return {"drafter": name, "context_tokens": length, "ns_per_step": next(steps[(name, length)]),
                "ns_per_token_build": float(next(builds))}

    monkeypatch.setattr(timing, "sweep_point", point)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    cfg = DraftersConfig(traces=[], tokenizer="t", sweep=[64], repeats=3)
    ticks = []
    rows = timing.fastest_sweep(["a", "slow"], np.zeros(10, np.int32), cfg, on_point=lambda: ticks.append(1))
    by = {r["drafter"]: r for r in rows}
    assert calls.count("a") == 3 and calls.count("slow") == 1 and len(ticks) == 6
    assert by["a"]["ns_per_step"] == 300.0 and by["a"]["timed_rounds"] == 3
    assert by["a"]["ns_per_token_build"] == min(10.0, 8.0, 7.0)   # its three builds: 10, 8, 7
    assert by["slow"]["ns_per_step"] == 5000.0 and by["slow"]["timed_rounds"] == 1


def test_build_speedups_and_step_cost_growth_by_hand():
    """The sweep's headlines: each Python baseline's per-token build cost over the library
    drafter's, per context length, and each drafter's per-step cost at the longest context
    over the shortest."""
    cfg = DraftersConfig(traces=[], tokenizer="t", sweep=[256, 4096])

    def pt(name, length, step, build):
        return {"drafter": name, "context_tokens": length, "ns_per_step": step, "ns_per_token_build": build}

    rows = [_row("sam-fixed", 500.0, 60.0), _row("sam-public", 9000.0, 900.0), _row("ngram", 100.0, None)]
    sweep = [pt("sam-fixed", 256, 100.0, 10.0), pt("sam-fixed", 4096, 120.0, 8.0),
             pt("sam-public", 256, 3000.0, 400.0), pt("sam-public", 4096, 3300.0, 400.0),
             pt("ngram", 256, 50.0, 1.0), pt("ngram", 4096, 800.0, 1.0)]
    m = summarize(rows, sweep, cfg)
    assert m["build_speedup_vs_sam_public_by_context"] == {"256": pytest.approx(40.0), "4096": pytest.approx(50.0)}
    assert "build_speedup_vs_sam_python_by_context" not in m   # no sam-python row: no ratio
    assert m["step_cost_growth_longest_vs_shortest_context"] == {
        "sam-fixed": pytest.approx(1.2), "sam-public": pytest.approx(1.1), "ngram": pytest.approx(16.0)}


@pytest.mark.parametrize("drafters", ["", " , "])
def test_no_drafter_given_is_one_line_exit_2(tmp_path, drafters, capfd):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"prompt": "p", "response": "r"}\n')
    with pytest.raises(UserError, match="give at least one drafter"):
        suite.build_config(traces=(str(trace),), tokenizer="tok", data_dir=None, drafters=drafters, k=8,
                           max_tokens=100, sweep=[64], sweep_steps=10, repeats=1, chat_template="auto",
                           on_error="stop", no_progress=True)
    with pytest.raises(SystemExit) as exc:
        main(["drafters", "--traces", str(trace), "--tokenizer", "tok", "--drafters", drafters,
              "--output", str(tmp_path), "--no-progress"])
    err = capfd.readouterr().err.strip()
    assert exc.value.code == 2 and "give at least one drafter" in err and len(err.splitlines()) == 1


def test_skipped_trace_lines_are_printed_and_kept(tmp_path, qwen3_tokenizer_dir, capfd):
    bad = tmp_path / "bad.jsonl"
    good = [json.dumps({"id": f"r{i}", "group": "g", "prompt": "What is 12 times 13? Think step by step.",
                        "response": "12 times 13 is 12 times 10 plus 12 times 3, 120 + 36 = 156."}) for i in range(40)]
    bad.write_text("\n".join(good[:20] + ["{not json"] + good[20:]) + "\n")
    out = tmp_path / "r.json"
    main(["drafters", "--traces", str(bad), "--tokenizer", str(qwen3_tokenizer_dir), "--on-error", "skip",
          "--drafters", "sam", "--max-tokens", "400", "--sweep", "64", "--sweep-steps", "10", "--repeats", "1",
          "--output", str(tmp_path), "--json", str(out), "--no-progress"])
    err = capfd.readouterr().err
    assert f"skipped {bad}:21: " in err
    extra = json.loads(out.read_text())
    assert extra["skipped_trace_lines"] == 1 and extra["skipped"][0]["line"] == 21


def test_a_drafting_cost_below_the_timing_noise_is_none_and_said_never_0_ns(monkeypatch, capsys):
    """ns/draft is the draft pass less the stream pass; when the draft pass was not slower, the
    cost is not resolved: None in the row, '< noise' in the table, no ratio made of it (a clamped
    0 ns read as free drafting and made a 0x speedup)."""
    secs = {"bulk": 0.30, "stream": 0.50, "draft": 0.49}   # the draft pass measured faster
    monkeypatch.setattr(timing, "timed_pass", lambda name, groups, k, mode, on_group=None: (secs[mode], 100, 10, 800, 1))
    monkeypatch.setattr(timing, "replay_pass", lambda *a, **kw: (0.0, 100, 10, 800))
    cfg = DraftersConfig(traces=[], tokenizer="t", drafters=["ngram"], repeats=1, sweep=[64])
    (row,) = timing.measure_replay(["ngram"], [], cfg)
    assert row["ns_per_draft"] is None
    m = summarize([_row("sam-fixed", 500.0, 60.0), _row("sam-python", None, 900.0)], [], cfg)
    assert m["draft_speedup_vs_sam_python"] is None
    suite.print_table({"config": {"k": 8}, "environment": {"device": {"device": "cpu", "name": "Test CPU"}},
                       "tables": {"replay": [dict(row, tokens=100, policy_path=None)], "context_sweep": []},
                       "metrics": {"draft_speedup_vs_x": 0.33}})
    out = " ".join(capsys.readouterr().out.split())
    assert "< noise" in out and "below the timing noise" in out
    assert "measured on cpu (Test CPU)" in out
    assert "draft_speedup_vs_x: 0.33x" in out     # not rounded to 0x


def test_an_unresolved_drafting_cost_is_bounded_by_the_stream_passes_spread(monkeypatch):
    # stream passes of 0.50 and 0.53 s, draft passes of 0.49 and 0.52 s over 10 drafts: the cost is
    # not resolved, and it is at most the stream pass's own spread, 0.03 s / 10 drafts = 3e6 ns
    times = iter([0.30, 0.50, 0.49, 0.31, 0.53, 0.52])
    monkeypatch.setattr(timing, "MODES", ("bulk", "stream", "draft"))
    monkeypatch.setattr(timing, "timed_pass", lambda name, groups, k, mode, on_group=None: (next(times), 100, 10, 800, 1))
    monkeypatch.setattr(timing, "replay_pass", lambda *a, **kw: (0.0, 100, 10, 800))
    cfg = DraftersConfig(traces=[], tokenizer="t", drafters=["ngram"], repeats=2, sweep=[64])
    (row,) = timing.measure_replay(["ngram"], [], cfg)
    assert row["ns_per_draft"] is None and row["ns_per_draft_at_most"] == pytest.approx(3e6)
    m = summarize([dict(_row("sam-fixed", None, 60.0), ns_per_draft_at_most=250.0)], [], cfg)
    assert m["sam_ns_per_draft"] is None and m["sam_ns_per_draft_at_most"] == 250.0


def test_the_run_records_the_cpu_it_was_timed_on(small_result):
    result, _ = small_result
    dev = result["environment"]["device"]
    assert dev["device"] == "cpu" and dev["used"] is True and dev["name"] and "wall clock" in dev["timer"]


def test_without_a_tokenizer_or_a_data_dir_the_error_names_tokenizer(tmp_path, monkeypatch):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"id": "a", "group": "g", "prompt": "1+1=", "response": "2"}\n')
    monkeypatch.setenv("SAMSPEC_DATA_DIR", str(tmp_path / "none"))
    with pytest.raises(UserError, match=r"^--tokenizer not given, and no data directory found .*\(or pass --tokenizer\)$"):
        suite.build_config(traces=(str(trace),), tokenizer=None, data_dir=None, drafters="sam", k=8, max_tokens=100,
                           sweep=[64], sweep_steps=10, repeats=1, chat_template="auto", on_error="stop",
                           no_progress=True)


@pytest.mark.parametrize("given, said", [("file", "not a known trace format"),
                                          ("folder", "1 of 1 file(s) not understood as traces")])
def test_an_unknown_trace_format_is_not_told_to_use_an_option_drafters_lacks(tmp_path, capfd, given, said):
    """drafters has no --trace-format (accept has): its error names the formats, not that option,
    for a file and for a folder holding one."""
    (tmp_path / "in").mkdir()
    f = tmp_path / "in" / "qa.jsonl"
    f.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["drafters", "--traces", str(f if given == "file" else f.parent), "--tokenizer", str(tmp_path),
              "--output", str(tmp_path / "out"), "--no-progress"])
    err = capfd.readouterr().err
    assert exc.value.code == 2 and said in err and "--trace-format" not in err
    assert not (tmp_path / "out").exists()


def test_max_tokens_is_a_cap_the_result_and_terminal_account_for(small_result):
    """--max-tokens 6000 over two files: at most 6000 tokens replayed (the response crossing a
    file's 3000 is cut there, not kept whole), and result.json says what was used against the cap."""
    result, _ = small_result
    budget = result["token_budget"]
    assert budget["max_tokens"] == 6000 and budget["share_per_file"] == 3000
    assert all(r["tokens"] == budget["tokens"] <= 6000 for r in result["tables"]["replay"])
    assert [f["tokens"] <= 3000 for f in budget["files"]] == [True, True] and not budget["files_without_tokens"]
    assert budget["responses_cut"] == sum(f["cut"] for f in budget["files"])
    # the sweep (4096 + 50 steps) fits in the replayed tokens: it reads nothing past the cap
    assert budget["sweep"] == {"tokens_needed": 4146, "stream_tokens": budget["tokens"], "beyond_max_tokens": False}


def _resp(i, prompt, response, group="g"):
    return TokenizedResponse(id=str(i), group=group, prompt_ids=np.arange(prompt, dtype=np.int32),
                             response_ids=np.arange(response, dtype=np.int32), source=Path("t.jsonl"), line=i + 1,
                             prompt_format="raw", logprobs=np.zeros(response, dtype=np.float32),
                             tool_spans=((2, 8, "x"), (30, 40, "y")))


def test_the_response_crossing_a_files_share_is_cut_at_it():
    resp = [_resp(0, 10, 40), _resp(1, 10, 40), _resp(2, 10, 40)]
    taken, cut = within_share(resp, 75)   # 50 + the second's prompt (10) + 15 of its 40 response tokens
    assert cut and [r.response_ids.size for r in taken] == [40, 15]
    assert sum(r.prompt_ids.size + r.response_ids.size for r in taken) == 75
    assert taken[1].logprobs.size == 15 and taken[1].tool_spans == ((2, 8, "x"),)
    assert within_share(resp, 150) == (resp, False)     # all fit: nothing cut
    taken, cut = within_share(resp, 60)   # the second's prompt and one token do not fit: it is left out
    assert [r.id for r in taken] == ["0"] and not cut


def test_a_share_too_small_for_the_first_prompt_is_one_line_naming_max_tokens(tmp_path, qwen3_tokenizer_dir, capfd):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"prompt": "What is the sum of the first ten primes? " * 4, "response": "129"}) + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["drafters", "--traces", str(f), "--tokenizer", str(qwen3_tokenizer_dir), "--output",
              str(tmp_path / "out"), "--max-tokens", "5", "--no-progress"])
    err = capfd.readouterr().err.strip()
    assert exc.value.code == 2 and "--max-tokens 5" in err and "raise --max-tokens" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()
