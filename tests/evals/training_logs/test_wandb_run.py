"""wandb run folders (wandb_run.py): a history that holds the steps whose console lines wandb cut
at 4096 bytes lost nothing there, and the run says so instead of counting the cut as loss."""

from __future__ import annotations

import json

from samspec_bench.evals.training_logs import load_run
from samspec_bench.evals.training_logs.console import WANDB_LINE_CUT


def _step_line(step: int, n_val: int) -> str:
    pairs = [("actor/entropy", f"np.float64({0.3 - 0.01 * step})")]
    pairs += [(f"val-aux/x/reward/k{i}", f"np.float64({i}.123456789)") for i in range(n_val)]
    pairs.append(("critic/score/mean", f"np.float64({0.1 * step})"))
    return " - ".join([f"step:{step}"] + [f"{k}:{v}" for k, v in pairs])


def _run_folder(tmp_path, history_steps):
    files = tmp_path / "run-20250101_120000-abcd1234" / "files"
    files.mkdir(parents=True)
    lines = [_step_line(s, 400 if s == 3 else 0) for s in range(1, 6)]
    lines[2] = lines[2].encode()[:WANDB_LINE_CUT].decode()        # wandb's capture cuts step 3
    (files / "output.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = [{"_step": s, "actor/entropy": 0.3 - 0.01 * s, "critic/score/mean": 0.1 * s} for s in history_steps]
    (files / "wandb-history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return files.parent


def test_console_cut_at_a_step_the_history_holds_is_no_loss(tmp_path):
    run = load_run(_run_folder(tmp_path, range(1, 6)))
    assert run.format == "wandb"
    assert run.series["critic/score/mean"].steps.tolist() == [1, 2, 3, 4, 5]
    assert "truncated_lines" not in run.skipped() and "dropped_fields" not in run.skipped()
    assert any("1 at steps the history holds, read from it (nothing lost)" in n for n in run.notes)
    assert not any("absent at those steps" in n for n in run.notes)


def test_console_cut_at_a_step_the_history_lacks_is_still_counted(tmp_path):
    run = load_run(_run_folder(tmp_path, (1, 2, 4, 5)))
    assert run.skipped()["truncated_lines"] == 1 and run.skipped()["dropped_fields"] == 1
    assert 3 not in run.series["critic/score/mean"].steps.tolist()
