"""`--device` on every suite that runs a model or tensors (accept, rollout, rollout profile,
accuracy, op-equivalence, run): a device that is not there is one line, exit 2, and leaves no
run folder; `cpu` and `auto` (the CPU on a machine without an accelerator) give the same
metrics; result.json names the device (environment.device) and the report shows it. With a
stand-in CUDA (torch.cuda answering as on a one-GPU machine) the resolved device reaches the
engine, the workload and every step of `run`."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch
import yaml
from device_fixtures import fake_cuda, no_cuda  # noqa: F401 - fixtures

from samspec_bench import cli
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import resolve_model

TINY = "builtin:tiny-qwen3"
# a device that is not there, per suite: the cheapest command line that reaches its check
MISSING_DEVICE = {
    "accept (replay)": ["accept"],
    "accept (reference)": ["accept", "--engine", "reference", "--model", TINY],
    "rollout (replay)": ["rollout", "--traces", "t.jsonl", "--tokenizer", "tok"],
    "rollout (reference)": ["rollout", "--engine", "reference", "--model", TINY],
    "rollout profile": ["rollout", "profile", "--model", TINY],
    "accuracy": ["accuracy", "--model", TINY],
    "op-equivalence": ["op-equivalence", "--model", TINY],
    "run": ["run"],
}


def cli_exit(args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        cli.main(args)
    return e.value.code, capsys.readouterr().err


def cli_json(args: list[str], capsys) -> dict:
    cli.main(args + ["--json", "-"])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", list(MISSING_DEVICE))
def test_a_device_that_is_not_there_is_one_line_exit_2_and_no_run_folder(name, tmp_path, monkeypatch, capsys, no_cuda):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    target = out / "profile.json" if name == "rollout profile" else out
    code, err = cli_exit(MISSING_DEVICE[name] + ["--device", "cuda", "--output", str(target)], capsys)
    assert code == 2
    assert err.strip() == ("error: --device cuda: torch sees no CUDA device on this machine; pass --device cpu "
                           "or auto")
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("device, message", [("gpu", "--device 'gpu': not a device; use one of auto, cpu, cuda"),
                                             ("cuda:3", "--device cuda:3: this machine has 1 cuda device(s) (0..0)")])
@pytest.mark.parametrize("name", ["accept (reference)", "op-equivalence", "run"])
def test_bad_device_specs_name_the_option(name, device, message, tmp_path, monkeypatch, capsys, fake_cuda):
    monkeypatch.chdir(tmp_path)
    code, err = cli_exit(MISSING_DEVICE[name] + ["--device", device, "--output", str(tmp_path / "out")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# --- cpu and auto: the same results, the device recorded ----------------------------------------

def _cpu_record(env: dict) -> dict:
    dev = env["device"]
    assert dev["device"] == "cpu" and dev["type"] == "cpu" and dev["torch"] == torch.__version__
    return dev


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory) -> tuple[Path, Path]:
    """Two GRPO groups of two responses that repeat themselves (SAM drafts), and the tiny
    model's tokenizer."""
    d = tmp_path_factory.mktemp("trace")
    rows = []
    for g in range(2):
        for j in range(2):
            n = g + j + 5
            rows.append({"id": f"g{g}-{j}", "group": f"g{g}", "prompt": f"Add {g + 2} and {j + 3}.",
                         "response": f"The answer is {n}. So the answer is {n}. " * (2 + j)})
    (d / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return d / "t.jsonl", resolve_model(TINY)


def test_accept_on_the_reference_engine_cpu_and_auto_agree(tmp_path, capsys, no_cuda):
    args = ["accept", "--engine", "reference", "--model", TINY, "--benchmark", "aime25", "--limit-groups", "1",
            "--max-tokens", "8", "--no-progress"]
    cpu = cli_json(args + ["--device", "cpu", "--output", str(tmp_path / "cpu")], capsys)
    auto = cli_json(args + ["--device", "auto", "--output", str(tmp_path / "auto")], capsys)
    assert cpu["metrics"] == auto["metrics"] and cpu["metrics"]["sam k=3 own"]["counts"]["steps"] > 0
    assert cpu["config"]["device"] == auto["config"]["device"] == "cpu"
    assert _cpu_record(cpu["environment"])["used"] is True and cpu["engine"]["device"] == "cpu"
    assert auto["environment"]["device"]["name"] == cpu["environment"]["device"]["name"]


def test_accept_replay_records_the_device_unused(tiny_trace, tmp_path, capsys, no_cuda):
    trace, tok = tiny_trace
    res = cli_json(["accept", "--traces", str(trace), "--tokenizer", str(tok), "--no-progress", "--output",
                    str(tmp_path / "o")], capsys)
    dev = res["environment"]["device"]
    assert dev == {"device": "cpu", "type": "cpu", "used": False,
                   "why": "the replay engine runs no model: nothing is computed on a device"}


def test_rollout_replay_cpu_and_auto_agree(tiny_trace, tmp_path, capsys, no_cuda):
    trace, tok = tiny_trace
    args = ["rollout", "--traces", str(trace), "--tokenizer", str(tok)]
    cpu = cli_json(args + ["--device", "cpu", "--output", str(tmp_path / "cpu")], capsys)
    auto = cli_json(args + ["--device", "auto", "--output", str(tmp_path / "auto")], capsys)
    def counted(arms):   # everything but the simulation's own wall time
        return {lbl: {k: v for k, v in m.items() if k != "sim_seconds"} for lbl, m in arms.items()}

    arms = counted(cpu["metrics"]["arms"])
    assert arms == counted(auto["metrics"]["arms"]) and arms["always k=3"]["accepted"] > 0
    assert cpu["environment"]["device"]["used"] is False and auto["config"]["device"] == "cpu"


def test_rollout_profile_cpu_and_auto_agree(tmp_path, capsys, no_cuda):
    args = ["rollout", "profile", "--model", TINY, "--batch-sizes", "1", "--tokens", "3", "-k", "2",
            "--prompt-pad", "0"]
    docs = {}
    for dev in ("cpu", "auto"):
        cli.main(args + ["--device", dev, "--output", str(tmp_path / f"{dev}.json")])
        docs[dev] = json.loads((tmp_path / f"{dev}.json").read_text())
    assert docs["cpu"]["runs"] == docs["auto"]["runs"] and len(docs["cpu"]["runs"]) >= 2   # same steps measured
    for doc in docs.values():   # the profile JSON names the device the engine ran on
        assert doc["device"]["device"] == "cpu" and doc["device"]["used"] is True
        assert doc["device"]["timer"].startswith("CPU wall clock")


def test_op_equivalence_cpu_and_auto_agree_and_the_report_shows_the_device(tmp_path, capsys, no_cuda):
    from samspec_bench.reports.collect import collect
    from samspec_bench.reports.markdown import write_markdown

    args = ["op-equivalence", "--level", "kernel", "--pairs", "reference,vllm-cpu-attn", "--num-seqs", "2",
            "--seq-len", "16:32", "--trials", "1", "--gqa", "1", "--no-progress"]
    cpu = cli_json(args + ["--device", "cpu", "--output", str(tmp_path / "cpu")], capsys)
    auto = cli_json(args + ["--device", "auto", "--output", str(tmp_path / "auto")], capsys)
    assert cpu["metrics"] == auto["metrics"] and "kernel/reference/float32" in cpu["metrics"]["pairs"]
    assert _cpu_record(auto["environment"])["used"] is True and auto["config"]["device"] == "cpu"
    md = write_markdown(collect([Path(cpu["run_dir"])]), tmp_path / "r.md").read_text()
    assert f"| device | cpu ({cpu['environment']['device']['name']}); torch {torch.__version__}" in md


def test_run_passes_its_device_to_the_steps(tmp_path, capsys, no_cuda):
    from samspec_bench.suites.run.command import run_all

    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({"device": "auto", "op-equivalence": {
        "level": "kernel", "pairs": "reference", "num-seqs": 2, "seq-len": "16:32", "gqa": 1}}))
    metrics = {}
    for dev in ("cpu", None):   # --device cpu, then the config file's auto
        state, out = run_all(output=tmp_path / str(dev), config=conf, steps="op-equivalence", device=dev)
        st = state["steps"]["op-equivalence"]
        assert state["settings"]["device"] == "cpu" and st["status"] == "done"
        assert st["args"][st["args"].index("--device") + 1] == "cpu"
        result = json.loads((out / st["run_dir"] / "result.json").read_text())
        metrics[dev] = result["metrics"]
        assert result["environment"]["device"]["device"] == "cpu"
        assert "| device | cpu (" in (out / "report.md").read_text()
    assert metrics["cpu"] == metrics[None]


