"""`samspec-bench run --resume` on damaged files: a step recorded done whose result.json does not
read back is run again (and said so), so the exit code is the steps' real outcome; a hand-damaged
run_state.json is one line, exit 2, naming what is wrong, before anything runs or is written.
Stand-in suites (registered in the command table) keep it fast."""

from __future__ import annotations

import json
import sys
import types

import click
import pytest

from samspec_bench.cli import main
from samspec_bench.commands import COMMANDS
from samspec_bench.results import RunDir
from samspec_bench.suites.run import plan
from samspec_bench.suites.run.command import outcome
from samspec_bench.suites.run.plan import Plan, Step
from samspec_bench.suites.run.state import STATE_FILE

CALLS: list[str] = []


def _standin(name: str, gate_passed: bool) -> types.ModuleType:
    """A suite that records that it ran and writes a result with one gate."""
    def build_config(*, size):
        return {"size": size}

    def execute(cfg, *, output, resume=None, json_path=None):
        CALLS.append(name)
        RunDir(output, name, resume).write_result(
            cfg, {"size": cfg["size"]},
            extra={"gates": [{"name": f"{name} ok", "passed": gate_passed, "value": 1, "threshold": 1}]})
        return 0

    @click.command(name)
    @click.option("--size", type=int, default=1)
    @click.option("--output", default="results")
    @click.option("--resume", default=None)
    def cmd(size, output, resume):
        execute(build_config(size=size), output=output, resume=resume)

    mod = types.ModuleType(f"samspec_resume_standin_{name}")
    mod.SUITE, mod.command, mod.build_config, mod.execute = name, cmd, build_config, execute
    return mod


@pytest.fixture()
def two_steps(monkeypatch):
    """alpha (its gate passes) then gamma (its gate fails): a fresh run exits 1."""
    CALLS.clear()
    for name, passed in (("alpha", True), ("gamma", False)):
        mod = _standin(name, passed)
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
        monkeypatch.setitem(COMMANDS, name, (f"{mod.__name__}:command", f"stand-in {name}"))
    steps = (Step("alpha", "alpha", "first", lambda ctx: Plan()), Step("gamma", "gamma", "second", lambda ctx: Plan()))
    monkeypatch.setattr(plan, "STEPS", steps)
    monkeypatch.setattr(plan, "STEP_NAMES", tuple(s.name for s in steps))


def _run(args, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    got = capsys.readouterr()
    return e.value.code, got.out, got.err


def _finished_run(tmp_path, capsys):
    code, _, _ = _run(["run", "--output", str(tmp_path / "res")], capsys)
    assert code == 1   # gamma's gate fails
    (out,) = (tmp_path / "res").glob("run-*")
    CALLS.clear()
    return out, json.loads((out / STATE_FILE).read_text())


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_result_is_run_again_and_the_exit_code_is_its_outcome(two_steps, tmp_path, capsys):
    out, state = _finished_run(tmp_path, capsys)
    old = state["steps"]["gamma"]["run_dir"]
    _truncate(out / old / "result.json")
    code, printed, err = _run(["run", "--resume", str(out)], capsys)
    lines = [x for x in printed.splitlines() if x.startswith("step gamma:")]
    assert len(lines) == 1 and lines[0].startswith("step gamma: its result.json is damaged (not valid JSON")
    assert lines[0].endswith("): running it again")
    assert CALLS == ["gamma"]                      # alpha's readable result is kept, not run again
    assert "alpha: done in an earlier session" in printed and "gamma: done in an earlier session" not in printed
    assert code == 1                               # gamma's gate fails again: not 0 for a lost step
    saved = json.loads((out / STATE_FILE).read_text())
    assert saved["steps"]["gamma"]["status"] == "done" and saved["steps"]["gamma"]["run_dir"] != old
    assert json.loads((out / saved["steps"]["gamma"]["run_dir"] / "result.json").read_text())["suite"] == "gamma"
    assert (out / old).is_dir()                    # the damaged folder is not deleted
    assert f"report: left out {out / old}" in err


def test_a_missing_result_is_run_again(two_steps, tmp_path, capsys):
    out, state = _finished_run(tmp_path, capsys)
    (out / state["steps"]["alpha"]["run_dir"] / "result.json").unlink()
    code, printed, _ = _run(["run", "--resume", str(out)], capsys)
    assert f"step alpha: its run folder {out / state['steps']['alpha']['run_dir']} has no result.json: running it " \
           "again" in printed
    assert CALLS == ["alpha"] and code == 1


def test_a_step_recorded_done_that_the_report_cannot_read_fails_the_run(two_steps, tmp_path, capsys):
    out, state = _finished_run(tmp_path, capsys)
    gamma = out / state["steps"]["gamma"]["run_dir"]
    gamma.rename(tmp_path / "moved-away")          # the report reads alpha alone, which passes its gate
    assert outcome(state, out) == 1
    state["steps"].pop("gamma")
    assert outcome(state, out) == 0


DAMAGE = {
    "a step's record is a string": (lambda s: s["steps"].update(alpha="done"),
                                    "steps.alpha is a JSON str (\"done\"), not an object with the step's status"),
    "settings without model": (lambda s: s["settings"].pop("model"), "settings has no 'model'"),
    "a step list as a string": (lambda s: s["settings"].update(steps="alpha"),
                                "settings.steps is a JSON str (\"alpha\"), not a list of step names or null"),
    "an unknown step": (lambda s: s["steps"].update(frob={"status": "done"}),
                        "steps has 'frob', not a step of this build (alpha, gamma)"),
    "an unknown status": (lambda s: s["steps"]["alpha"].update(status="finished"),
                          'steps.alpha.status is a JSON str ("finished"), not one of done, failed, skipped, '
                          "running"),
    "a run folder outside the run": (lambda s: s["steps"]["alpha"].update(run_dir="../elsewhere"),
                                     "steps.alpha.run_dir '../elsewhere' is not a folder inside the run"),
    "threads not an object": (lambda s: s.update(threads=2),
                              "threads is a JSON int (2), not an object with the run's torch threads (an integer >= 1)"),
    "a model that is a number": (lambda s: s["settings"].update(model=5),
                                 "settings.model is a JSON int (5), not a string or null"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_hand_damaged_run_state_is_one_line_exit_2(case, two_steps, tmp_path, capsys):
    out, state = _finished_run(tmp_path, capsys)
    damage, what = DAMAGE[case]
    damage(state)
    (out / STATE_FILE).write_text(json.dumps(state))
    before = sorted((p.relative_to(out), p.stat().st_mtime_ns) for p in out.rglob("*"))
    code, printed, err = _run(["run", "--resume", str(out)], capsys)
    assert code == 2
    assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert err.strip() == (f"error: {STATE_FILE} in {out}: {what}; the file is damaged: start a new run "
                           "(or fix the file)")
    assert CALLS == [] and "resuming" not in printed
    assert sorted((p.relative_to(out), p.stat().st_mtime_ns) for p in out.rglob("*")) == before   # nothing written
