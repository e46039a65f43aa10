"""The engine-free step profiler: the timed step is a real cached forward, its times come from the
device timer, its rows load as measured points."""

import pytest
import torch

from samspec_bench import devices
from samspec_bench.bench.simulation import torch_step_profiler as tsp
from samspec_bench.bench.simulation.measured_points import load_points
from samspec_bench.errors import UserError

TINY = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 1000,
        "tie_word_embeddings": False}


@pytest.fixture(scope="module")
def tiny():
    return tsp.build_model(dict(TINY), "float32", "cpu")


def test_step_over_a_filled_cache_equals_the_full_forward(tiny):
    # the step's K/V come from a real prefill of C tokens: its logits must be the full forward's at C..C+q-1
    B, q, C = 2, 3, 5
    ids = torch.randint(0, 1000, (B, C + q), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        full = tiny(input_ids=ids).logits
        pre = tiny(input_ids=ids[:, :C], use_cache=True).past_key_values
    kv = [(layer.keys, layer.values) for layer in pre.layers]
    run = tsp._step(tiny, B, q, C, "cpu", torch.float32, torch.Generator(), kv_layers=kv, ids=ids[:, C:])
    first, again = run(), run()   # the write position is reset: a repeat is the same step
    torch.testing.assert_close(first, full[:, C:], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(again, first)


def test_rows_are_the_grid_timed_by_the_device_timer(tiny, monkeypatch, tmp_path):
    calls = []

    def fake_time_ms(fn, device, *, repeats, warmup=1):
        calls.append((device, repeats, tuple(fn().shape)))   # the step itself runs
        return [3.0, 1.0, 2.5][:repeats], "fake device timer"

    monkeypatch.setattr(devices, "time_ms", fake_time_ms)
    rows, how = tsp.measure(tiny, [1, 2], [1, 4], [0, 16], device="cpu", repeats=3)
    assert [(r["B"], r["q"], r["C"]) for r in rows] == [(b, q, c) for c in (0, 16) for b in (1, 2) for q in (1, 4)]
    assert all(r["ms"] == 2.5 for r in rows)   # the median of the timer's repeats
    assert how == {"timer": "fake device timer", "mode": "eager"}
    assert [c[2] for c in calls[:2]] == [(1, 1, 1000), (1, 4, 1000)] and all(c[:2] == ("cpu", 3) for c in calls)
    path = tsp.write_rows(tmp_path / "p.jsonl", rows, {"mode": how["mode"]})
    loaded, meta = load_points(path)
    assert meta == {"mode": "eager"}
    assert [(r["B"], r["q"], r["C"], r["ms"]) for r in loaded] == [(r["B"], r["q"], r["C"], 2.5) for r in rows]


def test_model_config_from_catalogue_and_layers_override(tmp_path):
    cfg = tsp.model_config("Qwen3-8B", layers=2)
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_key_value_heads"]) == (4096, 2, 8)
    (tmp_path / "config.json").write_text('{"model_type": "qwen3", "hidden_size": 64}')
    with pytest.raises(UserError, match="num_hidden_layers"):
        tsp.model_config(str(tmp_path))
    with pytest.raises(UserError, match="--model"):
        tsp.model_config(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("grid, opt", [(([0], [1], [0]), "--grid-batches"), (([1], [], [0]), "--grid-q"),
                                       (([1], [1], [-1]), "--grid-contexts")])
def test_bad_grid_names_its_option(grid, opt):
    with pytest.raises(UserError, match=opt):
        tsp.check_grid(*grid, repeats=1)
