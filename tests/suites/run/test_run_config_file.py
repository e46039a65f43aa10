"""`samspec-bench run --config FILE`: an error in a suite's section of the config file (an unknown
option, a value its click type refuses, a skip that is not a boolean) is one line that starts
with `--config FILE:` (the path as given), exit 2, before the run folder is made."""

from __future__ import annotations

import pytest

from samspec_bench.cli import main


def _run(tmp_path, capsys, text: str) -> tuple[int, str, str]:
    cfg = tmp_path / "conf.yaml"
    cfg.write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit) as e:
        main(["run", "--config", str(cfg), "--output", str(tmp_path / "out")])
    return e.value.code, capsys.readouterr().err, str(cfg)


def test_unknown_option_in_a_suite_section_names_the_config_file(tmp_path, capsys):
    code, err, cfg = _run(tmp_path, capsys, "sampler:\n  sampels: 100\n")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: --config {cfg}: config section sampler: `samspec-bench sampler` has no "
                          "option --sampels"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, rest", [
    ("sampler:\n  skip: maybe\n", "config section sampler: skip must be true or false (got 'maybe')"),
    ("sampler:\n  output: x\n", "config section sampler: --output is set by `samspec-bench run` itself"),
    ("sampler:\n  samples: {a: 1}\n", "config section sampler: samples must be a value or a list of values"),
    ("sampler:\n  samples: many\n", "config section sampler: "),
])
def test_other_section_errors_name_the_config_file(tmp_path, capsys, text, rest):
    code, err, cfg = _run(tmp_path, capsys, text)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: --config {cfg}: {rest}"), err
    assert not (tmp_path / "out").exists()
