"""accept's build_config checks --traces and --bins when the options are read: a trace path that
is not there and bins that are not ascending positive edges are one line naming the option, the
value and a good one, exit 2, before a model is looked for or anything is read or written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samspec_bench import cli
from samspec_bench.errors import UserError
from samspec_bench.suites import accept

NAMES = {p.name for p in accept.command.params} - {"output", "json_path", "resume"}
ROW = {"id": "a", "group": "g", "prompt": "1 + 1?", "response": "2"}


def _params(*args: str) -> dict:
    """build_config's parameters as the click command gives them for `accept ARGS`."""
    ctx = accept.command.make_context("accept", list(args))
    return {k: v for k, v in ctx.params.items() if k in NAMES}


def _trace(path: Path) -> Path:
    path.write_text(json.dumps(ROW) + "\n", encoding="utf-8")
    return path


def test_a_missing_trace_path_is_refused_by_build_config(tmp_path):
    a, b = _trace(tmp_path / "a.jsonl"), _trace(tmp_path / "b.jsonl")
    missing = tmp_path / "no" / "such.jsonl"
    with pytest.raises(UserError) as e:
        accept.build_config(**_params("--traces", str(a), "--traces", str(missing), "--tokenizer", str(tmp_path)))
    assert str(e.value) == (f"--traces {missing}: no such file or directory; pass an existing trace file or folder "
                            "(a verl rollout_data_dir, lm-eval --log_samples output, or JSONL)")
    # what accept reads today still passes: a file, several files, a folder
    for traces in ([a], [a, b], [tmp_path]):
        args = [x for t in traces for x in ("--traces", str(t))]
        assert accept.build_config(**_params(*args, "--tokenizer", str(tmp_path))).traces == [str(t) for t in traces]


def test_a_missing_trace_path_is_named_before_the_model_is_looked_for(tmp_path):
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(UserError, match=f"^--traces {missing}: no such file"):
        accept.build_config(**_params("--engine", "reference", "--model", str(tmp_path / "no-model"),
                                      "--traces", str(missing)))


def test_a_missing_trace_path_exits_2_in_one_line_writing_nothing(tmp_path, capsys):
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(SystemExit) as e:
        cli.main(["accept", "--traces", str(missing), "--tokenizer", str(tmp_path), "--output", str(tmp_path / "out"),
                  "--no-progress"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.strip() == (f"error: --traces {missing}: no such file or directory; pass an existing trace file or "
                           "folder (a verl rollout_data_dir, lm-eval --log_samples output, or JSONL)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bins, why", [
    ("5,3", "bin edges [5, 3]: need ascending positive integers"),
    ("0,64", "bin edges [0, 64]: need ascending positive integers"),
    ("64,,128", "an empty item (a stray comma)"),
    ("sixty", "give log2:LO:HI or ascending integers separated by commas"),
    ("log2:100:200", "LO and HI must be powers of two with LO <= HI"),
    ("log2:64", "write log2:LO:HI"),
])
def test_bad_bins_are_refused_by_build_config(tmp_path, bins, why):
    trace = _trace(tmp_path / "t.jsonl")
    with pytest.raises(UserError) as e:
        accept.build_config(**_params("--traces", str(trace), "--tokenizer", str(tmp_path), "--bins", bins))
    message = str(e.value)
    assert message.startswith(f"--bins {bins!r}: ") and why in message and "e.g. " in message
    assert "\n" not in message
    for good in ("log2:64:32768", "32,64,96,128", "log2:1:1"):
        assert accept.build_config(**_params("--traces", str(trace), "--tokenizer", str(tmp_path),
                                             "--bins", good)).bins == good


def test_a_missing_corpus_path_is_refused_by_build_config(tmp_path):
    a = _trace(tmp_path / "a.jsonl")
    missing = tmp_path / "old_step.jsonl"
    with pytest.raises(UserError, match=f"^--corpus {missing}: no such file or directory"):
        accept.build_config(**_params("--traces", str(a), "--tokenizer", str(tmp_path), "--sources", "own,corpus",
                                      "--corpus", str(missing)))
    cfg = accept.build_config(**_params("--traces", str(a), "--tokenizer", str(tmp_path), "--sources", "own,corpus",
                                        "--corpus", str(a)))
    assert cfg.corpus == [str(a)]
