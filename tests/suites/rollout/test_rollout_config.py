"""The rollout suite's contract (build_config / execute) and its small pure helpers: option
parsing, arms, the measured side's prediction error, the profile's --prompt-pad."""

import inspect

import click
import numpy as np
import pytest

from samspec_bench.errors import UserError
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout import config as rc
from samspec_bench.suites.rollout import measured as rm
from samspec_bench.suites.rollout.profile import padded, parse_prompt_pads

OUTPUT_OPTIONS = ("output", "json_path", "resume")


def _defaults(**over):
    """Every parameter of the click command at its click default (what `samspec-bench run` fills)."""
    params = {p.name: p.default for p in ro.command.params if p.name not in OUTPUT_OPTIONS}
    params.update(over)
    return params


def test_build_config_takes_every_command_parameter():
    names = {p.name for p in ro.command.params} - set(OUTPUT_OPTIONS)
    sig = inspect.signature(ro.build_config).parameters
    assert set(sig) == names and all(p.default is p.empty for p in sig.values())
    assert isinstance(ro.build_config(**_defaults(engine="reference")), ro.RolloutConfig)
    with pytest.raises(TypeError):
        ro.build_config(**{k: v for k, v in _defaults().items() if k != "seed"})   # no defaults of its own


def test_click_defaults_make_the_dataclass_defaults(shared_data):
    cfg = ro.build_config(**_defaults(data_dir=str(shared_data)))
    assert cfg.traces == str(shared_data / "traces" / "qwen25math_math_100x8.jsonl")
    assert cfg.tokenizer == str(shared_data / "tokenizers" / "qwen3")
    assert cfg == ro.RolloutConfig(traces=cfg.traces, tokenizer=cfg.tokenizer)
    # a measured engine needs no data directory (one that is not there is refused: unread_options)
    assert ro.build_config(**_defaults(engine="reference")).traces is None
    with pytest.raises(UserError, match="--data-dir /no/such/dir: no such directory"):
        ro.build_config(**_defaults(engine="reference", data_dir="/no/such/dir"))


def test_replay_with_model_uses_its_tokenizer(shared_data, tmp_path, monkeypatch):
    """--model on a replay picks the tokenizer (as accept does); without it the data directory's;
    a hub model that is not cached offline stops with one line naming it."""
    ckpt = shared_data / "tokenizers" / "qwen3"     # a local directory with tokenizer files
    cfg = ro.build_config(**_defaults(data_dir=str(shared_data), model=str(ckpt)))
    assert cfg.tokenizer == str(ckpt) and cfg.model == str(ckpt)
    assert ro.build_config(**_defaults(data_dir=str(shared_data), model=str(ckpt),
                                       tokenizer=str(tmp_path))).tokenizer == str(tmp_path)   # --tokenizer wins
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(UserError, match="Qwen/Qwen3-8B"):
        ro.build_config(**_defaults(data_dir=str(shared_data), model="Qwen3-8B"))


@pytest.mark.parametrize("over, match", [
    ({"arms": "off,sometimes"}, "--arms"),
    ({"spec_threshold": "4,x"}, "--spec-threshold"),
    ({"ks": "0"}, "-k"),
    ({"kv_capacity_tokens": 8, "block_size": 16}, "--kv-capacity-tokens"),
    ({"repeats": 0}, "--repeats"),
    ({"sources": "group", "engine": "vllm"}, "--sources group"),
    ({"engine": "sglang"}, "--engine"),
    ({"engine": "replay", "data_dir": "/no/such/dir"}, "data directory"),
])
def test_build_config_refuses_bad_options(over, match):
    with pytest.raises(UserError, match=match):
        ro.build_config(**_defaults(**{"engine": "reference", **over}))


def test_repeats_matter_only_to_measured_engines_and_a_replay_refuses_them(shared_data):
    assert ro.build_config(**_defaults(data_dir=str(shared_data))).repeats == 1
    with pytest.raises(UserError, match="--repeats 0 repeats a measured engine's runs; --engine replay simulates"):
        ro.build_config(**_defaults(data_dir=str(shared_data), repeats=0))


def test_execute_refuses_resume(tmp_path):
    with pytest.raises(UserError, match="--resume"):
        ro.execute(ro.RolloutConfig(), output=str(tmp_path), resume=str(tmp_path))
    assert not list(tmp_path.iterdir())


def test_command_is_a_group_with_profile():
    assert isinstance(ro.command, click.Group) and ro.command.name == ro.SUITE == "rollout"
    assert set(ro.command.commands) == {"profile"}


def test_arm_settings_and_tail_thresholds():
    cfg = ro.RolloutConfig(thresholds=[2, 8], ks=[3, 5], arms=["threshold"], tail_threshold=None)
    labels = [s["label"] for s in ro.arm_settings(cfg)]
    assert labels == ["off", "threshold<=2 k=3", "threshold<=8 k=3", "threshold<=2 k=5", "threshold<=8 k=5"]
    always = {"arm": "always", "k": 3, "threshold": None}
    assert rc.tail_threshold_for(always, cfg) == 2
    assert rc.tail_threshold_for(always, ro.RolloutConfig(tail_threshold=7)) == 7
    assert rc.tail_threshold_for({"arm": "threshold", "k": 3, "threshold": 8}, cfg) == 8
    assert rc.arm_policy({"arm": "threshold", "threshold": 8}).describe() == {"name": "threshold", "threshold": 8}


