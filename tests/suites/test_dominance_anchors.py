"""`samspec-bench dominance --anchors` (suites/dominance_anchors.py): the row logic on planted
figures, the budget handed to the default, and the command's run folder, resume and gate on a
small slice of a shared trace."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from samspec_bench.cli import group
from samspec_bench.data import load_tokenizer
from samspec_bench.errors import UserError
from samspec_bench.results import load_result
from samspec_bench.sam.draft_length import parse_length
from samspec_bench.suites import dominance_anchors as anchors
from trace_fixtures import grouped_rows, write_verl_dump

GRPO = "qwen25math_math_100x8.jsonl"


def _m(tokens, drafted):
    return {"tokens_per_step": tokens, "drafted_per_step": drafted, "acceptance_rate": 0.5, "steps": 10}


def test_versus_needs_both_at_least_the_tokens_and_at_most_the_drafts():
    anchor = _m(1.5, 2.0)
    assert anchors.versus(anchor, _m(1.5, 2.0))["dominates"]
    assert not anchors.versus(anchor, _m(1.6, 2.01))["dominates"]   # more tokens, but more drafts
    assert not anchors.versus(anchor, _m(1.49, 1.0))["dominates"]   # fewer drafts, fewer tokens
    v = anchors.versus(anchor, _m(1.625, 1.5))
    assert v["dominates"] and v["tokens_per_step"] == pytest.approx(0.125) and v["drafted_per_step"] == -0.5
    assert anchors.versus(anchor, None) == {"dominates": False, "tokens_per_step": None, "drafted_per_step": None}


def _steps(m0, m1):
    """Pooled figures are not read for the budget: only each RL step's."""
    return {**_m(1.6, 1.75), "by_step": {"0": m0, "1": m1}}


def test_a_cell_budgets_the_default_per_rl_step_at_the_anchors_drafts_on_its_sources():
    """A stub replay: the anchor drafts 0.5 per step in RL step 0 (no history yet) and 3.0 in
    step 1; the default's plain arm runs once per (k, sources, window) and the budgeted arm is
    one job per step with exactly the anchor's figure of that step; a step where the anchor
    drafted nothing gets a budget that never holds a token."""
    seen = []

    def replay(jobs, window):
        seen.append((jobs, window))
        (dc, step), *rest = jobs
        length = dict(dc.options).get("length")
        if dc.strategy and not dc.strategy.startswith("evidence"):
            return _steps(_m(1.2, 0.5), _m(2.0, 3.0))
        if length is None:
            return _m(1.55, 1.0)    # the default: fewer drafts, fewer tokens
        return _m(1.7, 1.74)
    defaults: dict = {}
    row = anchors.anchor_cell([], "histospec", 3, replay, defaults, budget_scope="step")
    assert row["sources"] == "history" and row["budget"] == 1.75 and row["budget_by_step"] == {"0": 0.5, "1": 3.0}
    budgeted_jobs = seen[2][0]
    assert [(step, parse_length(dict(dc.options)["length"]).budget) for dc, step in budgeted_jobs] == [(0, 0.5), (1, 3.0)]
    assert not row["default_vs_anchor"]["dominates"] and row["budgeted_vs_anchor"]["dominates"]
    assert [all(dc.history and not dc.group for dc, _ in jobs) for jobs, _ in seen] == [True, True, True]
    assert [step for _, step in seen[0][0]] == [None] and [step for _, step in seen[1][0]] == [None]
    anchors.anchor_cell([], "das", 3, replay, defaults, budget_scope="step")
    assert seen[3][1] == 4 and len(seen) == 6   # das's window 4: a default of its own
    anchors.anchor_cell([], "histospec", 3, replay, defaults, budget_scope="step")
    assert len(seen) == 8   # the default at (3, history, 16) was kept
    assert anchors.step_budgets(_steps(_m(1.0, 0.0), {**_m(1.0, 2.0), "steps": 0})) == {0: anchors.NO_DRAFTS}


def _stub_replay(seen: list, default: dict):
    """A replay stub: the anchor drafts 0.5 per step in RL step 0 and 3.0 in step 1 (pooled 1.75);
    any default arm gets `default`; every call's jobs are kept in `seen`."""
    def replay(jobs, window):
        seen.append(jobs)
        dc = jobs[0][0]
        if dc.strategy and not dc.strategy.startswith("evidence"):
            return _steps(_m(1.2, 0.5), _m(2.0, 3.0))
        return default
    return replay


