"""CSV exports (csv_export.py): TensorBoard's CSV download `run-<run>-tag-<tag>.csv` names its one
metric by the tag part of the file name and its run by the run part, so the same tag downloaded
from two runs is one metric."""

from __future__ import annotations

from samspec_bench.evals.training_logs import load_run
from samspec_bench.evals.training_logs.csv_export import tensorboard_download


def _download(path, values):
    path.write_text("Wall time,Step,Value\n" + "".join(f"{1.7e9 + s},{s},{v}\n" for s, v in enumerate(values, 1)))
    return path


def test_tensorboard_download_is_named_by_tag_and_run(tmp_path):
    a = load_run(_download(tmp_path / "run-sam_off-tag-critic_score_mean.csv", [0.5, 0.6, 0.7]))
    b = load_run(_download(tmp_path / "run-sam_on-tag-critic_score_mean.csv", [0.5, 0.6, 0.8]))
    assert list(a.series) == list(b.series) == ["critic_score_mean"]
    assert (a.label, b.label) == ("sam_off", "sam_on")
    assert b.series["critic_score_mean"].values.tolist() == [0.5, 0.6, 0.8]


def test_other_value_csv_keeps_its_stem(tmp_path):
    assert tensorboard_download(tmp_path / "critic_score_mean.csv") == (None, "critic_score_mean")
    assert tensorboard_download(tmp_path / "run-.-tag-val-core_gsm8k_acc_mean@1.csv") == (".", "val-core_gsm8k_acc_mean@1")
    assert list(load_run(_download(tmp_path / "reward.csv", [1, 2])).series) == ["reward"]
