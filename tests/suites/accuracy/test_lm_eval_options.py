"""`samspec-bench accuracy` takes lm-eval's own options and task names: the spellings, --model_args /
--gen_kwargs merged into the settings (hand-worked values), --limit as a count or a fraction, and
bad values refused on one line (exit 2) with the nearest form."""

from __future__ import annotations

import math
import sys

import pytest

from samspec_bench.errors import UserError
from samspec_bench.suites.accuracy.lm_options import (lm_eval_argv, limited_count, merge_gen_kwargs, merge_model_args,
                                                      parse_kv, parse_limit)

pytestmark = pytest.mark.usefixtures("needs_lm_eval")   # task names resolve against lm-eval's YAMLs

DEFAULTS = {"model": "builtin:smollm2-135m", "engine": "reference", "dtype": "float32", "device": "auto",
            "max_num_seqs": 64, "temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_gen_toks": 1024}


def _job(args: list[str]):
    """The command line through the click command (its lm-eval spellings included) to build_config."""
    from samspec_bench.suites.accuracy import OUTPUT_PARAMS, build_config, command
    ctx = command.make_context("accuracy", list(args))
    return build_config(**{k: v for k, v in ctx.params.items() if k not in OUTPUT_PARAMS})


def _exit2(args: list[str], capsys) -> str:
    from samspec_bench.cli import main
    with pytest.raises(SystemExit) as e:
        main(["accuracy", *args])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    return err


def test_lm_eval_spellings_become_ours():
    opts = {"--model-args", "--gen-kwargs", "--tasks", "--num-fewshot", "--log-samples", "--output-path",
            "--max-gen-toks", "--fewshot-as-multiturn", "--limit"}
    got = lm_eval_argv(["--model_args", "pretrained=a", "dtype=bfloat16", "--tasks", "gsm8k", "aime24",
                        "--num_fewshot", "3", "--log_samples", "--output_path=o", "--max_gen_toks", "5",
                        "--fewshot_as_multiturn", "false", "--limit", "0.1", "--batch_size", "8", "--unknown_x"],
                       opts)
    assert got == ["--model-args", "pretrained=a,dtype=bfloat16", "--tasks", "gsm8k,aime24", "--num-fewshot", "3",
                   "--log-samples", "--output-path=o", "--max-gen-toks", "5", "--no-fewshot-as-multiturn",
                   "--limit", "0.1", "--max-num-seqs", "8",   # lm-eval's batch: the engine's
                   "--unknown_x"]   # neither ours nor lm-eval's: left for click to name


def test_lm_eval_options_that_are_not_ours_are_mapped_noted_or_refused(capsys):
    opts = {"--seed", "--max-num-seqs", "--tasks"}
    assert lm_eval_argv(["-b", "4", "--seed", "7"], opts) == ["--max-num-seqs", "4", "--seed", "7"]
    assert lm_eval_argv(["--seed", "5,None,5,5", "--max_batch_size=16"], opts) == ["--seed", "5", "--max-num-seqs", "16"]
    assert lm_eval_argv(["--batch_size", "auto:4", "--verbosity", "DEBUG", "--tasks", "gsm8k"], opts) == [
        "--tasks", "gsm8k"]
    err = capsys.readouterr().err
    assert "--batch_size auto:4: the engine batches up to --max-num-seqs" in err and "--verbosity DEBUG is not used" in err
    with pytest.raises(UserError, match="one seed for python, numpy, torch and the few-shot draw"):
        lm_eval_argv(["--seed", "0,1234,1234,1234"], opts)
    with pytest.raises(UserError, match="--system_instruction is not taken by accuracy: .*--data-dir"):
        lm_eval_argv(["--system_instruction", "Be brief."], opts)
    with pytest.raises(UserError, match="--use_cache is not taken.*--resume DIR"):
        lm_eval_argv(["--use_cache", "cache.db", "--tasks", "gsm8k"], opts)


def test_key_value_lists_are_read_as_lm_eval_reads_them():
    assert parse_kv('temperature=0,top_p=0.95,do_sample=True,until=["\\n\\n","Q:"],max_gen_toks=256',
                    "--gen_kwargs") == {"temperature": 0, "top_p": 0.95, "do_sample": True,
                                        "until": ["\n\n", "Q:"], "max_gen_toks": 256}
    assert parse_kv("pretrained=Qwen/Qwen3-8B,dtype=bfloat16,x=1e-3", "--model_args") == \
        {"pretrained": "Qwen/Qwen3-8B", "dtype": "bfloat16", "x": 0.001}
    assert parse_kv('{"temperature": 0.5, "until": ["a"]}', "--gen_kwargs") == {"temperature": 0.5, "until": ["a"]}
    # lm-eval 0.4.x's own parser gives the same dicts (where this version has it)
    utils = pytest.importorskip("lm_eval._cli.utils")
    for text in ('temperature=0,top_p=0.95,do_sample=True,until=["\\n\\n","Q:"],max_gen_toks=256',
                 "pretrained=Qwen/Qwen3-8B,dtype=bfloat16,trust_remote_code=true,max_model_len=4096",
                 "a=1e-3,b=abc,c=[1,2],d=False,e='x,y'"):
        assert parse_kv(text, "--gen_kwargs") == utils.key_val_to_dict(text)


