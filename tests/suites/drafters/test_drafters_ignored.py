"""Nothing is silent: `drafters --data-dir` that is not a directory is refused in one line
(exit 2, nothing written), also where --traces and --tokenizer leave it unread; before, such a
run went on with exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from samspec_bench import cli


@pytest.fixture
def small(traces_dir, tmp_path) -> Path:
    p = tmp_path / "small.jsonl"
    p.write_text("".join((traces_dir / "qwen25math_math_100x8.jsonl").read_text().splitlines(keepends=True)[:8]))
    return p


def drafters(argv: list, capsys) -> tuple[int, str]:
    try:
        cli.main(["drafters", "--drafters", "sam", "--sweep", "64", "--sweep-steps", "5", "--repeats", "1",
                  "--max-tokens", "2000", "--no-progress", *map(str, argv)])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    return code, capsys.readouterr().err


def test_a_data_dir_that_is_not_there_is_refused_even_beside_traces_and_tokenizer(small, qwen3_tokenizer_dir,
                                                                                  tmp_path, capsys):
    for bad in (tmp_path / "missing", small):   # no such path; a file
        code, err = drafters(["--data-dir", bad, "--traces", small, "--tokenizer", qwen3_tokenizer_dir, "--output",
                              tmp_path / "o"], capsys)
        assert code == 2 and f"--data-dir {bad}: no such directory" in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


def test_an_existing_data_dir_still_runs(shared_data, small, tmp_path, capsys):
    code, err = drafters(["--data-dir", shared_data, "--traces", small, "--output", tmp_path / "o"], capsys)
    assert code == 0, err