def test_scope_run_budgets_one_job_over_every_step_at_the_pooled_rate_in_a_pool_of_its_own():
    """Scope run: the anchor's POOLED drafted tokens per step, one job over every RL
    step, a pool name no other arm shares (no credit carries from one cell to the next)."""
    seen: list = []
    replay = _stub_replay(seen, _m(1.7, 1.74))
    row = anchors.anchor_cell([], "histospec", 3, replay, {}, budget_scope="run")
    assert row["budget_scope"] == "run" and row["budget_by_step"] is None and row["budget"] == 1.75
    ((dc, step),) = seen[2]
    first = parse_length(dict(dc.options)["length"])
    assert step is None and first.budget == 1.75 and first.pool and dc.history
    anchors.anchor_cell([], "histospec", 3, replay, {}, budget_scope="run")
    assert parse_length(dict(seen[-1][0][0].options)["length"]).pool != first.pool
    assert row["budgeted_vs_anchor"]["dominates"]


def test_scope_step_and_run_keeps_the_step_budgets_under_one_ceiling_at_the_pooled_rate():
    """Scope step+run: one job per RL step at that step's rate, all in one pool whose ceiling is
    the anchor's POOLED rate; another cell gets a pool of its own."""
    seen: list = []
    replay = _stub_replay(seen, _m(1.7, 1.74))
    row = anchors.anchor_cell([], "histospec", 3, replay, {}, budget_scope="step+run")
    assert row["budget_scope"] == "step+run" and row["budget_by_step"] == {"0": 0.5, "1": 3.0}
    pols = [(step, parse_length(dict(dc.options)["length"])) for dc, step in seen[2]]
    assert [(step, p.budget, p.ceiling) for step, p in pols] == [(0, 0.5, 1.75), (1, 3.0, 1.75)]
    assert pols[0][1].pool and pols[0][1].pool == pols[1][1].pool
    assert [p.bucket for _, p in pols] == [0, 0]   # the step budgets pace, the ceiling caps
    anchors.anchor_cell([], "histospec", 3, replay, {}, budget_scope="step+run")
    assert parse_length(dict(seen[-1][0][0].options)["length"]).pool != pols[0][1].pool
    anchors.anchor_cell([], "histospec", 3, replay, {}, "bucket=1", budget_scope="step+run")
    assert parse_length(dict(seen[-1][0][0].options)["length"]).bucket == 1   # the user's option wins


def test_every_step_reads_each_rl_step_on_its_own():
    # pooled over both steps the other policy drafts more (it weighs step 1 more), yet it
    # dominates in each step: the pooled and the per-step verdicts differ (Simpson's paradox)
    anchor = {**_m(1.6, 1.68), "by_step": {"0": _m(1.40, 1.412), "1": {**_m(2.0, 2.0007), "steps": 10}}}
    other = {**_m(1.7, 1.6792), "by_step": {"0": _m(1.41, 1.4105), "1": {**_m(2.01, 1.9993), "steps": 20}}}
    assert anchors.every_step(anchor, other) is True
    worse = {**other, "by_step": {**other["by_step"], "1": _m(1.99, 1.9)}}
    assert anchors.every_step(anchor, worse) is False
    assert anchors.every_step(anchor, {"tokens_per_step": 2.0}) is None and anchors.every_step(anchor, None) is None


def test_a_row_that_loses_a_step_shows_each_step():
    anchor = {**_m(1.6, 1.68), "by_step": {"10": _m(2.0, 2.0), "2": _m(1.4, 1.4)}}
    budgeted = {**_m(1.61, 1.67), "by_step": {"10": _m(1.99, 1.9), "2": _m(1.45, 1.4)}}
    row = {"trace": "t", "k": 3, "anchor": "arctic", "sources": "group+history", "anchor_metrics": anchor,
           "default": None, "default_vs_anchor": anchors.versus(anchor, None), "budgeted": budgeted,
           "budgeted_vs_anchor": anchors.versus(anchor, budgeted), "budgeted_every_step": False}
    first, second = anchors.fmt_row(row).split("\n")
    assert "budgeted 1.610 / 1.670 +0.0100 / -0.010 yes" in first
    # steps in numeric order (2 before 10), each budgeted minus anchor and its verdict
    assert second.endswith("2 +0.0500 / +0.000 yes; 10 -0.0100 / -0.100 no")
    assert "\n" not in anchors.fmt_row({**row, "budgeted_every_step": True})


