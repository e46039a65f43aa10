"""The sampler suite on the chosen device: where the speed grid's tensors live, which timer
measures them and how the table, result.json and terminal say so; `--device` errors; the
battery's verdicts with `cpu` and `auto` (the CPU here). The accelerator paths run against
stand-ins here (the `meta` device for placement, test_devices' fake event clock for timing);
on a real GPU: test_sampler_cuda.py (`cuda` marker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from device_fixtures import FakeClock, FakeEvent

from samspec_bench.cli import main
from samspec_bench.devices import timer_label
from samspec_bench.bench.rejection import samspec_sampler
from samspec_bench.suites.sampler import speed
from samspec_bench.suites.sampler.adapters import Audited
from samspec_bench.suites.sampler.audit import audit
from samspec_bench.suites.sampler.battery import build_battery
from samspec_bench.suites.sampler.config import SamplerConfig
from samspec_bench.suites.sampler.controls import no_exclusion_demo
from samspec_bench.suites.sampler.running import run

TINY_GRID = dict(speed_batches=(1, 3), speed_ks=(2,), speed_vocabs=(64,), speed_reps=1, speed_min_seconds=0.0)


# ------------------------------------------------------------------------- placement


def test_every_speed_input_is_made_on_the_chosen_device(monkeypatch):
    """On `meta` (a device that is not the CPU): the samplers are spies that record where each
    tensor they get lives, and the timer asked for is the device's."""
    seen, clocks = [], []

    def spy(draft, nums, probs, **kw):
        seen.extend(t.device.type for t in (draft, probs, kw["bonus_token_ids"], *kw["uniforms"]))
        return torch.zeros((len(nums), max(nums) + 1), dtype=torch.long)   # results are read back on the host

    monkeypatch.setattr(speed, "resolve_device", lambda spec: spec)
    monkeypatch.setattr(speed, "_generator", lambda device, seed: torch.Generator().manual_seed(seed))  # meta has none
    monkeypatch.setattr(speed, "rejection_sample", spy)
    monkeypatch.setattr(speed, "rejection_sample_loop", spy)
    monkeypatch.setattr(speed, "synchronize", lambda device: None)
    real_clock = speed._clock
    monkeypatch.setattr(speed, "_clock", lambda device: clocks.append(device) or real_clock("cpu"))
    rows = speed.speed_benchmark(SamplerConfig(device="meta", **TINY_GRID))
    assert len(rows) == 2 and seen and set(seen) == {"meta"}
    assert set(clocks) == {"meta"}
    assert all(r["device"] == "meta" and r["timer"].startswith("meta device time") for r in rows)


# ------------------------------------------------------------------------- timers and labels


def test_speed_labels_name_the_device_and_its_timer():
    assert speed.speed_timer("cpu", 1).startswith("CPU time of the calling thread")
    assert "1 intra-op thread" in speed.speed_timer("cpu", 1)
    assert speed.speed_timer("cuda:0", 1) == "cuda device time (cuda events, synchronised), median"
    assert speed.fastest_timer("cpu").startswith("CPU wall clock")
    assert speed.fastest_timer("npu:1") == timer_label("npu:1")


def test_on_an_accelerator_a_speed_point_is_timed_by_its_events(monkeypatch):
    """A stand-in CUDA whose events run on a fake clock that only the timed work advances: the
    timing is the events' (read after synchronising), not the host's wall clock."""
    clock = FakeClock()
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: FakeEvent(clock, enable_timing))
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: synced.append(clock.now))
    durations = iter([0.007, 0.002, 0.004, 0.003])   # the first call: the untimed warm-up

    def work():
        clock.now += next(durations)
        return "first result"

    timing, res = speed._time(work, "cuda:0", min_reps=3, min_seconds=0.0)
    assert res == "first result" and synced == [0.0]   # synchronised before the first call
    assert (timing.ms, timing.min_ms, timing.calls) == (pytest.approx(3.0), pytest.approx(2.0), 3)


