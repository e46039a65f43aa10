"""A simulated rollout keeps each draw as it finishes (suites/rollout/kept_work.py): an interrupted
run leaves its finished draws, `rollout --resume` simulates only the rest and gives the figures an
uninterrupted run gives, and a folder of other settings or changed inputs is refused."""

import json
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from samspec_bench import cli
from samspec_bench.errors import UserError
from samspec_bench.results import RunDir, to_jsonable
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout import replay_arm
from samspec_bench.suites.rollout.command import step_model_file
from samspec_bench.suites.rollout.kept_work import DRAWS_FILE, KeptWork, kept_draw, keeping, scope

DRAWS = 4


def _args(small, shared_data, *extra):
    draws = [] if "--draws" in extra else ["--draws", str(DRAWS)]
    return ["--traces", str(small), "--tokenizer", str(shared_data / "tokenizers" / "qwen3"),
            "--length-dist", "lognormal:300:0.8", "--max-response-len", "2000", *draws,
            "--arms", "off,always", *extra]


def _counting(monkeypatch, stop_at=None):
    """Count the draws simulated after the shown one; raise Ctrl-C at the `stop_at`-th."""
    calls = []
    real = replay_arm.simulate_seed

    def counted(cfg, rep, settings, seed, model):
        calls.append(seed)
        if stop_at is not None and len(calls) == stop_at:
            raise KeyboardInterrupt
        return real(cfg, rep, settings, seed, model)
    monkeypatch.setattr(replay_arm, "simulate_seed", counted)
    return calls


def _figures(summary):
    """Every arm's spreads: what a resumed run must give as an uninterrupted one does."""
    return {lbl: {k: v["values"] for k, v in m["spread"].items()} for lbl, m in summary["arms"].items()}


def _config(small, shared_data, *extra):
    return ro.build_config(**{**_defaults(), **_parse(_args(small, shared_data, *extra))})


def _defaults():
    ctx = ro.command.make_context("rollout", [], resilient_parsing=True)
    return {k: v for k, v in ctx.params.items() if k not in ("output", "json_path", "resume")}


def _parse(argv):
    ctx = ro.command.make_context("rollout", list(argv))
    return {k: v for k, v in ctx.params.items() if k not in ("output", "json_path", "resume")}


def test_an_interrupted_run_keeps_its_draws_and_a_resume_simulates_only_the_rest(small, shared_data, tmp_path,
                                                                                  monkeypatch):
    cfg = _config(small, shared_data)
    _, whole = ro.run(cfg, str(tmp_path / "whole"))

    calls = _counting(monkeypatch, stop_at=2)   # the shown draw and seed 1 finish, seed 2 is cut
    with pytest.raises(KeyboardInterrupt):
        ro.run(cfg, str(tmp_path / "cut"))
    folder = next((tmp_path / "cut").iterdir())
    kept = [json.loads(line)["key"] for line in (folder / DRAWS_FILE).read_text().splitlines()]
    assert kept == ["all/seed=0", "all/seed=1"] and not (folder / "result.json").exists()

    monkeypatch.undo()
    calls = _counting(monkeypatch)
    path, resumed = ro.run(cfg, str(tmp_path / "cut"), resume=str(folder))
    assert path == folder
    assert calls == [2, 3]                       # seed 1 was not simulated again
    assert resumed["kept_draws"]["kept_from_earlier"] == 2 and resumed["kept_draws"]["simulated_now"] == 2
    assert _figures(resumed) == _figures(whole)
    assert json.loads((folder / "result.json").read_text())["metrics"]["arms"].keys() == whole["arms"].keys()


def test_a_torn_last_draw_is_simulated_again(small, shared_data, tmp_path, monkeypatch):
    cfg = _config(small, shared_data)
    _counting(monkeypatch, stop_at=3)
    with pytest.raises(KeyboardInterrupt):
        ro.run(cfg, str(tmp_path / "runs"))
    folder = next((tmp_path / "runs").iterdir())
    lines = (folder / DRAWS_FILE).read_text().splitlines(keepends=True)
    assert len(lines) == 3
    (folder / DRAWS_FILE).write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])   # killed mid-write
    monkeypatch.undo()
    calls = _counting(monkeypatch)
    _, summary = ro.run(cfg, str(tmp_path / "runs"), resume=str(folder))
    assert calls == [2, 3] and summary["kept_draws"]["kept_from_earlier"] == 2
    keys = [json.loads(line)["key"] for line in (folder / DRAWS_FILE).read_text().splitlines()]
    assert keys == ["all/seed=0", "all/seed=1", "all/seed=2", "all/seed=3"]


