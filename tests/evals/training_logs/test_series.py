"""What every reader returns (series.py): a step logged again is replaced, not skipped, and every
caller of the readers says so in the same words."""

from __future__ import annotations

import pytest

from samspec_bench.evals.training_logs import load_run, replaced_text
from samspec_bench.suites.curves.verdicts import run_record
from samspec_bench.suites.rollout.tool_latency import latency_text, tool_latency_option

TOOL, TURNS = "timing_s/agent_loop/tool_calls/mean", "num_turns/mean"


def _resumed_log(path):
    """Steps 1-3, then a run resumed from its step-2 checkpoint that logs steps 2-3 again with
    other values, and one field that is no number (a real skip beside the replacements)."""
    first = [f"step:{s} - {TOOL}:np.float64({s}.0) - {TURNS}:np.float64(4.0)" for s in (1, 2, 3)]
    again = [f"step:{s} - {TOOL}:np.float64({s * 10}.0) - {TURNS}:np.float64(4.0) - note:warmup" for s in (2, 3)]
    path.write_text("\n".join(first + again) + "\n", encoding="utf-8")
    return path


def test_a_re_logged_step_is_replaced_with_the_later_value_not_skipped(tmp_path):
    run = load_run(_resumed_log(tmp_path / "console.log"))
    assert run.series[TOOL].values.tolist() == [1.0, 20.0, 30.0]    # the later values kept
    s = run.summary()
    assert s["replaced"] == {"duplicate_steps": {"points": 4, "kept": "later"}}   # 2 steps x 2 tags
    assert s["skipped"] == {"non_numeric_fields": 2}
    assert replaced_text(s["replaced"]) == "4 value(s) logged again at a step (duplicate_steps; the later value kept)"
    assert replaced_text({}) == ""


def test_every_caller_says_the_same_of_the_replaced_steps(tmp_path):
    log = _resumed_log(tmp_path / "console.log")
    run = load_run(log)
    rec = run_record(run)                                            # curves' result.json
    seconds, src = tool_latency_option(f"from:{log}")                # rollout --tool-latency-s from:LOG
    assert seconds == pytest.approx((1 + 20 + 30) / 3)              # 1 round a sample at every step
    assert src["log_replaced"] == rec["replaced"] == {"duplicate_steps": {"points": 4, "kept": "later"}}
    assert src["log_skipped"] == rec["skipped"] == {"non_numeric_fields": 2}
    said = latency_text(seconds, src)
    assert "replaced: 4 value(s) logged again at a step (duplicate_steps; the later value kept)" in said
    assert "skipped: non_numeric_fields 2" in said and "duplicate_steps 4" not in said


def test_a_finite_but_huge_value_is_counted_as_non_finite_not_kept(tmp_path):
    # 1.7e308 is finite, yet no metric reaches it (an overflowed double): kept, it overflowed the figures
    vals = {1: "0.5", 2: "1.7e308", 3: "-1e200", 4: "1e99", 5: "0.5"}
    p = tmp_path / "huge.log"
    p.write_text("".join(f"step:{s} - {TURNS}:np.float64({v})\n" for s, v in vals.items()), encoding="utf-8")
    run = load_run(p)
    assert run.series[TURNS].steps.tolist() == [1, 4, 5]             # 1e99 is still a value
    assert run.non_finite[TURNS] == {"count": 2, "steps": 5, "first_step": 2, "nan": 0, "inf": 0, "huge": 2}
    assert run.non_finite_steps[TURNS].tolist() == [2, 3]
    assert "2 of 5 steps non-finite (huge (|value| > 1e100), first at step 2)" == run.non_finite_text(TURNS)
    assert run.summary()["skipped"] == {"non_finite_values": 2}
    assert any("2 of the non-finite value(s) finite but huge" in n for n in run.notes), run.notes
