"""A parent folder of several runs is expanded into them (named by sub-folder, or by file where
logs lie side by side); a folder holding one log is that run; a folder holding none is one
line of error."""

from __future__ import annotations

import json

import pytest

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs import expand_runs, load_run


def _console(path, n=3):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"step:{s} - critic/score/mean:{s / 10}\n" for s in range(1, n + 1)))
    return path


def test_parent_of_run_folders_expands_by_sub_folder(shared_data, tmp_path):
    src = sorted((shared_data / "training_logs" / "verl_pr2854_tensorboard").glob("q3b_fsdp_base.*"))[0]
    parent = tmp_path / "exp"
    (parent / "sam_off").mkdir(parents=True)
    (parent / "sam_off" / src.name).symlink_to(src)
    _console(parent / "sam_on" / "console.log")
    jl = parent / "sam_on_file" / "metrics.jsonl"
    jl.parent.mkdir(parents=True)
    jl.write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": 0.5}}) + "\n" for s in (1, 2)))
    (parent / "sam_on_file" / "notes.md").write_text("no log here\n")
    (parent / "checkpoints").mkdir()                                 # no log: not a run
    (parent / ".hydra").mkdir()
    runs = expand_runs(parent)
    assert [r.name for r in runs] == ["sam_off", "sam_on", "sam_on_file"]
    assert [load_run(r).label for r in runs] == ["sam_off", "sam_on", "sam_on_file"]
    assert [load_run(r).format for r in runs] == ["tensorboard", "console", "jsonl"]


def test_verl_file_logger_project_folder_is_one_run_per_experiment(tmp_path):
    project = tmp_path / "my_project"          # verl's default: <root>/<project_name>/<experiment_name>.jsonl
    project.mkdir()
    for exp in ("grpo_sam_on", "grpo_sam_off"):
        (project / f"{exp}.jsonl").write_text(json.dumps({"step": 1, "data": {"critic/score/mean": 0.5}}) + "\n")
    assert [load_run(r).label for r in expand_runs(project)] == ["grpo_sam_off", "grpo_sam_on"]


def test_real_flat_folder_of_event_files_is_one_run_per_prefix(shared_data):
    runs = expand_runs(shared_data / "training_logs" / "verl_pr2854_tensorboard")
    assert [load_run(r).label for r in runs] == ["q3b_fsdp_base", "q3b_fsdp_off_ppl", "q3b_mcore_base"]
    logs = expand_runs(shared_data / "training_logs" / "open_agentrl_console")    # LICENSE, Notice.txt left out
    assert [p.name for p in logs] == sorted(p.name for p in logs) and all(p.name.endswith(".output.log") for p in logs)
    assert len(logs) == 2


def test_a_run_folder_is_not_expanded_and_an_empty_one_is_an_error(tmp_path):
    one = tmp_path / "one"
    _console(one / "train.log")
    assert expand_runs(one) == [one] and load_run(one).label == "one"
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "README").write_text("nothing\n")
    with pytest.raises(UserError, match="holds no training log") as e:
        expand_runs(empty)
    assert "\n" not in str(e.value)


def test_wandb_folder_latest_run_link_is_read_once(tmp_path):
    # wandb's own folder: offline-run-* folders, `latest-run` (a link to the newest) and debug.log
    # links; the link sorts first and would be read as a run of its own and taken for the baseline
    wandb = tmp_path / "wandb"
    for name in ("offline-run-20250101_120000-aaaa1111", "offline-run-20250102_120000-bbbb2222"):
        _console(wandb / name / "files" / "output.log")
    (wandb / "latest-run").symlink_to("offline-run-20250102_120000-bbbb2222")
    ignored: list[str] = []
    runs = expand_runs(wandb, ignored)
    assert [r.name for r in runs] == ["offline-run-20250101_120000-aaaa1111", "offline-run-20250102_120000-bbbb2222"]
    assert any("latest-run: a link to" in why for why in ignored)
