"""`samspec-bench run`: option plumbing, the config file, skipping with reasons, resuming an
interrupted run, and the built-in workload (a trace generated with a model, replayed by accept).
The orchestration tests run stand-in suites (a click command with build_config and execute,
registered in the command table)."""

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
from samspec_bench.suites.run import plan
from samspec_bench.suites.run.command import DEFAULT_MODEL, outcome, run_all
from samspec_bench.suites.run.config_file import load_config
from samspec_bench.suites.run.config_options import build_args, engine_option, suite_command, suite_params
from samspec_bench.suites.run.plan import Ctx, Plan, Step
from samspec_bench.suites.run.state import STATE_FILE


# --- options -> arguments --------------------------------------------------------------------------------

def test_build_args_from_cli_option_names():
    from samspec_bench.suites.accept import command as accept

    args = build_args(accept, "accept", {"drafter": "sam,ngram", "num-spec-tokens": [3, 5], "progress": False,
                                         "traces": ["a.jsonl", "b.jsonl"], "limit_groups": 4, "bins": None})
    assert args == ["--drafter", "sam,ngram", "--num-spec-tokens", "3,5", "--no-progress",
                    "--traces", "a.jsonl", "--traces", "b.jsonl", "--limit-groups", "4"]
    # the short name and the parameter name work too
    assert build_args(accept, "accept", {"k": 8}) == ["--num-spec-tokens", "8"]
    assert build_args(accept, "accept", {"drafters": "sam"}) == ["--drafter", "sam"]


def test_build_args_flags_without_a_negative_form():
    from samspec_bench.suites.drafters import command as drafters

    assert build_args(drafters, "drafters", {"no-progress": True}) == ["--no-progress"]
    assert build_args(drafters, "drafters", {"no-progress": False}) == []
    with pytest.raises(UserError, match="flag"):
        build_args(drafters, "drafters", {"no-progress": "yes"})


@pytest.mark.parametrize("options, message", [
    ({"no-such-option": 1}, "has no option --no-such-option"),
    ({"output": "x"}, "set by `samspec-bench run` itself"),
    ({"resume": "x"}, "set by `samspec-bench run` itself"),
    ({"drafter": "sam", "drafters": "ngram"}, "same option"),
])
def test_build_args_rejects(options, message):
    from samspec_bench.suites.accept import command as accept

    with pytest.raises(UserError, match=message):
        build_args(accept, "accept", options)


