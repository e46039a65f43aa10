"""The drafter benchmark's recorded rounds: read back for --resume (a record that does not fit
the run is measured again and counted), and the sessions that measured them."""

from __future__ import annotations

import json

from samspec_bench.results import RunDir
from samspec_bench.suites.drafters import DraftersConfig
from samspec_bench.suites.drafters.rounds import ROUNDS_FILE, Rounds

NAMES = ["sam", "ngram"]
A = {"pid": 11, "started": "2026-01-01T00:00:00.000001+00:00"}
B = {"pid": 12, "started": "2026-01-02T00:00:00.000001+00:00"}


def replay(names):
    one = {m: {"seconds": 0.01, "loops": 1} for m in ("bulk", "stream", "draft")}
    return {n: dict(one, tokens=100, drafts=60, mem=4000) for n in names}


def point(name, seconds=0.001):
    return {"drafter": name, "context_tokens": 64, "ns_per_step": 900.0, "ns_per_token_build": 40.0,
            "build_windows": 4, "bytes_per_token": 80.0, "seconds": seconds}


def test_records_that_do_not_fit_are_measured_again_and_counted(tmp_path):
    cfg = DraftersConfig(traces=[], tokenizer="t", drafters=NAMES, sweep=[64], repeats=3)
    run_dir = RunDir(tmp_path, "drafters")
    lines = [
        {"kind": "replay", "round": 0, "session": A, "data": replay(NAMES)},
        {"kind": "replay", "round": 1, "session": A, "data": replay(["sam"])},          # a drafter missing
        {"kind": "replay", "round": 3, "session": A, "data": replay(NAMES)},            # beyond --repeats 3
        {"kind": "sweep", "round": 0, "session": A, "data": [point("sam"), point("ngram", seconds=2.0)]},
        {"kind": "sweep", "round": 1, "session": A, "data": [point("ngram")]},          # sam's point missing
        {"kind": "sweep", "round": 2, "session": B, "data": [point("sam")]},            # ngram's ran once: slow
    ]
    (run_dir.path / ROUNDS_FILE).write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"kind": "repl')
    rounds = Rounds(run_dir, cfg, NAMES, B)
    rounds.load()
    assert sorted(rounds.recorded("replay")) == [0] and sorted(rounds.recorded("sweep")) == [0, 2]
    assert rounds.ignored == 3   # the torn last line is not a record (results.RunDir.samples skips it)
    extra = rounds.extra()
    assert extra["resumed_rounds"] == {"replay": 1, "sweep": 2} and extra["ignored_round_records"] == 3
    assert [(s["pid"], s["replay_rounds"], s["sweep_rounds"]) for s in extra["sessions"]] == [(11, 1, 1), (12, 0, 1)]
    assert extra["sessions_note"].startswith("rounds measured in 2 sessions (processes 11, 12")


def test_one_session_has_no_note_and_a_round_is_appended_whole(tmp_path):
    cfg = DraftersConfig(traces=[], tokenizer="t", drafters=NAMES, sweep=[64], repeats=2)
    run_dir = RunDir(tmp_path, "drafters")
    rounds = Rounds(run_dir, cfg, NAMES, A)
    rounds.record("replay", 0, replay(NAMES))
    rounds.record("sweep", 0, [point("sam"), point("ngram")])
    again = Rounds(run_dir, cfg, NAMES, B)
    again.load()
    assert again.recorded("replay") == {0: replay(NAMES)} and again.ignored == 0
    assert again.extra()["sessions"] == [dict(A, replay_rounds=1, sweep_rounds=1)]
    assert again.extra()["sessions_note"] is None


def test_a_round_with_impossible_figures_is_measured_again(tmp_path):
    cfg = DraftersConfig(traces=[], tokenizer="t", drafters=NAMES, sweep=[64], repeats=4)
    run_dir = RunDir(tmp_path, "drafters")
    no_tokens, negative, no_loops = replay(NAMES), replay(NAMES), replay(NAMES)
    no_tokens["sam"]["tokens"] = 0                       # the figures divide by it
    negative["ngram"]["stream"]["seconds"] = -0.01       # would be the fastest pass
    no_loops["sam"]["draft"]["loops"] = 0.5
    lines = [{"kind": "replay", "round": i, "session": A, "data": d}
             for i, d in enumerate([replay(NAMES), no_tokens, negative, no_loops])]
    lines.append({"kind": "sweep", "round": 0, "session": A,
                  "data": [dict(point("sam"), ns_per_step=0.0), point("ngram")]})
    (run_dir.path / ROUNDS_FILE).write_text("".join(json.dumps(r) + "\n" for r in lines))
    rounds = Rounds(run_dir, cfg, NAMES, B)
    rounds.load()
    assert sorted(rounds.recorded("replay")) == [0] and rounds.recorded("sweep") == {}
    assert rounds.ignored == 4
