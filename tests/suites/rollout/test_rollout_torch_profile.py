"""`rollout profile --engine torch`: the JSONL rows and the format-3 profile that --step-model prices with."""

import json

import numpy as np
import pytest

from samspec_bench import cli, devices
from samspec_bench.bench.simulation.measured_points import load_points, point_features
from samspec_bench.bench.simulation.step_model_spec import load_step_model
from samspec_bench.suites.rollout.profile import read_profile

TINY = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 1000,
        "tie_word_embeddings": False}


def _args(tmp_path, *extra):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    return ["rollout", "profile", "--engine", "torch", "--model", str(tmp_path / "config.json"), "--layers", "2",
            "--device", "cpu", "--repeats", "2", "--out-jsonl", str(tmp_path / "pts.jsonl"),
            "--output", str(tmp_path / "prof.json"), *extra]


def test_torch_profile_writes_points_and_a_profile(tmp_path, monkeypatch, capsys):
    # a fake device clock: each point's step costs 1 ms + 0.01 ms per query token + 0.001 ms per context token
    def fake_time_ms(fn, device, *, repeats, warmup=1):
        logits = fn()
        B, q, _ = logits.shape
        C = fake_time_ms.contexts[len(fake_time_ms.seen) // 4]
        fake_time_ms.seen.append((B, q))
        ms = 1.0 + 0.01 * B * q + 0.001 * B * C
        return [ms, ms + 5.0, ms][:repeats] + [ms], "fake device timer"
    fake_time_ms.contexts, fake_time_ms.seen = [0, 64], []
    monkeypatch.setattr(devices, "time_ms", fake_time_ms)
    assert cli.main(_args(tmp_path, "--grid-batches", "1,4", "--grid-q", "1,4", "--grid-contexts", "0,64")) in (0, None)
    rows, meta = load_points(tmp_path / "pts.jsonl")
    assert [(r["B"], r["q"], r["C"]) for r in rows] == [(b, q, c) for c in (0, 64) for b in (1, 4) for q in (1, 4)]
    assert [r["ms"] for r in rows] == pytest.approx([1.0 + 0.01 * r["B"] * r["q"] + 0.001 * r["B"] * r["C"]
                                                     for r in rows])
    assert meta["timer"] == "fake device timer" and meta["layers"] == 2 and meta["device"]["type"] == "cpu"
    assert meta["attention"] == "samspec_gqa"   # KV heads read once unless --attention names another
    model, info = read_profile(tmp_path / "prof.json")
    assert info["engine"]["name"] == "torch" and "fake device timer" in info["timer"]
    assert info["grid"] == {"batch_sizes": [1, 4], "query_tokens": [1, 4], "contexts": [0, 64]}
    f = point_features(rows)
    # the profile prices the measured points (the fake cost is linear in its features)
    assert model.predict(**f) * 1e3 == pytest.approx(np.array([r["ms"] for r in rows]), rel=1e-6)
    assert load_step_model(str(tmp_path / "prof.json")).coef == model.coef
    assert str(tmp_path / "pts.jsonl") in capsys.readouterr().out


@pytest.mark.parametrize("extra, opt", [(["--grid-q", "0"], "--grid-q"), (["--grid-batches", "x"], "--grid-batches"),
                                        (["--grid-contexts", "-1"], "--grid-contexts"),
                                        (["--layers", "0"], "--layers"),
                                        (["--grid-q", "1,2", "--tree-paths", "4"], "--tree-paths"),
                                        (["--attention", "no-such-kernel"], "--attention")])
def test_torch_profile_refuses_a_bad_grid(extra, opt, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(_args(tmp_path, *extra))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert opt in err and len(err.splitlines()) == 1
    assert not (tmp_path / "pts.jsonl").exists() and not (tmp_path / "prof.json").exists()


def test_torch_profile_times_trees_beside_chains(tmp_path, monkeypatch, capsys):
    # a fake clock that tells a tree step (a 4-D mask among its inputs) from a chain: trees cost 1.5x
    def fake_time_ms(fn, device, *, repeats, warmup=1):
        fn()
        tree = fake_time_ms.calls % 2 == 1   # per point with q >= 3: the chain, then the tree
        fake_time_ms.calls += 1
        return [3.0 if tree else 2.0], "fake device timer"
    fake_time_ms.calls = 0
    monkeypatch.setattr(devices, "time_ms", fake_time_ms)
    assert cli.main(_args(tmp_path, "--grid-batches", "1,2", "--grid-q", "4", "--grid-contexts", "16",
                          "--tree-paths", "2")) in (0, None)
    rows, meta = load_points(tmp_path / "pts.jsonl")
    assert meta["tree_paths"] == 2 and [r["ms"] for r in rows] == [2.0, 2.0]   # the chain stays the step's time
    doc = json.loads((tmp_path / "prof.json").read_text())
    assert {k: doc["tree"][k] for k in ("median", "min", "max", "points", "paths")} == {
        "median": 1.5, "min": 1.5, "max": 1.5, "points": 2, "paths": [2]}
    assert "median 1.500x [1.500, 1.500] over 2 points" in capsys.readouterr().out


def test_a_grid_that_stops_halfway_keeps_the_points_it_measured(tmp_path, monkeypatch):
    from samspec_bench.suites.rollout.torch_profile import torch_profile

    seen = []

    def fake_time_ms(fn, device, *, repeats, warmup=1):
        if len(seen) == 2:
            raise RuntimeError("the machine went away")
        fn()
        seen.append(1)
        return [1.0 + len(seen)], "fake device timer"
    monkeypatch.setattr(devices, "time_ms", fake_time_ms)
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    with pytest.raises(RuntimeError, match="went away"):
        torch_profile(str(tmp_path / "config.json"), [1, 2, 4], [1], [8], device="cpu", dtype="float32", layers=1,
                      repeats=1, seed=0, threads=1, out_jsonl=tmp_path / "pts.jsonl", output=tmp_path / "p.json")
    rows, meta = load_points(tmp_path / "pts.jsonl")
    assert [(r["B"], r["ms"]) for r in rows] == [(1, 2.0), (2, 3.0)]   # the third point never came
    assert meta["complete"] is False and not (tmp_path / "p.json").exists()