def test_a_combined_switch_with_a_threshold_part_is_an_arm_with_that_tail():
    cfg = ro.RolloutConfig(arms=["off"], strategies=["seed/threshold:4+enginecutoff:8:0.3", "seer/enginecutoff:8:0.3"])
    by = {s["label"]: s for s in ro.arm_settings(cfg)}   # int('4+enginecutoff:8:0.3') stopped the run, exit 3
    assert by["seed/threshold:4+enginecutoff:8:0.3"]["threshold"] == 4
    assert by["seer/enginecutoff:8:0.3"]["threshold"] is None


@pytest.mark.parametrize("over, match", [
    ({"strategy": "seer/cost"}, "without --step-model the replay counts decode steps"),   # ran as always
    ({"strategy": "seer/threshold:2+costk"}, "without --step-model"),
    ({"strategy": "seed/threshold:64"}, "threshold:64 speculates in every step"),
    ({"strategy": "seed/threshold:100+enginecutoff:8:0.3", "max_num_seqs": 16}, "threshold:100 speculates"),
    # seer drafts from its group, as --sources group, which these shards refuse (it ran as one index per group)
    ({"strategy": "seed,seer", "dp": 2, "dp_shard": "rebalance"}, "'seer' drafts from its group"),
    ({"strategy": "arctic@group+history", "dp": 2, "dp_shard": "agent-loop"}, "--dp-shard agent-loop --dp 2"),
])
def test_strategy_switches_that_would_run_as_another_arm_are_refused(shared_data, over, match):
    with pytest.raises(UserError, match=match):
        ro.build_config(**_defaults(data_dir=str(shared_data), **over))
    ok = ro.build_config(**_defaults(data_dir=str(shared_data), strategy="seer/cost,seed/threshold:63",
                                     step_model="roofline:hardware=H100,model=Qwen3-8B"))
    assert ok.strategies == ["seer/cost", "seed/threshold:63"]
    divided = ro.build_config(**_defaults(data_dir=str(shared_data), strategy="seer:divided=64,seer@own", dp=2,
                                          dp_shard="rebalance"))   # one queue, no shards; or no group
    assert divided.strategies == ["seer:divided=64", "seer@own"]


def test_kv_options_for_the_simulation_and_the_engines():
    assert rc.kv_options(ro.RolloutConfig()) == {}
    cfg = ro.RolloutConfig(kv_capacity_tokens=100, block_size=16)
    assert rc.kv_options(cfg) == {"kv_capacity_tokens": 100, "block_size": 16}
    assert rm.kv_engine_options(cfg) == {"num_blocks": 6, "block_size": 16}
    v = rm.engine_options(ro.RolloutConfig(engine="vllm", kv_capacity_tokens=100, block_size=16, ks=[3, 5]))
    assert v["num_spec_tokens"] == 5 and v["max_model_len"] == 80
    assert v["engine_args"]["num_gpu_blocks_override"] == 6


def test_prediction_error():
    m = {"total_s": 2.0, "tail_s": 0.0, "accepted": 10}
    e = rm.prediction_error(m, {"total_s": 3.0, "tail_s": 1.0, "accepted": 5})
    assert e == {"total": 0.5, "tail": None, "accepted": -0.5}
    assert rm.speedup_error(2.0, 3.0) == 0.5 and rm.speedup_error(None, 3.0) is None


def test_prompt_pads():
    assert parse_prompt_pads("0,256") == (0, 256) and parse_prompt_pads("") == (0,)
    for bad in ("x", "-1"):
        with pytest.raises(UserError, match="--prompt-pad"):
            parse_prompt_pads(bad)
    assert padded([1, 2, 3], 5) == [1, 2, 3, 1, 2, 1, 2, 3] and padded([7], 0) == [7]


def test_draw_lengths_follow_their_distributions():
    t = ro.draw_lengths("trace", 2000, 0, 1, 1000, trace_lengths=np.array([10, 20]))
    assert set(t) == {10, 20} and 0.45 < (t == 10).mean() < 0.55            # resampled uniformly
    # closed forms: Pareto(xm=5, alpha=2) has minimum 5 and median 5 * 2^(1/2); a lognormal's median is its MEDIAN
    p = ro.draw_lengths("pareto:5:2", 4000, 0, 1, 10 ** 6)
    assert p.min() == 5 and abs(np.median(p) - 5 * 2 ** 0.5) <= 0.5
    assert abs(np.median(ro.draw_lengths("lognormal:300:0.8", 4000, 0, 1, 10 ** 6)) / 300 - 1) < 0.05
    assert ro.draw_lengths("fixed:50", 3, 0, 1, 30).tolist() == [30, 30, 30]   # clipped to the maximum
    with pytest.raises(UserError):
        ro.draw_lengths("trace", 3, 0, 1, 10)
