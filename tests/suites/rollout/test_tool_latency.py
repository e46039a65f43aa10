"""rollout --tool-latency-s from:LOG: the seconds a tool round took, read from verl's logs."""

import numpy as np
import pytest

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs import load_run
from samspec_bench.suites.rollout.tool_latency import tool_latency_option

AGENTRL = "training_logs/open_agentrl_console"


def _console(path, rows, prefix="timing_s/"):
    lines = [f"step:{s} - {prefix}agent_loop/tool_calls/mean:np.float64({t}) - num_turns/mean:np.float64({n}) - "
             f"response_length/mean:100.0" for s, t, n in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("prefix", ["timing_s/", ""])
def test_latency_is_the_runs_tool_time_over_its_rounds(tmp_path, prefix):
    # step 1: 1.0 s of tools a sample over 4 turns (1 round); step 2: 3.0 s over 6 turns (2 rounds);
    # step 3: 2 turns, no round: left out and counted
    log = _console(tmp_path / "console.log", [(1, 1.0, 4), (2, 3.0, 6), (3, 0.0, 2)], prefix)
    seconds, src = tool_latency_option(f"from:{log}")
    assert seconds == pytest.approx(4.0 / 3.0)
    assert src["steps"] == 2 and src["steps_without_rounds"] == 1
    assert src["per_step_s"] == pytest.approx({"median": 1.25, "min": 1.0, "max": 1.5})


def test_plain_seconds_and_bad_values(tmp_path):
    assert tool_latency_option("0.5") == (0.5, None)
    for bad, says in (("fast", "give seconds"), ("-1", ">= 0"), ("nan", "finite"), ("from:", "name the log")):
        with pytest.raises(UserError, match=says):
            tool_latency_option(bad)
    log = tmp_path / "single.log"
    log.write_text("step:1 - timing_s/gen:12.5 - response_length/mean:100.0\n")
    with pytest.raises(UserError, match=r"^--tool-latency-s from:.*no timing_s/agent_loop/tool_calls/mean and "
                                        r"num_turns/mean"):
        tool_latency_option(f"from:{log}")
    no_rounds = _console(tmp_path / "none.log", [(1, 0.0, 2), (2, 0.0, 2)])
    with pytest.raises(UserError, match="no step with a tool round"):
        tool_latency_option(f"from:{no_rounds}")
    text = tmp_path / "x.txt"
    text.write_text("hello")
    with pytest.raises(UserError, match="^--tool-latency-s from:.*not a known training log format") as e:
        tool_latency_option(f"from:{text}")
    assert "--format" not in str(e.value)   # curves' option, not rollout's


def test_rounds_from_num_turns_match_the_recipes_own_tool_call_count(shared_data):
    # Open-AgentRL logs its own count of tool calls a sample (rollout/tool_calls_avg, one call a
    # round there): (num_turns/mean - 2) / 2 must give it back, step by step
    for f in sorted((shared_data / AGENTRL).glob("*.log")):
        run = load_run(f)
        turns, calls = run.series["num_turns/mean"], run.series["rollout/tool_calls_avg"]
        steps = np.intersect1d(turns.steps, calls.steps)
        assert len(steps) > 100
        assert np.max(np.abs((turns.at(steps) - 2) / 2 - calls.at(steps))) < 0.05
        seconds, src = tool_latency_option(f"from:{f}")
        assert 0.05 < seconds < 5.0 and src["per_step_s"]["min"] <= seconds <= src["per_step_s"]["max"]
