"""accuracy: options that would change nothing are refused, or said (nothing silent).

- --fewshot-as-multiturn / --no-fewshot-as-multiturn without --apply-chat-template: lm-eval reads
  it only through a chat template (lm_eval/api/task.py; its CLI refuses it set without one, see
  lm_eval/config/evaluate_config.py): refused, exit 2.
- --top-p / --top-k (or --gen_kwargs top_p / top_k) with temperature 0: greedy decoding keeps the
  most likely token, which they never remove: refused, exit 2.
- --log-samples without --output-path: lm-eval's samples files are always written to the run
  folder, so it changes nothing; not refused (a harmless habit from lm-eval command lines) but
  said in a printed note and in result.json's "notes".
"""

from __future__ import annotations

import importlib
import inspect
import json

import pytest

from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.suites.accuracy import OUTPUT_PARAMS, build_config, command
from accuracy_stubs import StubEngine

BASE = ["--model", "builtin:tiny-qwen3", "--limit", "2", "--max-gen-toks", "4", "--device", "cpu"]


def _job(argv: list[str]):
    ctx = command.make_context("accuracy", list(argv))
    return build_config(**{k: v for k, v in ctx.params.items() if k not in OUTPUT_PARAMS})


@pytest.mark.parametrize("flag", ["--fewshot-as-multiturn", "--no-fewshot-as-multiturn"])
def test_fewshot_as_multiturn_without_a_chat_template_is_refused(flag, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["accuracy", *BASE, flag, "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err == (f"error: {flag} without --apply-chat-template: few-shot examples become chat "
                                         f"turns only in a chat template; add --apply-chat-template, or drop {flag}")
    assert not (tmp_path / "out").exists()


def test_lm_eval_spelling_of_fewshot_as_multiturn_is_refused_too():
    with pytest.raises(UserError, match="^--no-fewshot-as-multiturn without --apply-chat-template"):
        _job(BASE + ["--fewshot_as_multiturn", "false"])


def test_lm_eval_reads_fewshot_as_multiturn_only_with_a_chat_template():
    """The premise, in lm-eval's own source: its CLI refuses fewshot_as_multiturn=True without
    apply_chat_template, and a task builds multi-turn few-shot only with a chat template."""
    pytest.importorskip("lm_eval")
    cfg_src = inspect.getsource(importlib.import_module("lm_eval.config.evaluate_config"))
    assert "self.fewshot_as_multiturn is True and not self.apply_chat_template" in cfg_src
    task_src = inspect.getsource(importlib.import_module("lm_eval.api.task"))
    assert "if apply_chat_template and chat_template:" in task_src


def test_fewshot_as_multiturn_with_a_chat_template_or_left_out_is_taken():
    assert _job(BASE).config.fewshot_as_multiturn is True                     # lm-eval's default, recorded
    on = _job(BASE + ["--apply-chat-template"]).config
    assert on.apply_chat_template and on.fewshot_as_multiturn is True
    off = _job(BASE + ["--apply-chat-template", "--no-fewshot-as-multiturn"]).config
    assert off.apply_chat_template and off.fewshot_as_multiturn is False


@pytest.mark.parametrize("extra, named, them", [
    (["--top-p", "0.5"], "--top-p 0.5", "it"),
    (["--top-k", "3"], "--top-k 3", "it"),
    (["--top-p", "0.5", "--top-k", "3"], "--top-p 0.5 and --top-k 3", "them"),
    (["--gen_kwargs", "top_p=0.9"], "--gen_kwargs top_p=0.9", "it"),
    (["--gen_kwargs", "do_sample=false,top_k=20"], "--gen_kwargs top_k=20", "it"),
])
def test_top_p_and_top_k_at_temperature_0_are_refused(extra, named, them):
    with pytest.raises(UserError) as e:
        _job(BASE + extra)
    assert str(e.value) == (f"{named} with temperature 0: greedy decoding takes the most likely token, which top-p "
                            f"and top-k always keep, so nothing would change; drop {them}, or sample with "
                            "--temperature > 0")


def test_top_p_and_top_k_when_sampling_are_taken():
    c = _job(BASE + ["--temperature", "0.7", "--top-p", "0.9", "--top-k", "20"]).config
    assert (c.temperature, c.top_p, c.top_k) == (0.7, 0.9, 20)
    c = _job(BASE + ["--gen_kwargs", "do_sample=true,top_p=0.8"]).config   # do_sample=true: temperature 1
    assert (c.temperature, c.top_p) == (1.0, 0.8)


def test_log_samples_without_output_path_is_noted_not_refused(tmp_path):
    job = _job(BASE + ["--log-samples"])
    assert job.log_samples and len(job.notes) == 1
    assert job.notes[0].startswith("--log-samples without --output-path changes nothing: lm-eval's samples files are "
                                   "always written to the run folder")
    assert _job(BASE).notes == ()
    assert _job(BASE + ["--log-samples", "--output-path", str(tmp_path / "lm")]).notes == ()


@pytest.mark.usefixtures("needs_lm_eval")
def test_the_note_is_printed_and_kept_in_the_result(tmp_path, monkeypatch, capsys):
    """execute prints the note before the run; result.json and --json keep it in "notes"."""
    accuracy_command = importlib.import_module("samspec_bench.suites.accuracy.command")
    running = importlib.import_module("samspec_bench.suites.accuracy.running")
    bench = tmp_path / "data" / "benchmarks"
    bench.mkdir(parents=True)
    for name in ("gsm8k_train.jsonl", "gsm8k_test.jsonl"):
        (bench / name).write_text(json.dumps({"question": "Ann has 3 pens and buys 4 more. How many?",
                                              "answer": "3 + 4 = 7\n#### 7"}) + "\n", encoding="utf-8")
    real_run = running.run
    monkeypatch.setattr(accuracy_command, "run", lambda cfg, output, **kw: real_run(cfg, output, engine=StubEngine(answer=" 3 + 4 = 7\n#### 7\n\nQuestion:"), **kw))
    job = _job(BASE + ["--log-samples", "--data-dir", str(tmp_path / "data"), "--num-fewshot", "0", "--no-progress"])
    out = tmp_path / "r.json"
    assert accuracy_command.execute(job, output=str(tmp_path / "runs"), json_path=str(out)) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "note: --log-samples without --output-path changes nothing" in printed
    (run_dir,) = (tmp_path / "runs").glob("accuracy-*")
    for result in (json.loads(out.read_text()), json.loads((run_dir / "result.json").read_text())):
        assert result["notes"] == list(job.notes)
    # the samples are there all the same
    assert list((run_dir / "lm_eval").rglob("samples_*.jsonl"))
