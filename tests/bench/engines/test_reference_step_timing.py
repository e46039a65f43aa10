"""What the reference engine's step times are: on an accelerator device time (events read after
synchronising), on the CPU the wall clock, each StepRecord naming its timer. The accelerator
runs here as a stand-in (test_devices' fake event clock, advanced only by the step's work), and
for real under the `cuda` marker."""

from __future__ import annotations

import pytest
import torch
from device_fixtures import FakeClock, FakeEvent

from samspec_bench.bench.engines import reference_engine
from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.oracle import OracleDrafter
from samspec_bench.bench.engines.reference_engine import ReferenceEngine
from samspec_bench.devices import DeviceTimer, timer_label
from samspec_bench.models.checkpoints import load_model

FORWARD_S, VERIFY_S = 0.004, 0.0015   # what the stand-in device spends per forward / per sampling pass


@pytest.fixture(scope="module")
def engine():
    model, tok = load_model("builtin:tiny-qwen3")
    return ReferenceEngine(model, tokenizer=tok, max_num_seqs=4, max_model_len=256, num_blocks=64, block_size=8)


def _requests(n=2, tokens=6):
    # ids below 259: builtin:tiny-qwen3's smallest vocabulary (its byte tokenizer)
    return [Request(f"r{i}", [3 + 7 * i + j for j in range(9 + 4 * i)],
                    SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)) for i in range(n)]


def test_on_an_accelerator_step_times_are_its_events_read_after_synchronising(engine, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: FakeEvent(clock, enable_timing))
    monkeypatch.setattr(reference_engine, "step_timers", lambda device: (DeviceTimer("cuda:0"), DeviceTimer("cuda:0")))
    run, sample = engine._run, reference_engine.sample_step

    def forward(*a, **kw):
        clock.now += FORWARD_S          # queued device work: only the events see it
        return run(*a, **kw)

    def sampling(*a, **kw):
        clock.now += VERIFY_S
        return sample(*a, **kw)

    monkeypatch.setattr(engine, "_run", forward)
    monkeypatch.setattr(reference_engine, "sample_step", sampling)
    reqs = _requests()
    g = engine.generate(reqs, drafter=OracleDrafter({r.req_id: [5, 6, 7, 8, 9, 10] for r in reqs}), num_spec_tokens=2)
    assert g.steps and g.engine["step_timer"] == timer_label("cuda:0")
    for s in g.steps:   # the host's wall clock would give the CPU's milliseconds, not the device clock's
        assert s.timer == "cuda device time (cuda events, synchronised)"
        assert s.forward_s == pytest.approx(FORWARD_S)
        assert s.time_s == pytest.approx(FORWARD_S + VERIFY_S)


def test_on_the_cpu_step_times_are_the_wall_clock(engine):
    g = engine.generate(_requests())
    assert g.engine["step_timer"] == timer_label("cpu")
    assert {s.timer for s in g.steps} == {timer_label("cpu")}
    assert all(0 < s.forward_s <= s.time_s for s in g.steps)
    assert sum(s.time_s for s in g.steps) <= g.wall_time_s


def test_a_device_kind_without_a_timer_is_labelled_host_wall_clock():
    step, fwd = reference_engine.step_timers(torch.device("mps"))
    assert step.kind == fwd.kind == "cpu" and step.label == "host wall clock (mps work not synchronised)"


@pytest.mark.cuda
def test_on_cuda_the_engine_records_device_time(accel_device, on_accelerator):
    eng = ReferenceEngine("builtin:tiny-qwen3", device=accel_device, max_num_seqs=4, max_model_len=256,
                          num_blocks=64, block_size=8)
    reqs = _requests()
    g = eng.generate(reqs, drafter="sam", num_spec_tokens=3)
    assert all(len(o.token_ids) == 6 for o in g.outputs)
    label = timer_label(str(eng.device))
    assert g.engine["step_timer"] == label and {s.timer for s in g.steps} == {label}
    assert all(0 < s.forward_s <= s.time_s for s in g.steps)
    if on_accelerator:
        assert label.startswith("cuda device time")
