"""Data-parallel rollouts (bench/simulation/dp.py and the rollout suite's --dp): verl's sharding
rule, instances simulated independently, the rollout ending at the slowest."""

import json

import numpy as np
import pytest

from samspec_bench.bench.policies import ThresholdPolicy
from samspec_bench.bench.simulation.dp import instance_steps, shard_requests, simulate_dp
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel
from samspec_bench.errors import UserError
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout import phases as ph

MODEL = StepTimeModel(0.01, {"running": 0.001, "decode_tokens": 1e-4, "prefill_tokens": 1e-4, "draft_tokens": 3e-4,
                             "context_tokens": 1e-6, "speculative": 0.002, "spec_requests": 1e-4})


def _requests(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        m = int(rng.integers(20, 200))
        d = rng.integers(0, 5, m).astype(np.int16)
        out.append(SimRequest(int(rng.integers(5, 40)), int(rng.integers(5, 300)), d,
                              np.minimum(rng.integers(0, 4, m), d).astype(np.int16), stretch=True))
    return out


# ---------- the sharding rule ----------

@pytest.mark.parametrize("prompts, n, dp", [(8, 4, 4), (6, 3, 4), (96, 16, 4), (7, 2, 7)])
def test_group_rule_keeps_groups_together_and_balances(prompts, n, dp):
    shards = shard_requests(prompts, n, dp, "group")
    assert len(shards) == dp
    allq = np.concatenate(shards)
    assert sorted(allq.tolist()) == list(range(prompts * n))              # every request once
    for s in shards:
        groups = s // n
        # whole groups, in verl's prompt-major row order
        assert all(np.sum(groups == g) == n for g in np.unique(groups))
        assert np.array_equal(s, np.sort(s))
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= n                                    # at most one group apart
    if prompts % dp == 0:   # verl's DataProto.chunk: equal contiguous chunks of the interleaved rows
        rows = prompts * n // dp
        for i, s in enumerate(shards):
            assert np.array_equal(s, np.arange(i * rows, (i + 1) * rows))


def test_rebalance_rule_spreads_groups_copy_major():
    # the seed's data_rebalance: rows copy-major (copy 0 of every prompt, copy 1, ...), then chunked
    shards = shard_requests(6, 4, 2, "rebalance")
    assert [len(s) for s in shards] == [12, 12]
    assert shards[0][:6].tolist() == [0, 4, 8, 12, 16, 20]                 # copy 0 of prompts 0..5
    for s in shards:
        assert np.bincount(s // 4, minlength=6).tolist() == [2] * 6       # n/dp members of every prompt
    assert sorted(np.concatenate(shards).tolist()) == list(range(24))


def test_agent_loop_rule_sends_each_workers_samples_round_the_instances():
    # verl's async agent loop: 12 rows (3 prompts x 4) cut into 2 worker chunks (rows 0-5, 6-11);
    # worker 0 sends row j to instance j mod 2, worker 1 to (j + 1) mod 2; an instance admits
    # rows by their place in their chunk, then by worker
    shards = shard_requests(3, 4, 2, "agent-loop:2")
    assert shards[0].tolist() == [0, 7, 2, 9, 4, 11]
    assert shards[1].tolist() == [6, 1, 8, 3, 10, 5]
    # verl's default 8 workers over 96 x 16 rows and 4 instances: balanced, every group spread
    big = shard_requests(96, 16, 4, "agent-loop")
    assert [len(x) for x in big] == [384] * 4
    for x in big:
        assert np.bincount(x // 16, minlength=96).tolist() == [4] * 96
    assert sorted(np.concatenate(big).tolist()) == list(range(96 * 16))


@pytest.mark.parametrize("args, match", [((4, 2, 0), "--dp 0"), ((4, 2, -1), "--dp -1"),
                                         ((3, 4, 4), "every instance needs"), ((4, 2, 2, "round"), "--dp-shard"),
                                         ((4, 2, 2, "agent-loop:0"), "an integer >= 1"),
                                         ((4, 2, 2, "group:2"), "agent-loop\\[:WORKERS\\]")])
def test_bad_sharding_is_a_user_error(args, match):
    with pytest.raises(UserError, match=match):
        shard_requests(*args)


# ---------- instances simulated independently ----------

def test_one_shard_is_exactly_simulate():
    reqs = _requests(30)
    opts = dict(k=3, step_model=MODEL, max_num_seqs=8, max_num_batched_tokens=256, tail_threshold=4,
                position_edges=(32, 128))
    a = simulate(reqs, policy=ThresholdPolicy(4), **opts)
    b = simulate_dp(reqs, [np.arange(30)], policy=lambda: ThresholdPolicy(4), **opts)
    (r,) = b.instances
    assert r.num_steps == a.num_steps and b.makespan_s == a.makespan_s
    for c in a.steps:
        assert np.array_equal(a.steps[c], r.steps[c]), c
    assert np.array_equal(b.finish_time_s, a.finish_time_s)


def test_makespan_is_the_slowest_instance_and_each_runs_alone():
    reqs = _requests(40, seed=1)
    shards = shard_requests(10, 4, 3, "group")
    made = []

    def factory():
        made.append(ThresholdPolicy(4))
        return made[-1]

    opts = dict(k=3, step_model=MODEL, max_num_seqs=6, max_num_batched_tokens=256)
    r = simulate_dp(reqs, shards, policy=factory, **opts)
    assert len(made) == 3 and len({id(p) for p in made}) == 3             # a switch per engine
    alone = [simulate([reqs[i] for i in s], policy=ThresholdPolicy(4), **opts) for s in shards]
    assert r.makespan_s == max(x.makespan_s for x in alone) == r.instance_makespan_s[r.slowest]
    for s, x in zip(shards, alone):
        assert np.array_equal(r.finish_time_s[s], x.finish_time_s)
    assert np.nanmax(r.finish_time_s) == pytest.approx(r.makespan_s)
    st = instance_steps(r)
    assert np.bincount(st["instance"]).tolist() == [x.num_steps for x in alone]
    assert st["num_emitted"].sum() == sum(q.response_len for q in reqs)
    with pytest.raises(ValueError, match="exactly once"):
        simulate_dp(reqs, [shards[0]], **opts)


def test_dp_metrics_by_hand():
    def steps(running, waiting, times):
        n = len(times)
        return {"time_s": np.asarray(times, float), "num_running": np.asarray(running),
                "num_waiting": np.asarray(waiting), "speculative": np.zeros(n, bool), "num_drafted": np.zeros(n, int),
                "num_accepted": np.zeros(n, int), "num_emitted": np.ones(n, int)}
    off = [steps([8, 2, 1], [0, 0, 0], [4, 4, 4]), steps([8, 1], [0, 0], [4, 4])]       # 12 s and 8 s
    on = [steps([8, 2, 1], [0, 0, 0], [4, 2, 2]), steps([8, 1], [0, 0], [4, 2])]        # 8 s and 6 s
    fin = [np.ones(2), np.ones(2)]
    m_off = ph.dp_arm_metrics(off, fin, 2, np.ones(4), [2, 2])
    m_on = ph.dp_arm_metrics(on, fin, 2, np.ones(4), [2, 2])
    assert m_off["total_s"] == 12 and m_off["dp"]["slowest_instance"] == 0
    assert m_off["head_s"] + m_off["tail_s"] == m_off["total_s"] and m_off["tail_s"] == 8
    assert m_off["dp"]["tail_s_pooled"] == 12 and m_off["dp"]["tail_share_pooled"] == pytest.approx(12 / 20)
    assert m_off["dp"]["idle_share"] == pytest.approx(1 - 10 / 12) and m_off["steps"] == 5
    metrics = {"off": m_off, "t": m_on}
    ph.add_dp_speedups(metrics, [{"arm": "off", "label": "off"}, {"arm": "threshold", "label": "t"}], off)
    assert m_on["speedup_overall"] == pytest.approx(12 / 8)
    assert m_on["speedup_mean_instance"] == pytest.approx(10 / 7)
    assert m_on["speedup_tail"] == pytest.approx(12 / 6)                   # pooled: (8 + 4) / (4 + 2)
    assert [r["speedup_overall"] for r in m_on["instances"]] == pytest.approx([12 / 8, 8 / 6])


# ---------- the rollout suite's --dp ----------

def _run(shared_data, out, *extra):
    from click.testing import CliRunner
    res = CliRunner().invoke(ro.command, ["--engine", "replay", "--data-dir", str(shared_data), "--prompts", "8",
                                          "--group-size", "4", "--max-num-seqs", "6", "--spec-threshold", "3",
                                          "-k", "3", "--arms", "off,threshold", "--length-dist", "lognormal:200:0.8",
                                          "--max-response-len", "1500", "--output", str(out),
                                          "--step-model", "roofline:hardware=H100,model=Qwen3-8B", *extra])
    return res


def _metrics(res, out):
    assert res.exit_code == 0, res.output
    (run,) = list(out.iterdir())
    return run, json.loads((run / "result.json").read_text())["metrics"]


def _no_timing(d):
    if isinstance(d, dict):
        return {k: _no_timing(v) for k, v in d.items() if k not in ("sim_seconds", "sim_seconds_total",
                                                                       "profile_seconds")}
    return d


def test_dp_one_is_the_single_engine_result(shared_data, tmp_path):
    _, a = _metrics(_run(shared_data, tmp_path / "a"), tmp_path / "a")
    _, b = _metrics(_run(shared_data, tmp_path / "b", "--dp", "1"), tmp_path / "b")
    assert _no_timing(a["arms"]) == _no_timing(b["arms"])
    assert _no_timing(a["workload"]) == _no_timing(b["workload"]) and "dp" not in b["workload"]


def test_dp_rollout_ends_at_the_slowest_instance(shared_data, tmp_path):
    res = _run(shared_data, tmp_path, "--dp", "2")
    run, m = _metrics(res, tmp_path)
    assert m["workload"]["dp"]["requests_per_instance"] == [16, 16] and m["workload"]["dp"]["rule"] == "group"
    one = json.loads(json.dumps(m))
    for lbl, a in m["arms"].items():
        mk = a["dp"]["instance_makespan_s"]
        assert a["total_s"] == max(mk) and a["head_s"] + a["tail_s"] == pytest.approx(a["total_s"])
        assert a["completion"]["makespan_s"] == pytest.approx(max(mk))
        assert len(a["instances"]) == 2 and sum(r["requests"] for r in a["instances"]) == 32
        assert a["emitted"] == one["arms"]["off"]["emitted"] == sum(r["emitted"] for r in a["instances"])
    thr = m["arms"]["threshold<=3 k=3"]
    assert thr["speedup_overall"] == pytest.approx(thr["baseline_phases"]["total_s"] / thr["total_s"])
    assert all("speedup_tail" in r for r in thr["instances"])
    assert "instance 1:" in res.output and "data-parallel: 2 instances" in res.output
    assert (run / "dp_running_vs_time.png").stat().st_size > 0
    import pandas as pd
    pq = pd.read_parquet(run / "steps.parquet")
    assert set(pq["instance"]) == {0, 1}
    for lbl, a in m["arms"].items():
        per = pq[pq["arm"] == lbl].groupby("instance")["time_s"].sum()
        assert per.tolist() == pytest.approx(a["dp"]["instance_makespan_s"])


def cli(argv, capsys):
    """`samspec-bench ARGV` in process: (exit code, stderr lines)."""
    from samspec_bench.cli import main
    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code, [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


@pytest.mark.parametrize("dp", ["0", "-2"])
def test_bad_dp_exits_2_with_one_line(shared_data, tmp_path, capsys, dp):
    code, err = cli(["rollout", "--data-dir", str(shared_data), "--dp", dp, "--output", str(tmp_path)], capsys)
    assert code == 2 and len(err) == 1 and f"--dp {dp}" in err[0]
    assert not list(tmp_path.iterdir())                                    # refused before anything ran


def test_dp_refused_on_measured_engines():
    params = {p.name: p.default for p in ro.command.params if p.name not in ("output", "json_path", "resume")}
    with pytest.raises(UserError, match="--dp"):
        ro.build_config(**dict(params, engine="reference", dp=2))
