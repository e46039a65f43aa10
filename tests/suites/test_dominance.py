"""`samspec-bench dominance` (suites/dominance.py): what --limit-groups keeps, the same with and
without --anchors (the command's run folder, resume and gate: tests/bench/test_draft_dominance.py)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from samspec_bench.bench import draft_dominance
from samspec_bench.cli import group
from samspec_bench.data import LIMIT_GROUPS_PER, load_tokenizer
from samspec_bench.errors import UserError
from samspec_bench.suites import dominance
from samspec_bench.suites import dominance_anchors as anchors
from trace_fixtures import grouped_rows, write_tool_dump, write_verl_dump

GRPO = "qwen25math_math_100x8.jsonl"


def test_limit_groups_keeps_the_same_prompts_at_every_step_with_and_without_anchors(
        traces_dir, qwen3_tokenizer_dir, tmp_path, monkeypatch):
    """A verl folder of four step files, two prompts each with two responses, every prompt back
    in a second epoch: --limit-groups 1 keeps the same prompts at every step they appear in, one
    group per step file on average (as accept reads it), in both paths."""
    d = tmp_path / "rollout_data_dir"
    write_verl_dump(d, load_tokenizer(qwen3_tokenizer_dir), grouped_rows(traces_dir / GRPO, 4), batch=2, n=2,
                    epochs=2)   # 1.jsonl and 3.jsonl: prompts 1-2, 2.jsonl and 4.jsonl: prompts 3-4
    replayed = []

    def cell(items, k, source, sam_length, limit, *rest):   # no replay: what the cell's units hold
        units = draft_dominance.units(items, source == "group", limit)
        replayed.append({(items[int(key)].source.name, items[int(key)].group) for u in units for key, *_ in u})
        m = {"tokens_per_step": 1.0, "drafted_per_step": 1.0, "verify_tokens_per_token": 1.0,
             "acceptance_rate": 0.5, "steps": 1}
        return {"k": k, "source": source, "sam": m, "sam_fixed": m, "suffix": m, "dominates": True}
    monkeypatch.setattr(draft_dominance, "replay_cell", cell)
    monkeypatch.setattr(dominance, "arctic_available", lambda: True)
    res = CliRunner().invoke(group, ["dominance", "--traces", str(d), "--tokenizer", str(qwen3_tokenizer_dir), "-k",
                                     "2", "--limit-groups", "1", "--output", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert len(replayed) == 2   # own and group
    kept = {(it.source.name, it.group) for it in anchors.load_items(d, str(qwen3_tokenizer_dir), 1)}
    assert replayed[0] == replayed[1] == kept
    prompts = {g for _, g in kept}
    at = {name: {it.group for it in anchors.load_items(d, str(qwen3_tokenizer_dir), None) if it.source.name == name}
          for name in ("1.jsonl", "2.jsonl", "3.jsonl", "4.jsonl")}
    assert all({g for n, g in kept if n == name} == prompts & there for name, there in at.items())
    assert len(kept) >= 4   # one group per step file on average
    (said,) = [ln for ln in res.output.splitlines() if "--limit-groups 1:" in ln]
    assert "the same prompts at every RL step" in said and "by RL step (kept of read): 1: " in said


def test_the_help_says_what_limit_groups_keeps():
    text = " ".join(CliRunner().invoke(group, ["dominance", "--help"]).output.split())
    assert "first N groups (prompts) of each trace file" in text and "the same prompts at every step" in text


def test_a_missing_traces_path_is_said_before_arctic_is_asked_for(tmp_path, monkeypatch):
    monkeypatch.setattr(dominance, "arctic_available", lambda: False)
    missing = tmp_path / "no_such.jsonl"
    res = CliRunner().invoke(group, ["dominance", "--traces", str(missing), "-k", "2",
                                     "--output", str(tmp_path / "runs")])
    assert isinstance(res.exception, UserError), res.output
    assert str(res.exception).startswith(f"--traces {missing}: no such file or folder")



def _fake_metrics() -> dict:
    return {"tokens_per_step": 1.0, "drafted_per_step": 1.0, "verify_tokens_per_token": 1.0, "acceptance_rate": 0.5,
            "steps": 1}


def _request(it) -> tuple:
    """A replayed request's identity: its file, line, turn (sub) and generated tokens."""
    return (it.source.name, it.line, it.sub, tuple(int(t) for t in it.response_ids))


