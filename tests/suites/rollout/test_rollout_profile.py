"""`samspec-bench rollout profile`: the oracle drafter that makes every verify step k + 1 tokens
wide, the profile JSON (format 3) and its fields, bad options, and the short profile's grid
(`quick_profile`; what `samspec-bench run` measures before its replay is in
tests/suites/run/test_run_rollout_plan.py)."""

import json
from datetime import datetime
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from device_fixtures import FakeClock, FakeEvent

from samspec_bench import cli
from samspec_bench.bench.engines import reference_engine
from samspec_bench.bench.engines.oracle import OracleDrafter
from samspec_bench.devices import DeviceTimer, timer_label
from samspec_bench.bench.simulation.fitted_step_model import FEATURES, StepTimeModel
from samspec_bench.metrics import ResponseSteps
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout import profile as pr

ENGINE_FIELDS = {"name": str, "version": str, "device": str, "model": str, "dtype": str, "tp": int, "threads": int}


def test_oracle_drafter_proposes_the_continuation_at_the_position():
    d = OracleDrafter({"a": [5, 6, 7, 8, 9, 10, 11, 12, 13], "b": [1, 2, 3]}, mixed={"a": 1, "b": 0})
    d.start("a", [1, 2])
    d.extend("a", [5])              # the prefill's token
    assert d.propose("a", 3) == [6, 7, 8]
    d.extend("a", [6, 7, 8, 9])     # 3 accepted + the bonus token
    assert d.propose("a", 3) == [10]            # every other step: the request's mixed width
    d.extend("a", [10])             # 0 accepted + 1
    assert d.propose("a", 3) == [11, 12, 13]
    assert d.propose("a", 2) == [11]            # a mixed step again: width 1
    assert d.propose("a", 5) == [11, 12, 13]    # the continuation's end
    d.stop("a")
    d.start("b", [1])
    assert d.propose("b", 2) == [1, 2] and d.propose("b", 2) == []
    d.start("c", [1])
    assert d.propose("c", 3) == []       # no continuation known: no draft
    assert [pr.half_width(k) for k in (1, 2, 3, 8)] == [0, 1, 2, 4]


def test_recorded_profile_places_drafts_at_their_positions():
    rs = ResponseSteps(key="x", prompt_len=3, response_len=9, position=[1, 4, 8], drafted=[3, 3, 0],
                       accepted=[2, 3, 0], emitted=[3, 4, 1])
    d, a = pr.recorded_profile(SimpleNamespace(token_ids=list(range(9)), steps=rs))
    assert list(d) == [0, 3, 0, 0, 3, 0, 0, 0, 0] and list(a) == [0, 2, 0, 0, 3, 0, 0, 0, 0]


def test_auto_batch_sizes():
    assert pr.auto_batch_sizes(1) == [1]
    assert pr.auto_batch_sizes(4) == [1, 4]
    assert pr.auto_batch_sizes(16) == [1, 4, 16]
    assert pr.auto_batch_sizes(24) == [1, 4, 24]       # 16 is within 2x of 24: left out
    assert pr.auto_batch_sizes(64) == [1, 4, 16, 64]


@pytest.mark.parametrize("args, match", [
    (["-k", "0"], "-k"),
    (["--batch-sizes", "0,2"], "--batch-sizes"),
    (["--tokens", "1"], "--tokens"),
    (["--prompt-pad", "-3"], "--prompt-pad"),
    (["--engine-arg", "max_num_seqs=4"], "--engine-arg"),
    (["--engine", "sglang"], "--engine"),
])
def test_profile_refuses_bad_options(args, match, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["rollout", "profile", "--model", "builtin:tiny-qwen3", "--output", str(tmp_path / "p.json"), *args])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def test_quick_profile_takes_the_grids_batch_sizes(tmp_path, monkeypatch):
    seen = []

    def fake(model, sizes, tokens, ks, threads, dtype, **kw):
        seen.append((sizes, tokens, kw["prompt_pads"], kw["pad_max_batch"]))
        raise RuntimeError("stop")   # nothing to write: only the grid is looked at

    monkeypatch.setattr(pr, "profile", fake)
    for grid, largest in (({"tokens": 16, "batch_sizes": [1, 4, 8], "prompt_pads": (0, 55), "pad_max_batch": None}, 99),
                          (None, 16)):
        with pytest.raises(RuntimeError):
            pr.quick_profile(tmp_path / "p.json", "reference", "m", [3], largest, grid=grid)
    assert seen == [([1, 4, 8], 16, (0, 55), None),
                    ([1, 4, 16], pr.AUTO_PROFILE["tokens"], pr.AUTO_PROFILE["prompt_pads"], pr.AUTO_PROFILE["pad_max_batch"])]


