"""`rollout`'s inputs refused in one line before anything runs (a length distribution that
draws nonsense, an empty arm or strategy list, an option given twice in a strategy spec, a
profile with too few verify steps), and the workload line that says what the requests replay
and what the traces held beside them (responses unused, repeated, cut)."""

import json

import pytest
from click.testing import CliRunner

from samspec_bench.bench.simulation.fitted_step_model import MIN_VERIFY_STEPS, StepTimeModel
from samspec_bench.errors import UserError
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout.profile import check_covers




def _run(traces, out, *extra):
    return CliRunner().invoke(ro.command, ["--traces", str(traces), "--draws", "1", "--output", str(out), *extra])


@pytest.mark.parametrize("spec", ["lognormal:nan:1", "lognormal:32:inf", "fixed:-3", "fixed:0", "fixed:2.5",
                                  "pareto:0:1", "pareto:10:0", "lognormal:5", "uniform:1:2", "trace:3"])
def test_a_length_distribution_that_draws_nonsense_is_refused(small, tmp_path, spec):
    res = _run(small, tmp_path / "o", "--length-dist", spec)
    assert isinstance(res.exception, UserError), res.output
    assert f"--length-dist {spec!r}" in str(res.exception) and "\n" not in str(res.exception)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, needle", [(("--arms", ""), "--arms ''"), (("--strategy", ","), "--strategy ','"),
                                          (("--strategy", "seed:k=3:k=5"), "k= given twice")])
def test_empty_lists_and_repeated_options_are_refused(small, tmp_path, args, needle):
    res = _run(small, tmp_path / "o", *args)
    assert isinstance(res.exception, UserError) and needle in str(res.exception), res.output


def test_a_profile_with_too_few_verify_steps_says_so():
    few = StepTimeModel(0.01, {}, fit={"verify_widths": {"3": MIN_VERIFY_STEPS - 1}})
    with pytest.raises(UserError, match=f"too few verify steps of k=3 .*k=3: {MIN_VERIFY_STEPS - 1} steps.*--tokens"):
        check_covers(few, [3], "p.json")
    with pytest.raises(UserError, match="no verify steps of k=5"):
        check_covers(few, [5], "p.json")


def test_the_workload_line_counts_what_the_requests_leave_out_or_repeat(small, tmp_path):
    res = _run(small, tmp_path / "a", "--group-size", "3", "--arms", "off", "--json", str(tmp_path / "a.json"))
    assert res.exit_code == 0, res.output
    assert "6 requests (2 prompts x 3) replaying 6 distinct of the traces' 16 responses" in res.output
    assert "10 responses unused" in res.output
    w = json.loads((tmp_path / "a.json").read_text())["metrics"]["workload"]
    assert (w["trace_responses"], w["unused_responses"], w["requests"]) == (16, 10, 6)
    res = _run(small, tmp_path / "b", "--prompts", "5", "--max-response-len", "100", "--arms", "off")
    assert res.exit_code == 0, res.output
    assert "24 requests repeat a response" in res.output
    assert "16 trace responses cut at --max-response-len 100" in res.output
    assert "40 requests (100.0 %) run to --max-response-len 100" in res.output


def test_lengths_drawn_below_the_shortest_simulated_response_are_counted_and_shown(small, tmp_path):
    # fixed:2 asks for 2-token responses; the simulation runs 4 at least and must say so
    res = _run(small, tmp_path / "a", "--group-size", "2", "--arms", "off", "--length-dist", "fixed:2",
               "--json", str(tmp_path / "a.json"))
    assert res.exit_code == 0, res.output
    assert "4 requests (100.0 %) drawn shorter than 4 tokens run 4" in res.output
    w = json.loads((tmp_path / "a.json").read_text())["metrics"]["workload"]
    assert (w["requests_raised_to_min_len"], w["min_len"]) == (4, 4)
    res = _run(small, tmp_path / "b", "--group-size", "2", "--arms", "off", "--length-dist", "fixed:9",
               "--json", str(tmp_path / "b.json"))
    assert "drawn shorter" not in res.output
    assert json.loads((tmp_path / "b.json").read_text())["metrics"]["workload"]["requests_raised_to_min_len"] == 0


def test_one_draw_of_drawn_lengths_says_it_was_drawn(small, tmp_path):
    res = _run(small, tmp_path / "a", "--group-size", "2", "--arms", "off", "--length-dist", "pareto:100:1",
               "--json", str(tmp_path / "a.json"))
    assert res.exit_code == 0, res.output
    varies = json.loads((tmp_path / "a.json").read_text())["metrics"]["workload"]["draws"]["varies"]
    assert varies.startswith("nothing: one draw of the lengths from pareto:100:1 (seed 0")


def test_history_options_without_a_history_source_are_refused(small, tmp_path):
    res = _run(small, tmp_path / "o", "--history-window", "3")
    assert isinstance(res.exception, UserError) and "no arm drafts from history" in str(res.exception), res.output
    ok = _run(small, tmp_path / "p", "--history-window", "3", "--sources", "own,history", "--arms", "off,always")
    assert ok.exit_code == 0, ok.output


def test_when_every_response_ends_together_the_tail_speedup_is_absent_not_zero(small, tmp_path):
    # equal lengths: the off arm's requests all end in one step, so it has no tail to speed up
    res = _run(small, tmp_path / "o", "--length-dist", "fixed:300", "--arms", "off,always", "--json",
               str(tmp_path / "r.json"))
    assert res.exit_code == 0, res.output
    arms = json.loads((tmp_path / "r.json").read_text())["metrics"]["arms"]   # no step model: in decode steps
    assert arms["off"]["tail_steps"] == 0 and arms["always k=3"]["tail_steps"] > 0
    assert arms["always k=3"]["step_ratio_tail"] is None and "tail n/a" in res.output


def test_a_preset_priced_by_another_step_model_says_so(small, tmp_path):
    other = "roofline:hardware=H100,model=Qwen3-8B"
    res = _run(small, tmp_path / "o", "--preset", "seed-qwen3-32b", "--step-model", other, "--no-sensitivity")
    assert res.exit_code == 0, res.output
    assert f"WARNING: priced by {other}, not the preset's roofline:hardware=910C" in res.output
    own = _run(small, tmp_path / "p", "--preset", "seed-qwen3-32b", "--no-sensitivity")
    assert own.exit_code == 0, own.output
    assert "WARNING: priced by" not in own.output


def test_a_bad_trace_line_stops_the_run_or_with_on_error_skip_is_counted(small, tmp_path):
    rows = [json.loads(line) for line in small.read_text().splitlines()]
    rows[3]["response"] = ""   # e.g. a response of special tokens only, written out as empty text
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = _run(bad, tmp_path / "a", "--arms", "off")
    assert isinstance(res.exception, UserError)   # exit 2 through the CLI
    assert f"{bad}:4" in str(res.exception) and "rollout" in str(res.exception).split("--on-error skip")[0]
    res = _run(bad, tmp_path / "b", "--arms", "off", "--on-error", "skip", "--json", str(tmp_path / "b.json"))
    assert res.exit_code == 0, res.output
    w = json.loads((tmp_path / "b.json").read_text())["metrics"]["workload"]
    assert w["skipped_lines"] == 1 and w["skipped"][0]["line"] == 4 and w["trace_responses"] == 15
