"""`rollout --sources ...history --strategy ...`: history and group+history profiles give the
same acceptance as `accept`'s replay engine on the same traces and split; strategy arms run
and fill the strategy table, whose figures follow hand-computed counts."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from samspec_bench.bench.draft_config import DraftConfig, strategy_config
from samspec_bench.bench.engines.replay import ReplayEngine
from samspec_bench.bench.simulation.profiles import history_store, profiles_for, split_history, walk_profile
from samspec_bench.data import load_tokenizer, read_traces, tokenize_traces
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout.strategy_table import best_strategy, strategy_lines, strategy_rows
from trace_fixtures import grouped_rows


def planted_arm(totals):
    """An arm whose draws had these totals (the off arm's total 20 in every draw)."""
    sp = lambda vals: {"median": float(np.median(vals)), "min": min(vals), "max": max(vals), "n": len(vals),  # noqa: E731
                       "values": list(vals)}
    return {"total_s": totals[0], "spread": {"total_s": sp(totals), "speedup_overall": sp([20 / x for x in totals])}}


@pytest.fixture(scope="module")
def small_items(shared_data, tmp_path_factory):
    path = tmp_path_factory.mktemp("tr") / "six.jsonl"
    rows = [r for g in grouped_rows(shared_data / "traces" / "qwen25math_math_100x8.jsonl", 6) for r in g]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tokenize_traces(read_traces(str(path)), load_tokenizer(str(shared_data / "tokenizers" / "qwen3")))


def accept_steps(items, dc):
    """Per item of the rollout's step (step 1 of the split), accept's (steps, emitted)."""
    eng = ReplayEngine(workers=1)
    out = {}
    for _, res in eng.run(items, [(dc, list(range(len(items))))]):
        for i, rs in res:
            out[i] = (len(rs.drafted), int(rs.drafted.sum()), int(rs.accepted.sum()))
    return out


@pytest.mark.parametrize("sources", ["history", "own"])
def test_history_profiles_match_accept(small_items, sources):
    current, earlier, why = split_history(small_items)
    assert "split" in why and len(current) == len(earlier) == 24   # 6 groups x 8: 4 earlier, 4 current
    store = history_store(earlier, 16, 1 << 30)
    pairs = [(it.prompt_ids, it.response_ids) for it in current]
    profs = profiles_for(pairs, None, 3, "sam-fixed", sources, history=store if sources == "history" else None)
    split = earlier + current                      # the same split, as accept replays it (emulated steps)
    dc = DraftConfig(drafter="sam-fixed", k=3, history=sources == "history")
    got = accept_steps(split, dc)
    for j, (d, a) in enumerate(profs):
        pos, dr, ac, _ = walk_profile(d, a, 3)
        assert got[len(earlier) + j] == (len(pos), sum(dr), sum(ac))
    if sources == "history":   # history drafts more of the current half than the response's own text does
        own = profiles_for(pairs, None, 3, "sam-fixed", "own")
        assert sum(int(a.sum()) for _, a in profs) > sum(int(a.sum()) for _, a in own)


def test_strategy_in_accept_matches_rollout_profile(small_items):
    """A strategy with a length rule (histospec: AIMD over the min-prob path, history) drafts
    the same in accept's replay as along rollout's profile walk."""
    from samspec_bench.suites.rollout.replay_arm import strategy_profiles
    from samspec_bench.sam.strategies import parse_strategy
    current, earlier, _ = split_history(small_items)
    store = history_store(earlier, 16, 1 << 30)
    pairs = [(it.prompt_ids, it.response_ids) for it in current]
    st = parse_strategy("das")
    profs, trees = strategy_profiles(st, pairs, None, lambda w: store)
    assert trees is None   # no paths: no tree profiles
    got = accept_steps(earlier + current, strategy_config("das"))
    for j, (d, a) in enumerate(profs):
        pos, dr, ac, _ = walk_profile(d, a, st.k)
        assert got[len(earlier) + j] == (len(pos), sum(dr), sum(ac))


def test_rollout_strategy_arms(shared_data, tmp_path):
    res = CliRunner().invoke(ro.command, ["--data-dir", str(shared_data), "--prompts", "4", "--max-num-seqs", "8",
                                          "--sources", "own,history", "--arms", "off,always",
                                          "--strategy", "seed,histospec,seer/cost", "--output", str(tmp_path),
                                          "--step-model", "roofline:hardware=H100,model=Qwen3-8B"])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    result = json.loads((run / "result.json").read_text())["metrics"]
    arms = result["arms"]
    assert set(arms) == {"off", "always k=3 own", "always k=3 history", "seed", "histospec", "seer/cost"}
    for m in arms.values():   # every arm runs the rollout step's requests (the current half)
        assert m["emitted"] == arms["off"]["emitted"]
    assert result["workload"]["requests"] == 16 and "split" in result["workload"]["history"]["steps"]
    assert arms["always k=3 history"]["tokens_per_step"] > arms["always k=3 own"]["tokens_per_step"]
    assert arms["seed"]["tail_threshold"] == 8
    rows = result["strategy_table"]["rows"]
    assert [r["arm"] for r in rows[:3]] == ["seed", "histospec", "seer/cost"]
    assert "best strategy:" in res.output and "tokens/step" in res.output


def test_per_step_k_arms_in_the_rollout(shared_data, tmp_path):
    """A batch schedule's band k caps every step's drafts (planted: 2 of seer's 8); the cost
    rule's per-step k is chosen by the step model and drafts no more than the arm's k."""
    res = CliRunner().invoke(ro.command, ["--data-dir", str(shared_data), "--prompts", "4", "--max-num-seqs", "8",
                                          "--strategy", "seer,seer/schedule:1-1024=2,seer:k=4/costk",
                                          "--step-model", "roofline:hardware=H100,model=Qwen3-8B", "--draws", "1",
                                          "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    m = json.loads((run / "result.json").read_text())["metrics"]
    arms = m["arms"]
    assert arms["seer"]["drafted_per_step"] > 2.0 >= arms["seer/schedule:1-1024=2"]["drafted_per_step"] > 0
    steps = pd.read_parquet(run / "steps.parquet")
    sched = steps[steps["arm"] == "seer/schedule:1-1024=2"]
    assert (sched["num_drafted"] <= 2 * sched["num_decode_reqs"]).all()
    costk = steps[steps["arm"] == "seer:k=4/costk"]
    assert (costk["num_drafted"] <= 4 * costk["num_decode_reqs"]).all() and costk["num_drafted"].sum() > 0
    assert arms["seer:k=4/costk"]["emitted"] == arms["off"]["emitted"]


def test_engine_cutoff_arm_in_the_rollout(shared_data, tmp_path):
    """`/enginecutoff:2:0.99`: SAM keeps well under 99% of its drafts pooled over two drafting
    steps, so the arm drafts in exactly two steps and then decodes plainly to the end; the
    same strategy without the switch drafts on."""
    res = CliRunner().invoke(ro.command, ["--data-dir", str(shared_data), "--prompts", "4", "--max-num-seqs", "8",
                                          "--strategy", "seed,seed/enginecutoff:2:0.99", "--draws", "1",
                                          "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    arms = json.loads((run / "result.json").read_text())["metrics"]["arms"]
    steps = pd.read_parquet(run / "steps.parquet")
    gated = steps[steps["arm"] == "seed/enginecutoff:2:0.99"].sort_values("step")
    drafting = gated["num_drafted"].to_numpy() > 0
    assert drafting.sum() == 2 and not drafting[np.nonzero(drafting)[0][-1] + 1:].any()
    assert (steps[steps["arm"] == "seed"]["num_drafted"] > 0).sum() > 2
    assert arms["seed/enginecutoff:2:0.99"]["emitted"] == arms["off"]["emitted"]
    # the step it tripped at is the step after the second drafting one, in the result and the console
    trip = int(gated["step"].to_numpy()[np.nonzero(drafting)[0][-1]])
    assert arms["seed/enginecutoff:2:0.99"]["switch_off_after_step"] == trip
    assert f"seed/enginecutoff:2:0.99: speculation off for good after step {trip}" in res.output
    assert "switch_off_after_step" not in arms["seed"]


def test_strategy_table_against_hand_counts():
    """A tiny run's counts: 10 decode steps of a request; the strategy accepted 6 of 8 drafts."""
    from samspec_bench.suites.rollout.phases import acceptance_cost
    m = {"decode_request_steps": 10, "drafted": 8, "accepted": 6, "total_s": 5.0, "tail_s": 2.0,
         "speedup_overall": 2.0, "speedup_tail": 1.5}
    m.update(acceptance_cost(m))
    summary = {"units": "s", "measured": False, "priced_by": {"kind": "roofline"},
               "arms": {"off": {"total_s": 10.0, "tail_s": 3.0}, "histospec": m},
               "workload": {"strategies": {"histospec": {"sources": "history", "k": 16, "switch": "always",
                                                         "needs": ["history kept between RL steps"]}}}}
    (row,) = strategy_rows(summary)
    assert row["tokens_per_step"] == pytest.approx(1.6)          # (10 + 6) / 10
    assert row["drafted_per_step"] == pytest.approx(0.8)         # 8 / 10
    assert row["verify_tokens_per_token"] == pytest.approx(18 / 16)
    assert best_strategy([row])["arm"] == "histospec"
    lines = strategy_lines(summary)
    assert "modelled by the roofline step model" in lines[0]
    assert lines[-1].startswith("best strategy: histospec (2.000x overall, 1.500x tail")
    assert lines[-1].endswith("needs: history kept between RL steps")


def test_a_sharded_runs_tail_column_is_the_pooled_tail_its_speed_up_divides():
    """--dp 2: the slowest instance's tail (tail_s) is not what the tail speed-up compares; the
    table's tail column shows the instances' own tails summed, and says so; whole labels."""
    sp = lambda v: {"median": v, "min": v, "max": v, "n": 1, "values": [v]}  # noqa: E731
    m = {"decode_request_steps": 10, "drafted": 8, "accepted": 6, "total_s": 5.0, "tail_s": 2.0,
         "speedup_overall": 2.0, "speedup_tail": 1.5,
         "spread": {"tail_s": sp(2.0), "tail_s_pooled": sp(7.0), "speedup_tail": sp(1.5)}}
    label = "seer:k=16:paths=4:sched=context@group+history"
    summary = {"units": "s", "measured": False, "priced_by": {"kind": "roofline"},
               "arms": {"off": {"total_s": 10.0}, label: m},
               "workload": {"dp": {"instances": 2}, "strategies": {label: {"sources": "group+history", "k": 16}}}}
    (row,) = strategy_rows(summary)
    assert row["tail"] == 7.0
    lines = strategy_lines(summary)
    assert "tail summed over the 2 instances' own tails" in lines[0]
    assert any(ln.strip().startswith(label + " ") for ln in lines[2:])


def test_strategy_table_ranks_by_the_median_over_draws():
    """Three draws: A's totals 10, 12, 9 (median 10), B's 11, 11, 11: A is best by the median
    and fastest in 2 of the 3 draws; a row's figure is the median, its cell median [min, max]."""
    summary = {"units": "s", "measured": False, "priced_by": {"kind": "roofline"},
               "arms": {"off": {"total_s": 20.0}, "A": planted_arm([10.0, 12.0, 9.0]),
                        "B": planted_arm([11.0, 11.0, 11.0])},
               "workload": {"draws": {"n": 3}, "strategies": {"A": {"needs": []}, "B": {"needs": []}}}}
    rows = strategy_rows(summary)
    assert [r["total"] for r in rows] == [10.0, 11.0]
    assert rows[0]["speedup_overall"] == pytest.approx(2.0)      # median of 20/10, 20/12, 20/9
    assert rows[0]["best_in_draws"] == {"best": 2, "draws": 3}
    lines = strategy_lines(summary)
    assert "median [min, max] over 3 draws" in lines[0]
    assert "10 [9, 12]" in lines[2] and "2.000x [1.667, 2.222]" in lines[2]
    assert "fastest strategy in 2 of 3 draws" in lines[-1] and lines[-1].startswith("best strategy: A (2.000x [")


def test_strategy_table_names_the_best_on_one_path_when_the_best_drafts_trees():
    """B (trees) is best; C is the fastest without trees, A slower: the table marks C and prints
    its line. Without tree rows there is no such line."""
    tree = "tree verification of multi-path drafts in the engine (tree attention; vLLM's suffix and ngram " \
           "methods and this project's proposer verify one path)"
    arms = {"off": {"total_s": 20.0}, "A": planted_arm([12.0]), "B": planted_arm([8.0]), "C": planted_arm([10.0])}
    summary = {"units": "s", "measured": False, "priced_by": {"kind": "roofline"}, "arms": arms,
               "workload": {"strategies": {"A": {"needs": []}, "B": {"needs": [tree]},
                                           "C": {"needs": ["group sharing"]}}}}
    rows = {r["arm"]: r for r in strategy_rows(summary)}
    assert rows["C"].get("best_one_path") and not rows["A"].get("best_one_path") and not rows["B"].get("best_one_path")
    lines = strategy_lines(summary)
    assert lines[-2].startswith("best strategy: B (2.500x")
    assert lines[-1].startswith("best on one path (no tree verification: what vLLM runs today): C (2.000x overall")
    assert lines[-1].endswith("needs: group sharing")
    summary["workload"]["strategies"]["B"]["needs"] = []
    assert not any(r.get("best_one_path") for r in strategy_rows(summary))
    assert not strategy_lines(summary)[-1].startswith("best on one path")


@pytest.mark.parametrize("args, msg", [
    (["--strategy", "medusa"], "--strategy 'medusa'"),
    (["--strategy", "seed/sometimes"], "--strategy 'seed/sometimes'"),
    (["--strategy", "seed/enginecutoff:0:0.3"], "window >= 1"),
    (["--strategy", "seed/enginecutoff:8:1.5"], "0 < threshold < 1"),
    (["--strategy", "seed/enginecutoff:8"], "enginecutoff:WINDOW:THRESHOLD"),
    # the spec said once (it was "--strategy 'X': strategy 'X': ..."), the bad value and the form
    (["--strategy", "seed/cutoff:8:1.5"], "--strategy 'seed/cutoff:8:1.5': THRESHOLD '1.5' is not a number in [0, 1]"),
    (["--sources", "own,corpus"], "--sources"),
    (["--history-window", "0"], "--history-window"),
])
def test_bad_strategy_and_source_inputs(shared_data, tmp_path, capsys, args, msg):
    from samspec_bench.cli import main
    with pytest.raises(SystemExit) as e:
        main(["rollout", "--data-dir", str(shared_data), "--output", str(tmp_path), *args])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and msg in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("dp", [1, 2])
def test_rollout_tree_arm_drafts_trees_in_the_tail_only(shared_data, tmp_path, dp):
    """`arctic:paths=4:tree_at=4` verifies 4-path trees where at most 4 run and nobody waits:
    the same tokens come out, the tail keeps more tokens per step than the single-path arm, and
    not every speculative step is a tree step (one instance or two, each its own tail)."""
    res = CliRunner().invoke(ro.command, ["--data-dir", str(shared_data), "--prompts", "4", "--max-num-seqs", "8",
                                          "--arms", "off", "--strategy", "arctic,arctic:paths=4:tree_at=4",
                                          "--dp", str(dp), "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    result = json.loads((run / "result.json").read_text())
    arms = result["metrics"]["arms"]
    one, tree = arms["arctic"], arms["arctic:paths=4:tree_at=4"]
    assert one["emitted"] == tree["emitted"] == arms["off"]["emitted"]
    assert one["tree_steps"] == 0 < tree["tree_steps"] < tree["spec_steps"]
    assert tree["tokens_per_step_tail"] > one["tokens_per_step_tail"]
    assert tree["drafted_per_step"] > one["drafted_per_step"]
    described = result["metrics"]["workload"]["strategies"]
    assert (described["arctic"]["paths"], described["arctic:paths=4:tree_at=4"]["paths"]) == (0, 4)
    assert described["arctic:paths=4:tree_at=4"]["tree_running"] == 4
    assert any("tree verification" in n for n in described["arctic:paths=4:tree_at=4"]["needs"])


def test_accept_refuses_tree_strategies_where_the_engine_verifies_one_path():
    from samspec_bench.errors import UserError
    from samspec_bench.suites.accept.config import check_strategy
    with pytest.raises(UserError, match="paths=W.*--engine reference"):
        check_strategy("arctic:paths=4")   # replay
    assert check_strategy("arctic:paths=4@own", "reference").strategy == "arctic:paths=4@own"


def test_json_on_stdout_stays_clean_while_profiles_show_progress(shared_data, tmp_path):
    """The profiles' progress bar writes to stderr: `--json -` leaves stdout one JSON document."""
    res = CliRunner().invoke(ro.command, ["--data-dir", str(shared_data), "--prompts", "4", "--max-num-seqs", "8",
                                          "--arms", "off", "--strategy", "arctic:paths=4", "--output", str(tmp_path),
                                          "--json", "-"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("{")
    assert json.loads(res.stdout)["metrics"]["arms"]["arctic:paths=4"]["tree_steps"] > 0


def test_responses_without_a_step_beside_stepped_ones_are_said_to_be_the_earliest_history(small_items):
    from dataclasses import replace
    stepped = [replace(it, step=2 if i % 2 else 3) for i, it in enumerate(small_items[:8])]
    stepless = [replace(it, step=None) for it in small_items[8:11]]
    current, earlier, why = split_history(stepped + stepless)
    assert all(it.step == 3 for it in current) and len(current) == 4
    assert [it.step for it in earlier[:3]] == [None] * 3 and len(earlier) == 7
    assert "3 responses without an RL step" in why
    assert "without an RL step" not in split_history(stepped)[2]


def test_a_strategy_in_another_admission_order_runs_beside_that_order_without_speculation(shared_data, tmp_path):
    """`seer:sched=context` runs under Seer's admission order, reads the same profiles as `seer`
    (the same tokens per step), and `off:sched=context` adds what the order alone is worth."""
    settings = ro.config.arm_settings(ro.config.RolloutConfig(strategies=["seer", "seer:sched=context"]))
    by = {s["label"]: s for s in settings}
    assert by["seer:sched=context"]["profile"] == by["seer"]["profile"]
    assert (by["off:sched=context"]["arm"], by["off:sched=context"]["schedule"]) == ("schedule", "context")
    res = CliRunner().invoke(ro.command, ["--data-dir", str(shared_data), "--prompts", "6", "--max-num-seqs", "8",
                                          "--strategy", "seer@group,seer:sched=context@group", "--output",
                                          str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    result = json.loads((run / "result.json").read_text())["metrics"]
    arms = result["arms"]
    assert set(arms) == {"off", "seer@group", "seer:sched=context@group", "off:sched=context"}
    assert arms["off:sched=context"]["drafted_per_step"] == 0
    assert arms["off:sched=context"]["emitted"] == arms["off"]["emitted"]
    assert any("admits by the group's estimated length" in n
               for n in result["workload"]["strategies"]["seer:sched=context@group"]["needs"])


def test_accept_refuses_an_admission_order():
    from samspec_bench.errors import UserError
    from samspec_bench.suites.accept.config import check_strategy
    with pytest.raises(UserError, match="sched=.*rollout --strategy"):
        check_strategy("seer:sched=context@group")


def test_accept_refuses_a_divided_rollout():
    from samspec_bench.errors import UserError
    from samspec_bench.suites.accept.config import check_strategy
    with pytest.raises(UserError, match="divided=.*rollout --strategy"):
        check_strategy("seer:divided=4096@group")


@pytest.mark.parametrize("dp", [1, 2])
def test_a_divided_strategy_runs_beside_its_scheduling_without_speculation(shared_data, tmp_path, dp):
    """`seer:divided=D` reads the same profiles as `seer` and runs on one queue the instances pull
    from; `off:divided=D` is that scheduling alone; the baseline keeps its fixed shards."""
    settings = ro.config.arm_settings(ro.config.RolloutConfig(strategies=["seer", "seer:divided=64:sched=context"]))
    by = {s["label"]: s for s in settings}
    assert by["seer:divided=64:sched=context"]["profile"] == by["seer"]["profile"]
    off = by["off:sched=context:divided=64"]
    assert (off["arm"], off["schedule"], off["divided"], off["k"]) == ("schedule", "context", 64, 0)
    res = CliRunner().invoke(ro.command, ["--data-dir", str(shared_data), "--prompts", "6", "--max-num-seqs", "4",
                                          "--dp", str(dp), "--strategy", "seer@group,seer:divided=64@group",
                                          "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    result = json.loads((run / "result.json").read_text())["metrics"]
    arms = result["arms"]
    assert set(arms) == {"off", "seer@group", "seer:divided=64@group", "off:divided=64"}
    div = arms["seer:divided=64@group"]
    assert div["emitted"] == arms["seer@group"]["emitted"]
    assert div["divided"]["chunk_tokens"] == 64 and div["divided"]["chunks_released"] > 0
    assert "shared pool" in div["divided"]["assumed"]
    assert arms["off:divided=64"]["drafted"] == 0 and arms["off:divided=64"]["emitted"] == arms["off"]["emitted"]
    if dp > 1:   # the terminal says what moved and what was assumed of it
        assert div["dp"]["instances"] == dp and "divided" not in arms["off"]
        assert f"{div['divided']['kv_tokens_moved']:,} KV tokens through the shared pool" in res.output
        # one queue: an instance does other work than off's instance of the same number, no ratio between them
        assert all("step_ratio_overall" not in r for r in div["instances"])   # (no step model: step counts)
        assert all("step_ratio_overall" in r for r in arms["seer@group"]["instances"])
    assert any("divided rollout" in n for n in result["workload"]["strategies"]["seer:divided=64@group"]["needs"])