def _interrupted_folder(small, shared_data, tmp_path, monkeypatch) -> Path:
    _counting(monkeypatch, stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        ro.run(_config(small, shared_data), str(tmp_path / "runs"))
    monkeypatch.undo()
    return next((tmp_path / "runs").iterdir())


def test_a_resume_with_other_settings_is_refused_in_one_line(small, shared_data, tmp_path, monkeypatch, capsys):
    folder = _interrupted_folder(small, shared_data, tmp_path, monkeypatch)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli.main(["rollout", *_args(small, shared_data, "--seed", "5"), "--output", str(tmp_path / "runs"),
                  "--resume", str(folder)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1
    assert "the run used seed = 0, this call 5" in err[0] and "repeat the original options" in err[0]


def test_a_resume_over_a_changed_trace_file_is_refused(small, shared_data, tmp_path, monkeypatch, capsys):
    folder = _interrupted_folder(small, shared_data, tmp_path, monkeypatch)
    lines = small.read_text().splitlines(keepends=True)
    small.write_text("".join(lines[8:] + lines[:8]))   # the same responses, another file
    with pytest.raises(SystemExit) as e:
        cli.main(["rollout", *_args(small, shared_data), "--output", str(tmp_path / "runs"), "--resume", str(folder)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"{small} changed since the run started" in err


def test_a_measured_engine_is_not_resumed(tmp_path):
    cfg = ro.build_config(**{**_defaults(), "engine": "reference"})
    with pytest.raises(Exception) as e:
        ro.run(cfg, str(tmp_path), resume=str(tmp_path))
    assert "--engine reference measures its arms interleaved in one session" in str(e.value)


def test_bad_traces_found_after_the_folder_is_made_leave_no_folder(shared_data, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x", "response": }\n')
    with pytest.raises(SystemExit) as e:
        cli.main(["rollout", *_args(bad, shared_data), "--output", str(tmp_path / "out")])
    assert e.value.code == 2 and "bad.jsonl" in capsys.readouterr().err
    assert not list((tmp_path / "out").glob("rollout-*"))


def _record(seed, total=1.0, **figures):
    """A draw's record as draws.draw_record writes one (one arm, one instance)."""
    return {"seed": seed, "arms": {"off": {"total_s": total, **figures, "kv": {"source": "unlimited", "note": None}}},
            "phases": {"off": [{"total_s": total, "tail_steps": 3}]}, "baseline": {}}


def test_kept_values_are_json_values_whether_computed_or_read_back(tmp_path):
    run_dir = RunDir(tmp_path, "rollout")
    kept = KeptWork(run_dir, resumed=False)
    with keeping(kept), scope("dev"):
        first = kept_draw("seed=3", lambda: _record(3, float("nan"), rounds=(1, 2)))
    assert first == _record(3, None, rounds=[1, 2]) == to_jsonable(_record(3, float("nan"), rounds=(1, 2)))
    again = KeptWork(run_dir, resumed=True)
    with keeping(again), scope("dev"):
        assert kept_draw("seed=3", lambda: pytest.fail("simulated again")) == first
    with keeping(again):   # another scope is another draw
        assert kept_draw("seed=3", lambda: _record(3, 2.0)) == _record(3, 2.0)
    assert (again.reused, again.computed, again.ignored) == (1, 1, 0)


def test_kept_lines_that_are_not_a_whole_draw_are_simulated_again_and_counted(tmp_path):
    run_dir = RunDir(tmp_path, "rollout")
    lines = [{"key": f"all/seed={s}", "value": _record(s, 10.0 + s)} for s in range(3)]
    lines += [{"key": "all/seed=1", "value": _record(1, 11.0)},                  # given twice
              {"key": "all/seed=3", "value": "oops"},                            # not a record
              {"key": "all/seed=4", "value": _record(4, "12")},                  # a figure as text
              {"key": "all/seed=5", "value": {**_record(5), "arms": {"off": {"kv": {}}}}},   # a figure removed
              {"key": "all/seed=6", "value": _record(7)},                        # another seed's
              {"key": "all/seed=8"},                                             # no value
              {"key": "sensitivity/call=0/seed=2", "value": [_record(2), _record(1002)]},
              {"key": "sensitivity/call=1/seed=2", "value": _record(2)}]         # not a list of rounds
    (run_dir.path / DRAWS_FILE).write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"key": "all/se')
    kept = KeptWork(run_dir, resumed=True)
    assert sorted(kept.done) == ["all/seed=0", "all/seed=1", "all/seed=2", "sensitivity/call=0/seed=2"]
    assert kept.ignored == 7 and kept.describe()["ignored_records"] == 7   # the torn last line is not counted


def test_a_damaged_kept_draw_is_simulated_again_with_the_uninterrupted_figures(small, shared_data, tmp_path,
                                                                             monkeypatch, capsys):
    cfg = _config(small, shared_data)
    _, whole = ro.run(cfg, str(tmp_path / "whole"))
    _counting(monkeypatch, stop_at=3)
    with pytest.raises(KeyboardInterrupt):
        ro.run(cfg, str(tmp_path / "cut"))
    folder = next((tmp_path / "cut").iterdir())
    lines = (folder / DRAWS_FILE).read_text().splitlines(keepends=True)
    lines[1] = json.dumps({"key": "all/seed=1", "value": "edited by hand"}) + "\n"
    (folder / DRAWS_FILE).write_text("".join(lines))
    monkeypatch.undo()
    calls = _counting(monkeypatch)
    capsys.readouterr()
    _, resumed = ro.run(cfg, str(tmp_path / "cut"), resume=str(folder))
    assert calls == [1, 3] and resumed["kept_draws"]["ignored_records"] == 1
    assert "1 line(s) of" in capsys.readouterr().err
    assert _figures(resumed) == _figures(whole)


def test_a_roofline_specs_files_are_checked_on_resume(tmp_path):
    cal, model = tmp_path / "cal.json", tmp_path / "model"
    cal.write_text("{}")
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec = f"roofline:hardware=H200,model={model},tp=1,calibration={cal}"
    assert step_model_file(SimpleNamespace(step_model=spec)) == [str(cal), str(model / "config.json")]
    catalogued = "roofline:hardware=H200,model=Qwen/Qwen3-8B"
    assert step_model_file(SimpleNamespace(step_model=catalogued)) == []


def test_the_sensitivity_table_keeps_its_draws_too(small, shared_data, tmp_path, monkeypatch):
    from samspec_bench.suites.rollout import sensitivity
    cfg = _config(small, shared_data, "--sensitivity", "--draws", "2")
    _, whole = ro.run(cfg, str(tmp_path / "whole"))
    real, calls = sensitivity.simulate_arms, []

    def counted(*a, **k):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(sensitivity, "simulate_arms", counted)
    with pytest.raises(KeyboardInterrupt):
        ro.run(cfg, str(tmp_path / "cut"))
    folder = next((tmp_path / "cut").iterdir())
    keys = [json.loads(line)["key"] for line in (folder / DRAWS_FILE).read_text().splitlines()]
    assert sum(k.startswith("sensitivity/") for k in keys) == 4   # one simulated draw each, the fifth cut
    monkeypatch.setattr(sensitivity, "simulate_arms", real)
    _, resumed = ro.run(cfg, str(tmp_path / "cut"), resume=str(folder))
    assert resumed["kept_draws"]["kept_from_earlier"] == len(keys)
    rows = lambda s: [(r["assumption"], r["value"], r["tail_share_pct"]["values"], r["gain_pct"]["values"])
                      for r in s["sensitivity"]["rows"]]
    assert rows(resumed) == rows(whole) and len(rows(whole)) > 5


def test_a_complete_folder_is_reprinted_not_simulated(small, shared_data, tmp_path, monkeypatch, capsys):
    cfg = _config(small, shared_data, "--draws", "2")
    path, whole = ro.run(cfg, str(tmp_path / "runs"))
    written = (path / "result.json").read_text()
    monkeypatch.setattr(replay_arm, "simulate_arms", lambda *a, **k: pytest.fail("simulated again"))
    capsys.readouterr()
    again, summary = ro.run(cfg, str(tmp_path / "runs"), resume=str(path))
    assert again == path and (path / "result.json").read_text() == written
    assert _figures(summary) == _figures(whole) and "the run is complete" in capsys.readouterr().err


def test_a_folder_saved_before_newer_settings_resumes_with_what_it_did(small, shared_data, tmp_path, monkeypatch):
    """A run folder saved before history_includes_validation, on_error and length_rank_share were
    settings resumes when this call asks for what those runs did, and not otherwise."""
    folder = _interrupted_folder(small, shared_data, tmp_path, monkeypatch)
    cfg = folder / "config.json"
    saved = json.loads(cfg.read_text())
    for key in ("history_includes_validation", "on_error", "length_rank_share"):
        saved.pop(key)
    cfg.write_text(json.dumps(saved))
    KeptWork.start(asdict(_config(small, shared_data)), str(tmp_path / "runs"), str(folder), "rollout")
    with pytest.raises(UserError, match="the run used on_error = 'stop', this call 'skip'"):
        KeptWork.start(asdict(_config(small, shared_data, "--on-error", "skip")), str(tmp_path / "runs"),
                       str(folder), "rollout")
