"""curves on verl agent-loop logs: the slowest sample's share of the rollout, and its time as a
speed metric (SAM off against on)."""

from __future__ import annotations

import json

import pytest

from samspec_bench import cli
from samspec_bench.evals.training_logs import load_run
from samspec_bench.suites.curves.rollout_tail import slowest_share


def _agent_log(path, rows):
    # rows: (step, gen seconds, slowest sample's seconds)
    path.write_text("".join(
        f"step:{s} - critic/score/mean:0.5 - response_length/mean:300.0 - actor/entropy:0.3 - timing_s/gen:{g} - "
        f"timing_s/agent_loop/slowest/generate_sequences:np.float64({w})\n" for s, g, w in rows))
    return path


def test_slowest_sample_share_by_hand(tmp_path):
    log = _agent_log(tmp_path / "a.log", [(1, 100.0, 90.0), (2, 200.0, 100.0), (3, 50.0, 40.0), (4, 0.0, 1.0)])
    share = slowest_share(load_run(log))
    assert share["median"] == pytest.approx(0.8) and share["min"] == pytest.approx(0.5)
    assert share["max"] == pytest.approx(0.9) and share["steps"] == 3 and share["steps_without_rollout_time"] == 1
    plain = tmp_path / "plain.log"
    plain.write_text("step:1 - timing_s/gen:10.0 - critic/score/mean:0.5\n")
    assert slowest_share(load_run(plain)) is None


def test_curves_reports_the_tail_share_and_the_slowest_samples_speed(tmp_path, capsys):
    off = _agent_log(tmp_path / "off.log", [(s, 100.0, 80.0) for s in range(1, 31)])
    on = _agent_log(tmp_path / "on.log", [(s, 90.0 + (s % 3), 60.0 + (s % 2)) for s in range(1, 31)])
    out = tmp_path / "c.json"
    cli.main(["curves", str(off), str(on), "--output", str(tmp_path / "c"), "--json", str(out)])
    res = json.loads(out.read_text())
    shares = [r["slowest_sample_share"]["median"] for r in res["runs"]]
    assert shares[0] == pytest.approx(0.8)
    row = next(r for r in res["tables"]["speed"] if r["name"] == "slowest_sample_time")
    assert row["ratio_b_over_a"] == pytest.approx(60.5 / 80.0, rel=0.01)
    assert "slowest sample 80 % of timing_s/gen (median over 30 steps" in capsys.readouterr().out
