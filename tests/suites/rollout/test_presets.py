"""`rollout --preset`: the seed's configurations (suites/rollout/presets.py) checked against
../shared/FACTS.md, explicit options over the preset, the prediction printed beside the
published figures, and the sensitivity table (suites/rollout/sensitivity.py)."""

import importlib
import inspect
import json
import re

import numpy as np
import pytest

from samspec_bench.bench.simulation.fitted_step_model import FEATURES, StepTimeModel
from samspec_bench.errors import UserError
from samspec_bench.reports.suite_headlines import SUITE_SUMMARIZERS
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout.config import RolloutConfig
from samspec_bench.suites.rollout.presets import DEFAULT_LENGTH_DIST, PRESETS, always_on_notes
from samspec_bench.suites.rollout.sensitivity import mixture_lengths

rcmd = importlib.import_module("samspec_bench.suites.rollout.command")   # the package exports the click group by that name


def _params(**over):
    takes = inspect.signature(ro.build_config).parameters   # the options build_config reads (not --output, ...)
    params = {p.name: p.default for p in ro.command.params if p.name in takes}
    params.update(over)
    return params


def _facts(shared_data) -> dict[str, str]:
    """The seed's bullet lines of FACTS.md, one string each, by model."""
    path = shared_data.parent / "FACTS.md"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    text = path.read_text(encoding="utf-8")
    sec = text[text.index("## The seed's rollout configurations"):]
    sec = sec[: sec.index("\n## ", 5)] if "\n## " in sec[5:] else sec
    items = [" ".join(b.split()) for b in re.split(r"\n- ", sec)[1:]]
    out = {}
    for it in items:
        key = ("seed-customer" if "customer" in it else "seed-qwen3-235b" if it.startswith("Qwen3-235B")
               else "seed-qwen3-32b" if it.startswith("Qwen3-32B") else "tail" if it.startswith("Long tail") else None)
        if key:
            out[key] = it
    out["header"] = sec.splitlines()[0]
    return out


def _num(pattern, text):
    m = re.search(pattern, text)
    assert m, (pattern, text)
    return [float(g.replace(",", "")) for g in m.groups()]


def test_preset_values_equal_facts(shared_data):
    facts = _facts(shared_data)
    assert _num(r"max response ([\d,]+)", facts["header"]) == [34816]
    assert "910C" in facts["header"] and "eager" in facts["header"]
    assert _num(r"([\d.]+)x over no speculation", facts["tail"]) == [1.35]
    checked = {}
    for name, p in PRESETS.items():
        if not name.startswith("seed-"):   # the anchors' presets: test_histospec_preset_is_the_papers_setting
            continue
        f = facts[name]
        checked[name] = 0
        assert p.max_response_len == 34816 and p.hardware == "910C" and p.mode == "eager"
        assert _num(r"gen(?: batch)? (\d+)", f) == [p.prompts], name
        assert _num(r"train(?: batch)? (\d+)", f) == [p.train_batch], name
        assert _num(r"max_num_seqs (\d+)", f) == [p.max_num_seqs], name
        assert _num(r"TP (\d+) on (\d+) dies", f) == [p.tp, p.dies], name
        assert _num(r"threshold (\d+)", f) == [p.threshold] and _num(r"\bk (\d+)", f) == [p.k], name
        assert p.dp == p.dies // p.tp and p.published["tail_speedup"] == 1.35
        pub = p.published
        for label, key in (("per-DP-round inference", "per_round_inference"),
                           ("per-step inference", "per_step_inference"), ("per step inference", "per_step_inference"),
                           ("step total", "step_total")):
            m = re.search(re.escape(label) + r" ([\d.]+) -> ([\d.]+) s \(-([\d.]+) %\)", f)
            if m:
                off, on, gain = map(float, m.groups())
                assert (pub[key]["off_s"], pub[key]["on_s"], pub[key]["gain_pct"]) == (off, on, gain), (name, label)
                checked[name] += 1
        for label, key in (("per round", "per_round_inference"), ("step total", "step_total")):
            m = re.search(re.escape(label) + r" -([\d.]+) %", f)
            if m:
                assert pub[key]["gain_pct"] == float(m.group(1)), (name, label)
                checked[name] += 1
    assert checked == {"seed-qwen3-32b": 3, "seed-qwen3-235b": 3, "seed-customer": 2}   # every published figure
    assert PRESETS["seed-qwen3-32b"].dp == 4 and PRESETS["seed-customer"].dp == 16 and PRESETS["seed-qwen3-235b"].dp == 32