def _invoke(*args):
    return CliRunner().invoke(group, ["dominance", "--anchors", *map(str, args)])


@pytest.mark.slow
def test_anchors_run_folder_resume_and_gate(traces_dir, qwen3_tokenizer_dir, tmp_path, monkeypatch):
    args = ("--traces", traces_dir / GRPO, "--tokenizer", qwen3_tokenizer_dir, "-k", "2", "--limit-groups", "1",
            "--output", tmp_path / "runs")
    res = _invoke(*args)
    (run,) = list((tmp_path / "runs").iterdir())
    result = load_result(run)
    rows = result["rows"]
    assert [r["anchor"] for r in rows] == list(anchors.ANCHORS)
    for r in rows:
        assert r["budgeted"]["drafted_per_step"] <= r["anchor_metrics"]["drafted_per_step"]   # the hard cap
        assert r["budget"] == r["anchor_metrics"]["drafted_per_step"]
    budgeted = sum(r["budgeted_vs_anchor"]["dominates"] for r in rows)
    assert result["metrics"]["budgeted_dominated_cells"] == budgeted
    assert res.exit_code == (0 if budgeted == len(rows) else 1)
    # resume: every cell kept, nothing replayed again
    monkeypatch.setattr(anchors, "anchor_cell", lambda *a, **kw: pytest.fail("a finished cell replayed"))
    res2 = _invoke(*args, "--resume", run)
    assert res2.output.count("(kept)") == len(rows)


def test_anchors_refuse_options_of_the_arctic_comparison(tmp_path):
    res = _invoke("--figure", tmp_path / "f.png", "--output", tmp_path / "runs")
    assert isinstance(res.exception, UserError) and "--anchors" in str(res.exception)


def test_budget_options_reach_the_budgeted_default_and_bad_ones_are_refused(tmp_path):
    seen: list = []
    replay = _stub_replay(seen, _m(1.5, 1.0))
    anchors.anchor_cell([], "seed", 3, replay, {}, "windup=0.5", budget_scope="step")
    budgeted = [parse_length(dict(dc.options)["length"]) for dc, _ in seen[2]]
    assert [(p.budget, p.windup) for p in budgeted] == [(0.5, 0.5), (3.0, 0.5)]
    anchors.anchor_cell([], "seed", 3, replay, {}, "windup=0.5", budget_scope="run")   # the options and a pool
    (run,) = [parse_length(dict(dc.options)["length"]) for dc, _ in seen[-1]]
    assert (run.budget, run.windup) == (1.75, 0.5) and run.pool
    res = _invoke("--budget-options", "windup=1.5", "--output", tmp_path / "runs")
    assert isinstance(res.exception, UserError) and "windup" in str(res.exception)
    for opt in ("pool=mine", "pool=mine,ceiling=1"):
        res = _invoke("--budget-options", opt, "--output", tmp_path / "runs")
        assert isinstance(res.exception, UserError) and "--budget-scope" in str(res.exception)
    for scope in ("step", "run"):   # a budget that only paces needs step+run's cap
        res = _invoke("--budget-options", "bucket=0", "--budget-scope", scope, "--output", tmp_path / "runs")
        assert isinstance(res.exception, UserError) and "step+run" in str(res.exception), res.output
        assert "\n" not in str(res.exception)
    res = _invoke("--budget-options", "bucket=2", "--output", tmp_path / "runs")
    assert isinstance(res.exception, UserError) and "bucket" in str(res.exception)
    res = CliRunner().invoke(group, ["dominance", "--budget-options", "windup=0.5", "--output", str(tmp_path / "r")])
    assert isinstance(res.exception, UserError) and "add --anchors" in str(res.exception)
    for extra in (["--budget-scope", "run"], ["--costs", "0.1,0.2"]):   # options that would be ignored
        res = CliRunner().invoke(group, ["dominance", *extra, "--output", str(tmp_path / "r")])
        assert isinstance(res.exception, UserError) and "drop it" in str(res.exception), res.output
        assert ("add --anchors" if extra[0] == "--budget-scope" else "add --figure") in str(res.exception)