@pytest.mark.slow
def test_reference_profile_json(tmp_path):
    out = tmp_path / "prof.json"
    res = CliRunner().invoke(ro.command, ["profile", "--model", "builtin:tiny-qwen3", "--batch-sizes", "1,3",
                                          "--tokens", "9", "-k", "2,3", "--prompt-pad", "0,24", "--output", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["format"] == 3 and doc["kind"] == "step-profile"
    assert {k: type(doc["engine"][k]) for k in ENGINE_FIELDS} == ENGINE_FIELDS
    assert doc["engine"]["name"] == "reference" and doc["engine"]["model"] == "builtin:tiny-qwen3"
    assert "torch" in doc["engine"]["version"] and doc["engine"]["tp"] == 1
    assert datetime.fromisoformat(doc["date"]).tzinfo is not None
    steps = doc["measured_steps"]
    n = len(steps["time_s"])
    assert set(steps) == {"time_s", *FEATURES}   # every run's context reproduced: context is a feature
    assert all(len(v) == n for v in steps.values()) and all(t > 0 for t in steps["time_s"])
    assert len(doc["runs"]) == 2 * 2 * 3 and all(r["context"] for r in doc["runs"])
    fit = doc["model"]["fit"]
    assert fit["n_steps"] == n
    for key in ("r2", "median_rel_error", "max_rel_error", "p90_rel_error", "mean_abs_error_s"):
        assert isinstance(fit[key], float), key
    assert fit["median_rel_error"] <= fit["max_rel_error"]
    assert set(fit["valid_range"]) == set(FEATURES)
    assert fit["valid_range"]["running"] == [1.0, 3.0]
    assert fit["valid_range"]["draft_tokens"][1] == 3 * 3   # 3 requests verifying k=3 drafts each
    # the oracle drafts the full k: verify steps of both widths were measured
    assert fit["verify_widths"]["2"] >= 3 and fit["verify_widths"]["3"] >= 3
    for line in ("step time =", "fit on", "valid over", "verify steps measured"):
        assert line in res.output
    assert doc["timer"] == timer_label("cpu") and doc["device"]["device"] == "cpu"
    assert f"step times measured by: {timer_label('cpu')}" in res.output
    model, meta = pr.read_profile(out)
    assert meta["engine"] == doc["engine"] and (meta["timer"], meta["device"]) == (doc["timer"], doc["device"])
    t = model.predict(**{f: np.asarray(steps[f]) for f in FEATURES})
    assert np.sum(t) == pytest.approx(np.sum(steps["time_s"]) * (1 + fit["total_error"]), rel=1e-6)


# --- what timed the steps ------------------------------------------------------------------------

STEP_S = 0.003   # what the stand-in device spends on each step's forward pass


def test_a_profile_on_an_accelerator_records_its_device_time_and_says_so(monkeypatch, tmp_path):
    """The reference engine on a stand-in CUDA whose event clock only the forward passes advance:
    every measured step time is that clock's, and the profile names the timer."""
    clock = FakeClock()
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: FakeEvent(clock, enable_timing))
    monkeypatch.setattr(reference_engine, "step_timers", lambda device: (DeviceTimer("cuda:0"), DeviceTimer("cuda:0")))
    run = reference_engine.ReferenceEngine._run

    def forward(self, *a, **kw):
        clock.now += STEP_S
        return run(self, *a, **kw)

    monkeypatch.setattr(reference_engine.ReferenceEngine, "_run", forward)
    eng = pr.open_engine("reference", "builtin:tiny-qwen3", "float32", 0, 2, 2048, 2)
    try:
        m, tables, meta = pr.profile_engine(eng, "reference", "builtin:tiny-qwen3", [1, 2], 4, [2], threads=1,
                                            dtype="float32", max_num_seqs=2, max_num_batched_tokens=2048)
    finally:
        eng.close()
    assert meta["timer"] == "cuda device time (cuda events, synchronised)"
    doc = pr.profile_document(m, tables, meta)
    assert doc["timer"] == meta["timer"]
    assert doc["measured_steps"]["time_s"] == pytest.approx([STEP_S] * len(doc["measured_steps"]["time_s"]))
    assert any(line == f"step times measured by: {meta['timer']}" for line in pr.profile_lines(m, meta))


def test_a_profile_written_before_device_and_timer_still_reads(tmp_path):
    model = StepTimeModel.constant(0.01)
    doc = {"format": 3, "kind": "step-profile", "engine": {"name": "reference"}, "date": "2026-01-01T00:00:00+00:00",
           "grid": {}, "measured_steps": {"time_s": []}, "model": model.describe()}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    m, meta = pr.read_profile(path)
    assert m.intercept == pytest.approx(0.01) and meta["device"] is None and meta["timer"] is None
    assert not any(line.startswith("step times measured by") for line in pr.profile_lines(m, meta))
