"""`samspec-bench run --config`: a section's value that its suite refuses (out of range, an output
option build_config does not take) is one line naming the config file, the section and the option,
exit 2, before the run folder is made; the suite's own build_config judges it. An input an earlier
step makes (no traces before the workload step) is not blamed on the config file."""

from __future__ import annotations

import json
import sys
import types

import click
import pytest

from samspec_bench.cli import main
from samspec_bench.commands import COMMANDS
from samspec_bench.errors import UserError
from samspec_bench.results import RunDir
from samspec_bench.suites.run import command as run_command
from samspec_bench.suites.run import plan
from samspec_bench.suites.run.command import run_all
from samspec_bench.suites.run.plan import Plan, Step

CALLS: list[str] = []


def _standin(name: str, needs_traces: bool = False) -> types.ModuleType:
    """A suite whose build_config checks --size's range (after its traces, when it needs them)."""
    def build_config(*, size, traces):
        if needs_traces and not traces:
            raise UserError("no traces: pass --traces or --data-dir")
        if not 1 <= size <= 10:
            raise UserError(f"--size {size}: must be in 1..10")
        return {"size": size}

    def execute(cfg, *, output, resume=None, json_path=None):
        CALLS.append(name)
        RunDir(output, name, resume).write_result(cfg, {"size": cfg["size"]})
        return 0

    @click.command(name)
    @click.option("--size", "-s", type=int, default=1)
    @click.option("--traces", default=None)
    @click.option("--figure", default=None)       # an output option build_config does not take
    @click.option("--output", default="results")
    @click.option("--resume", default=None)
    def cmd(size, traces, figure, output, resume):
        execute(build_config(size=size, traces=traces), output=output, resume=resume)

    mod = types.ModuleType(f"samspec_values_standin_{name}")
    mod.SUITE, mod.command, mod.build_config, mod.execute = name, cmd, build_config, execute
    return mod


@pytest.fixture()
def standins(monkeypatch):
    CALLS.clear()
    for mod in (_standin("ranged"), _standin("needy", needs_traces=True)):
        name = mod.SUITE
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
        monkeypatch.setitem(COMMANDS, name, (f"{mod.__name__}:command", f"stand-in {name}"))
    steps = (Step("ranged", "ranged", "checks its size", lambda ctx: Plan(options={"size": 2})),
             Step("needy", "needy", "needs traces", lambda ctx: Plan(options={"size": 3})))
    monkeypatch.setattr(plan, "STEPS", steps)
    monkeypatch.setattr(plan, "STEP_NAMES", tuple(s.name for s in steps))