@pytest.fixture
def verl_and_tools(traces_dir, qwen3_tokenizer_dir, tmp_path) -> dict:
    """A verl folder: rollout steps 1-2 (4 prompts, 2 responses each) and 0.jsonl, a validation
    round of tool-using responses told apart by its lines' shape ('reward' equal to 'score');
    and a folder of multi-turn tool rollouts (steps 1-2, three model turns each)."""
    tok = load_tokenizer(qwen3_tokenizer_dir)
    run = tmp_path / "rollout_data_dir"
    write_verl_dump(run, tok, grouped_rows(traces_dir / GRPO, 4), batch=2, n=2, epochs=1)
    write_tool_dump(tmp_path / "val", tok, steps=[0])
    val = [json.loads(x) for x in (tmp_path / "val" / "0.jsonl").read_text().splitlines()]
    (run / "0.jsonl").write_text("".join(json.dumps({**r, "reward": r["score"]}) + "\n" for r in val))
    tools = tmp_path / "tools"
    info = write_tool_dump(tools, tok, steps=[1, 2])
    turns = [sum(not is_tool for _, is_tool in pieces) for pieces in info["pieces"].values()]
    rollout_lines = sum(len((run / f"{s}.jsonl").read_text().splitlines()) for s in (1, 2))
    return {"run": run, "tools": tools, "validation": len(val), "rollout_lines": rollout_lines,
            "tool_responses": len(turns), "later_turns": sum(t - 1 for t in turns)}


def test_both_paths_replay_the_same_requests_and_say_what_the_reading_left_out(
        verl_and_tools, qwen3_tokenizer_dir, tmp_path, monkeypatch):
    """Without --anchors the traces are read as --anchors reads them (one function): a verl
    folder's validation round is left out and tool-using responses are one request per model
    turn; both paths say and record the counts."""
    f = verl_and_tools
    plain: dict = {}

    def cell(items, k, source, *rest):   # no replay: what the cell's units hold
        units = draft_dominance.units(items, source == "group", None)
        plain.setdefault(items[0].source.parent.name, set()).update(
            _request(items[int(key)]) for u in units for key, *_ in u)
        m = _fake_metrics()
        return {"k": k, "source": source, "sam": m, "sam_fixed": m, "suffix": m, "dominates": True}
    monkeypatch.setattr(draft_dominance, "replay_cell", cell)
    monkeypatch.setattr(dominance, "arctic_available", lambda: True)
    base = ["dominance", "--traces", str(f["run"]), "--traces", str(f["tools"]), "--tokenizer",
            str(qwen3_tokenizer_dir), "-k", "2"]
    res = CliRunner().invoke(group, [*base, "--output", str(tmp_path / "plain"), "--json", str(tmp_path / "p.json")])
    assert res.exit_code == 0, res.output
    anchored: dict = {}

    def arm(items, jobs, window, workers=0):   # no replay: the requests an anchor cell replays
        anchored.setdefault(items[0].source.parent.name, set()).update(_request(it) for it in items)
        return {**_fake_metrics(), "by_step": {str(s): _fake_metrics() for s in {it.step for it in items}}}
    monkeypatch.setattr(anchors, "replay_arm", arm)
    res2 = CliRunner().invoke(group, [*base, "--anchors", "--output", str(tmp_path / "anchors"),
                                      "--json", str(tmp_path / "a.json")])
    assert res2.exit_code == 0, res2.output
    assert plain == anchored
    assert len(plain["rollout_data_dir"]) == f["rollout_lines"]   # the validation round left out
    assert {name for name, *_ in plain["rollout_data_dir"]} == {"1.jsonl", "2.jsonl"}
    assert len(plain["tools"]) == f["tool_responses"] + f["later_turns"]   # one request per model turn
    for out, js in ((res.output, "p.json"), (res2.output, "a.json")):
        result = json.loads((tmp_path / js).read_text())
        m = result["metrics"]
        assert (m["validation_left_out"], m["later_turns"], m["skipped_lines"], m["merged_steps"]) == (
            f["validation"], f["later_turns"], 0, 0)
        run_in, tools_in = (result["inputs"][str(p)] for p in (f["run"], f["tools"]))
        assert (run_in["validation_left_out"], run_in["requests"]) == (f["validation"], f["rollout_lines"])
        assert (tools_in["later_turns"], tools_in["tool_output_responses"]) == (f["later_turns"], f["tool_responses"])
        assert f"{f['validation']} validation generation(s) left out" in out
        assert f"{f['later_turns']} later model turn(s) of {f['tool_responses']} tool-using response(s)" in out
        assert "--history-includes-validation" not in out   # an option dominance does not have