def test_the_command_says_where_and_how_the_speed_table_was_timed(tmp_path, capsys):
    out = tmp_path / "res"
    main(["sampler", "--output", str(out), "--device", "cpu", "--no-builtin", "--audit", "samspec",
          "--samples", "400", "--max-vocab", "60", "--speed-batch", "1,2", "--speed-k", "2",
          "--speed-vocab", "64", "--speed-reps", "1", "--speed-min-time", "0", "--speed-threads", "1"])   # exit 0
    (run,) = out.glob("sampler-*")
    res = json.loads((run / "result.json").read_text())
    dev = res["environment"]["device"]
    assert dev["device"] == "cpu" and dev["torch_threads"] >= 1 and dev["name"]
    assert res["config"]["device"] == "cpu" and res["config"]["device_requested"] == "cpu"
    label = "CPU time of the calling thread (thread_time), 1 intra-op thread(s), median"
    assert all(r["device"] == "cpu" and r["timer"] == label for r in res["tables"]["speed"])
    m = res["metrics"]
    assert (m["speed_device"], m["speed_timer"]) == ("cpu", label)
    assert (m["speed_largest"]["vocab"], m["speed_largest"]["batch"], m["speed_largest"]["k"]) == (64, 2, 2)
    assert m["speed_largest"]["vectorised_min_ms"] > 0   # the fastest call, beside the median (gpu_check prints both)
    printed = " ".join(capsys.readouterr().out.split())   # rich wraps long titles
    assert "Speed on cpu" in printed and "CPU time of the calling thread" in printed


def test_a_resumed_run_retimes_rows_measured_elsewhere(tmp_path):
    cfg = SamplerConfig(device="cpu", builtin=False, **TINY_GRID)
    first = run(cfg, str(tmp_path))
    rows = Path(first["run_dir"]) / "speed.jsonl"
    recs = [json.loads(x) for x in rows.read_text().splitlines()]
    recs[0]["row"].update(device="cuda:0", timer="cuda device time (cuda events, synchronised), median",
                          vectorised_ms=-1.0)
    recs[1]["row"]["vectorised_ms"] = -2.0                     # kept: same device and timer
    rows.write_text("".join(json.dumps(r) + "\n" for r in recs))
    again = run(cfg, str(tmp_path), resume=first["run_dir"])
    ms = {r["batch"]: r["vectorised_ms"] for r in again["tables"]["speed"]}
    assert ms[3] == -2.0 and ms[1] > 0 and again["tables"]["speed"][0]["device"] == "cpu"


# ------------------------------------------------------------------------- the device option


@pytest.mark.parametrize("spec", ["cuda", "npu:1"])
def test_a_device_this_machine_lacks_is_one_line_exit_2_and_no_run_folder(tmp_path, capsys, monkeypatch, spec):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        main(["sampler", "--output", str(tmp_path), "--device", spec, "--no-speed", "--samples", "400"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--device {spec}:" in err[0] and "pass --device cpu or auto" in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fn, verdict", [(samspec_sampler, "EXACT"), (no_exclusion_demo, "LOSSY")])
def test_cpu_and_auto_give_the_same_battery_and_verdicts(monkeypatch, fn, verdict):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)   # auto: the CPU, as on this machine
    recs = {}
    for device in ("cpu", "auto"):
        cfg = SamplerConfig(samples=1500, max_vocab=1000, seed=0, speed=False, device=device)
        recs[device] = audit(Audited("x", "x", "test", fn, "contract"), cfg, build_battery(cfg))
    assert recs["cpu"]["verdict"] == recs["auto"]["verdict"] == verdict
    strip = lambda t: {k: v for k, v in t.items() if k != "seconds"}  # noqa: E731
    assert [strip(t) for t in recs["cpu"]["table"]] == [strip(t) for t in recs["auto"]["table"]]