def _run(args, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    return e.value.code, capsys.readouterr().err


@pytest.mark.parametrize("section", ["{size: -5}", "{s: -5}", "{size: 11}"])
def test_an_out_of_range_value_is_refused_before_the_run_folder(section, standins, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"ranged: {section}\n", encoding="utf-8")
    code, err = _run(["run", "--config", cfg, "--output", tmp_path / "res"], capsys)
    value = section.split(": ")[1].rstrip("}")
    assert code == 2
    assert err.strip() == f"error: --config {cfg}: config section ranged: --size {value}: must be in 1..10"
    assert CALLS == [] and not (tmp_path / "res").exists()


def test_an_output_option_build_config_does_not_take_is_refused_before_the_run_folder(standins, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("ranged: {figure: f.png}\n", encoding="utf-8")
    code, err = _run(["run", "--config", cfg, "--output", tmp_path / "res"], capsys)
    assert code == 2
    assert err.strip() == (f"error: --config {cfg}: config section ranged: --figure is an output option of "
                           "`samspec-bench ranged`; `samspec-bench run` cannot pass it, remove it")
    assert CALLS == [] and not (tmp_path / "res").exists()


def test_what_an_earlier_step_provides_is_left_to_the_step(standins, tmp_path):
    """needy refuses for want of traces before it reads --size: the same without the section, so
    the config file is not blamed; the step records it when it runs."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("ranged: {size: 4}\nneedy: {size: -5}\n", encoding="utf-8")
    state, out = run_all(output=tmp_path / "res", config=cfg)
    assert state["steps"]["ranged"]["status"] == "done"
    assert state["steps"]["needy"] == {**state["steps"]["needy"], "status": "failed",
                                       "reason": "no traces: pass --traces or --data-dir"}
    assert CALLS == ["ranged"]
    result = json.loads((out / state["steps"]["ranged"]["run_dir"] / "result.json").read_text())
    assert result["config"] == {"size": 4}


def test_the_audits_drafters_k_out_of_range(tmp_path, capsys, monkeypatch):
    """The real drafters suite: `drafters: {k: -5}` with a data directory, as reported."""
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    data = tmp_path / "data"
    (data / "traces").mkdir(parents=True)
    (data / "traces" / "t.jsonl").write_text('{"prompt": "p", "response": "r"}\n', encoding="utf-8")
    cfg = tmp_path / "neg.yaml"
    cfg.write_text("drafters: {k: -5}\nsteps: [drafters]\n", encoding="utf-8")
    code, err = _run(["run", "--config", cfg, "--data-dir", data, "--output", tmp_path / "runs3"], capsys)
    assert code == 2
    assert err.strip() == (f"error: --config {cfg}: config section drafters: -k -5: the number of draft tokens must "
                           "be in 1..34 (as in accept and rollout)")
    assert not (tmp_path / "runs3").exists()


@pytest.mark.parametrize("section", ["drafters: {k: -5}", "drafters: {repeats: 0}", "rollout: {max-num-seqs: 0}"])
def test_a_value_of_a_step_that_reads_the_workload_trace_is_refused_before_the_workload_runs(
        section, tmp_path, capsys, monkeypatch):
    """No data directory anywhere: drafters and rollout read the trace the workload step makes,
    and their suites look for traces before their values. They are checked on a stand-in trace,
    so the bad value stops the run before the workload step generates anything."""
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)   # no ./shared/data or ../shared/data
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"{section}\n", encoding="utf-8")
    step = section.split(":")[0]
    code, err = _run(["run", "--config", cfg, "--steps", f"workload,{step}", "--model", "builtin:tiny-qwen3",
                      "--output", tmp_path / "res"], capsys)
    assert code == 2
    assert err.startswith(f"error: --config {cfg}: config section {step}: ")
    assert not (tmp_path / "res").exists()


def test_the_stand_in_trace_is_not_used_when_the_workload_step_does_not_run(tmp_path, capsys, monkeypatch):
    """`workload: false`: the other steps have no traces and are skipped; their values are left to them."""
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("workload: false\ndrafters: {k: -5}\nsteps: [workload, drafters]\n", encoding="utf-8")
    state, _ = run_all(output=tmp_path / "res", config=cfg)
    assert state["steps"]["drafters"]["status"] == "skipped"
    assert state["steps"]["workload"]["status"] == "skipped"


def test_a_value_the_suite_refuses_by_naming_it_is_the_sections(tmp_path, capsys, monkeypatch):
    """drafters refuses a trace path that is not there naming the path, not the option: still the
    config file's value, refused before the run folder is made."""
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    data = tmp_path / "data"
    (data / "traces").mkdir(parents=True)
    (data / "traces" / "t.jsonl").write_text('{"prompt": "p", "response": "r"}\n', encoding="utf-8")
    missing = tmp_path / "no" / "such.jsonl"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"drafters: {{traces: {missing}}}\nsteps: [drafters]\n", encoding="utf-8")
    code, err = _run(["run", "--config", cfg, "--data-dir", data, "--output", tmp_path / "res"], capsys)
    assert code == 2
    assert err.strip() == (f"error: --config {cfg}: config section drafters: trace file {missing} does not exist: "
                           "pass an existing JSONL file or a directory of them")
    assert not (tmp_path / "res").exists()


# --- paths: refused when nothing writes them, taken when an earlier step of the run does ---------

@pytest.fixture()
def no_steps_run(monkeypatch, tmp_path) -> list[str]:
    """No data directory anywhere, and no step really runs: the names of those `run` would run."""
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)   # no ./shared/data or ../shared/data
    ran: list[str] = []
    monkeypatch.setattr(run_command, "run_step", lambda step, *a, **k: ran.append(step.name))
    return ran


@pytest.mark.parametrize("section, option", [
    ("accept: {{traces: {missing}}}", "--traces"),
    ("curves: {{runs: [{log}, {missing}]}}", "--run"),
])
def test_a_path_nothing_writes_is_refused_before_any_step_runs(section, option, no_steps_run, tmp_path, capsys):
    log = tmp_path / "a.csv"
    log.write_text("step,critic/score/mean\n1,0.5\n", encoding="utf-8")
    missing = tmp_path / "no" / "such"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(section.format(missing=missing, log=log) + "\n", encoding="utf-8")
    step = section.split(":")[0]
    code, err = _run(["run", "--config", cfg, "--steps", f"workload,{step}", "--model", "builtin:tiny-qwen3",
                      "--output", tmp_path / "res"], capsys)
    assert code == 2
    assert err.strip().count("\n") == 0
    assert err.startswith(f"error: --config {cfg}: config section {step}: {option} {missing}: no such file")
    assert no_steps_run == [] and not (tmp_path / "res").exists()


def test_the_trace_the_workload_step_writes_is_taken_and_the_sections_values_checked_on_it(
        no_steps_run, tmp_path, capsys):
    """accept reads the trace the workload step writes, not there yet: its trace check passes
    on the stand-in, so the section's --bins is judged before the workload generates anything;
    a good section goes on to the steps."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("accept: {bins: '64,32'}\n", encoding="utf-8")
    args = ["run", "--config", cfg, "--steps", "workload,accept", "--model", "builtin:tiny-qwen3",
            "--output", tmp_path / "res"]
    code, err = _run(args, capsys)
    assert code == 2
    assert err.strip() == (f"error: --config {cfg}: config section accept: --bins '64,32': bin edges [64, 32]: need "
                           "ascending positive integers, e.g. log2:64:32768 or 64,512,4096")
    assert no_steps_run == [] and not (tmp_path / "res").exists()
    cfg.write_text("accept: {bins: '32,64'}\n", encoding="utf-8")
    run_all(output=tmp_path / "res", config=cfg, steps="workload,accept", model="builtin:tiny-qwen3")
    assert no_steps_run == ["workload", "accept"]