def _plain_run(args: list[str], tmp_path, monkeypatch) -> tuple[list, object]:
    """`dominance` without replays (each cell's (k, source) kept in the list returned)."""
    calls: list = []

    def cell(items, k, source, *rest):
        calls.append((k, source))
        m = _fake_metrics()
        return {"k": k, "source": source, "sam": m, "sam_fixed": m, "suffix": m, "dominates": True, "interval": None}
    monkeypatch.setattr(draft_dominance, "replay_cell", cell)
    monkeypatch.setattr(dominance, "arctic_available", lambda: True)
    return calls, lambda *more: CliRunner().invoke(group, ["dominance", *args, *map(str, more)])


def test_a_traces_reading_is_kept_once_and_each_cell_row_keeps_its_counts(verl_and_tools, qwen3_tokenizer_dir,
                                                                          tmp_path, monkeypatch):
    """What a trace's reading left out (the validation files, tool output, every skipped line) is
    kept once per trace (inputs.jsonl, result.json's `inputs`), not in every cell row, which keeps
    its counts; a resumed run whose cells are all kept says and records the whole reading again."""
    f = verl_and_tools
    calls, invoke = _plain_run(["--traces", str(f["run"]), "--tokenizer", str(qwen3_tokenizer_dir), "-k", "2,3"],
                               tmp_path, monkeypatch)
    assert invoke("--output", tmp_path / "runs", "--json", tmp_path / "r.json").exit_code == 0
    (run,) = list((tmp_path / "runs").iterdir())
    rows = [json.loads(x) for x in (run / dominance.CELLS_FILE).read_text().splitlines()]
    assert len(rows) == 4 and all(set(r["inputs"]) == set(anchors.CELL_COUNTS) for r in rows)
    assert all(r["inputs"]["validation_left_out"] == f["validation"] for r in rows)
    (reading,) = [json.loads(x) for x in (run / dominance.INPUTS_FILE).read_text().splitlines()]
    assert reading["path"] == str(f["run"]) and reading["inputs"]["validation"]["files"]
    assert reading["inputs"]["skipped"] == [] and reading["inputs"]["validation_left_out"] == f["validation"]
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["inputs"] == {str(f["run"]): reading["inputs"]}
    assert all(set(r["inputs"]) == set(anchors.CELL_COUNTS) for r in result["rows"])
    calls.clear()
    res = invoke("--resume", run, "--json", tmp_path / "r2.json")
    assert res.exit_code == 0 and calls == [], res.output
    assert json.loads((tmp_path / "r2.json").read_text())["inputs"] == result["inputs"]
    assert "  validation generations: " in res.output   # the whole reading, from the run folder

    def failing(*args):
        raise UserError("stopped")
    # a reading without cells is written nowhere: the folder holds no work (discarded on a failure)
    monkeypatch.setattr(draft_dominance, "replay_cell", failing)
    res = CliRunner().invoke(group, ["dominance", "--traces", str(f["run"]), "--tokenizer", str(qwen3_tokenizer_dir),
                                     "-k", "2", "--output", str(tmp_path / "failed")])
    assert isinstance(res.exception, UserError) and not list((tmp_path / "failed").glob("*/*.jsonl"))