def test_published_gain_is_off_over_on_minus_one():
    # the seed's "gain" is the speedup minus one, not the time saved: the stored times say so
    for p in PRESETS.values():
        for key, t in p.published.items():
            if isinstance(t, dict) and t.get("off_s"):
                assert 100 * (t["off_s"] / t["on_s"] - 1) == pytest.approx(t["gain_pct"], abs=0.006), (p.name, key)
                assert abs(100 * (1 - t["on_s"] / t["off_s"]) - t["gain_pct"]) > 0.3


def test_preset_fills_the_config_and_explicit_options_win(shared_data):
    cfg = ro.build_config(**_params(data_dir=str(shared_data), preset="seed-qwen3-32b"))
    p = PRESETS["seed-qwen3-32b"]
    assert (cfg.prompts, cfg.group_size, cfg.max_num_seqs, cfg.dp, cfg.thresholds, cfg.ks) == (96, 16, 128, 4, [8], [3])
    assert cfg.max_response_len == 34816 and cfg.max_num_batched_tokens == 2048 + 34816
    assert cfg.step_model == "roofline:hardware=910C,model=Qwen/Qwen3-32B,tp=8,mode=eager" == p.step_model
    assert cfg.model == "Qwen/Qwen3-32B" and cfg.length_dist == DEFAULT_LENGTH_DIST and cfg.sensitivity
    assert cfg.arms == ["off", "threshold"] and cfg.sources == "own" and cfg.preset == "seed-qwen3-32b"
    over = ro.build_config(**_params(data_dir=str(shared_data), preset="seed-qwen3-32b", max_num_seqs=7, dp=2,
                                     spec_threshold="2,3", ks="4", step_model="/x.json", prompts=8,
                                     length_dist="fixed:100", sensitivity=False, arms="off,always,threshold"))
    assert (over.max_num_seqs, over.dp, over.thresholds, over.ks, over.step_model, over.prompts) == \
        (7, 2, [2, 3], [4], "/x.json", 8)
    assert over.length_dist == "fixed:100" and over.sensitivity is False
    assert over.arms == ["off", "always", "threshold"]
    assert over.group_size == 16 and over.max_response_len == 34816     # the rest still the preset's
    # an explicit value equal to the generic default still wins over the preset
    assert ro.build_config(**_params(data_dir=str(shared_data), preset="seed-qwen3-32b", max_num_seqs=64)).max_num_seqs == 64
    # no preset: the generic defaults
    plain = ro.build_config(**_params(data_dir=str(shared_data)))
    assert (plain.max_num_seqs, plain.dp, plain.thresholds, plain.sensitivity) == (64, 1, [4], False)


@pytest.mark.parametrize("over, match", [
    ({"preset": "seed-qwen3-32b", "engine": "reference"}, "--preset"),
    ({"preset": "seed-nope"}, "--preset 'seed-nope'"),
    ({"sensitivity": True, "length_dist": "fixed:100"}, "--sensitivity"),
    ({"dp_shard": "random"}, "--dp-shard"),
    ({"sources": "group", "dp_shard": "rebalance", "dp": 2}, "cannot share a drafter"),
    ({"draws": 0}, "--draws 0"),
    ({"engine": "reference", "draws": 3}, "--draws with --engine reference"),
])
def test_bad_preset_inputs_are_user_errors(shared_data, over, match):
    with pytest.raises(UserError, match=match):
        ro.build_config(**_params(**{"data_dir": str(shared_data), **over}))


def test_overridden_names_only_the_settings_options_changed(shared_data):
    p = PRESETS["seed-qwen3-32b"]
    assert p.overridden(ro.build_config(**_params(data_dir=str(shared_data), preset=p.name))) == {}
    # prompts given as the preset has it: not a change
    cfg = ro.build_config(**_params(data_dir=str(shared_data), preset=p.name, max_num_seqs=64, ks="4,5", prompts=96))
    assert p.overridden(cfg) == {"max_num_seqs": {"ran": 64, "preset": 128}, "ks": {"ran": [4, 5], "preset": [3]}}


