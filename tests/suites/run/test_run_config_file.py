"""`samspec-bench run --config FILE`: an error in a suite's section of the config file (an unknown
option, a value its click type refuses, a skip that is not a boolean) is one line that starts
with `--config FILE:` (the path as given), exit 2, before the run folder is made."""

from __future__ import annotations

import pytest

from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.suites.run.config_file import load_config


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


@pytest.mark.parametrize("text, rest", [
    ("sampler:\n  samples: 300\n  samples: 200\n", "'samples' is given twice (line 3); keep one"),
    ("sampler:\n  samples: 300\nsampler: false\n", "'sampler' is given twice (line 3); keep one"),
])
def test_a_key_given_twice_is_refused_not_silently_overridden(tmp_path, text, rest):
    cfg = tmp_path / "conf.yaml"
    cfg.write_text(text, encoding="utf-8")
    with pytest.raises(UserError) as e:
        load_config(cfg)
    assert str(e.value) == f"--config {cfg}: {rest}"
    merged = tmp_path / "merge.yaml"   # a YAML merge key may still be overridden
    merged.write_text("sampler: &s\n  samples: 300\naccept:\n  <<: *s\n  samples: 400\n", encoding="utf-8")
    assert load_config(merged)["accept"] == {"samples": 400}


@pytest.mark.parametrize("text, rest", [
    ("engine: vlm\n", "engine: 'vlm'"),
    ("steps: [sampler, nope]\n", "steps: ['sampler', 'nope']"),
    ("data-dir: /nonexistent/data\n", "data-dir: /nonexistent/data: no such directory"),
    ("device: cuda:7\nsteps: sampler\n", "device: cuda:7"),
])
def test_top_level_errors_name_the_config_file(tmp_path, capsys, monkeypatch, text, rest):
    """A bad top-level value of the file says it comes from the file (not as a --data-dir the
    user never passed)."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    code, err, cfg = _run(tmp_path, capsys, text)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: --config {cfg}: {rest}"), err
    assert not (tmp_path / "out").exists()



@pytest.mark.parametrize("key, value, rest", [
    ("drafter", "bogus", "drafter 'bogus': use one of sam,"),
    ("dtype", "int8", "dtype 'int8': use auto or one of"),
    ("seed", "1.5", "seed must be an integer (got 1.5)"),
    ("num-prompts", "true", "num-prompts must be an integer (got True)"),
    ("max-tokens", "1e9", "max-tokens must be an integer (got '1e9')"),
    ("model", "5", "model must be text (got 5)"),
    ("model", "/nonexistent/ckpt", "model: model path /nonexistent/ckpt is not"),
    ("samples", "null", "samples must be an integer (got None)"),
])
def test_a_workload_value_the_generation_would_refuse_names_its_key_before_the_run(tmp_path, capsys, key, value,
                                                                                    rest):
    """The built-in workload step's section: a value of the wrong type, an unknown drafter or dtype,
    a model that is not there stop the run before its folder is made (not a failed step or a
    message without the key). The other settings keep the generation tiny."""
    small = {"num-prompts": "1", "samples": "1", "max-tokens": "4", "model": "builtin:tiny-qwen3"}
    section = ", ".join(f"{k}: {v}" for k, v in {**small, key: value}.items())
    cfg = tmp_path / "conf.yaml"
    cfg.write_text(f"workload: {{{section}}}\n", encoding="utf-8")
    with pytest.raises(SystemExit) as e:
        main(["run", "--config", str(cfg), "--steps", "workload", "--model", "builtin:tiny-qwen3",
              "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: --config {cfg}: config section workload: {rest}"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text", ["false\n", "0\n", "[]\n", "''\n"])
def test_a_top_level_that_is_an_empty_value_but_not_a_mapping_is_refused(tmp_path, text):
    """`[]`, `false`, `0`: not a config (a file of the wrong kind), not read as an empty one."""
    cfg = tmp_path / "conf.yaml"
    cfg.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match="the top level must be a mapping"):
        load_config(cfg)


def test_an_empty_file_or_comments_only_is_an_empty_config(tmp_path):
    cfg = tmp_path / "conf.yaml"
    cfg.write_text("# nothing set yet\n", encoding="utf-8")
    assert load_config(cfg) == {}


def test_a_config_from_a_pipe_is_read(tmp_path):
    """`--config <(generate-config)`: a pipe is no regular file, but it is one to read."""
    import os
    import threading

    fifo = tmp_path / "conf.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("sampler: {samples: 100}\n", encoding="utf-8"))
    writer.start()
    try:
        assert load_config(fifo) == {"sampler": {"samples": 100}}
    finally:
        if writer.is_alive():   # not read (the test failed): take what the writer waits to write
            fifo.read_text(encoding="utf-8")
        writer.join()


def test_a_directory_as_config_is_named_as_one(tmp_path):
    with pytest.raises(UserError, match=f"--config {tmp_path}: a directory; pass a YAML file"):
        load_config(tmp_path)