@pytest.mark.slow
def test_anchors_read_a_verl_rollout_folder_as_accept_does(traces_dir, qwen3_tokenizer_dir, tmp_path):
    """verl's trainer.rollout_data_dir: one file per RL step, `input` / `output` / `step`. With
    --anchors the folder is read as accept reads it, its steps are the RL steps (history from the
    earlier ones) and the step+run budget covers each step; without --anchors it is refused."""
    import json as _json
    rows = [_json.loads(x) for x in (traces_dir / GRPO).read_text(encoding="utf-8").splitlines()[:8]]
    folder = tmp_path / "rollout_data"
    folder.mkdir()
    for step, pair in ((1, rows[:3]), (2, rows[3:6]), (3, rows[6:8])):
        (folder / f"{step}.jsonl").write_text("".join(_json.dumps({"input": r["prompt"], "output": r["response"],
                                                                   "score": 0.0, "step": step}) + "\n"
                                                      for r in pair), encoding="utf-8")
    res = _invoke("--traces", folder, "--tokenizer", qwen3_tokenizer_dir, "-k", "2", "--output", tmp_path / "runs",
                  "--json", tmp_path / "r.json")
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    result = _json.loads((tmp_path / "r.json").read_text())
    histospec = next(r for r in result["rows"] if r["anchor"] == "histospec")
    assert sorted(histospec["budget_by_step"], key=int) == ["1", "2", "3"]
    assert histospec["budgeted"]["drafted_per_step"] <= histospec["anchor_metrics"]["drafted_per_step"]
    from samspec_bench.sam.drafters import arctic_available
    res = CliRunner().invoke(group, ["dominance", "--traces", str(folder), "-k", "3", "--output", str(tmp_path / "x"),
                                     "--json", str(tmp_path / "plain.json")])
    # without --anchors the folder is read the same way, for the plain cells (SAM against Arctic's
    # suffix decoding; where arctic-inference is missing, that is said first)
    if arctic_available():
        assert res.exit_code in (0, 1), res.output
        cells = _json.loads((tmp_path / "plain.json").read_text())["tables"]["cells"]
        assert {c["source"] for c in cells} >= {"own"} and all(c["k"] == 3 for c in cells)
    else:
        assert isinstance(res.exception, UserError) and "arctic-inference" in str(res.exception)


def test_an_unknown_trace_format_sends_no_one_to_an_option_dominance_lacks(tmp_path, qwen3_tokenizer_dir):
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "a", "answer": "b"}\n')
    with pytest.raises(UserError, match="not a known trace format") as e:
        anchors.load_items(qa, str(qwen3_tokenizer_dir), None)
    assert "--trace-format" not in str(e.value)


def test_the_reader_hands_the_whole_reading_once_and_each_cell_its_counts(traces_dir, qwen3_tokenizer_dir,
                                                                          tmp_path):
    """trace_reader: the cells get the reading's counts only, `on_read` the whole reading (what
    --limit-groups kept at each RL step among it), said on the terminal."""
    d = tmp_path / "rollout_data_dir"
    write_verl_dump(d, load_tokenizer(qwen3_tokenizer_dir), grouped_rows(traces_dir / GRPO, 4), batch=2, n=2,
                    epochs=2)   # steps 1-4, every prompt in two of them
    said, whole = [], {}
    read = anchors.trace_reader(str(qwen3_tokenizer_dir), 1, True, said.append,
                                lambda path, counts: whole.setdefault(path, counts))
    items, counts = read(d)
    assert set(counts) == set(anchors.CELL_COUNTS) and counts["responses"] == len(items)
    limit = whole[d]["limit"]
    assert (limit["groups"], sorted(limit["by_step"], key=int)) == (1, ["1", "2", "3", "4"])
    assert sum(c["kept"] for c in limit["by_step"].values()) == len({(it.step, it.group) for it in items}) >= 4
    assert all(c["of"] == 2 for c in limit["by_step"].values())
    assert any(line.startswith("  --limit-groups 1: the same prompts at every RL step") for line in said), said
