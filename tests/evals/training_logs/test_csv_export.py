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


def test_semicolon_and_tab_delimited_exports_with_a_bom_are_read(tmp_path):
    # a spreadsheet in a comma-decimal locale saves `;` and `0,5`; pandas' to_csv(sep="\t") a tab
    semi = tmp_path / "sam_off.csv"
    semi.write_bytes("\ufeff_step;critic/score/mean;actor/entropy\r\n1;0,5;1,25\r\n2;0,75;1e-3\r\n".encode())
    tab = tmp_path / "sam_on.tsv"
    tab.write_text("step\tcritic/score/mean\n1\t0.5\n2\t0.75\n")
    a, b = load_run(semi), load_run(tab)
    assert (a.format, b.format) == ("csv", "csv")
    assert a.series["critic/score/mean"].values.tolist() == [0.5, 0.75]
    assert a.series["actor/entropy"].values.tolist() == [1.25, 0.001]
    assert b.series["critic/score/mean"].values.tolist() == [0.5, 0.75]
    assert b.label == "sam_on" and not a.counts and not b.counts


def test_wandb_chart_export_run_name_with_a_dash(tmp_path):
    p = tmp_path / "chart.csv"
    p.write_text("Step,SAM on - lr 1e-6 - critic/score/mean,SAM on - lr 1e-6 - critic/score/mean__MIN\n1,0.5,0.4\n"
                 "2,0.6,0.5\n")
    assert list(load_run(p).series) == ["critic/score/mean"]
