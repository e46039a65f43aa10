"""verl's console step lines: the values' printed precision."""

from __future__ import annotations

from samspec_bench.evals.training_logs import load_run, replaced_text


def _old_line(step: int, values: dict[str, float]) -> str:
    # verl <= 0.4: aggregate_logger.concat_dict_to_str prints f"{k}:{v:.3f}", through Ray
    return "(main_task pid=2211) " + " - ".join([f"step:{step}"] + [f"{k}:{v:.3f}" for k, v in values.items()])


def test_a_log_printed_with_three_decimals_says_so_and_names_the_coarse_tags(tmp_path):
    lines = [_old_line(s, {"actor/kl_loss": 0.0002, "actor/pg_clipfrac": 0.004 + s / 1000, "critic/score/mean": 0.3,
                           "response_length/mean": 600 + s, "global_seqlen/min": 12000 + s}) for s in range(1, 4)]
    p = tmp_path / "old.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = load_run(p)
    assert list(run.series["actor/kl_loss"].values) == [0, 0, 0]   # what the log holds: 0.0002 printed as 0.000
    assert run.read["decimals"] == 3
    [note] = [n for n in run.notes if "3 decimals" in n]
    assert "2 tag(s) stay under 0.1" in note and "actor/kl_loss (0 at every step)" in note
    assert "actor/pg_clipfrac" in note and "critic/score" not in note


def test_a_log_printed_by_repr_is_not_taken_as_rounded(tmp_path):
    # verl >= 0.5 prints pprint.pformat(v): ints without decimals, floats in full
    lines = ["step:%d - actor/kl_loss:np.float64(0.000213) - critic/score/mean:0.125 - global_seqlen/min:12001 - "
             "actor/lr:1e-06" % s for s in range(1, 4)]
    p = tmp_path / "new.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = load_run(p)
    assert "decimals" not in run.read and not any("3 decimals" in n for n in run.notes)
    assert run.series["actor/kl_loss"].values[0] == 0.000213


def test_a_validation_block_printed_through_ray_fills_a_cut_step_whole(tmp_path):
    # verl's TaskRunner is a Ray actor: every line it prints, each line of pprint's wrapped block included,
    # reaches the terminal log behind "(TaskRunner pid=N) "; a key may end one wrapped line
    block = ['("Initial validation metrics: {\'val-core/gsm8k/reward/mean@1\': "',
             '"np.float64(0.51), \'val-core/gsm8k/reward/mean@2\': np.float64(0.52), "',
             '"\'val-core/gsm8k/reward/mean@3\': np.float64(0.53)}")']
    lines = ["\x1b[36m(TaskRunner pid=812)\x1b[0m " + b for b in block]
    lines.append("(TaskRunner pid=812) step:0 - val-core/gsm8k/reward/mean@1:np.float64(0.5")   # cut by wandb
    lines += [f"(TaskRunner pid=812) step:{s} - critic/score/mean:np.float64(0.{s}) - perf/throughput:1000.0"
              for s in (1, 2)]
    p = tmp_path / "train.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = load_run(p)
    got = {k: float(run.series[k].values[0]) for k in run.series if k.startswith("val-core")}
    assert got == {"val-core/gsm8k/reward/mean@1": 0.51, "val-core/gsm8k/reward/mean@2": 0.52,
                   "val-core/gsm8k/reward/mean@3": 0.53}


def test_a_final_validation_value_at_a_step_that_logged_it_is_counted(tmp_path):
    # verl logs the last step's validation on its step line, then prints the same metrics as the final block
    lines = ["step:1 - critic/score/mean:np.float64(0.1) - perf/throughput:1000.0",
             "step:2 - val-core/gsm8k/reward/mean@1:np.float64(0.8) - critic/score/mean:np.float64(0.2) - "
             "perf/throughput:1000.0",
             "Final validation metrics: {'val-core/gsm8k/reward/mean@1': np.float64(0.81), "
             "'val-aux/gsm8k/score/mean@1': np.float64(0.7)}"]
    p = tmp_path / "train.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = load_run(p)
    assert run.series["val-core/gsm8k/reward/mean@1"].values.tolist() == [0.8]   # the step line's value
    assert run.series["val-aux/gsm8k/score/mean@1"].steps.tolist() == [2]        # a key the line lacked: filled
    s = run.summary()
    assert s["replaced"] == {"validation_block_repeats": {"points": 1, "kept": "step line's"}}
    assert "validation_block_repeats" not in s["skipped"]
    assert replaced_text(s["replaced"]) == ("1 value(s) logged again at a step (validation_block_repeats; "
                                            "the step line's value kept)")


def test_two_runs_appended_to_one_log_are_said_not_taken_for_a_resume(tmp_path):
    # `python -m verl.trainer.main_ppo ... | tee -a train.log` twice: step numbering goes back to
    # step 1; a resume from a checkpoint goes on after it (steps 3-4 again here) and is no restart
    def lines(steps, v):
        return [f"step:{s} - critic/score/mean:np.float64({v + s / 100})" for s in steps]
    appended = tmp_path / "appended.log"
    appended.write_text("\n".join(lines(range(1, 6), 0.1) + ["Training from scratch"] + lines(range(1, 6), 0.5)) + "\n")
    resumed = tmp_path / "resumed.log"
    resumed.write_text("\n".join(lines(range(1, 6), 0.1) + lines(range(3, 8), 0.1)) + "\n")
    run = load_run(appended)
    assert run.read["step_restarts"] == 1
    said = "step numbering goes back to step 1 (line 7, after step 5): two runs in one file"
    assert any(said in n for n in run.notes)
    assert run.series["critic/score/mean"].values.tolist()[0] == 0.51     # the later run's value, as said
    again = load_run(resumed)
    assert "step_restarts" not in again.read and not any("goes back" in n for n in again.notes)
