"""`rollout --tool-latency-s`: seconds, or `from:LOG`, the time a tool round took in the user's
own RL run, read from a verl training log (any format `curves` reads).

What verl logs (volcengine/verl, verl/experimental/agent_loop/): every sample's agent loop
times its tool rounds with `simple_timer("tool_calls", metrics)`, which adds up the wall time
of each round (the round's parallel calls run together, `asyncio.gather`), so a sample's
`tool_calls` is its total tool time; `AgentLoopManager._performance_metrics` logs its mean over
the step's samples as `timing_s/agent_loop/tool_calls/mean` (seconds; `agent_loop/...` in
versions that log it without the prefix). `ToolAgentLoop` ends a sample on an assistant turn
and reports `num_turns = user turns + assistant turns + 1`, one user (tool) turn per round, so
a sample of r rounds has 2 r + 2 turns and the step's rounds per sample are
(`num_turns/mean` - 2) / 2.

The latency per round is then the run's tool time over its rounds: the sum over steps of the
mean tool time, over the sum of the mean rounds (steps without a round are left out and
counted), with the per-step figures' median [min, max] beside it. It is one figure for every
call: the log holds no distribution (its per-step max, kept in the record, shows how far a slow
sandbox call reaches). A round a sample made and then could not append (its tool text would
have passed the response length) is timed but not a turn, so the figure leans high there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from samspec_bench.errors import UserError, number_in
from samspec_bench.evals.training_logs import load_run, replaced_text

TOOL_TIME = ("timing_s/agent_loop/tool_calls/mean", "agent_loop/tool_calls/mean")
TOOL_TIME_MAX = ("timing_s/agent_loop/tool_calls/max", "agent_loop/tool_calls/max")
TURNS = "num_turns/mean"
FROM = "from:"


def tool_latency_option(value: Any) -> tuple[float, dict[str, Any] | None]:
    """(seconds, where they came from) of a --tool-latency-s value: a number (None: given), or
    from:LOG measured in a verl training log."""
    if isinstance(value, str) and value.startswith(FROM):
        return latency_from_log(value[len(FROM):])
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise UserError(f"--tool-latency-s {value!r}: give seconds (e.g. 0.5), or from:LOG to take them from a verl "
                        "training log of your run") from None
    number_in(seconds, "--tool-latency-s", 0)
    return seconds, None


def latency_from_log(path: str) -> tuple[float, dict[str, Any]]:
    """The seconds per tool round measured in the verl log at `path` (the module docstring)."""
    if not path:
        raise UserError("--tool-latency-s from:: name the log, e.g. from:outputs/run/console.log")
    try:
        run = load_run(path)
    except UserError as e:   # the reader's own hint names curves' --format, not an option here
        raise UserError(f"--tool-latency-s from:{path}: {str(e).split(', or force one with --format')[0]}") from None
    tool = next((run.series[t] for t in TOOL_TIME if t in run.series), None)
    turns = run.series.get(TURNS)
    if tool is None or turns is None:
        missing = " and ".join(x for x, s in ((TOOL_TIME[0], tool), (TURNS, turns)) if s is None)
        raise UserError(f"--tool-latency-s from:{path}: the log has no {missing} (verl's agent loop logs them in "
                        "multi-turn runs); pass the log of a multi-turn run, or give seconds")
    steps = np.intersect1d(tool.steps, turns.steps)
    t, rounds = tool.at(steps), (turns.at(steps) - 2.0) / 2.0
    used = rounds > 0
    if not used.any():
        raise UserError(f"--tool-latency-s from:{path}: no step with a tool round ({TURNS} is 2 or less in all "
                        f"{len(steps)}); give seconds")
    per_step = t[used] / rounds[used]
    tmax = next((run.series[x] for x in TOOL_TIME_MAX if x in run.series), None)
    seconds = float(t[used].sum() / rounds[used].sum())
    return seconds, {"log": str(path), "format": run.format, "steps": int(used.sum()),
                     "steps_without_rounds": int((~used).sum()),
                     "steps_missing_a_metric": int(len(np.union1d(tool.steps, turns.steps)) - len(steps)),
                     "rounds_per_sample_mean": float(rounds[used].mean()),
                     "per_step_s": {"median": float(np.median(per_step)), "min": float(per_step.min()),
                                    "max": float(per_step.max())},
                     "sample_tool_time_max_s": float(tmax.values.max()) if tmax is not None and len(tmax) else None,
                     "how": f"sum over steps of {TOOL_TIME[0]} / sum of ({TURNS} - 2) / 2 (verl's ToolAgentLoop: "
                            "2 turns a tool round + 2)",
                     # what the reader skipped, and the steps logged again (which value was kept), as curves says them
                     "log_skipped": run.skipped(), "log_replaced": run.replaced()}


def latency_text(seconds: float, source: dict[str, Any] | None) -> str:
    """'0.234 s (--tool-latency-s from:LOG: ...)' for the terminal."""
    if not source:
        return f"{seconds:g} s (--tool-latency-s)"
    p = source["per_step_s"]
    skipped = ", ".join(f"{k} {v}" for k, v in (source.get("log_skipped") or {}).items())
    replaced = replaced_text(source.get("log_replaced") or {})
    return (f"{seconds:.3f} s (MEASURED by verl's agent loop in {source['log']}: {source['steps']} steps, "
            f"{source['rounds_per_sample_mean']:.2f} rounds a sample, per step median {p['median']:.3f} s "
            f"[{p['min']:.3f}, {p['max']:.3f}]; one figure for every call"
            + (f"; the log's skipped: {skipped}" if skipped else "") + (f"; replaced: {replaced}" if replaced else "")
            + ")")