def test_load_config(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("model: builtin:tiny-qwen3\ndata_dir: /x\naccept:\n  num-spec-tokens: [3, 5]\n"
                 "op-equivalence: false\nsampler:\n", encoding="utf-8")
    cfg = load_config(p)
    assert cfg == {"model": "builtin:tiny-qwen3", "data-dir": "/x", "accept": {"num-spec-tokens": [3, 5]},
                   "op-equivalence": False, "sampler": {}}
    p.write_text("acept:\n  k: 3\n", encoding="utf-8")
    with pytest.raises(UserError, match="unknown key 'acept'"):
        load_config(p)
    p.write_text("accept: [1, 2]\n", encoding="utf-8")
    with pytest.raises(UserError, match="must be a mapping"):
        load_config(p)
    p.write_text("accept: {k: [3\n", encoding="utf-8")
    with pytest.raises(UserError, match="not valid YAML"):
        load_config(p)


def test_bad_config_option_fails_before_anything_runs(tmp_path, capsys):
    p = tmp_path / "c.yaml"
    p.write_text("sampler:\n  sampels: 100\n", encoding="utf-8")
    with pytest.raises(SystemExit) as e:
        main(["run", "--config", str(p), "--output", str(tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "config section sampler" in err and "--sampels" in err
    assert not list((tmp_path / "out").glob("run-*/runs"))


# --- stand-in suites: the orchestration without the cost --------------------------------------------------------

CALLS: list[tuple[str, list[str]]] = []
FAIL_ONCE: set[str] = set()


def _suite(name: str, command: click.Command, build_config, execute) -> types.ModuleType:
    mod = types.ModuleType(f"samspec_standin_{name}")
    mod.SUITE, mod.command, mod.build_config, mod.execute = name, command, build_config, execute
    return mod


def _fake(name: str, gate_passed: bool = True) -> types.ModuleType:
    """A suite that records how it was called and writes a result with one gate."""
    def build_config(*, size, model, engine):
        return {"size": size, "model": model, "engine": engine}

    def execute(cfg, *, output, resume=None, json_path=None):
        CALLS.append((name, list(sys.argv[2:])))
        rd = RunDir(output, name, resume)
        if name in FAIL_ONCE:
            FAIL_ONCE.discard(name)
            raise KeyboardInterrupt   # interrupted mid-run: a partial directory, no result.json
        rd.write_result(cfg, {"size": cfg["size"]},
                        extra={"gates": [{"name": f"{name} ok", "passed": gate_passed, "value": cfg["size"],
                                          "threshold": 1}]})
        return 0

    @click.command(name)
    @click.option("--size", type=int, default=1)
    @click.option("--model", default=None)
    @click.option("--engine", type=click.Choice(["replay", "reference"]), default="replay")
    @click.option("--output", default="results")
    @click.option("--resume", default=None)
    def cmd(size, model, engine, output, resume):
        execute(build_config(size=size, model=model, engine=engine), output=output, resume=resume)

    return _suite(name, cmd, build_config, execute)


def _register(monkeypatch, suites: dict[str, types.ModuleType], steps: tuple[Step, ...]) -> None:
    """The stand-ins in the command table (as `module:command`) and `steps` as run's steps."""
    for name, mod in suites.items():
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
        monkeypatch.setitem(COMMANDS, name, (f"{mod.__name__}:command", f"stand-in {name}"))
    monkeypatch.setattr(plan, "STEPS", steps)
    monkeypatch.setattr(plan, "STEP_NAMES", tuple(s.name for s in steps))


@pytest.fixture()
def fake_steps(monkeypatch):
    CALLS.clear()
    FAIL_ONCE.clear()
    suites = {"alpha": _fake("alpha"), "beta": _fake("beta"), "gamma": _fake("gamma", gate_passed=False)}
    steps = (
        Step("alpha", "alpha", "first", lambda ctx: Plan(options={"size": 2})),
        Step("beta", "beta", "second", lambda ctx: Plan(options={"size": 3})),
        Step("missing", "not-in-this-build", "absent", lambda ctx: Plan()),
        Step("never", "alpha", "cannot run here", lambda ctx: Plan(skip="needs something this machine lacks")),
    )
    _register(monkeypatch, suites, steps)
    return suites


def test_run_records_steps_and_renders_the_report(fake_steps, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("beta:\n  size: 7\n", encoding="utf-8")
    state, out = run_all(output=tmp_path / "res", config=cfg, engine="reference")
    st = state["steps"]
    assert [st[n]["status"] for n in ("alpha", "beta", "missing", "never")] == ["done", "done", "skipped", "skipped"]
    assert "no `not-in-this-build` command" in st["missing"]["reason"]
    assert st["never"]["reason"] == "needs something this machine lacks"
    # defaults < globals < the config file's section
    assert st["alpha"]["args"] == ["--size", "2", "--model", DEFAULT_MODEL, "--engine", "reference"]
    assert st["beta"]["args"][:2] == ["--size", "7"]
    beta = json.loads((out / st["beta"]["run_dir"] / "result.json").read_text())
    assert beta["config"] == {"size": 7, "model": DEFAULT_MODEL, "engine": "reference"}
    # the suite's result records the command that reproduces it
    assert beta["environment"]["argv"][:2] == ["samspec-bench", "beta"]
    html = (out / "report.html").read_text()
    assert "needs something this machine lacks" in html and "Steps of samspec-bench run" in html
    assert (out / "report.md").is_file()
    saved = json.loads((out / STATE_FILE).read_text())
    assert saved["steps"]["beta"]["status"] == "done" and saved["report"]["html"] == "report.html"


def test_threads_and_cpu_seconds_are_printed_and_in_the_state_and_the_report(fake_steps, tmp_path, monkeypatch,
                                                                            capsys):
    """The torch-thread choice (from what is free when the run starts) is printed before the
    steps run, kept in run_state.json and shown in the report; each step's CPU seconds too."""
    from samspec_bench.reports.fmt import fmt

    chosen = {"threads": 1, "cores": 2, "load_avg_1m": 5.0, "rule": "cores available - load average"}
    monkeypatch.setattr(plan, "choose_threads", lambda: dict(chosen))
    state, out = run_all(output=tmp_path / "res", steps="alpha,beta")
    printed = capsys.readouterr().out
    assert "torch threads 1: 2 core(s) available, load average 5 when the run started" in printed
    assert printed.index("torch threads 1") < printed.index("alpha")   # said before the steps run
    saved = json.loads((out / STATE_FILE).read_text())
    assert saved["threads"] == chosen
    md = (out / "report.md").read_text()
    assert "torch threads 1 (2 cores available, load average 5 when the run started)" in md
    assert "torch threads 1 (2 cores available" in (out / "report.html").read_text()
    for name in ("alpha", "beta"):
        cpu = saved["steps"][name]["cpu_seconds"]
        assert isinstance(cpu, float) and cpu > 0   # the stand-in suite ran code in this process
        (row,) = [r for r in md.splitlines() if r.startswith(f"| {name} | done |")]
        assert row.split(" | ")[3] == fmt(cpu)


def test_engine_typo_is_refused_and_an_engine_a_suite_cannot_use_is_noted(fake_steps, tmp_path):
    with pytest.raises(UserError, match="--engine 'vllm-xyz': not an engine of this build; use one of replay, reference"):
        run_all(output=tmp_path, engine="vllm-xyz", steps="alpha")
    assert not list(tmp_path.iterdir())
    value, note = engine_option(fake_steps["alpha"].command, "vllm")   # an engine of another suite
    assert value is None and "not one of this suite's engines" in note


def test_an_engine_that_is_not_installed_skips_its_steps_and_the_others_run(tmp_path, monkeypatch):
    """--engine vllm where vLLM does not import: the steps that would run it are skipped with the
    reason (README: "with vllm missing they are skipped"), the others run; not a refusal of the run."""
    import importlib.util

    from samspec_bench.bench.engines import factory

    def missing():
        raise UserError("vLLM does not import (stand-in)")

    monkeypatch.setitem(factory._REQUIRES, "vllm", missing)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    data = tmp_path / "data"
    (data / "traces").mkdir(parents=True)
    (data / "traces" / "t.jsonl").write_text('{"prompt": "p", "response": "r"}\n', encoding="utf-8")
    state, _ = run_all(output=tmp_path / "res", engine="vllm", steps="accept,curves", data_dir=data)
    accept = state["steps"]["accept"]
    assert accept["status"] == "skipped" and "vLLM is not installed" in accept["reason"]
    assert state["steps"]["curves"]["status"] == "skipped" and state["settings"]["engine"] == "vllm"


def test_interrupted_run_resumes(fake_steps, tmp_path):
    FAIL_ONCE.add("beta")
    with pytest.raises(KeyboardInterrupt):
        run_all(output=tmp_path)
    (out,) = tmp_path.glob("run-*")
    state = json.loads((out / STATE_FILE).read_text())
    assert state["steps"]["alpha"]["status"] == "done" and state["steps"]["beta"]["status"] == "running"
    (partial,) = (out / "runs" / "beta").iterdir()
    assert not (partial / "result.json").exists()
    CALLS.clear()
    state, out2 = run_all(resume=out)
    assert out2 == out
    # alpha is not run again; beta continues its partial directory
    assert [c[0] for c in CALLS] == ["beta"]
    assert CALLS[0][1][-2:] == ["--resume", str(partial)]
    assert state["steps"]["beta"]["status"] == "done"
    assert out / state["steps"]["beta"]["run_dir"] == partial
    # a finished run resumed again does nothing but render the report
    CALLS.clear()
    run_all(resume=out)
    assert CALLS == []


def test_resume_refuses_other_settings(fake_steps, tmp_path):
    state, out = run_all(output=tmp_path, steps="alpha")
    with pytest.raises(UserError, match="--model"):
        run_all(resume=out, model="other")
    with pytest.raises(UserError, match="no run_state.json"):
        run_all(resume=tmp_path)


def test_steps_named_twice_or_in_another_order_are_the_same_run(fake_steps, tmp_path):
    """--steps runs each step once, in the run's order: the resume of `beta,alpha,alpha` takes
    `alpha,beta` (the same steps), not only the string it was started with."""
    state, out = run_all(output=tmp_path, steps="beta,alpha,alpha")
    assert state["settings"]["steps"] == ["alpha", "beta"] and [c[0] for c in CALLS] == ["alpha", "beta"]
    CALLS.clear()
    run_all(resume=out, steps="alpha,beta")
    assert CALLS == []
    with pytest.raises(UserError, match="the run used --steps"):
        run_all(resume=out, steps="alpha")
    with pytest.raises(UserError, match="'alpah' is not a step \\(nearest: alpha\\)"):
        run_all(output=tmp_path, steps="alpha,alpah")


def test_steps_over_the_config_files_steps_is_said_and_the_files_list_checked(fake_steps, tmp_path):
    """--steps wins over the file's `steps:`, which is not dropped without a word (a note), nor
    left unchecked (a typo in it is refused)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("steps: [alpha]\n", encoding="utf-8")
    state, _ = run_all(output=tmp_path / "a", config=cfg, steps="beta")
    assert list(state["steps"]) == ["beta"]
    assert "--steps beta over the config file's steps: alpha" in state["notes"]
    cfg.write_text("steps: [alpah]\n", encoding="utf-8")
    with pytest.raises(UserError, match=f"--config {cfg}: steps: \\['alpah'\\]: 'alpah' is not a step"):
        run_all(output=tmp_path / "b", config=cfg, steps="beta")
    assert not (tmp_path / "b").exists()


def test_exit_code_reflects_failed_gates(fake_steps, tmp_path, monkeypatch, capsys):
    _register(monkeypatch, {}, (Step("gamma", "gamma", "a failing gate", lambda ctx: Plan()),))
    with pytest.raises(SystemExit) as e:
        main(["run", "--output", str(tmp_path)])
    assert e.value.code == 1
    assert "report:" in capsys.readouterr().out


def test_json_to_stdout_is_the_summary_alone(fake_steps, tmp_path, monkeypatch, capsys):
    _register(monkeypatch, {}, (Step("gamma", "gamma", "a failing gate", lambda ctx: Plan()),
                                Step("never", "alpha", "cannot run here", lambda ctx: Plan(skip="no device"))))
    with pytest.raises(SystemExit) as e:
        main(["run", "--output", str(tmp_path), "--json", "-"])
    out = capsys.readouterr()
    doc = json.loads(out.out)   # the run's own lines went to stderr
    assert e.value.code == 1 and doc["exit_code"] == 1 and "report:" in out.err
    assert doc["steps"]["gamma"]["status"] == "done" and doc["steps"]["never"]["reason"] == "no device"
    assert doc["report"]["html"].endswith("report.html") and (tmp_path / doc["run_dir"]).is_dir()


def test_a_suite_exit_code_without_a_failed_gate_fails_the_run(fake_steps, tmp_path, monkeypatch):
    """accuracy exits 1 when every sample of an arm failed, with no gate to fail: run exits 1 too."""
    def execute(cfg, *, output, resume=None, json_path=None):
        RunDir(output, "quiet").write_result({}, {"x": 1})
        return 1

    @click.command("quiet")
    @click.option("--output")
    def quiet(output):
        execute(None, output=output)

    _register(monkeypatch, {"quiet": _suite("quiet", quiet, lambda: None, execute)},
              (Step("quiet", "quiet", "exits 1", lambda ctx: Plan()),))
    state, out = run_all(output=tmp_path)
    assert state["steps"]["quiet"]["status"] == "done" and state["steps"]["quiet"]["exit_code"] == 1
    assert outcome(state, out) == 1


def test_ctrl_c_exits_130_with_only_the_resume_hint(fake_steps, tmp_path, capsys):
    FAIL_ONCE.add("beta")
    with pytest.raises(SystemExit) as e:
        main(["run", "--output", str(tmp_path)])
    assert e.value.code == 130
    err = capsys.readouterr().err
    assert "samspec-bench run --resume" in err and "aborted" not in err


def test_a_failing_step_does_not_stop_the_others(fake_steps, tmp_path, monkeypatch):
    def execute(cfg, *, output, resume=None, json_path=None):
        raise UserError("boom: the input is bad; fix it")

    @click.command("boom")
    @click.option("--output")
    def boom(output):
        execute(None, output=output)

    steps = (Step("boom", "boom", "fails", lambda ctx: Plan()), Step("alpha", "alpha", "runs", lambda ctx: Plan()))
    _register(monkeypatch, {"boom": _suite("boom", boom, lambda: None, execute)}, steps)
    state, out = run_all(output=tmp_path)
    assert state["steps"]["boom"] == {**state["steps"]["boom"], "status": "failed",
                                      "reason": "boom: the input is bad; fix it"}
    assert state["steps"]["alpha"]["status"] == "done"
    assert outcome(state, out) == 1


# --- the suite contract: values converted by the suite's click options, defaults from them ----------------------

RECEIVED: list[dict] = []


def _typed_suite() -> types.ModuleType:
    """A stand-in whose build_config records what it gets: each option's type, a multiple
    option, a callback, flags with and without a negative form, and output options it leaves
    to execute."""
    def int_list(ctx, param, value):
        try:
            return [int(v) for v in value.split(",")]
        except ValueError:
            raise click.BadParameter(f"{value!r}: give comma-separated integers") from None

    def build_config(**params):
        RECEIVED.append({"build_config": params})
        return params

    def execute(cfg, *, output, resume=None, json_path=None):
        RECEIVED.append({"execute": {"output": output, "resume": resume, "json_path": json_path}})
        RunDir(output, "typed").write_result(cfg, {})
        return 0

    @click.command("typed")
    @click.option("--count", type=int, default=5)
    @click.option("--ratio", type=float, default=0.5)
    @click.option("--mode", type=click.Choice(["a", "b"]), default="a")
    @click.option("--trace", "traces", multiple=True)
    @click.option("--sweep", default="1,2", callback=int_list)
    @click.option("--progress/--no-progress", default=True)
    @click.option("--fast", is_flag=True)
    @click.option("--name", default=None)
    @click.option("--output", default="results")
    @click.option("--resume", default=None)
    @click.option("--json", "json_path", default=None)
    def cmd(**params):
        pass

    return _suite("typed", cmd, build_config, execute)


@pytest.fixture()
def typed_suite(monkeypatch):
    RECEIVED.clear()
    mod = _typed_suite()
    # alpha finishes, so that the report has a run even when the typed step fails
    _register(monkeypatch, {"typed": mod, "alpha": _fake("alpha")},
              (Step("typed", "typed", "types", lambda ctx: Plan(options={"count": 7})),
               Step("alpha", "alpha", "first", lambda ctx: Plan())))
    return mod


def test_run_calls_build_config_with_converted_values_and_defaults(typed_suite, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("typed:\n  ratio: 2\n  mode: b\n  trace: [x.jsonl, y.jsonl]\n  sweep: [64, 256]\n"
                   "  progress: false\n  fast: true\n", encoding="utf-8")
    state, out = run_all(output=tmp_path / "res", config=cfg)
    st = state["steps"]["typed"]
    assert st["status"] == "done", st
    # build_config checks the section's values before the run folder is made, then the step calls it again
    assert RECEIVED == [RECEIVED[0], RECEIVED[0], RECEIVED[-1]]
    assert RECEIVED[0] == {"build_config": {"count": 7, "ratio": 2.0, "mode": "b", "traces": ("x.jsonl", "y.jsonl"),
                                            "sweep": [64, 256], "progress": False, "fast": True, "name": None}}
    assert RECEIVED[-1] == {"execute": {"output": str(out / "runs" / "typed"), "resume": None, "json_path": None}}
    # the equivalent command line is still shown and recorded
    assert st["args"] == ["--count", "7", "--ratio", "2", "--mode", "b", "--trace", "x.jsonl", "--trace", "y.jsonl",
                          "--sweep", "64,256", "--no-progress", "--fast"]


def test_suite_params_fill_defaults_and_leave_out_what_run_sets(typed_suite):
    params = suite_params(typed_suite.command, "typed", {"fast": False, "name": None})
    assert params == {"count": 5, "ratio": 0.5, "mode": "a", "traces": (), "sweep": [1, 2], "progress": True,
                      "fast": False, "name": None}
    for key in ("output", "resume", "json"):
        with pytest.raises(UserError, match="set by `samspec-bench run` itself"):
            suite_params(typed_suite.command, "typed", {key: "x"})
    with pytest.raises(UserError, match="flag"):
        suite_params(typed_suite.command, "typed", {"fast": "yes"})


def test_a_bad_value_is_refused_with_clicks_message_before_the_run_starts(typed_suite, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("typed:\n  sweep: 1,x\n  mode: c\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"config section typed: .*--mode.*'c' is not one of 'a', 'b'"):
        run_all(output=tmp_path / "res", config=cfg)
    cfg.write_text("typed:\n  sweep: 1,x\n", encoding="utf-8")
    with pytest.raises(UserError, match="config section typed: .*'1,x': give comma-separated integers"):
        run_all(output=tmp_path / "res", config=cfg)
    assert RECEIVED == [] and not (tmp_path / "res").exists()


def test_a_suite_without_the_contract_fails_its_step(typed_suite, tmp_path, monkeypatch):
    monkeypatch.delattr(typed_suite, "build_config")
    state, _ = run_all(output=tmp_path)
    st = state["steps"]["typed"]
    assert st["status"] == "failed" and "does not implement the suite contract" in st["reason"]


def test_an_output_option_build_config_does_not_take_is_refused(tmp_path, monkeypatch):
    """A suite may keep an output-only option out of build_config; run then leaves it out too,
    and a config section that sets it is refused before the run starts."""
    RECEIVED.clear()
    mod = _typed_suite()

    def build_config(*, count, ratio, mode, traces, sweep, progress, fast):   # no `name`
        RECEIVED.append({"build_config": {"count": count}})
        return {"count": count}

    mod.build_config = build_config
    _register(monkeypatch, {"typed": mod, "alpha": _fake("alpha")},
              (Step("typed", "typed", "types", lambda ctx: Plan()), Step("alpha", "alpha", "first", lambda ctx: Plan())))
    state, _ = run_all(output=tmp_path / "a")
    assert state["steps"]["typed"]["status"] == "done" and RECEIVED[0] == {"build_config": {"count": 5}}
    cfg = tmp_path / "c.yaml"
    cfg.write_text("typed:\n  name: x\n", encoding="utf-8")
    with pytest.raises(UserError, match=f"--config {cfg}: config section typed: --name is an output option"):
        run_all(output=tmp_path / "b", config=cfg)
    assert not (tmp_path / "b").exists()   # refused before the run folder is made


# --- the real steps' plans ---------------------------------------------------------------------------------------

def test_default_plans_without_data(tmp_path):
    ctx = Ctx(out=tmp_path, model="builtin:tiny-qwen3", engine=None, data_dir=None, sections={},
              state={"steps": {}})
    plans = {s.name: s.plan(ctx) for s in plan.STEPS}
    assert plans["workload"].skip is None and plans["workload"].options["model"] == "builtin:tiny-qwen3"
    assert "workload step" in plans["accept"].skip and "workload step" in plans["drafters"].skip
    assert "workload step" in plans["rollout"].skip
    # accuracy runs on the built-in benchmark sets: no data directory needed
    acc = plans["accuracy"]
    assert acc.skip is None and acc.options["limit"] == plan.ACCURACY_LIMIT and "data-dir" not in acc.options
    assert "built-in gsm8k" in acc.notes[0]
    # op-equivalence: the built-in gsm8k set (its config fills the data directory in), no prompts file
    assert "prompts" not in plans["op-equivalence"].options and "data-dir" not in plans["op-equivalence"].options
    ctx.data_dir = tmp_path
    assert "traces of" in plan.plan_workload(ctx).skip
    opts = plan.plan_accept(ctx).options
    assert opts["data-dir"] == str(tmp_path) and opts["engine"] == "replay" and "model" not in opts
    assert opts["sources"] == "own,group,history,group+history"
    assert plan.plan_accuracy(ctx).options["limit"] == plan.ACCURACY_LIMIT
    # the built-in model on the shared traces (other models'): their own tokenizer, no model check
    ctx.model = DEFAULT_MODEL
    assert plan.plan_accept(ctx).options["model"] is None


def test_a_section_that_names_its_traces_runs_without_data_or_workload(tmp_path):
    """accept, drafters and rollout with `traces:` in their config section run on those traces when
    neither --data-dir nor the workload step gives any (they were skipped as having none)."""
    secs = {name: {"traces": "mine.jsonl"} for name in ("accept", "drafters", "rollout")}
    ctx = Ctx(out=tmp_path, model="builtin:tiny-qwen3", engine=None, data_dir=None, sections=secs,
              state={"steps": {}})
    for make in (plan.plan_accept, plan.plan_drafters, plan.plan_rollout):
        p = make(ctx)
        assert p.skip is None and "traces" not in p.options and "data-dir" not in p.options
    assert "bins" not in plan.plan_accept(ctx).options   # the built-in trace's short bins are not forced on them
    assert "sweep" not in plan.plan_drafters(ctx).options


def test_threads_are_chosen_once_from_what_is_free(tmp_path, monkeypatch):
    from samspec_bench import workload

    monkeypatch.setattr(workload.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    load = [0.2]
    monkeypatch.setattr(workload.os, "getloadavg", lambda: (load[0], 0.0, 0.0))
    assert workload.choose_threads()["threads"] == 2      # a quiet 2-core machine
    load[0] = 5.0
    got = workload.choose_threads()
    assert got == {**got, "threads": 1, "cores": 2, "load_avg_1m": 5.0}   # loaded: one thread
    load[0] = 1.2
    assert workload.choose_threads()["threads"] == 1
    ctx = Ctx(out=tmp_path, model="builtin:tiny-qwen3", engine=None, data_dir=None, sections={},
              state={"steps": {}})
    p = plan.plan_workload(ctx)
    assert p.options["threads"] == 1 and "torch threads 1: 2 core(s) available, load average 1.2" in p.notes[0]
    load[0] = 0.0   # later steps keep the run's choice (this run's own load would count otherwise)
    assert plan.plan_accuracy(ctx).options["threads"] == 1
    assert plan.plan_op_equivalence(ctx).options["threads"] == 1
    assert ctx.state["threads"]["threads"] == 1


def test_every_default_plan_is_valid_for_its_command(tmp_path):
    """The small defaults name options the suites really have (catches a renamed option), with
    values their click types accept."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("", encoding="utf-8")
    state = {"steps": {"workload": {"status": "done", "run_dir": "w"}}}
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "result.json").write_text(json.dumps({"trace": "t.jsonl", "tokenizer": "tok",
                                                            "metrics": {"total_tokens": 5000}}))
    checked = set()
    for data_dir in (None, tmp_path):
        ctx = Ctx(out=tmp_path, model="m", engine=None, data_dir=data_dir, sections={}, state=state)
        for step in plan.STEPS:
            if step.command is None or step.command not in COMMANDS:
                continue
            p = step.plan(ctx)
            if p.skip is None:
                cmd = suite_command(step.command)
                # the recorded command line, parsed by the command itself, gives the values the
                # suite is called with (two paths from the same options must agree)
                args = build_args(cmd, step.name, p.options)
                params = suite_params(cmd, step.name, p.options)
                parsed = cmd.make_context(f"samspec-bench {step.name}", list(args)).params
                assert {k: parsed[k] for k in params} == params, (step.name, data_dir)
                checked.add(step.name)
    assert {"accept", "drafters", "accuracy", "op-equivalence", "sampler"} <= checked


def test_accuracy_and_drafters_get_their_config_from_run_options(tmp_path):
    """The real suites this branch gives the contract: click's defaults reach the config."""
    from samspec_bench.suites import accuracy, drafters

    job = accuracy.build_config(**suite_params(accuracy.command, "accuracy",
                                               {"model": "builtin:tiny-qwen3", "tasks": "gsm8k", "limit": 10,
                                                "max-gen-toks": 256, "data-dir": str(tmp_path), "progress": False,
                                                "device": "cpu"}))
    # click's --dtype auto reaches the config resolved for the device (float32 on the CPU)
    assert job.config == accuracy.AccuracyConfig(model="builtin:tiny-qwen3", tasks=["gsm8k"], limit=10,
                                                 max_gen_toks=256, data_dir=str(tmp_path.resolve()), dtype="float32")
    assert job.progress is False
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"prompt": "p", "response": "r"}\n', encoding="utf-8")   # its format is read here
    job = drafters.build_config(**suite_params(drafters.command, "drafters",
                                               {"traces": str(trace), "tokenizer": "tok", "k": 8, "repeats": 1,
                                                "sweep": [256, 1024], "no-progress": True}))
    assert job.config == drafters.DraftersConfig(traces=[str(trace)], tokenizer="tok", k=8, repeats=1,
                                                 sweep=[256, 1024])
    assert job.progress is False


# --- the built-in workload -----------------------------------------------------------------------------------------

def test_builtin_prompts_are_ours_and_well_formed(tmp_path):
    from samspec_bench.workload import PROMPTS, write_prompts_file

    assert len(PROMPTS) >= 8 and len(set(PROMPTS)) == len(PROMPTS)
    p = write_prompts_file(tmp_path / "p.jsonl", 3)
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    assert [r["prompt"] for r in rows] == list(PROMPTS[:3])


def test_workload_then_accept_and_drafters_on_a_tiny_model(tmp_path):
    """The seam end to end: a trace generated with a model is replayed by accept and timed by
    drafters, all through `run` (random-weight tiny model: seconds, not minutes)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("workload:\n  num-prompts: 2\n  samples: 3\n  max-tokens: 48\n"
                   "accept:\n  num-spec-tokens: 3\n  sources: own\n  workers: 1\n"
                   "drafters:\n  drafters: sam,ngram\n  sweep: 64,256\n  sweep-steps: 20\n", encoding="utf-8")
    state, out = run_all(output=tmp_path / "res", model="builtin:tiny-qwen3", config=cfg,
                         steps="workload,accept,drafters")
    st = state["steps"]
    assert [st[n]["status"] for n in ("workload", "accept", "drafters")] == ["done", "done", "done"], st
    wdir = out / st["workload"]["run_dir"]
    from samspec_bench.data import read_traces

    traces = read_traces(wdir / "trace.jsonl")
    assert len(traces.records) == 6 and len({r.group for r in traces.records}) == 2
    assert all(r.prompt_ids and r.response_ids for r in traces.records)
    accept = json.loads((out / st["accept"]["run_dir"] / "result.json").read_text())
    assert accept["inputs"]["responses"] == 6
    assert accept["inputs"]["traces"][0]["file"] == str(wdir / "trace.jsonl")
    html = (out / "report.html").read_text()
    for suite in ("workload", "accept", "drafters"):
        assert f'id="suite-{suite}"' in html
    # resuming the finished workload step reuses its trace (nothing is regenerated)
    before = (wdir / "trace.jsonl").read_bytes()
    state2, _ = run_all(resume=out)
    assert state2["steps"]["workload"]["run_dir"] == st["workload"]["run_dir"]
    assert (wdir / "trace.jsonl").read_bytes() == before


def test_workload_resumes_from_its_partial_responses(tmp_path, monkeypatch):
    from samspec_bench import workload as bp

    cfg = bp.WorkloadConfig(model="builtin:tiny-qwen3", num_prompts=2, samples=2, max_tokens=8)
    result, path = bp.generate_trace(cfg, tmp_path, progress=False)
    assert result["metrics"]["generated_this_session"] == 4
    # drop the final trace and two finished responses: a resumed run regenerates only those
    (path / bp.TRACE_FILE).unlink()
    (path / "result.json").unlink()
    lines = (path / bp.PARTIAL_FILE).read_text().splitlines()
    (path / bp.PARTIAL_FILE).write_text("\n".join(lines[:2]) + "\n")
    result2, path2 = bp.generate_trace(cfg, tmp_path, resume=path, progress=False)
    assert path2 == path and result2["metrics"]["generated_this_session"] == 2
    assert result2["metrics"]["responses"] == 4
    ids = [json.loads(x)["id"] for x in (path / bp.TRACE_FILE).read_text().splitlines()]
    assert ids == ["p00-s00", "p00-s01", "p01-s00", "p01-s01"]
    # other settings cannot continue it
    with pytest.raises(UserError, match="max_tokens"):
        bp.generate_trace(bp.WorkloadConfig(model="builtin:tiny-qwen3", num_prompts=2, samples=2, max_tokens=9),
                          tmp_path, resume=path, progress=False)


def test_workload_config_errors():
    from samspec_bench.workload import WorkloadConfig

    with pytest.raises(UserError, match="unknown option 'temp'"):
        WorkloadConfig.from_options({"temp": 1.0})
    with pytest.raises(UserError, match="num-prompts"):
        WorkloadConfig.from_options({"num-prompts": 1000})


@pytest.mark.usefixtures("needs_lm_eval")
def test_run_includes_accuracy_on_the_builtin_sets(tmp_path, monkeypatch):
    """A fresh install has no data directory: accuracy runs on the package's benchmark sets,
    with the run's torch threads, and says so."""
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)   # no shared/data next to the working directory
    cfg = tmp_path / "c.yaml"
    cfg.write_text("accuracy:\n  limit: 2\n  max-gen-toks: 8\n  max-num-seqs: 4\n", encoding="utf-8")
    state, out = run_all(output=tmp_path / "res", model="builtin:tiny-qwen3", config=cfg, steps="accuracy")
    st = state["steps"]["accuracy"]
    assert st["status"] == "done", st
    assert st["args"][st["args"].index("--limit") + 1] == "2" and "--data-dir" not in st["args"]
    assert st["args"][st["args"].index("--threads") + 1] == str(state["threads"]["threads"])
    assert any(n.startswith("torch threads") for n in st["notes"])
    run_dir = out / st["run_dir"]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["config"]["data_dir"] is None and result["data"].startswith("built-in benchmark sets")
    samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert sorted((r["arm"], r["doc_id"]) for r in samples) == [("off", 0), ("off", 1), ("on", 0), ("on", 1)]
    # gsm8k over the built-in sets: the shipped test set, 5-shot from the first train problems
    task = (run_dir / "tasks" / "samspec_gsm8k.yaml").read_text()
    assert "sampler: first_n" in task
    from samspec_bench.data import BUILTIN_BENCHMARKS

    data = run_dir / "builtin_benchmarks"
    assert (data / "gsm8k_test.jsonl").read_bytes() == (BUILTIN_BENCHMARKS / "gsm8k_test.jsonl").read_bytes()
    assert (data / "gsm8k_train.jsonl").read_bytes() == (BUILTIN_BENCHMARKS / "gsm8k_fewshot.jsonl").read_bytes()