def test_unknown_preset_on_the_command_line_is_one_line(capsys):
    from samspec_bench.cli import main
    with pytest.raises(SystemExit) as e:
        main(["rollout", "--preset", "seed-nope"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert e.value.code == 2 and len(err) == 1 and "--preset" in err[0]


def test_mixture_lengths():
    x = mixture_lengths(500, 0.9, 0.2, 1000, 0, 4, 3000)
    assert (x == 3000).sum() == 200 and x.max() == 3000 and x.min() >= 4
    body = x[x < 3000]
    assert 400 < np.median(body) < 650
    y = mixture_lengths(500, 0.9, 0.0, 1000, 0, 4, 3000)
    assert (y < 3000).all()                      # 0 % truncated: the lognormal is redrawn below the maximum
    assert np.array_equal(y, mixture_lengths(500, 0.9, 0.0, 1000, 0, 4, 3000))
    with pytest.raises(ValueError):
        mixture_lengths(500, 0.9, 1.5, 10, 0, 4, 3000)


# ---------- a preset run end to end (a small workload; a profile JSON written here) ----------

def _profile(tmp_path):
    m = StepTimeModel(0.02, {f: 0.0 for f in FEATURES}, fit={"source": "written by the test"})
    m.coef.update(decode_tokens=1e-3, draft_tokens=8e-4, prefill_tokens=1e-4, context_tokens=1e-7, spec_requests=2e-4)
    return str(m.save(tmp_path / "profile.json"))


def test_a_threshold_not_written_at_or_above_max_num_seqs_is_said():
    """A preset's, a strategy's own or the default threshold at or above --max-num-seqs: the arm
    drafts every step, said in a note (a written one is refused by build_config)."""
    cfg = RolloutConfig(preset="seed-qwen3-32b", thresholds=[8], max_num_seqs=4, arms=["off", "threshold"])
    (note,) = always_on_notes(cfg)
    assert note.startswith("preset seed-qwen3-32b's threshold 8 >= --max-num-seqs 4: the switch never turns SAM off; "
                           "the arm threshold<=8 drafts every step")
    assert always_on_notes(RolloutConfig(preset="seed-qwen3-32b", thresholds=[8], max_num_seqs=9)) == []
    assert always_on_notes(RolloutConfig(thresholds=[8], max_num_seqs=4, arms=["off", "always"])) == []   # no such arm
    (a, b) = always_on_notes(RolloutConfig(max_num_seqs=4, strategies=["seed", "seer", "seed/threshold:2"]))
    assert a.startswith("the default threshold 4 >= --max-num-seqs 4") and "threshold<=4" in a
    assert b.startswith("strategy seed's threshold 8 >= --max-num-seqs 4") and "the arm seed drafts every step" in b


SMALL = ["--prompts", "8", "--group-size", "4", "--max-num-seqs", "6", "--length-dist", "lognormal:150:0.9",
         "--max-response-len", "800", "--max-num-batched-tokens", "4096"]


def _invoke(shared_data, out, *extra):
    from click.testing import CliRunner
    return CliRunner().invoke(ro.command, ["--preset", "seed-qwen3-32b", "--data-dir", str(shared_data), *SMALL,
                                           "--output", str(out), *extra])


def test_preset_run_prints_prediction_beside_published(shared_data, tmp_path):
    res = _invoke(shared_data, tmp_path / "run", "--step-model", _profile(tmp_path))
    assert res.exit_code == 0, res.output
    (run,) = list((tmp_path / "run").iterdir())
    result = json.loads((run / "result.json").read_text())
    cfg, met = result["config"], result["metrics"]
    assert (cfg["dp"], cfg["thresholds"], cfg["ks"], cfg["max_num_seqs"], cfg["prompts"]) == (4, [8], [3], 6, 8)
    # the small workload runs 6 at a time: the preset's threshold 8 never turns SAM off, and the run says so
    (note,) = met["notes"]
    assert note.startswith("preset seed-qwen3-32b's threshold 8 >= --max-num-seqs 6: the switch never turns SAM off")
    assert f"note: {note}" in res.output
    pre = met["preset"]
    p = PRESETS["seed-qwen3-32b"]
    assert pre["name"] == p.name and pre["published"]["per_round_inference"]["gain_pct"] == 10.02
    assert pre["inputs"]["length_dist"] == "lognormal:150:0.9" and pre["inputs"]["length_evidence"] == \
        "given with --length-dist"
    rows = {r["figure"]: r for r in pre["comparison"]["rows"]}
    arm = met["arms"][pre["comparison"]["arm"]]
    assert pre["comparison"]["arm"] == "threshold<=8 k=3"
    # five draws by default (seeds 0..4), the first one the shown draw: its own speedup is the spread's first value
    assert met["workload"]["draws"]["seeds"] == [0, 1, 2, 3, 4]
    so = arm["spread"]["speedup_overall"]
    assert so["n"] == 5 and so["values"][0] == arm["speedup_overall"] and len(set(so["values"])) > 1
    assert so["min"] <= so["median"] <= so["max"]
    gain = rows["per-step inference gain"]
    assert (gain["modelled"], gain["min"], gain["max"]) == pytest.approx(
        (100 * (so["median"] - 1), 100 * (so["min"] - 1), 100 * (so["max"] - 1)))
    assert gain["matched"] == (gain["min"] <= 9.64 <= gain["max"])
    if not gain["matched"]:   # the gap to the range's nearest end, modelled - published
        end = gain["min"] if 9.64 < gain["min"] else gain["max"]
        assert gain["gap"] == pytest.approx(end - 9.64)
    tail = rows["long-tail speedup"]
    assert tail["published"] == 1.35 and tail["modelled"] == arm["spread"]["speedup_tail"]["median"]
    share = rows["tail share of the off rollout"]
    assert share["modelled"] == pytest.approx(100 * arm["spread"]["baseline_tail_share"]["median"])
    assert "modelled" in pre["comparison"]["labels"] and "published" in pre["comparison"]["labels"]
    for word in ("MODELLED", "PUBLISHED", "prediction vs published", "+10.02 %", "1.35x", "instance 3:",
                 "median [min, max] over 5 draws", "what the prediction rests on (MODELLED",
                 "the prediction rests on: ", "KV cache (simulated, per instance): unlimited", "preemptions: off 0"):
        assert word in res.output, word
    line = next(ln for ln in res.output.splitlines() if ln.strip().startswith("per-step inference gain"))
    assert f"[{gain['min']:+.2f}, {gain['max']:+.2f}]" in line
    # the KV cache: a profile knows no device memory, so unlimited, and nothing preempted, as the arms count
    assert arm["kv"]["capacity_tokens"] is None and arm["kv"]["source"].startswith("unlimited")
    assert arm["kv"]["preemptions"] == arm["preemptions"] == 0
    sens = met["sensitivity"]
    groups = {r["assumption"] for r in sens["rows"]}
    assert groups == {"(the prediction)", "response lengths: median", "response lengths: sigma (spread)",
                      "response lengths: share at the maximum", "response lengths: alike in a group",
                      "response lengths: which run long",
                      "KV capacity", "DAPO generation rounds per step", "host overhead per step", "tail read as"}
    # drawn independent (the preset's default), so the one alike-row tries the traces' measured share
    (alike,) = [r for r in sens["rows"] if r["assumption"] == "response lengths: alike in a group"]
    measured = met["workload"]["length_group_share_traces"]
    assert met["workload"]["length_group_share"] == 0 and 0 < measured < 1
    assert alike["value"].startswith(f"{measured:.2f} (the traces'") and alike["how"].endswith(f"{measured:.2f}")
    assert sens["arm"] == "threshold<=8 k=3" and sens["seeds"] == [0, 1, 2]
    assert all(r["tail_share_pct"]["n"] == 3 for r in sens["rows"])
    assert sens["rests_on"]["tail_share"] in groups and sens["rests_on"]["tail_share"] != "tail read as"
    assert set(sens["rests_on"]["closest_to_published"]) == {"tail_share_pct", "gain_pct"}
    for f in ("sensitivity.png", "dp_running_vs_time.png", "running_vs_time.png"):
        assert (run / f).stat().st_size > 0
    # the report: the KV cache, the spread as each headline's range, the tail of a sharded run found
    heads = {h["name"]: h for h in SUITE_SUMMARIZERS["rollout"](result)[0]}
    assert heads["KV cache per instance (simulated), tokens"]["value"] == "unlimited"
    h = heads["preset seed-qwen3-32b: per-step inference gain (%; MODELLED median [min, max] over draws)"]
    assert h["value"] == gain["modelled"] and h["ci"] == [gain["min"], gain["max"]]
    tail_head = heads["threshold<=8 k=3: speedup in the long tail"]
    assert tail_head["ci"] == [tail["min"], tail["max"]] and "no tail phase" not in tail_head["note"]


def test_preset_step_model_is_its_roofline_spec(shared_data, tmp_path, monkeypatch, capsys):
    seen = []

    def stand_in(spec):   # a cheap model in place of the roofline one; the spec recorded
        seen.append(spec)
        return StepTimeModel.constant(0.05)

    monkeypatch.setattr(rcmd, "load_step_model", stand_in)
    res = _invoke(shared_data, tmp_path / "a", "--no-sensitivity", "--dp", "2")
    assert res.exit_code == 0, res.output
    assert seen == [PRESETS["seed-qwen3-32b"].step_model]
    (run,) = list((tmp_path / "a").iterdir())
    met = json.loads((run / "result.json").read_text())["metrics"]
    assert "sensitivity" not in met and met["workload"]["dp"]["instances"] == 2
    assert met["preset"]["inputs"]["step_model"] == PRESETS["seed-qwen3-32b"].step_model


# ---------- HistoSpec's setting (RhymeRL) ----------

def test_histospec_preset_is_the_papers_setting(shared_data):
    """The workload shape the paper published (FACTS.md, issue 31): Qwen3-14B, DAPO, max response
    8K, 256 prompts x 16 responses on 32 H100, up to 2.1x rollout; the rest is marked assumed."""
    p = PRESETS["histospec-qwen3-14b"]
    assert (p.model, p.hardware, p.prompts, p.group_size, p.max_response_len, p.tp * p.dp) == \
        ("Qwen/Qwen3-14B", "H100", 256, 16, 8192, 32)
    assert p.published == {"rollout_speedup_up_to": 2.1} and p.strategies == ("histospec",)
    assert "ASSUMED: TP 2" in p.notes[0] and p.length_evidence.startswith("ASSUMPTION")
    path = shared_data.parent / "FACTS.md"
    if path.is_file():
        line = " ".join(path.read_text(encoding="utf-8").split())
        m = re.search(r"up to ([\d.]+)x rollout, Qwen3-(\d+)B DAPO on (\d+) H100", line)
        assert m and (float(m.group(1)), int(m.group(2)), int(m.group(3))) == (2.1, 14, 32)
    cfg = ro.build_config(**_params(data_dir=str(shared_data), preset="histospec-qwen3-14b"))
    assert (cfg.prompts, cfg.group_size, cfg.dp, cfg.max_response_len, cfg.max_num_seqs) == (256, 16, 16, 8192, 1024)
    assert cfg.strategies == ["histospec"] and cfg.arms == ["off"] and cfg.length_dist == "lognormal:3500:0.6"
    assert cfg.step_model == "roofline:hardware=H100,model=Qwen/Qwen3-14B,tp=2,mode=graph"
    # an explicit --strategy replaces the preset's
    assert ro.build_config(**_params(data_dir=str(shared_data), preset="histospec-qwen3-14b",
                                     strategy="seed")).strategies == ["seed"]


def test_histospec_preset_compares_its_speedup_range_with_the_published_best_case(shared_data, tmp_path, monkeypatch):
    from click.testing import CliRunner
    monkeypatch.setattr(rcmd, "load_step_model", lambda spec: StepTimeModel.constant(0.05))
    res = CliRunner().invoke(ro.command, ["--preset", "histospec-qwen3-14b", "--data-dir", str(shared_data),
                                          "--prompts", "8", "--group-size", "4", "--dp", "2", "--max-num-seqs", "8",
                                          "--length-dist", "lognormal:150:0.6", "--max-response-len", "600",
                                          "--draws", "3", "--no-sensitivity", "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    met = json.loads((run / "result.json").read_text())["metrics"]
    cmp = met["preset"]["comparison"]
    assert cmp["arm"] == "histospec" and set(met["arms"]) == {"off", "histospec"}
    rows = {r["figure"]: r for r in cmp["rows"]}
    up = rows["rollout speed-up (published: up to)"]
    so = met["arms"]["histospec"]["spread"]["speedup_overall"]
    assert up["published"] == 2.1 and (up["modelled"], up["min"], up["max"]) == (so["median"], so["min"], so["max"])
    assert up["matched"] == (so["min"] <= 2.1 <= so["max"]) and up["draws"] == 3
    assert rows["long-tail speedup"]["published"] is None
    assert "RhymeRL" in cmp["labels"]["published"] and "strategies histospec" in res.output
    assert "note: published: Qwen3-14B" in res.output and "ASSUMED: TP 2" in res.output