def test_run_refuses_a_missing_device_in_the_config_before_the_run_folder(tmp_path, capsys, no_cuda):
    p = tmp_path / "c.yaml"
    for conf, message in (({"device": "cuda"}, f"error: --config {p}: device: cuda: torch sees no CUDA device"),
                          ({"op-equivalence": {"device": "cuda:1"}},
                           f"error: --config {p}: config section op-equivalence: device cuda:1: "
                           "torch sees no CUDA device"),
                          ({"workload": {"device": "gpu"}}, f"error: --config {p}: workload device 'gpu': not a device")):
        p.write_text(yaml.safe_dump(conf))
        code, err = cli_exit(["run", "--config", str(p), "--output", str(tmp_path / "out")], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith(message)
        assert not (tmp_path / "out").exists()


# --- a stand-in CUDA: the resolved device reaches what runs ----------------------------------------

class Reached(Exception):
    pass


def _catch(monkeypatch, module, name: str, seen: dict):
    def fake(*args, **kwargs):
        seen.update(kwargs)
        raise Reached
    monkeypatch.setattr(module, name, fake)


def test_accept_and_rollout_build_their_engine_on_the_device(tmp_path, monkeypatch, fake_cuda):
    from samspec_bench.bench.engines import acceptance
    from samspec_bench.suites import accept, rollout
    from samspec_bench.suites.rollout import measured, profile

    seen: dict = {}
    _catch(monkeypatch, acceptance, "make_engine", seen)
    ctx = accept.command.make_context("accept", ["--engine", "reference", "--model", TINY, "--device", "cuda",
                                                 "--limit-groups", "1", "--max-tokens", "4", "--no-progress"])
    cfg = accept.build_config(**{k: v for k, v in ctx.params.items() if k not in ("output", "json_path", "resume")})
    assert cfg.device == "cuda:0"
    with pytest.raises(Reached):
        accept.run(cfg, output=tmp_path / "a", progress=False)
    assert seen["device"] == "cuda:0"

    seen.clear()
    _catch(monkeypatch, measured, "make_engine", seen)
    ctx = rollout.command.make_context("rollout", ["--engine", "reference", "--model", TINY, "--device", "cuda"])
    cfg = rollout.build_config(**{k: v for k, v in ctx.params.items() if k not in ("output", "json_path", "resume")})
    with pytest.raises(Reached):
        measured.run_measured(cfg, profiler=lambda eng: None)
    assert cfg.device == seen["device"] == "cuda:0"

    seen.clear()
    _catch(monkeypatch, profile, "make_engine", seen)
    with pytest.raises(Reached):
        profile.profile(TINY, [1], 3, [2], 1, "float32", device="cuda:0")
    assert seen["device"] == "cuda:0"


def test_accuracy_and_op_equivalence_load_the_model_on_the_device(tmp_path, monkeypatch, fake_cuda):
    from samspec_bench.suites import accuracy, op_equivalence
    from samspec_bench.suites.accuracy import config as acc_config
    from samspec_bench.suites.op_equivalence import model_level

    seen: dict = {}
    _catch(monkeypatch, acc_config, "make_engine", seen)
    ctx = accuracy.command.make_context("accuracy", ["--model", TINY, "--device", "cuda"])
    job = accuracy.build_config(**{k: v for k, v in ctx.params.items()
                                   if k not in ("output", "resume", "json_path")})
    with pytest.raises(Reached):
        acc_config.build_engine(job.config)
    assert job.config.device == seen["device"] == "cuda:0"

    seen.clear()
    _catch(monkeypatch, model_level, "load_model", seen)
    ctx = op_equivalence.command.make_context("op-equivalence", ["--model", TINY, "--level", "model",
                                                                 "--device", "cuda:0"])
    cfg = op_equivalence.build_config(**{k: v for k, v in ctx.params.items() if k not in ("output", "json_path")})
    with pytest.raises(Reached):
        model_level.run_model_level(cfg, "float32", types.SimpleNamespace(add_task=lambda *a, **k: 0))
    assert cfg.device == seen["device"] == "cuda:0"


def test_run_hands_the_device_to_the_workload_and_every_suite(tmp_path, monkeypatch, capsys, fake_cuda):
    """`run --device cuda`: the workload builds its engine on cuda:0 and every step that takes
    --device gets it in its configuration (the suites stop there: nothing runs on the stand-in)."""
    from samspec_bench.bench.engines import reference_engine
    from samspec_bench.suites.run.command import run_all
    from samspec_bench.suites.run.config_options import suite_module

    seen: dict = {}
    _catch(monkeypatch, reference_engine, "ReferenceEngine", seen)
    configured = {}
    for step in ("sampler", "op-equivalence"):
        monkeypatch.setattr(suite_module(step), "execute",
                            lambda config, step=step, **kw: configured.setdefault(step, config.device) and 0)
    state, _ = run_all(output=tmp_path, steps="workload,sampler,op-equivalence", device="cuda")
    assert state["settings"]["device"] == "cuda:0" and seen["device"] == "cuda:0"
    assert set(configured) == {"sampler", "op-equivalence"} and configured["op-equivalence"] == "cuda:0"
    assert configured["sampler"] in ("cuda", "cuda:0")   # the sampler resolves its own when it runs
    for step in ("sampler", "op-equivalence"):
        args = state["steps"][step]["args"]
        assert args[args.index("--device") + 1] == "cuda:0", step


def test_a_workload_device_that_is_not_there_stops_before_its_folder(tmp_path, no_cuda):
    from samspec_bench.workload import WorkloadConfig, generate_trace

    with pytest.raises(UserError, match=r"^workload device cuda: torch sees no CUDA device"):
        generate_trace(WorkloadConfig(device="cuda"), tmp_path / "w")
    assert not (tmp_path / "w").exists()