def test_a_run_saved_before_limit_groups_said_what_it_counts_is_not_resumed(
        traces_dir, qwen3_tokenizer_dir, tmp_path, monkeypatch):
    args = ["--traces", str(traces_dir / GRPO), "--tokenizer", str(qwen3_tokenizer_dir), "-k", "2",
            "--limit-groups", "1"]
    calls, invoke = _plain_run(args, tmp_path, monkeypatch)
    assert invoke("--output", tmp_path / "runs").exit_code == 0
    (run,) = list((tmp_path / "runs").iterdir())
    cfg = json.loads((run / dominance.CONFIG_FILE).read_text())
    assert cfg["limit_groups_per"] == LIMIT_GROUPS_PER
    assert invoke("--resume", run).exit_code == 0   # a new run resumes
    cells = (run / dominance.CELLS_FILE).read_bytes()
    # as runs before the key saved it (N prompts of a whole folder), and before a verl folder's
    # steps kept the same prompts (N groups of each step file)
    for old, was in (({k: v for k, v in cfg.items() if k != "limit_groups_per"}, "prompts of a whole verl folder"),
                     ({**cfg, "limit_groups_per": "file"}, "groups of each step file")):
        (run / dominance.CONFIG_FILE).write_text(json.dumps(old))
        calls.clear()
        res = invoke("--resume", run)
        assert isinstance(res.exception, UserError), res.output
        msg = str(res.exception)
        assert msg.startswith(f"--resume {run}: this run's --limit-groups 1 kept the first 1 {was}") and \
            "start a new run" in msg and "\n" not in msg
        assert calls == [] and (run / dominance.CELLS_FILE).read_bytes() == cells   # nothing replayed or written


def test_a_run_without_limit_groups_stays_resumable_without_the_key(traces_dir, qwen3_tokenizer_dir, tmp_path,
                                                                    monkeypatch):
    args = ["--traces", str(traces_dir / GRPO), "--tokenizer", str(qwen3_tokenizer_dir), "-k", "2"]
    calls, invoke = _plain_run(args, tmp_path, monkeypatch)
    assert invoke("--output", tmp_path / "runs").exit_code == 0
    (run,) = list((tmp_path / "runs").iterdir())
    cfg = json.loads((run / dominance.CONFIG_FILE).read_text())
    assert cfg["limit_groups_per"] is None
    (run / dominance.CONFIG_FILE).write_text(json.dumps({k: v for k, v in cfg.items() if k != "limit_groups_per"}))
    calls.clear()
    res = invoke("--resume", run)
    assert res.exit_code == 0, res.output
    assert calls == [] and res.output.count("(kept)") >= 2


def test_kept_cells_read_the_old_way_are_replayed_again(traces_dir, qwen3_tokenizer_dir, tmp_path, monkeypatch):
    """A cell kept from a run whose path without --anchors read traces otherwise (no `inputs` in
    its row: validation generations and whole tool-using responses replayed) is not mixed in."""
    args = ["--traces", str(traces_dir / GRPO), "--tokenizer", str(qwen3_tokenizer_dir), "-k", "2"]
    calls, invoke = _plain_run(args, tmp_path, monkeypatch)
    assert invoke("--output", tmp_path / "runs").exit_code == 0
    (run,) = list((tmp_path / "runs").iterdir())
    cells = run / dominance.CELLS_FILE
    rows = [json.loads(x) for x in cells.read_text().splitlines()]
    cells.write_text(json.dumps({k: v for k, v in rows[0].items() if k != "inputs"}) + "\n"
                     + json.dumps(rows[1]) + "\n")
    calls.clear()
    res = invoke("--resume", run)
    assert res.exit_code == 0, res.output
    assert calls == [(2, rows[0]["source"])] and "1 kept cell(s) replayed again" in res.output


