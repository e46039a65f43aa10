"""The dominance benchmark: its cells (bench/draft_dominance.py) and the `samspec-bench dominance`
command (suites/dominance.py: run folder, resume per cell, figure, gate exit code, report).

Most tests stand a fixed-length SAM in for Arctic's suffix drafter (arctic-inference is not
installed everywhere): the suffix figures must then equal sam-fixed's, which the replay computes
separately. The tests marked `arctic` replay the real suffix drafter."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from samspec_bench.bench import draft_dominance
from samspec_bench.cli import group
from samspec_bench.data import load_tokenizer
from samspec_bench.errors import UserError
from samspec_bench.reports.collect import collect
from samspec_bench.results import load_result
from samspec_bench.sam.draft_length import EvidenceLength
from samspec_bench.sam.drafters import SamDrafter, arctic_available
from samspec_bench.suites import dominance
from samspec_bench.suites import dominance_anchors as anchors
from trace_fixtures import grouped_rows, write_verl_dump

arctic = pytest.mark.skipif(not arctic_available(), reason="needs arctic-inference (the 'suffix' drafter)")
GRPO, SOLO = "qwen25math_math_100x8.jsonl", "tora70b_gsm8k.jsonl"


@pytest.fixture
def stand_in(monkeypatch):
    """Arctic's drafter replaced by SAM's fixed-length baseline (same group sharing); the replays
    are counted per cell."""
    monkeypatch.setattr(draft_dominance, "ArcticSuffixDrafter",
                        lambda share_finished: SamDrafter(group_sharing=share_finished, length="fixed"))
    monkeypatch.setattr(dominance, "arctic_available", lambda: True)
    calls = []
    inner = draft_dominance.replay_cell
    monkeypatch.setattr(draft_dominance, "replay_cell", lambda items, k, source, *a: calls.append((k, source))
                        or inner(items, k, source, *a))
    return calls


def _invoke(*args):
    return CliRunner().invoke(group, ["dominance", *map(str, args)])


def _reader(tokenizer, limit):
    """The suite's reading of a trace (suites/dominance_anchors.read_trace), as the command hands it on."""
    return lambda path: anchors.read_trace(path, str(tokenizer), limit, history=False)


def test_cells_run_folder_gate_and_report(stand_in, traces_dir, qwen3_tokenizer_dir, tmp_path):
    res = _invoke("--traces", traces_dir / GRPO, "--traces", traces_dir / SOLO, "--tokenizer", qwen3_tokenizer_dir,
                  "-k", "2", "--limit-groups", "1", "--output", tmp_path / "runs", "--json", tmp_path / "d.json")
    (run,) = list((tmp_path / "runs").iterdir())
    result = load_result(run)
    rows = result["rows"]
    # the GRPO trace has both sources; the trace without groups only its own
    assert [(r["trace"], r["source"]) for r in rows] == [(GRPO, "own"), (GRPO, "group"), (SOLO, "own")]
    assert "no GRPO groups" in res.output
    for r in rows:
        assert r["suffix"] == r["sam_fixed"]   # the stand-in is sam-fixed
        assert r["dominates"] == (r["sam"]["tokens_per_step"] >= r["sam_fixed"]["tokens_per_step"]
                                  and r["sam"]["drafted_per_step"] <= r["sam_fixed"]["drafted_per_step"])
    passed = sum(r["dominates"] for r in rows)
    m = result["metrics"]
    assert (m["cells"], m["dominated_cells"], m["share_stats"]) == (3, passed, True)
    assert m["sam_policy"]["spec"] == EvidenceLength().spec() == "evidence"
    assert res.exit_code == (0 if passed == 3 else 1), res.output   # exit 1: the gate failed
    assert json.loads((tmp_path / "d.json").read_text())["metrics"] == m
    assert [c["source"] for c in result["tables"]["cells"]] == ["own", "group", "own"]
    (grp,) = collect([run]).groups
    assert grp.suite == "dominance"
    (g,) = grp.runs[0].gates
    assert g["passed"] is (passed == 3) and g["value"] == passed and g["threshold"] == 3


def test_resume_replays_only_the_missing_cells(stand_in, traces_dir, qwen3_tokenizer_dir, tmp_path):
    args = ["--traces", traces_dir / GRPO, "--tokenizer", qwen3_tokenizer_dir, "-k", "2,3", "--limit-groups", "1"]
    _invoke(*args, "--output", tmp_path / "runs")
    assert stand_in == [(2, "own"), (2, "group"), (3, "own"), (3, "group")]
    (run,) = list((tmp_path / "runs").iterdir())
    first = load_result(run)["rows"]
    cells = run / dominance.CELLS_FILE
    lines = cells.read_text().splitlines()
    cells.write_text("\n".join(lines[:2]) + "\n" + lines[2][:20])   # interrupted: two whole cells, one torn
    stand_in.clear()
    _invoke(*args, "--resume", run)
    assert stand_in == [(3, "own"), (3, "group")]
    assert load_result(run)["rows"] == first
    res = _invoke(*args[:-2], "--limit-groups", "2", "--resume", run)
    assert isinstance(res.exception, UserError) and "limit_groups = 1, this call 2" in str(res.exception)