def test_the_options_of_an_lm_eval_command_line_reach_the_config(tmp_path):
    job = _job(["--model", "hf", "--model_args", "pretrained=builtin:tiny-qwen3,dtype=bfloat16",
                "--gen_kwargs", "temperature=0.5", "top_p=0.9", "max_gen_toks=256", 'until=["\\n\\n"]',
                "--num_fewshot", "2", "--limit", "0.25", "--tasks", "gsm8k_cot", "aime24", "--log_samples",
                "--output_path", str(tmp_path / "out"), "--device", "cpu"])
    c = job.config
    assert (c.model, c.engine, c.dtype) == ("builtin:tiny-qwen3", "reference", "bfloat16")
    assert (c.temperature, c.top_p, c.max_gen_toks, c.until) == (0.5, 0.9, 256, ["\n\n"])
    assert (c.num_fewshot, c.limit, c.tasks) == (2, 0.25, ["gsm8k_cot", "aime24"])
    assert c.model_args == {"pretrained": "builtin:tiny-qwen3", "dtype": "bfloat16"}
    assert job.log_samples is True and job.output_path == str((tmp_path / "out").resolve())
    # our spellings give the same run
    same = _job(["--model-args", "pretrained=builtin:tiny-qwen3,dtype=bfloat16", "--gen-kwargs",
                 'temperature=0.5,top_p=0.9,max_gen_toks=256,until=["\\n\\n"]', "--num-fewshot", "2",
                 "--limit", "0.25", "--tasks", "gsm8k_cot,aime24", "--log-samples", "--output-path",
                 str(tmp_path / "out"), "--device", "cpu"])
    assert same == job
    # a count stays a count; JSON gen_kwargs; lm-eval's do_sample rules
    c2 = _job(["--limit", "10", "--gen_kwargs", '{"do_sample": true}', "--max-gen-toks", "64"]).config
    assert c2.limit == 10 and isinstance(c2.limit, int) and c2.temperature == 1.0 and c2.max_gen_toks == 64
    assert _job(["--limit", "1.0"]).config.limit == 1      # lm-eval: int(1.0), one problem


def test_gen_kwargs_conflicts_and_model_args_rules():
    # equal to ours, or ours at its default: taken
    assert merge_gen_kwargs({"max_gen_toks": 512}, {**DEFAULTS, "max_gen_toks": 512}, DEFAULTS) == {"max_gen_toks": 512}
    assert merge_gen_kwargs({"max_new_tokens": 300, "stop": "Q:"}, DEFAULTS, DEFAULTS) == \
        {"max_gen_toks": 300, "until": ["Q:"]}
    with pytest.raises(UserError, match=r"temperature=0.5 conflicts with --temperature 0.7"):
        merge_gen_kwargs({"temperature": 0.5}, {**DEFAULTS, "temperature": 0.7}, DEFAULTS)
    with pytest.raises(UserError, match="do_sample=false with temperature 0.7"):
        merge_gen_kwargs({"do_sample": False}, {**DEFAULTS, "temperature": 0.7}, DEFAULTS)
    with pytest.raises(UserError, match=r"nearest: top_p"):
        merge_gen_kwargs({"topp": 0.9}, DEFAULTS, DEFAULTS)
    assert merge_model_args({"pretrained": "m", "tensor_parallel_size": 2}, {**DEFAULTS, "model": "vllm"},
                            DEFAULTS) == {"engine": "vllm", "model": "m", "engine_args": {"tensor_parallel_size": 2}}
    with pytest.raises(UserError, match="conflicts with --model other"):
        merge_model_args({"pretrained": "m"}, {**DEFAULTS, "model": "other"}, DEFAULTS)
    with pytest.raises(UserError, match="conflicts with --engine reference"):
        merge_model_args({"pretrained": "m"}, {**DEFAULTS, "model": "vllm", "engine": "reference"},
                         {**DEFAULTS, "engine": "vllm"})
    with pytest.raises(UserError, match=r"nearest: max_num_seqs"):
        merge_model_args({"max_num_seq": 4}, DEFAULTS, DEFAULTS)


def test_limit_counts_like_lm_eval():
    assert parse_limit("0.1") == 0.1 and parse_limit("10") == 10 and parse_limit(None) is None
    # lm-eval: ceil(n * fraction) below 1, else the count; hand-worked on the built-in sets' sizes
    assert limited_count(30, 0.1) == 3 and limited_count(30, 0.05) == 2     # aime24: 30 problems, ceil(1.5)
    assert limited_count(1319, 0.1) == 132 and limited_count(500, 0.001) == 1
    assert limited_count(30, 50) == 30
    assert math.ceil(1319 * 0.1) == 132
    with pytest.raises(UserError, match=r"nearest: 2 or 3"):
        parse_limit("2.5")


