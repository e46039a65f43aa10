"""The sampler suite's contract: SUITE, command, build_config (the click options are the one
source of defaults) and execute (run, write, return the exit code) called without the CLI."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

from samspec_bench.errors import UserError
from samspec_bench.suites.run.config_options import suite_params
from samspec_bench.suites.run.plan import Ctx, plan_sampler
from samspec_bench.suites.sampler import SUITE, SamplerConfig, build_config, command, execute
from samspec_bench.suites.sampler.battery import build_battery
from samspec_bench.suites.sampler.power import planned_power

OUTPUT_ONLY = ("output", "json_path", "resume")


def _defaults(**over) -> dict:
    """The command's parameters as click converts its defaults, minus the output destinations."""
    params = command.make_context("sampler", []).params
    return {**{k: v for k, v in params.items() if k not in OUTPUT_ONLY}, **over}


def test_build_config_takes_every_option_and_no_defaults():
    sig = inspect.signature(build_config).parameters
    assert set(sig) == {p.name for p in command.params} - set(OUTPUT_ONLY)
    assert all(p.default is inspect.Parameter.empty for p in sig.values())


def test_click_defaults_give_the_config_defaults():
    assert SUITE == "sampler"
    assert build_config(**_defaults()) == SamplerConfig()


def test_build_config_converts_the_option_strings():
    cfg = build_config(**_defaults(audits=("samspec",), max_vocab="32k", large_vocab="qwen3", speed_batch="1,8",
                                   speed_k="3", speed_vocab="32k,151k", speed_min_time=0.0))
    assert cfg.audits == ("samspec",) and cfg.max_vocab == 32000 and cfg.large_vocab == 151936
    assert cfg.speed_batches == (1, 8) and cfg.speed_ks == (3,) and cfg.speed_vocabs == (32000, 151936)
    assert cfg.speed_min_seconds == 0.0


@pytest.mark.parametrize("over, needle", [
    ({"samples": 99}, "--samples"),
    ({"alpha": 1.0}, "--alpha"),
    ({"builtin": False, "speed": False}, "nothing to do"),
    ({"max_vocab": "1"}, "--max-vocab"),
    ({"speed_batch": "0"}, "--speed-batch"),
    ({"speed_k": "33"}, "--speed-k"),
    ({"speed_threads": 0}, "--speed-threads"),
    # huge values: refused, not a segfault (OpenMP threads) or every sampler blamed ERROR (memory)
    ({"speed_threads": 100000}, "--speed-threads 100000: must be in 1..1024"),
    ({"samples": 10 ** 14}, "--samples 100000000000000: give at most 1,000,000"),
    ({"large_vocab": "99999999999"}, "--large-vocab '99999999999': larger than any model's vocabulary"),
    ({"speed_vocab": "32k,2000000"}, "--speed-vocab '2000000': larger than any model's vocabulary"),
    ({"speed_min_time": -1.0}, "--speed-min-time -1.0: give a number >= 0"),
    ({"speed_reps": 0}, "--speed-reps 0"),
    ({"seed": -1}, "--seed -1"),
    ({"device": "no-such-device"}, "--device"),
    ({"device": "cuda:x"}, "--device"),
    ({"device": "mps"}, "--device 'mps': not a device; use one of auto, cpu, cuda"),
])
def test_build_config_refuses_bad_values(over, needle):
    with pytest.raises(UserError, match=needle):
        build_config(**_defaults(**over))


def test_a_well_spelled_device_this_machine_lacks_stops_before_the_run_folder(tmp_path):
    # build_config checks the spelling without torch; the run checks the device before any work
    cfg = build_config(**_defaults(builtin=False, speed=True, device="cuda:63"))
    with pytest.raises(UserError) as e:
        execute(cfg, output=str(tmp_path))
    # no CUDA here: "torch sees no CUDA device"; on a GPU machine: "this machine has N cuda device(s)"
    assert str(e.value).startswith("--device cuda:63: ") and "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


def _small(*audits: str) -> SamplerConfig:
    return build_config(**_defaults(audits=audits, builtin=False, speed=False, samples=400, max_vocab="60"))


@pytest.mark.parametrize("spec", ["samspec", "samspec_bench.sam.rejection:samspec_sampler"],
                         ids=["builtin", "the sampler's old module path"])
def test_execute_exact_audit_returns_0_and_writes_the_run(tmp_path, capsys, spec):
    js = tmp_path / "r.json"
    assert execute(_small(spec), output=str(tmp_path / "res"), json_path=str(js)) == 0
    (run,) = (tmp_path / "res").glob("sampler-*")
    res = json.loads((run / "result.json").read_text())
    assert res["suite"] == SUITE and res["metrics"]["verdicts"] == {spec: "EXACT"}
    (rec,) = res["audits"]
    assert rec["target"] == "samspec_bench.bench.rejection:samspec_sampler"
    assert json.loads(js.read_text())["metrics"] == res["metrics"]
    assert "Error:" not in capsys.readouterr().err


def test_execute_lossy_audit_returns_1_with_one_line(tmp_path, capsys):
    target = "samspec_bench.suites.sampler.controls:no_exclusion_demo"   # the path users pass to --audit
    assert execute(_small(target), output=str(tmp_path)) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("Error:")]
    assert len(err) == 1 and f"{target} is LOSSY" in err[0] and "result.json" in err[0]


def test_importing_the_suite_imports_neither_torch_nor_vllm():
    code = ("import sys, samspec_bench.suites.sampler; "
            "print(sorted(m for m in ('torch', 'vllm', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_run_step_audits_the_vocabularies_real_models_use_with_the_default_power(tmp_path):
    plan = plan_sampler(Ctx(tmp_path, "m", None, None, {}, {"steps": {}}))
    params = suite_params(command, "sampler", plan.options)
    cfg = build_config(**{k: v for k, v in params.items() if k not in OUTPUT_ONLY})
    cases = build_battery(cfg)
    vocabs = {c.vocab for c in cases}
    assert {32000, 151936} <= vocabs             # the two-level draw (vocabularies above 1,024)
    assert cfg.samples == SamplerConfig().samples and planned_power(cases, cfg)["detects_target_everywhere"]
    assert "samspec" in cfg.builtins and "samspec-loop" not in cfg.builtins
    assert any(b.endswith("-1pct-demo") for b in cfg.builtins)    # a 1 % loss among the negative controls