def test_figure_curves_in_the_run_folder(stand_in, traces_dir, qwen3_tokenizer_dir, tmp_path):
    fig = tmp_path / "pareto.png"
    _invoke("--traces", traces_dir / GRPO, "--tokenizer", qwen3_tokenizer_dir, "-k", "2", "--limit-groups", "1",
            "--figure", fig, "--costs", "0.1,0.6", "--output", tmp_path / "runs")
    (run,) = list((tmp_path / "runs").iterdir())
    result = load_result(run)
    assert result["figures"] == ["pareto.png"]
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" == (run / "pareto.png").read_bytes()[:8]
    for r in result["rows"]:
        sam, fixed = r["curves"]["sam"], r["curves"]["sam_fixed"]
        assert [p["cost"] for p in sam] == [0.1, 0.6]
        assert sam[1]["drafted_per_step"] < sam[0]["drafted_per_step"]   # a dearer verify token: fewer drafted
        assert [p["k"] for p in fixed] == [1, 2]
        # the curve's last point replays the table's sam-fixed configuration
        assert fixed[-1]["tokens_per_step"] == r["sam_fixed"]["tokens_per_step"]


@pytest.mark.parametrize("args, says", [
    (["--figure", "f.png", "--costs", "0.2,1.5"], "--costs 0.2,1.5"),
    (["--sam-length", "evidence:cost=2"], "evidence:cost=2"),
    (["-k", "0"], "-k '0'"),
    (["--traces", "none.jsonl"], "--traces none.jsonl: no such file"),
    (["--dev-share", "1"], "--dev-share 1.0: give the dev side's share"),
    (["--dev-share", "0.2", "--anchors"], "--dev-share 0.2: the held-out side is reported against Arctic"),
])
def test_bad_options_stop_before_any_replay(stand_in, tmp_path, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    res = _invoke(*args, "--output", tmp_path / "runs")
    assert isinstance(res.exception, UserError) and says in str(res.exception)   # the CLI exits 2
    assert stand_in == [] and not (tmp_path / "runs").exists()


def test_without_arctic_the_command_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setattr(dominance, "arctic_available", lambda: False)
    res = _invoke("--output", tmp_path / "runs")
    assert isinstance(res.exception, UserError) and "pip install arctic-inference" in str(res.exception)


def test_shared_stats_change_only_the_corrected_policy(stand_in, traces_dir, qwen3_tokenizer_dir, tmp_path):
    """Sharing (the default) carries acceptance statistics across replay units, never draft content:
    a policy without the per-token correction replays the same either way; the command's
    --no-share-stats runs the unshared replay."""
    def sam(spec, share):
        rows = draft_dominance.run([traces_dir / GRPO], _reader(qwen3_tokenizer_dir, 1), [2], spec,
                                   progress=lambda s: None, share_stats=share)
        return [(r["sam"]["tokens_per_step"], r["sam"]["drafted_per_step"]) for r in rows]
    assert sam("evidence:tokens=0,shape=0", True) == sam("evidence:tokens=0,shape=0", False)
    shared, fresh = sam("evidence:tokens=2", True), sam("evidence:tokens=2", False)
    assert shared != fresh
    res = _invoke("--traces", traces_dir / GRPO, "--tokenizer", qwen3_tokenizer_dir, "-k", "2", "--limit-groups",
                  "1", "--no-share-stats", "--sam-length", "evidence:tokens=2", "--output", tmp_path / "runs")
    assert "a fresh record per replay unit" in res.output
    (run,) = list((tmp_path / "runs").iterdir())
    result = load_result(run)
    assert result["metrics"]["share_stats"] is False
    assert [(r["sam"]["tokens_per_step"], r["sam"]["drafted_per_step"]) for r in result["rows"]] == fresh


@arctic
def test_real_suffix_drafter_cells(traces_dir, qwen3_tokenizer_dir):
    """With arctic-inference: Arctic's drafter is not SAM's fixed baseline (its figures differ
    somewhere), and the gate follows the rule."""
    rows = draft_dominance.run([traces_dir / GRPO], _reader(qwen3_tokenizer_dir, 1), [2, 8], "evidence",
                               progress=lambda s: None)
    assert [(r["k"], r["source"]) for r in rows] == [(2, "own"), (2, "group"), (8, "own"), (8, "group")]
    assert any(r["suffix"] != r["sam_fixed"] for r in rows)
    for r in rows:
        assert r["dominates"] == (r["sam"]["tokens_per_step"] >= r["suffix"]["tokens_per_step"]
                                  and r["sam"]["drafted_per_step"] <= r["suffix"]["drafted_per_step"])


def test_group_units_do_not_cross_rl_steps(stand_in, traces_dir, qwen3_tokenizer_dir, tmp_path):
    """A verl folder's group field is the prompt, which comes back in later RL steps: the group
    source's siblings are the responses of one step (as the replay engine keys groups), never a
    later step's. With one response per prompt and step there are no GRPO groups at all."""
    d = tmp_path / "rollout_data_dir"
    write_verl_dump(d, load_tokenizer(qwen3_tokenizer_dir), grouped_rows(traces_dir / GRPO, 2), batch=2, n=1,
                    epochs=3)   # steps 1-3, both prompts in every step, one response each
    said = []
    rows = draft_dominance.run([d], _reader(qwen3_tokenizer_dir, None), [3], "evidence", progress=said.append)
    assert [r["source"] for r in rows] == ["own"] and "no GRPO groups" in said[0]
    items = [SimpleNamespace(group="p", step=s, source="f", prompt_ids=[1], response_ids=[2]) for s in (1, 1, 2)]
    assert [len(u) for u in draft_dominance.units(items, True, None)] == [2, 1]
    assert [len(u) for u in draft_dominance.units(items, True, 1)] == [2, 1]   # --limit-groups counts prompts


def test_resume_from_another_folder_refuses_other_traces_of_the_same_name(stand_in, traces_dir, qwen3_tokenizer_dir,
                                                                           tmp_path, monkeypatch):
    """The run keeps its traces as absolute paths: resumed from another working folder, a
    relative --traces naming another file of the same name is refused; the same file named
    absolutely continues."""
    lines = (traces_dir / GRPO).read_text().splitlines(True)
    for name, n in (("a", 8), ("b", 16)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.jsonl").write_text("".join(lines[:n]))
    args = ["--tokenizer", qwen3_tokenizer_dir, "-k", "2", "--limit-groups", "1"]
    monkeypatch.chdir(tmp_path / "a")
    _invoke("--traces", "t.jsonl", *args, "--output", tmp_path / "runs")
    (run,) = list((tmp_path / "runs").iterdir())
    assert load_result(run)["config"]["traces"] == [str(tmp_path / "a" / "t.jsonl")]
    monkeypatch.chdir(tmp_path / "b")
    res = _invoke("--traces", "t.jsonl", *args, "--resume", run)
    assert isinstance(res.exception, UserError) and "traces" in str(res.exception), res.output
    ok = _invoke("--traces", tmp_path / "a" / "t.jsonl", *args, "--resume", run)
    assert ok.exit_code in (0, 1) and "kept" in ok.output, ok.output   # done or gate failed: the cell kept


@pytest.mark.parametrize("source", ["own", "group"])
def test_heldout_side_is_the_later_groups_replayed_alone(stand_in, traces_dir, qwen3_tokenizer_dir, source):
    """--dev-share: with a fresh record per unit, the held-out side's figures are those of a replay of
    the held-out prompt groups alone; the interval is over the cell's prompt groups."""
    items, _ = _reader(qwen3_tokenizer_dir, 4)(traces_dir / GRPO)
    prompts = list(dict.fromkeys(it.group for it in items))
    assert len(prompts) == 4
    row = draft_dominance.replay_cell(items, 3, source, "evidence", None, None, False, 0.25)
    alone = draft_dominance.replay_cell([it for it in items if it.group in prompts[1:]], 3, source, "evidence",
                                        None, None, False)
    held = row["heldout"]
    assert (held["dev_groups"], held["heldout_groups"]) == (1, 3)
    for name in ("sam", "sam_fixed", "suffix"):
        assert held[name] == alone[name]
    assert row["interval"]["groups"] == 4 and held["interval"]["groups"] == 3
    assert "held out (3 groups after the first 1)" in draft_dominance.fmt_row({**row, "trace": GRPO})


def _cell(pooled: bool, held: bool):
    """A replayed cell whose pooled and held-out sides dominate or not as asked."""
    def side(tok):
        return {"tokens_per_step": tok, "drafted_per_step": 1.0, "verify_tokens_per_token": 1.0,
                "acceptance_rate": 0.5, "steps": 10}
    iv = {"unit": "prompt group", "groups": 4, "level": 0.95, "tokens_per_step_diff": [-0.1, 0.2],
          "drafted_per_step_diff": [-0.2, 0.0], "holds": False}
    return lambda items, k, source, *a: {
        "k": k, "source": source, "sam": side(1.6 if pooled else 1.4), "sam_fixed": side(1.5), "suffix": side(1.5),
        "dominates": pooled, "interval": iv,
        "heldout": {"dev_share": 0.25, "dev_groups": 1, "heldout_groups": 3, "sam": side(1.6 if held else 1.4),
                    "sam_fixed": side(1.5), "suffix": side(1.5), "dominates": held, "interval": {**iv, "holds": held}}}


@pytest.mark.parametrize("pooled, held, code", [(True, False, 1), (False, True, 0)])
def test_with_a_dev_share_the_gate_reads_the_heldout_groups(monkeypatch, traces_dir, qwen3_tokenizer_dir, tmp_path,
                                                            pooled, held, code):
    monkeypatch.setattr(dominance, "arctic_available", lambda: True)
    monkeypatch.setattr(draft_dominance, "replay_cell", _cell(pooled, held))
    res = _invoke("--traces", traces_dir / SOLO, "--tokenizer", qwen3_tokenizer_dir, "-k", "3", "--limit-groups", "4",
                  "--dev-share", "0.25", "--output", tmp_path / "runs")
    assert res.exit_code == code, res.output
    assert f"SAM dominates in {int(held)} of 1 cells, its interval holds in {int(held)}" in res.output
    (run,) = list((tmp_path / "runs").iterdir())
    result = load_result(run)
    m = result["metrics"]
    assert (m["dominated_cells"], m["heldout_dominated_cells"], m["intervals_holding"]) == (int(pooled), int(held), 0)
    (cell,) = result["tables"]["cells"]
    assert (cell["tokens_margin_lo"], cell["drafted_margin_hi"], cell["heldout_dominates"]) == (-0.1, 0.0, held)
    (g,) = collect([run]).groups[0].runs[0].gates
    assert g["passed"] is held and "held-out" in g["name"]


def test_a_later_model_turn_is_resampled_with_its_response(traces_dir, qwen3_tokenizer_dir):
    """A tool-using response is replayed as one request per model turn; the bootstrap and the dev
    split keep its turns together (one prompt group per response), not one group per turn."""
    items, _ = _reader(qwen3_tokenizer_dir, 5)(traces_dir / SOLO)
    first_turns = sum(getattr(it, "turn", 0) == 0 for it in items)
    assert len(items) > first_turns   # the trace's tool-using responses were split
    assert len(set(draft_dominance.unit_groups(items, False, None))) == first_turns


def test_a_kept_cell_is_marked_on_its_own_line_not_its_heldout_line(monkeypatch, traces_dir, qwen3_tokenizer_dir,
                                                                     tmp_path):
    monkeypatch.setattr(dominance, "arctic_available", lambda: True)
    monkeypatch.setattr(draft_dominance, "replay_cell", _cell(True, True))
    args = ("--traces", traces_dir / SOLO, "--tokenizer", qwen3_tokenizer_dir, "-k", "3", "--limit-groups", "4",
            "--dev-share", "0.25", "--output", tmp_path / "runs")
    assert _invoke(*args).exit_code == 0
    (run,) = list((tmp_path / "runs").iterdir())
    res = _invoke(*args, "--resume", run)
    assert res.exit_code == 0, res.output
    (cell,) = [line for line in res.output.splitlines() if " k=3 " in line]
    assert cell.endswith("  (kept)")
    (held,) = [line for line in res.output.splitlines() if "held out (3 groups" in line]
    assert "(kept)" not in held


def test_the_figure_titles_a_cell_by_its_heldout_verdict_too(monkeypatch, tmp_path):
    """With --dev-share the gate reads the held-out side: a cell passing pooled but failing held out
    is not titled a bare PASS."""
    figs = []
    monkeypatch.setattr("matplotlib.pyplot.close", figs.append)   # the figure kept to read its titles
    row = {"trace": "t.jsonl", "k": 3, "source": "own", "dominates": True,
           "sam": {"tokens_per_step": 1.6, "drafted_per_step": 1.0}, "suffix": {"tokens_per_step": 1.5,
                                                                              "drafted_per_step": 1.0}}
    draft_dominance.write_figure([row, {**row, "heldout": {"dominates": False}}], tmp_path / "p.png", "evidence")
    titles = [ax.get_title() for ax in figs[0].axes[:2]]
    assert titles == ["t k=3 own PASS", "t k=3 own PASS, held out FAIL"]

