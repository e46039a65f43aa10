"""wandb run folders (wandb_run.py): a history that holds the steps whose console lines wandb cut
at 4096 bytes lost nothing there, and the run says so instead of counting the cut as loss."""

from __future__ import annotations

import json

import numpy as np

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


def _history_and_console(tmp_path, history: dict, console: list[str]):
    files = tmp_path / "run-20250101_130000-efgh5678" / "files"
    files.mkdir(parents=True)
    (files / "output.log").write_text("".join(ln + "\n" for ln in console))
    rows = [{"_step": s, **vals} for s, vals in history.items()]
    (files / "wandb-history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_run(files.parent)


def test_console_values_at_history_steps_are_counted_and_the_differing_ones_named(tmp_path):
    wide = float(np.float32(0.1))          # a float32 metric as the history holds it; the console prints 0.1
    history = {s: {"a": 0.25 * s, "b": wide} for s in range(1, 5)}
    console = [f"step:{s} - a:np.float64({9.5 if s == 2 else 0.25 * s}) - b:np.float32(0.1)" for s in range(1, 6)]
    run = _history_and_console(tmp_path, history, console)
    assert run.series["a"].steps.tolist() == [1, 2, 3, 4, 5]
    assert run.series["a"].values.tolist()[1] == 0.5          # the history's value wins at step 2
    note = next(n for n in run.summary()["notes"] if "at steps the history also holds" in n)
    assert note.startswith("8 value(s) of output.log")
    assert "7 the same as the history's" in note
    assert "1 differ (a: 1 (first at step 2: history 0.5, console 9.5))" in note
    assert "b:" not in note


def test_console_printed_with_3_decimals_repeats_the_history_within_its_rounding(tmp_path):
    history = {s: {"a": 0.1234 * s, "b": 2.0004 + s} for s in range(1, 6)}
    console = [f"step:{s} - a:{0.1234 * s:.3f} - b:{2.0004 + s:.3f}" for s in range(1, 6)]
    run = _history_and_console(tmp_path, history, console)
    note = next(n for n in run.notes if "at steps the history also holds" in n)
    assert note == ("10 value(s) of output.log at steps the history also holds: the history's kept; "
                    "10 the same as the history's")