@pytest.mark.parametrize("args, needle", [
    (["--tasks", "gsm8k_cott"], "nearest: gsm8k_cot"),
    (["--tasks", "hendrycks_math_algebra"], "not in the local datasets cache"),
    (["--tasks", "minerva_math500"], "nearest: math500, hendrycks_math500"),
    (["--tasks", "mmlu"], "a group of lm-eval tasks"),
    (["--tasks", "arc_easy"], "generate_until tasks only"),
    (["--limit", "2.5"], "nearest: 2 or 3"),
    (["--limit", "0"], "a fraction of each task below 1"),
    (["--limit", "ten"], "--limit 'ten'"),
    (["--gen_kwargs", "temperature=0.5", "--temperature", "0.7"], "conflicts with --temperature 0.7"),
    (["--gen_kwargs", "temprature=0.5"], "nearest: temperature"),
    (["--gen_kwargs", "temperature"], "is not key=value"),
    (["--model_args", "pretrained=a", "--model", "b"], "conflicts with --model b"),
    (["--model", "hf"], "--model_args pretrained=MODEL"),
    (["--model", "sglang", "--model_args", "pretrained=a"], "lm-eval's sglang backend"),
    (["--num_fewshot", "9"], "--num_fewshot 8 or less"),
    (["--num_fewshot", "2", "--tasks", "math500"], "has no few-shot examples"),
    # the 8 examples of gsm8k_cot's YAML: more was lm-eval's AssertionError mid-run (exit 3, a folder left)
    (["--num_fewshot", "999", "--tasks", "gsm8k_cot"], "gsm8k_cot has 8 few-shot examples (in its YAML)"),
    (["--output_path", "res.json"], "give a directory"),
    (["--batch_size", "eight"], "--batch_size 'eight': give a whole number"),
    (["--write_out"], "pass --log_samples"),
    # the drafting options, named before the model loads (the 'with SAM' arm would fail every sample)
    (["--drafter", "nope"], "the reference engine drafts with sam, sam-fixed, ngram"),
    (["--drafter", "sam-fixd"], "nearest: sam-fixed"),
    (["-k", "0"], "-k/--num-spec-tokens 0: give an integer in 1.."),
    (["--num-spec-tokens", "100000"], "-k/--num-spec-tokens 100000: give an integer in 1.."),
])
def test_bad_values_exit_2_on_one_line_with_the_fix(args, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if "minerva_math500" in args:   # its task code needs lm-eval[math]: refused where that does not import
        from samspec_bench.evals.tasks import catalog
        monkeypatch.setitem(sys.modules, "math_verify", None)    # not installed (whether or not it is here)
        catalog.resolve_task.cache_clear()
    err = _exit2(args + ["--output", str(tmp_path / "o")], capsys)
    assert needle in err
    assert not (tmp_path / "o").exists()   # refused before any run folder


def test_an_engine_built_for_its_method_takes_only_its_method_names():
    from samspec_bench.suites.accuracy import AccuracyConfig
    AccuracyConfig(engine="vllm", drafter="ngram").check_drafting()
    with pytest.raises(UserError, match=r"^--drafter 'sam-python': .*the vllm engine drafts with sam, ngram, suffix$"):
        AccuracyConfig(engine="vllm", drafter="sam-python").check_drafting()


def test_lm_eval_task_names_resolve_to_the_offline_sets():
    from samspec_bench.evals.tasks import resolve_task
    cot = resolve_task("gsm8k_cot")
    assert cot.data == {"test": "gsm8k_test.jsonl"} and cot.fewshot_pool_split() is None   # 8 shots inline
    assert resolve_task("gsm8k").data == {"test": "gsm8k_test.jsonl", "train": "gsm8k_train.jsonl"}
    assert resolve_task("math500").lm_name == "hendrycks_math500"
    assert resolve_task("aime24").data == {"train": "aime24.jsonl"}
    assert resolve_task("gsm8k_cot_zeroshot").offline


def test_a_task_sampling_otherwise_than_the_run_is_named():
    from samspec_bench.suites.accuracy import AccuracyConfig
    from samspec_bench.suites.accuracy.running import sampling_note
    # gsm8k_cot_self_consistency's YAML samples at temperature 0.2; gsm8k's is greedy like the run
    assert "own temperature 0.2 is replaced by this run's 0" in sampling_note(AccuracyConfig(),
                                                                             "gsm8k_cot_self_consistency")
    assert sampling_note(AccuracyConfig(), "gsm8k") is None
    assert "do_sample=false" in sampling_note(AccuracyConfig(temperature=0.6, num_samples=2), "aime24")
