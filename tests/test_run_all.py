"""`samspec-bench run`: option plumbing, the config file, skipping with reasons, resuming an
interrupted run, and the built-in workload (a trace generated with a model, replayed by accept)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.results import RunDir
from samspec_bench.suites import run_all
from samspec_bench.suites.run_all import Plan, Step, build_args, load_config


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


# --- fake suites: the orchestration without the cost --------------------------------------------------------

CALLS: list[tuple[str, list[str]]] = []
FAIL_ONCE: set[str] = set()


def _fake(name: str, gate_passed: bool = True) -> click.Command:
    @click.command(name)
    @click.option("--size", type=int, default=1)
    @click.option("--model", default=None)
    @click.option("--engine", type=click.Choice(["replay", "reference"]), default="replay")
    @click.option("--output", default="results")
    @click.option("--resume", default=None)
    def cmd(size, model, engine, output, resume):
        import sys
        CALLS.append((name, list(sys.argv[2:])))
        rd = RunDir(output, name, resume)
        if name in FAIL_ONCE:
            FAIL_ONCE.discard(name)
            raise KeyboardInterrupt   # interrupted mid-run: a partial directory, no result.json
        rd.write_result({"size": size, "model": model, "engine": engine}, {"size": size},
                        extra={"gates": [{"name": f"{name} ok", "passed": gate_passed, "value": size, "threshold": 1}]})
    return cmd


@pytest.fixture()
def fake_steps(monkeypatch):
    CALLS.clear()
    FAIL_ONCE.clear()
    commands = {"alpha": _fake("alpha"), "beta": _fake("beta"), "gamma": _fake("gamma", gate_passed=False)}
    steps = (
        Step("alpha", "alpha", "first", lambda ctx: Plan(options={"size": 2})),
        Step("beta", "beta", "second", lambda ctx: Plan(options={"size": 3})),
        Step("missing", "not-in-this-build", "absent", lambda ctx: Plan()),
        Step("never", "alpha", "cannot run here", lambda ctx: Plan(skip="needs something this machine lacks")),
    )
    monkeypatch.setattr(run_all, "STEPS", steps)
    monkeypatch.setattr(run_all, "STEP_NAMES", tuple(s.name for s in steps))
    monkeypatch.setattr(run_all, "_load_command", lambda name: commands.get(name))
    return commands


def test_run_records_steps_and_renders_the_report(fake_steps, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("beta:\n  size: 7\n", encoding="utf-8")
    state, out = run_all.run_all(output=tmp_path / "res", config=cfg, engine="reference")
    st = state["steps"]
    assert [st[n]["status"] for n in ("alpha", "beta", "missing", "never")] == ["done", "done", "skipped", "skipped"]
    assert "no `not-in-this-build` command" in st["missing"]["reason"]
    assert st["never"]["reason"] == "needs something this machine lacks"
    # defaults < globals < the config file's section
    assert st["alpha"]["args"] == ["--size", "2", "--model", run_all.DEFAULT_MODEL, "--engine", "reference"]
    assert st["beta"]["args"][:2] == ["--size", "7"]
    beta = json.loads((out / st["beta"]["run_dir"] / "result.json").read_text())
    assert beta["config"] == {"size": 7, "model": run_all.DEFAULT_MODEL, "engine": "reference"}
    # the suite's result records the command that reproduces it
    assert beta["environment"]["argv"][:2] == ["samspec-bench", "beta"]
    html = (out / "report.html").read_text()
    assert "needs something this machine lacks" in html and "Steps of samspec-bench run" in html
    assert (out / "report.md").is_file()
    saved = json.loads((out / run_all.STATE_FILE).read_text())
    assert saved["steps"]["beta"]["status"] == "done" and saved["report"]["html"] == "report.html"


def test_engine_a_suite_cannot_use_is_noted(fake_steps, tmp_path):
    state, _ = run_all.run_all(output=tmp_path, engine="vllm-xyz", steps="alpha")
    assert "--engine" not in state["steps"]["alpha"]["args"]
    assert any("not one of this suite's engines" in n for n in state["steps"]["alpha"]["notes"])


def test_interrupted_run_resumes(fake_steps, tmp_path):
    FAIL_ONCE.add("beta")
    with pytest.raises(KeyboardInterrupt):
        run_all.run_all(output=tmp_path)
    (out,) = tmp_path.glob("run-*")
    state = json.loads((out / run_all.STATE_FILE).read_text())
    assert state["steps"]["alpha"]["status"] == "done" and state["steps"]["beta"]["status"] == "running"
    (partial,) = (out / "runs" / "beta").iterdir()
    assert not (partial / "result.json").exists()
    CALLS.clear()
    state, out2 = run_all.run_all(resume=out)
    assert out2 == out
    # alpha is not run again; beta continues its partial directory
    assert [c[0] for c in CALLS] == ["beta"]
    assert CALLS[0][1][-2:] == ["--resume", str(partial)]
    assert state["steps"]["beta"]["status"] == "done"
    assert out / state["steps"]["beta"]["run_dir"] == partial
    # a finished run resumed again does nothing but render the report
    CALLS.clear()
    run_all.run_all(resume=out)
    assert CALLS == []


def test_resume_refuses_other_settings(fake_steps, tmp_path):
    state, out = run_all.run_all(output=tmp_path, steps="alpha")
    with pytest.raises(UserError, match="--model"):
        run_all.run_all(resume=out, model="other")
    with pytest.raises(UserError, match="no run_state.json"):
        run_all.run_all(resume=tmp_path)


def test_exit_code_reflects_failed_gates(fake_steps, tmp_path, monkeypatch, capsys):
    commands = dict(fake_steps)
    steps = (Step("gamma", "gamma", "a failing gate", lambda ctx: Plan()),)
    monkeypatch.setattr(run_all, "STEPS", steps)
    monkeypatch.setattr(run_all, "STEP_NAMES", ("gamma",))
    monkeypatch.setattr(run_all, "_load_command", lambda name: commands.get(name))
    with pytest.raises(SystemExit) as e:
        main(["run", "--output", str(tmp_path)])
    assert e.value.code == 1
    assert "report:" in capsys.readouterr().out


def test_ctrl_c_exits_130_with_only_the_resume_hint(fake_steps, tmp_path, capsys):
    FAIL_ONCE.add("beta")
    with pytest.raises(SystemExit) as e:
        main(["run", "--output", str(tmp_path)])
    assert e.value.code == 130
    err = capsys.readouterr().err
    assert "samspec-bench run --resume" in err and "aborted" not in err


def test_a_failing_step_does_not_stop_the_others(fake_steps, tmp_path, monkeypatch):
    @click.command("boom")
    @click.option("--output")
    def boom(output):
        raise UserError("boom: the input is bad; fix it")

    commands = {**fake_steps, "boom": boom}
    steps = (Step("boom", "boom", "fails", lambda ctx: Plan()), Step("alpha", "alpha", "runs", lambda ctx: Plan()))
    monkeypatch.setattr(run_all, "STEPS", steps)
    monkeypatch.setattr(run_all, "STEP_NAMES", ("boom", "alpha"))
    monkeypatch.setattr(run_all, "_load_command", lambda name: commands.get(name))
    state, out = run_all.run_all(output=tmp_path)
    assert state["steps"]["boom"] == {**state["steps"]["boom"], "status": "failed",
                                      "reason": "boom: the input is bad; fix it"}
    assert state["steps"]["alpha"]["status"] == "done"
    assert run_all.outcome(state, out) == 1


# --- the real steps' plans ---------------------------------------------------------------------------------------

def test_default_plans_without_data(tmp_path):
    ctx = run_all.Ctx(out=tmp_path, model="builtin:tiny-qwen3", engine=None, data_dir=None, sections={},
                      state={"steps": {}})
    plans = {s.name: s.plan(ctx) for s in run_all.STEPS}
    assert plans["workload"].skip is None and plans["workload"].options["model"] == "builtin:tiny-qwen3"
    assert "workload step" in plans["accept"].skip and "workload step" in plans["drafters"].skip
    assert "workload step" in plans["rollout"].skip
    assert "--data-dir" in plans["accuracy"].skip   # offline, its benchmark sets come from the data dir
    assert plans["op-equivalence"].options["prompts"].endswith("builtin_prompts.jsonl")
    assert Path(plans["op-equivalence"].options["prompts"]).is_file()
    ctx.data_dir = tmp_path
    assert "traces of" in run_all._plan_workload(ctx).skip
    assert run_all._plan_accept(ctx).options["data-dir"] == str(tmp_path)
    assert run_all._plan_accuracy(ctx).options["limit"] == 10


def test_every_default_plan_is_valid_for_its_command(tmp_path):
    """The small defaults name options the suites really have (catches a renamed option)."""
    from samspec_bench.commands import COMMANDS

    trace = tmp_path / "t.jsonl"
    trace.write_text("", encoding="utf-8")
    state = {"steps": {"workload": {"status": "done", "run_dir": "w"}}}
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "result.json").write_text(json.dumps({"trace": "t.jsonl", "tokenizer": "tok",
                                                            "metrics": {"total_tokens": 5000}}))
    for data_dir in (None, tmp_path):
        ctx = run_all.Ctx(out=tmp_path, model="m", engine=None, data_dir=data_dir, sections={}, state=state)
        for step in run_all.STEPS:
            if step.command is None or step.command not in COMMANDS:
                continue
            plan = step.plan(ctx)
            if plan.skip is None:
                build_args(run_all._load_command(step.command), step.name, plan.options)


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
    state, out = run_all.run_all(output=tmp_path / "res", model="builtin:tiny-qwen3", config=cfg,
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
    state2, _ = run_all.run_all(resume=out)
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
