"""The rollout step of `samspec-bench run` (suites/run/rollout_plan.py): on the built-in trace its
replay is RL-shaped (many requests, a batch that fills then drains, long-tailed lengths), so the
off arm has a long tail; the profile measured before it covers the batches and the context the
replay prices; a config section still overrides the shape; a data directory keeps its traces'
lengths.

The trace here is shaped like the one the workload step writes (4 prompts x 4 samples, prompts
of 60-80 tokens, responses of 81-128 tokens, half of them cut at 128), in token ids."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from rich.console import Console

from samspec_bench.bench.simulation.fitted_step_model import FEATURES, StepTimeModel
from samspec_bench.data import load_tokenizer
from samspec_bench.models.checkpoints import resolve_tokenizer
from samspec_bench.suites.rollout import replay_arm
from samspec_bench.suites.rollout.config import arm_settings
from samspec_bench.suites.rollout.draws import draw_seeds
from samspec_bench.suites.rollout.phases import tail_mask
from samspec_bench.suites.rollout.profile import profile_document, write_profile
from samspec_bench.suites.run import command, plan, rollout_plan, steps
from samspec_bench.suites.run.config_options import merge, suite_command, suite_params
from samspec_bench.suites.run.plan import Ctx
from samspec_bench.workload import PROMPTS, question_ids

MODEL = "builtin:tiny-qwen3"
PROMPT_LENS = (72, 60, 67, 80)
RESPONSE_LENS = (81, 92, 93, 104, 111, 113, 115, 124) + (128,) * 8


def _workload(root: Path) -> dict:
    """A finished workload step's run folder (result.json and trace.jsonl) under root/w; the run state."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(16):
        g, s = divmod(i, 4)
        rows.append({"id": f"p{g:02d}-s{s:02d}", "group": f"p{g:02d}",
                     "prompt_ids": [int(x) for x in rng.integers(10, 400, PROMPT_LENS[g])],
                     "response_ids": [int(x) for x in rng.integers(10, 400, RESPONSE_LENS[(5 * i) % 16])]})
    w = root / "w"
    w.mkdir(parents=True)
    (w / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (w / "result.json").write_text(json.dumps({"trace": "trace.jsonl", "tokenizer": str(resolve_tokenizer(MODEL)),
                                               "metrics": {"total_tokens": 5000}}), encoding="utf-8")
    return {"steps": {"workload": {"status": "done", "run_dir": "w"}}, "threads": {"threads": 1}}


def _ctx(tmp_path, sections=None, data_dir=None) -> Ctx:
    return Ctx(out=tmp_path, model=MODEL, engine=None, data_dir=data_dir, sections=sections or {},
               state=_workload(tmp_path))


def _params(options: dict) -> dict:
    """The rollout's parameters from a plan's options, as `samspec-bench run` computes them."""
    return suite_params(suite_command("rollout"), "rollout", options)


def _draws(cfg, model):
    """Every arm of the replay on every draw of its lengths: [(draw's lengths, {arm: steps})]."""
    rep = replay_arm.prepare(cfg)
    out = []
    for seed in draw_seeds(cfg):
        sims, _ = replay_arm.simulate_seed(cfg, rep, arm_settings(cfg), seed, model)
        lengths, _ = replay_arm.draw(replace(cfg, seed=seed), rep)
        out.append((lengths, {lbl: r.steps for lbl, r in sims.items()}))
    return out


def _cpu_like() -> StepTimeModel:
    """Step times shaped like the built-in model's profile on a CPU: a fixed cost, a cost per
    request and per context token."""
    coef = {f: 0.0 for f in FEATURES}
    coef.update(running=0.009, prefill_tokens=0.004, draft_tokens=0.003, context_tokens=2e-5, speculative=0.05)
    return StepTimeModel(0.05, coef)


def test_the_planned_replay_has_a_long_tail(tmp_path):
    p = plan.plan_rollout(_ctx(tmp_path))
    assert any(n.startswith("ASSUMPTION (drawn, not measured)") for n in p.notes)   # the shape is stated as drawn
    cfg = rollout_plan.rollout_config(_params(p.options))
    assert cfg.length_dist is not None and len(draw_seeds(cfg)) > 1   # figures are spread over draws
    T = cfg.thresholds[0]
    for lengths, tables in _draws(cfg, _cpu_like()):
        requests = len(lengths)
        assert requests >= 3 * cfg.max_num_seqs                  # the batch fills, then drains
        # a long right tail, few at the limit
        assert np.percentile(lengths, 90) >= 2.5 * np.median(lengths)
        assert np.mean(lengths >= cfg.max_response_len) <= 0.05
        off = tables["off"]
        tail = tail_mask(off, T)
        assert tail.mean() > 0.25                                 # of its steps, at most T running, none waiting
        assert off["time_s"][tail].sum() > 0.10 * off["time_s"].sum()   # and of its modelled time
        # the threshold arm turns speculation on there
        assert tables[f"threshold<={T} k=3"]["speculative"].sum() > 0


def test_the_profile_covers_the_batches_and_context_the_replay_prices(tmp_path, monkeypatch):
    ctx = _ctx(tmp_path)
    p = plan.plan_rollout(ctx)
    params = _params(p.options)
    calls = []
    monkeypatch.setattr(rollout_plan, "quick_profile", lambda *a, **k: calls.append((a, k)))
    p.prepare(params)
    (args, kw), = calls
    grid = kw["grid"]
    cfg = rollout_plan.rollout_config(params)
    priced = [t for _, tables in _draws(cfg, StepTimeModel.constant(1.0)) for t in tables.values()]
    # the profile's requests: the built-in questions, cycled over the batch, the pad in front,
    # `tokens` generated (its last decode step attends over all but the last)
    tok = load_tokenizer(resolve_tokenizer(MODEL))
    qs = [len(question_ids(tok, q)) for q in PROMPTS]
    b, pad = max(grid["batch_sizes"]), max(grid["prompt_pads"])
    measured_context = sum(qs[i % len(qs)] + pad for i in range(b)) + b * (grid["tokens"] - 1)
    assert measured_context >= max(float(np.max(t["context_tokens"])) for t in priced)
    assert b >= max(int(np.max(t["num_running"])) for t in priced) and args[4] == b
    assert grid["pad_max_batch"] is None   # the pad on the largest batch too: that is where the context is
    assert kw["note"] and "samspec-bench run" in kw["note"]


def test_a_resumed_run_keeps_the_profile_it_measured_and_a_damaged_one_is_measured_again(tmp_path, monkeypatch):
    """The rollout step's kept draws were priced by the run's profile: a resume must not measure
    (and overwrite) it again, or the resumed rollout refuses the changed file."""
    p = plan.plan_rollout(_ctx(tmp_path))
    params = _params(p.options)
    path = Path(params["step_model"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_profile(path, profile_document(StepTimeModel.constant(0.01), [], {"engine": {"name": "reference"}, "grid": {}}))
    calls = []
    monkeypatch.setattr(rollout_plan, "quick_profile", lambda *a, **k: calls.append((a, k)))
    p.prepare(params)
    assert calls == []
    path.write_text("{ not a profile")
    p.prepare(params)
    assert len(calls) == 1


def test_a_profile_named_in_the_config_is_not_measured(tmp_path, monkeypatch):
    p = plan.plan_rollout(_ctx(tmp_path))
    calls = []
    monkeypatch.setattr(rollout_plan, "quick_profile", lambda *a, **k: calls.append((a, k)))
    p.prepare(_params({**p.options, "step-model": "mine.json"}))
    assert calls == []


def _run_rollout_step(ctx, monkeypatch) -> tuple[dict, dict]:
    """run_step on the rollout step with the suite and the profile stood in for: (the options the
    suite got, the grid the profile got)."""
    got: dict = {}
    monkeypatch.setattr(rollout_plan, "quick_profile", lambda *a, **k: got.update(grid=k["grid"], largest=a[4]))
    monkeypatch.setattr(steps, "run_suite", lambda module, cmd, name, options, *a: got.update(options=options) or 0)
    step = next(s for s in plan.STEPS if s.name == "rollout")
    steps.run_step(step, ctx, Console(file=io.StringIO()), 1, 1)
    return got["options"], got


def test_a_config_section_overrides_the_planned_shape(tmp_path, monkeypatch):
    section = {"length-dist": "fixed:40", "max-num-seqs": 8, "prompts": 4}
    options, got = _run_rollout_step(_ctx(tmp_path, {"rollout": section}), monkeypatch)
    assert {k: options[k] for k in section} == section
    assert options["group-size"] == rollout_plan.RL_SHAPE["group-size"]   # what the section leaves keeps the plan's
    # the profile follows the replay the section asks for: its largest batch is 8
    assert got["largest"] == 8 and max(got["grid"]["batch_sizes"]) == 8
    # spelled as the parameter, a section's key still replaces the plan's option
    assert merge(suite_command("rollout"), rollout_plan.RL_SHAPE, {"length_dist": "trace"}) == {
        **{k: v for k, v in rollout_plan.RL_SHAPE.items() if k != "length-dist"}, "length_dist": "trace"}


def test_a_data_directory_keeps_its_traces_lengths(tmp_path):
    p = plan.plan_rollout(_ctx(tmp_path, data_dir=tmp_path))
    assert not set(rollout_plan.RL_SHAPE) & set(p.options)
    assert p.options["data-dir"] == str(tmp_path) and p.prepare is not None
    assert any("the traces' own" in n for n in p.notes)


def test_a_measured_engine_profiles_itself(tmp_path):
    ctx = _ctx(tmp_path)
    ctx.engine = "reference"
    assert plan.plan_rollout(ctx).prepare is None


def test_the_notes_print_as_text_in_the_runs_summary(tmp_path, monkeypatch):
    """The shape's ASSUMPTION says "median [min, max]": the summary table prints it, not as markup."""
    note = plan.plan_rollout(_ctx(tmp_path)).notes[1]
    out = io.StringIO()
    state = {"steps": {"rollout": {"status": "done", "notes": [note]}}}
    monkeypatch.setattr(command, "collect", lambda paths: SimpleNamespace(runs=[], unreadable=[]))
    command._print_summary(state, Console(file=out, width=4000), tmp_path / "report.html")
    assert "median [min, max] over the draws" in note and "median [min, max] over the draws" in out.getvalue()
