"""The rollout's terminal lines: a preset's header prints what ran, a setting an option changed
shown with the preset's published value beside it."""

from __future__ import annotations

import inspect

import pytest

from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout.lines import preset_lines
from samspec_bench.suites.rollout.presets import PRESETS



def _config(shared_data, **over):
    takes = inspect.signature(ro.build_config).parameters   # the options build_config reads (not --output, ...)
    params = {p.name: p.default for p in ro.command.params if p.name in takes}
    params.update(data_dir=str(shared_data), preset="seed-qwen3-32b", **over)
    return ro.build_config(**params)


def _summary(cfg) -> dict:
    """summary["preset"] as `rollout` hands it to the lines: the preset's describe(), what options
    changed, the run's inputs and a comparison (without rows)."""
    pre = PRESETS[cfg.preset]
    return {"arms": {}, "preset": {**pre.describe(), "overridden": pre.overridden(cfg), "published": pre.published,
                                   "comparison": {"preset": pre.name, "arm": "threshold<=8 k=3", "rows": []},
                                   "inputs": {"length_dist": cfg.length_dist, "length_evidence": "given with --length-dist",
                                              "traces": cfg.traces, "sources": cfg.sources, "dp_shard": cfg.dp_shard,
                                              "step_model": cfg.step_model, "priced_by_kind": "roofline",
                                              "kv_capacity_tokens": None}}}


def test_a_setting_an_option_changed_shows_the_run_and_the_preset(shared_data):
    cfg = _config(shared_data, max_num_seqs=64, ks="4", length_dist="lognormal:150:0.9", max_response_len=4096,
                  max_num_batched_tokens=4096, dp=2)
    lines = preset_lines(_summary(cfg))
    head = lines[0]
    assert head.startswith("preset seed-qwen3-32b: Qwen/Qwen3-32B on 910C (eager), TP 8 x DP 2 = 16 devices "
                           "(preset: DP 4 = 32 devices); 96 prompts x 16, max_num_seqs 64 (preset: 128), ")
    assert "threshold 8, k 4 (preset: 3), max response 4096 (preset: 34816)" in head
    assert any(ln.startswith("  inputs: lengths lognormal:150:0.9 (preset: lognormal:7400:0.9) (given with") for ln in lines)
    # a setting the header has no place for is listed on its own line
    assert "  options over the preset: --max-num-batched-tokens 4096 (preset: 36864)" in lines
    # the published figures are of the preset's setting: said before the comparison
    (note,) = [ln for ln in lines if "changed from the preset's" in ln]
    assert note.startswith("  note: --max-num-seqs, --max-num-batched-tokens, --max-response-len, -k, --dp changed")
    assert lines.index(note) < next(i for i, ln in enumerate(lines) if ln.startswith("prediction vs published"))


def test_a_strategy_in_place_of_the_presets_switch_says_what_it_replaced(shared_data):
    lines = preset_lines(_summary(_config(shared_data, strategy="seed")))
    assert "max_num_seqs 128, strategies seed (preset: threshold 8, k 3), max response 34816" in lines[0]
    assert "  options over the preset: --arms off (preset: off,threshold)" in lines


@pytest.mark.parametrize("over", [{}, {"max_num_seqs": 128}])
def test_the_presets_own_settings_are_printed_as_published(shared_data, over):
    lines = preset_lines(_summary(_config(shared_data, **over)))
    assert lines[0].endswith("TP 8 x DP 4 = 32 devices; 96 prompts x 16, max_num_seqs 128, threshold 8, k 3, "
                             "max response 34816")
    assert not any("(preset:" in ln or "options over the preset" in ln or "changed from" in ln for ln in lines)