def test_traces_whose_kept_cells_hold_no_counts_are_named():
    """--anchors keeps cells of runs made before the counts were recorded (read the same way):
    their trace's counts are said and recorded as not recorded, not as zeros."""
    counts = {"responses": 2, "requests": 3, "validation_left_out": 1, "validation": None, "later_turns": 1,
              "tool_output_responses": 1, "tool_output": None, "skipped_lines": 0, "skipped": [], "merged_steps": 0,
              "merged_step_folders": [], "steps": None}
    rows = [{"trace": "a.jsonl", "path": "/t/a.jsonl", "inputs": counts}, {"trace": "b.jsonl", "path": "/t/b.jsonl"}]
    totals = dominance.input_totals(rows, ("/t/a.jsonl", "/t/b.jsonl"))
    assert totals["inputs_not_recorded"] == ["/t/b.jsonl"]
    assert (totals["validation_left_out"], totals["later_turns"]) == (1, 1)
    said: list = []
    dominance.say_kept_inputs(rows, said.append)
    assert said[0].startswith("a.jsonl: 2 response(s) replayed as 3 request(s); 1 validation generation(s) left out")
    assert said[1].startswith("b.jsonl: what its reading left out was not recorded")


def _held_row(heldout_groups: int, holds):
    """A cell row whose held-out side has `heldout_groups` prompt groups (an interval from two on)."""
    iv = {"unit": "prompt group", "level": 0.95, "holds": holds,
          "tokens_per_step_diff": None if holds is None else [0.1, 0.2],
          "drafted_per_step_diff": None if holds is None else [-0.2, -0.1]}
    return {"dominates": True, "interval": {**iv, "holds": True, "tokens_per_step_diff": [0.1, 0.2],
                                            "drafted_per_step_diff": [-0.2, -0.1]},
            "heldout": {"heldout_groups": heldout_groups, "dominates": bool(heldout_groups), "interval": iv}}


def test_cells_without_a_heldout_side_or_interval_are_counted_and_said():
    """--dev-share on a trace of one prompt group leaves no held-out side: the gate counts the cell
    as not dominated, so the summary and the metrics say how many (and those without an interval)
    rather than a bare '1 of 3'; the share is written as given (0.0001 is not '0%')."""
    rows = [_held_row(3, True), _held_row(1, None), _held_row(0, None)]
    sure = dominance.margin_counts(rows)
    assert (sure["heldout_dominated_cells"], sure["heldout_intervals_holding"]) == (2, 1)
    assert (sure["heldout_cells_without_groups"], sure["heldout_intervals_missing"]) == (1, 2)
    line = dominance.margin_lines(sure, 0.0001)[1]
    assert "first 0.0001 share" in line and "0%" not in line
    assert "2 cell(s) without a held-out interval" in line
    assert "1 cell(s) without a held-out side (one prompt group) count as not dominated" in line
    assert "without a held-out" not in dominance.margin_lines(dominance.margin_counts(rows[:1]), 0.5)[1]


def test_a_trace_named_twice_is_refused_before_any_replay(traces_dir, qwen3_tokenizer_dir, tmp_path, monkeypatch):
    """The same file under two names would be replayed twice and its cells counted twice by the gate."""
    monkeypatch.setattr(dominance, "arctic_available", lambda: True)
    monkeypatch.chdir(traces_dir)
    res = CliRunner().invoke(group, ["dominance", "--traces", GRPO, "--traces", str(traces_dir / GRPO), "--tokenizer",
                                     str(qwen3_tokenizer_dir), "-k", "3", "--output", str(tmp_path / "runs")])
    assert isinstance(res.exception, UserError), res.output
    assert str(res.exception).startswith(f"--traces {traces_dir / GRPO}: this trace is given twice (first as {GRPO})")
    assert not (tmp_path / "runs").exists()
