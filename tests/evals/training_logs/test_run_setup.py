"""A run's GPU count (for perf/throughput, which verl logs per GPU): derived from the log's own
perf metrics, or read from the config beside the log (hydra, wandb) or printed into it."""

from __future__ import annotations

import re

from samspec_bench.evals.training_logs import load_run


def _perf_line(step: int, tokens: float, secs: float, gpus: int, extra: str = "") -> str:
    return (f"step:{step} - critic/score/mean:0.5 - perf/total_num_tokens:{tokens} - perf/time_per_step:{secs} - "
            f"perf/throughput:{tokens / (secs * gpus)!r}{extra}\n")


def test_gpus_derived_from_the_perf_metrics_beat_a_disagreeing_config(tmp_path):
    d = tmp_path / "outputs"
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "config.yaml").write_text("trainer:\n  n_gpus_per_node: 8\n  nnodes: 1\n")
    log = d / "main.log"
    log.write_text("".join(_perf_line(s, 1e6 + 7919 * s, 90.0 + s % 7, 4) for s in range(1, 9)))
    run = load_run(log)
    assert run.setup["gpus"] == 4 and run.setup["gpus_source"].startswith("derived")
    assert any("gives 8 GPUs" in n and "4 kept" in n for n in run.notes)
    # verl's divisor must be one whole number: a log whose ratios wander gives none
    log.write_text("".join(_perf_line(s, 1e6, 90.0, 4 if s % 2 else 6) for s in range(1, 9)))
    assert load_run(log).setup["gpus"] == 8          # then the config is what is left


def test_gpus_from_the_config_verl_prints_through_ray(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "(TaskRunner pid=4242) {'actor_rollout_ref': {'rollout': {'nnodes': 9, 'n_gpus_per_node': 9}},\n"
        "(TaskRunner pid=4242)  'reward_model': {'n_gpus_per_node': 3, 'nnodes': 3},\n"
        "(TaskRunner pid=4242)  'trainer': {'balance_batch': True,\n"
        "(TaskRunner pid=4242)              'n_gpus_per_node': 4,\n"
        "(TaskRunner pid=4242)              'nnodes': 2,\n"
        "(TaskRunner pid=4242)              'npu_profile': {'nnodes': 7, 'options': '{not: a dict}'},\n"
        "(TaskRunner pid=4242)              'project_name': 'p'}}\n"
        "step:1 - critic/score/mean:0.5 - perf/throughput:100.0\nstep:2 - critic/score/mean:0.6\n")
    run = load_run(log)
    assert run.setup == {"gpus": 8, "gpus_source": "config printed in train.log"}


def test_gpus_from_a_wandb_config_and_none_where_nothing_says(tmp_path):
    d = tmp_path / "run-1" / "files"
    d.mkdir(parents=True)
    (d / "output.log").write_text("step:1 - critic/score/mean:0.5\nstep:2 - critic/score/mean:0.6\n")
    (d / "config.yaml").write_text("trainer:\n  desc: null\n  value:\n    n_gpus_per_node: 2\n    nnodes: 3\n")
    assert load_run(d.parent).setup["gpus"] == 6
    (d / "config.yaml").unlink()
    assert load_run(d.parent).setup == {"gpus": None, "gpus_source": None}


def test_real_runs_gpu_counts_match_their_own_step_lines(shared_data):
    for log in sorted((shared_data / "training_logs" / "open_agentrl_console").glob("*.output.log")):
        line = next(ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("step:1 - "))
        val = {k: float(re.search(rf" - {k}:(?:np\.\w+\()?([-\d.e+]+)", line).group(1))
               for k in ("perf/total_num_tokens", "perf/time_per_step", "perf/throughput")}
        expected = round(val["perf/total_num_tokens"] / (val["perf/time_per_step"] * val["perf/throughput"]))
        assert load_run(log).setup["gpus"] == expected


def test_gpus_printed_in_a_wandb_console_whether_given_the_run_or_its_files_folder(tmp_path):
    d = tmp_path / "run-2" / "files"
    d.mkdir(parents=True)
    (d / "output.log").write_text("{'trainer': {'n_gpus_per_node': 4, 'nnodes': 2}}\n"
                                  "step:1 - critic/score/mean:0.5\nstep:2 - critic/score/mean:0.6\n")
    for given in (d.parent, d, d / "output.log"):
        assert load_run(given, format="wandb").setup == {"gpus": 8, "gpus_source": "config printed in output.log"}
