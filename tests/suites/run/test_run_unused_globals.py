"""`samspec-bench run`: a --model / --engine / --device no selected step uses is said, not dropped
silently (nothing silent), and a step is not handed global settings its suite would refuse.

Refusing them would break scripts that always pass them (`run --model M --engine E --device D
--steps curves`), so the run says so: a printed note, in run_state.json ("notes" and each step's
notes, which the summary table and the report show), and the report names no model or engine
the run did not use. A resume compares them as given.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from samspec_bench.errors import UserError
from samspec_bench.suites.op_equivalence import build_config as opeq_config
from samspec_bench.suites.op_equivalence import command as opeq_command
from samspec_bench.suites.run import plan
from samspec_bench.suites.run.command import DEFAULT_MODEL, run_all
from samspec_bench.suites.run.config_options import suite_params
from samspec_bench.suites.run.plan import Ctx
from samspec_bench.suites.run.state import STATE_FILE
from samspec_bench.suites.run.steps import globals_used

NOTE = ("--model builtin:tiny-qwen3, --engine reference, --device cpu: not used by the selected steps (curves), "
        "which take no model/engine/device; the run records none")


def _log(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    base = {"critic/score/mean": 0.6, "response_length/mean": 300.0, "actor/entropy": 0.3, "timing_s/gen": 30.0}
    data = {k: v * (1 + 0.01 * rng.standard_normal(30)) for k, v in base.items()}
    path.write_text("".join(" - ".join([f"step:{i + 1}"] + [f"{k}:{float(v[i])!r}" for k, v in data.items()]) + "\n"
                            for i in range(30)))
    return path


@pytest.fixture()
def curves_config(tmp_path) -> Path:
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({"curves": {"runs": [str(_log(tmp_path / "A.log", 1)),
                                                        str(_log(tmp_path / "B.log", 2))]}}))
    return conf


def test_model_engine_device_no_selected_step_uses_are_noted(tmp_path, curves_config, capsys):
    state, out = run_all(output=tmp_path / "res", config=curves_config, steps="curves", model="builtin:tiny-qwen3",
                         engine="reference", device="cpu")
    printed = " ".join(capsys.readouterr().out.split())
    assert f"note: {NOTE}" in printed
    assert state["steps"]["curves"]["status"] == "done"
    saved = json.loads((out / STATE_FILE).read_text())
    assert saved["notes"] == [NOTE] and NOTE in saved["steps"]["curves"]["notes"]
    s = saved["settings"]
    assert (s["model"], s["engine"], s["device"]) == (None, None, None)     # not the run's: it used none
    assert s["not_used"] == {"model": "builtin:tiny-qwen3", "engine": "reference", "device": "cpu"}
    md = (out / "report.md").read_text()
    assert NOTE in md and "model `builtin:tiny-qwen3`" not in md and "engine `reference`" not in md
    # the same settings continue it; others are refused as before
    run_all(resume=out, model="builtin:tiny-qwen3", engine="reference", device="cpu")
    with pytest.raises(UserError, match=r"the run used --model 'builtin:tiny-qwen3', this call 'other'"):
        run_all(resume=out, model="other")


def test_without_those_options_there_is_no_note(tmp_path, curves_config, capsys):
    state, out = run_all(output=tmp_path / "res", config=curves_config, steps="curves")
    assert "note:" not in capsys.readouterr().out
    assert "notes" not in state and not state["steps"]["curves"].get("notes")
    assert state["settings"]["model"] is None and "not_used" not in state["settings"]


def test_a_config_files_globals_are_named_as_the_config_files(tmp_path, curves_config, capsys):
    conf = yaml.safe_load(curves_config.read_text())
    conf["model"] = "builtin:tiny-qwen3"
    curves_config.write_text(yaml.safe_dump(conf))
    state, _ = run_all(output=tmp_path / "res", config=curves_config, steps="curves")
    assert state["notes"] == ["model: builtin:tiny-qwen3 (--config): not used by the selected steps (curves), which "
                              "take no model; the run records none"]


def test_which_steps_use_the_globals():
    assert globals_used(["curves"], {}, "reference") == set()
    assert globals_used(["drafters"], {}, None) == set()
    assert globals_used(["sampler"], {}, "vllm") == {"device"}
    assert globals_used(["workload"], {}, "vllm") == {"model", "device"}
    assert globals_used(["op-equivalence"], {}, "reference") == {"model", "engine", "device"}
    assert globals_used(["op-equivalence"], {}, "replay") == {"model", "device"}   # not one of its engines
    # op-equivalence without its model level (config file) takes no model or engine
    kernel = {"op-equivalence": {"level": "kernel"}}
    assert globals_used(["op-equivalence"], kernel, "reference") == {"device"}
    assert globals_used(["op-equivalence", "accuracy"], kernel, "reference") == {"model", "engine", "device"}


@pytest.mark.parametrize("section, levels", [({"level": "kernel"}, ["kernel"]), ({"levels": ["model"]}, ["model"]),
                                             ({"level": "kernel,model"}, ["kernel", "model"]), ({}, ["kernel", "model"])])
def test_op_equivalence_plan_gives_only_the_selected_levels_options(section, levels, tmp_path):
    """The plan's small defaults for a level the section leaves out would now be refused by the
    suite: they are left out with it, and without the model level the run's model, engine and data
    directory are not passed (Plan.unused)."""
    ctx = Ctx(out=tmp_path, model="builtin:tiny-qwen3", engine="reference", data_dir=tmp_path,
              sections={"op-equivalence": section}, state={"steps": {}, "threads": {"threads": 1}})
    p = plan.plan_op_equivalence(ctx)
    assert ("trials" in p.options) is ("kernel" in levels)
    assert ("model" in p.options and "num-prompts" in p.options) is ("model" in levels)
    assert set(p.unused) == (set() if "model" in levels else {"model", "engine", "data-dir"})
    if "model" not in levels:
        assert "the run's model, engine and data directory are not passed" in p.notes[0]
    opts = {**p.options, **section, "device": "cpu"}
    opts.pop("data-dir", None)     # a real benchmarks/ folder is not needed here
    cfg = opeq_config(**suite_params(opeq_command, "op-equivalence", opts))   # nothing refused
    assert cfg.levels == levels


def test_a_kernel_only_op_equivalence_step_runs_with_the_runs_model_and_engine(tmp_path, capsys):
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({"op-equivalence": {"level": "kernel", "pairs": "reference", "num-seqs": 1,
                                                       "seq-len": "16:32", "gqa": 1}}))
    state, out = run_all(output=tmp_path / "res", config=conf, steps="op-equivalence", model=DEFAULT_MODEL,
                         engine="reference", device="cpu", data_dir=str(tmp_path))
    st = state["steps"]["op-equivalence"]
    assert st["status"] == "done", st.get("reason")
    assert "--model" not in st["args"] and "--engine" not in st["args"] and "--data-dir" not in st["args"]
    assert any("the run's model, engine and data directory are not passed" in n for n in st["notes"])
    assert state["notes"][0].startswith(f"--model {DEFAULT_MODEL}, --engine reference: not used by the selected "
                                        "steps (op-equivalence)")
    assert state["settings"]["device"] == "cpu"
