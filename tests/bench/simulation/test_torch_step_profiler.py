"""The engine-free step profiler: the timed step is a real cached forward, its times come from the
device timer, its rows load as measured points."""

import pytest
import torch

from samspec_bench import devices
from samspec_bench.bench.simulation import torch_step_profiler as tsp
from samspec_bench.bench.simulation.measured_points import load_points, measured_tp
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
    assert meta == {"tp": 1, "mode": "eager"}   # one device: the tp a step model's tp check reads
    assert measured_tp(meta) == (1, "meta tp")
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


@pytest.mark.parametrize("q, paths, want", [(1, 4, [-1]), (4, 1, [-1, 0, 1, 2]), (9, 4, [-1, 0, 1, 0, 3, 0, 5, 0, 7]),
                                            (6, 2, [-1, 0, 1, 2, 0, 4]), (3, 8, [-1, 0, 0])])
def test_tree_parents_share_the_drafts_out_over_the_paths(q, paths, want):
    assert tsp.tree_parents(q, paths) == want


def test_tree_step_gives_each_token_the_logits_of_its_own_path(tiny):
    # every tree token's logits must be those of a plain forward over the context and its path alone:
    # a mask that let a token see a sibling branch, or a wrong position, changes them
    C, q = 5, 6
    parents = tsp.tree_parents(q, 2)          # root, then branches 1-2-3 and 4-5
    ids = torch.randint(0, 1000, (1, C + q), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        pre = tiny(input_ids=ids[:, :C], use_cache=True).past_key_values
    kv = [(layer.keys, layer.values) for layer in pre.layers]
    run = tsp._step(tiny, 1, q, C, "cpu", torch.float32, torch.Generator(), kv_layers=kv, ids=ids[:, C:],
                    parents=parents)
    out = run()
    for i in range(q):
        path, j = [], i
        while j >= 0:
            path.append(j)
            j = parents[j]
        seq = torch.cat([ids[:, :C], ids[:, C:][:, path[::-1]]], 1)
        with torch.inference_mode():
            ref = tiny(input_ids=seq).logits[0, -1]
        torch.testing.assert_close(out[0, i], ref, rtol=1e-4, atol=1e-4)
    chain = tsp._step(tiny, 1, q, C, "cpu", torch.float32, torch.Generator(), kv_layers=kv, ids=ids[:, C:])()
    assert not torch.allclose(chain[0, 4], out[0, 4], atol=1e-3)   # token 4 differs: it sees 0 only, not 1-3


def test_tree_rows_carry_both_times_and_their_ratio(tiny, monkeypatch):
    times = iter([2.0, 2.2, 4.0, 5.0])   # chain, tree per point with q >= 3; q = 1 has no tree

    def fake_time_ms(fn, device, *, repeats, warmup=1):
        fn()
        return [next(times)], "fake"

    monkeypatch.setattr(devices, "time_ms", fake_time_ms)
    rows, _ = tsp.measure(tiny, [1], [4, 9], [8], device="cpu", repeats=1, tree_paths=4)
    assert [(r["q"], r["ms"], r["tree_ms"], r["tree_paths"]) for r in rows] == [(4, 2.0, 2.2, 3), (9, 4.0, 5.0, 4)]
    assert tsp.tree_ratios(rows) == {"median": 1.175, "min": 1.1, "max": 1.25, "points": 2, "paths": [3, 4]}
    assert tsp.tree_ratios([{"ms": 1.0}]) is None
    with pytest.raises(UserError, match="--tree-paths"):
        tsp.check_grid([1], [1, 2], [0], 1, tree_paths=4)
    with pytest.raises(UserError, match="--tree-paths"):
        tsp.check_grid([1], [4], [0], 1, tree_paths=0)


@pytest.mark.parametrize("q, C, parents", [(1, 7, None), (4, 7, None), (6, 5, [-1, 0, 1, 2, 0, 4])])
def test_gqa_attention_gives_transformers_sdpa_logits(tiny, q, C, parents):
    # the profiler's attention (KV heads read once, query heads folded) against transformers' own
    # sdpa (KV heads repeated) on the same weights: decode, chain verify and tree verify
    ref = tsp.build_model(dict(TINY), "float32", "cpu", attention="sdpa")
    ref.load_state_dict(tiny.state_dict())
    assert tiny.config._attn_implementation == "samspec_gqa" and ref.config._attn_implementation == "sdpa"
    ids = torch.randint(0, 1000, (3, C + q), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        pre = ref(input_ids=ids[:, :C], use_cache=True).past_key_values
    kv = [(layer.keys, layer.values) for layer in pre.layers]
    out = [tsp._step(m, 3, q, C, "cpu", torch.float32, torch.Generator(), kv_layers=kv, ids=ids[:, C:],
                     parents=parents)() for m in (tiny, ref)]
    torch.testing.assert_close(out[0], out[1], rtol=1e-4, atol=1e-4)
    with torch.inference_mode():   # and a plain causal forward with no cache (no mask handed in)
        torch.testing.assert_close(tiny(input_ids=ids).logits, ref(input_ids=ids).logits, rtol=1e-4, atol=1e-4)
