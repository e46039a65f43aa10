"""`samspec-bench op-equivalence`: the kernel level, the model level on the tiny Qwen3, the
--tolerance gate, the output files and the suite contract (build_config / execute). The numbers
themselves: test_op_equivalence_stats.py; the model level on either engine:
test_op_equivalence_model_level.py."""

from __future__ import annotations

import dataclasses

import json
import re

import pytest
import torch

from samspec_bench.bench.engines.attention import paged_attention_decode, paged_attention_splitfuse
from samspec_bench.bench.engines.kernels import PAIRS, KernelPair, register_pair
from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.suites.op_equivalence import OpEqConfig, SUITE, build_config, command, execute
from samspec_bench.suites.op_equivalence.config import BUILTIN_DATA_DIR


def _run(tmp_path, *args):
    out = tmp_path / "res.json"
    try:
        main(["op-equivalence", "--output", str(tmp_path / "results"), "--json", str(out), "--no-progress", *args])
        code = 0
    except SystemExit as e:
        code = e.code
    return code, (json.loads(out.read_text()) if out.exists() else None)


def test_kernel_level_command_writes_result_and_figure(tmp_path):
    code, res = _run(tmp_path, "--pairs", "reference,reference-fixed-order", "--dtype", "float32,bfloat16",
                     "--num-seqs", "3", "--seq-len", "4:80", "--gqa", "1,2", "--head-dim", "32", "--trials", "1",
                     "--tolerance", "0.01")
    assert code == 0
    rows = res["metrics"]["pairs"]
    assert set(rows) == {f"kernel/{p}/{d}" for p in ("reference", "reference-fixed-order")
                         for d in ("float32", "bfloat16")}
    for d in ("float32", "bfloat16"):
        fixed = rows[f"kernel/reference-fixed-order/{d}"]
        assert fixed["logprob_diff_max"] == 0 and fixed["output_diff_max"] == 0
        assert fixed["exact_zero_fraction"] == 1.0
    assert rows["kernel/reference/float32"]["logprob_diff_max"] < 1e-4
    assert res["metrics"]["gate"]["passed"]
    assert len(res["tables"]["kernel_cases"]) == 2 * 2 * 2
    run_dir = tmp_path / "results" / res["run_dir"].split("/")[-1]
    assert (run_dir / "result.json").is_file() and (run_dir / "logprob_diff_hist.png").is_file()
    assert res["figures"] == ["logprob_diff_hist.png"]
    for name in ("npu", "npu-fia", "vllm-flash-attn"):
        assert name not in res["skipped_pairs"]    # not asked for


class _Noisy(KernelPair):
    """A deliberately inexact pair: the verify kernel adds noise."""

    name = "test-noisy"
    description = "decode vs decode + noise"

    def decode(self, case, query, seq_lens):
        meta = case.metadata(seq_lens, [1] * len(seq_lens))
        return paged_attention_decode(query, case.key_cache, case.value_cache, meta, case.scale)

    def verify(self, case):
        out = paged_attention_splitfuse(case.query, case.key_cache, case.value_cache, case.metadata(), case.scale)
        g = torch.Generator().manual_seed(0)
        return out + 0.05 * torch.randn(out.shape, generator=g)


@pytest.fixture
def noisy_pair():
    register_pair(_Noisy)
    yield
    del PAIRS[_Noisy.name]


def test_tolerance_gate_fails_with_exit_code_1(tmp_path, noisy_pair, capsys):
    code, res = _run(tmp_path, "--pairs", "test-noisy,reference-fixed-order", "--num-seqs", "2", "--seq-len", "8:40",
                     "--gqa", "2", "--trials", "1", "--tolerance", "1e-6")
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("op-equivalence: 1 row(s) exceed logprob_diff_max <= 1e-06")
    assert "kernel/test-noisy/float32" in err[-1]
    gate = res["metrics"]["gate"]
    assert [f["row"] for f in gate["failed"]] == ["kernel/test-noisy/float32"]


class _Unavailable(_Noisy):
    """A pair that does not run here (as torch-npu's or vLLM's where they are not installed)."""

    name = "test-unavailable"

    @classmethod
    def availability(cls):
        return "its library is not installed"


def test_a_gate_over_pairs_that_all_skipped_does_not_pass(tmp_path, capsys):
    register_pair(_Unavailable)
    try:
        code, res = _run(tmp_path, "--pairs", "test-unavailable", "--tolerance", "0")
    finally:
        del PAIRS[_Unavailable.name]
    assert code == 1
    assert res["metrics"]["pairs"] == {} and not res["metrics"]["gate"]["passed"]
    out, err = capsys.readouterr()
    assert "gate: logprob_diff_max <= 0.0: FAILED (0 row(s) measured)" in out
    assert err.strip().splitlines()[-1].startswith("op-equivalence: the --tolerance gate measured logprob_diff_max "
                                                   "on no row")


def test_bad_options_are_one_line_errors(tmp_path, capsys):
    for args, words in ((["--dtype", "float64"], "--dtype"), (["--pairs", "nope"], "unknown kernel pair"),
                        (["--level", "model"], "--model"), (["-k", "0"], "-k"), (["--seq-len", "9:3"], "--seq-len")):
        with pytest.raises(SystemExit) as e:
            main(["op-equivalence", "--output", str(tmp_path), "--no-progress", *args])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err


def test_model_level_on_the_tiny_qwen3(tmp_path, capfd):
    code, res = _run(tmp_path, "--model", "builtin:tiny-qwen3", "--level", "model", "--num-prompts", "2",
                     "--max-tokens", "12", "-k", "2", "--prompts", str(_prompts_file(tmp_path)))
    assert code == 0
    assert "Loading weights" not in capfd.readouterr().err   # --no-progress: transformers' load bar is off too
    rows = res["metrics"]["pairs"]
    main_row = rows["model/reference/float32"]
    ctl = rows["model/reference-batch-invariant/float32"]
    assert main_row["positions"] == ctl["positions"] > 0
    assert main_row["logprob_diff_max"] < 1e-4 and main_row["argmax_flip_rate"] == 0
    assert ctl["logprob_diff_max"] == 0 and ctl["full_exact_zero_fraction"] == 1.0 and ctl["kl_max"] == 0
    g = main_row["greedy"]
    assert g["prompts"] == 2 and g["drafter"] == "sam" and g["k"] == 2
    assert len(res["tables"]["greedy"]) == 2
    assert res["model_level"]["float32"]["prompts"]["prompts"].endswith("prompts.txt")


def _prompts_file(tmp_path):
    p = tmp_path / "prompts.txt"
    p.write_text("What is 2 + 2?\nName three prime numbers.\n")
    return p


# --- the suite contract: build_config(**params) / execute(config, output=..., ...) ----------------

def _click_defaults(**overrides):
    """Every parameter of the command as click converts its default, less the output options."""
    ctx = command.make_context("op-equivalence", [])
    params = {k: v for k, v in ctx.params.items() if k not in ("output", "json_path")}
    params.update(overrides)
    return params


def test_build_config_from_the_click_defaults():
    cfg = build_config(**_click_defaults())
    assert SUITE == "op-equivalence"
    # the dataclass defaults agree with the options' (no --data-dir: the built-in benchmark sets)
    assert cfg == dataclasses.replace(OpEqConfig(), data_dir=BUILTIN_DATA_DIR)
    assert "progress" not in cfg.record()      # display only: not in result.json's config
    cfg = build_config(**_click_defaults(levels="kernel", dtypes="float32,bfloat16", seq_len="8:64", gqa="2",
                                         pairs="reference", progress=False))
    assert (cfg.levels, cfg.dtypes, cfg.min_seq_len, cfg.max_seq_len, cfg.gqa, cfg.pairs, cfg.progress) == \
        (["kernel"], ["float32", "bfloat16"], 8, 64, [2], ["reference"], False)
    assert build_config(**_click_defaults(seq_len="300")).min_seq_len == 1


@pytest.mark.parametrize("override, words", [
    ({"dtypes": "float64"}, "--dtype"), ({"pairs": "nope"}, "unknown kernel pair"), ({"levels": "model"}, "--model"),
    ({"k": 0}, "-k"), ({"seq_len": "9:3"}, "--seq-len"),
    ({"seq_len": "1:3"}, r"--seq-len '1:3': MAX must be at least k\+1 = 4"),   # was an internal error (exit 3)
    ({"seq_len": "16:20", "k": 32}, r"--seq-len '16:20': MAX must be at least k\+1 = 33"),
    ({"gqa": "x"}, "--gqa"), ({"num_prompts": 0}, "--num-prompts"),
    # was an internal error (exit 3) after the kernel level and the model load
    ({"model": "builtin:tiny-qwen3", "drafter": "samm"}, r"--drafter 'samm': unknown drafter \(nearest: sam")])
def test_build_config_refuses_bad_values(override, words):
    with pytest.raises(UserError, match=words.replace("-", r"\-")):
        build_config(**_click_defaults(**override))


def test_build_config_takes_no_defaults():
    with pytest.raises(TypeError):
        build_config(levels="kernel")


def test_execute_returns_the_exit_code_and_refuses_resume(tmp_path, noisy_pair, capsys):
    small = dict(levels="kernel", num_seqs=2, seq_len="8:40", gqa="2", trials=1, progress=False)
    ok = build_config(**_click_defaults(pairs="reference-fixed-order", tolerance=0.0, **small))
    out = tmp_path / "r.json"
    assert execute(ok, output=str(tmp_path / "results"), json_path=str(out)) == 0
    assert json.loads(out.read_text())["config"] == ok.record()
    bad = build_config(**_click_defaults(pairs="test-noisy", tolerance=1e-6, **small))
    assert execute(bad, output=str(tmp_path / "results")) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("op-equivalence: 1 row(s) exceed")
    with pytest.raises(UserError, match="resume"):
        execute(ok, output=str(tmp_path / "results"), resume=str(tmp_path))


@pytest.mark.parametrize("content, words", [
    ('{"prompt": "What is 2 + 2?"}\n{"prompt": 5}\n', "p.jsonl:2: 'prompt' is 5"),
    ('{"question": ""}\n', "p.jsonl:1: 'question' is \"\""),
    ("", "--prompts {p}: no prompts in it"),
    ("\n  \n", "--prompts {p}: no prompts in it")])
def test_bad_prompts_file_is_one_line_exit_2_naming_it(tmp_path, capsys, content, words):
    p = tmp_path / "p.jsonl"
    p.write_text(content)
    with pytest.raises(SystemExit) as e:
        main(["op-equivalence", "--output", str(tmp_path), "--no-progress", "--level", "model", "--model",
              "builtin:tiny-qwen3", "--prompts", str(p)])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and words.format(p=p) in err


def test_a_prompt_beyond_the_models_positions_is_refused_before_the_engine_is_sized(tmp_path, capsys):
    # builtin:tiny-qwen3 has 8,192 positions; the engine would otherwise be sized past them
    p = tmp_path / "p.txt"
    p.write_text("short prompt\n" + "word " * 9000 + "\n")
    with pytest.raises(SystemExit) as e:
        main(["op-equivalence", "--output", str(tmp_path / "o"), "--no-progress", "--level", "model", "--model",
              "builtin:tiny-qwen3", "--prompts", str(p), "--no-control", "--max-tokens", "4"])
    line = capsys.readouterr().err.strip().splitlines()[-1]   # after transformers' weight-loading bar
    assert e.value.code == 2 and line.startswith("error: ")
    assert re.search(rf"--prompts {re.escape(str(p))}: prompt 2 is \d+ tokens, \d+ positions with --max-tokens 4 "
                     r"and k \d+, beyond the model's 8192 \(max_position_embeddings\)", line), line


@pytest.mark.parametrize("value, want", [(float("nan"), "a finite number"), (-0.5, "a number"),
                                         (float("inf"), "a finite number")])
def test_tolerance_must_be_a_finite_number_at_least_0(value, want):
    with pytest.raises(UserError, match=rf"^--tolerance .*: give {want} >= 0$"):
        build_config(**_click_defaults(tolerance=value))
    assert build_config(**_click_defaults(tolerance=0.0)).tolerance == 0.0


# --- hostile inputs: huge sizes, interrupted or failed runs, non-finite scores ---------------------

def test_threads_beyond_what_openmp_starts_are_refused():
    # 100000 threads crashed the process (segmentation fault) after the run folder was made
    with pytest.raises(UserError, match=r"--threads 100000: give an integer in 0\.\.1024"):
        build_config(**_click_defaults(threads=100000))
    assert build_config(**_click_defaults(threads=1024)).threads == 1024


def test_a_kv_cache_too_large_for_memory_is_bad_input_naming_the_options(tmp_path, monkeypatch, capsys):
    def no_memory(**kw):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory")
    monkeypatch.setattr("samspec_bench.bench.engines.kernels.make_case", no_memory)
    code, res = _run(tmp_path, "--pairs", "reference", "--num-seqs", "100000000000", "--gqa", "1", "--trials", "1")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and res is None
    assert len(err) == 1 and "--num-seqs 100000000000 x --seq-len 16:1024" in err[0] and "lower them" in err[0]
    assert not (tmp_path / "results").exists()          # no half-made run folder


class _CrashesLater(_Noisy):
    """A pair whose second case fails: the first case's row is already in kernel_cases.jsonl."""

    name = "test-crashes-later"
    calls = 0

    def verify(self, case):
        type(self).calls += 1
        if type(self).calls > 1:
            raise KeyboardInterrupt   # as Ctrl-C in the middle of the kernel level
        return super().verify(case)


def test_an_interrupted_run_leaves_no_folder_nor_a_resume_it_cannot_take(tmp_path, capsys):
    # op-equivalence has no --resume: the finished cases of an interrupted run are not kept
    register_pair(_CrashesLater)
    try:
        code, _ = _run(tmp_path, "--pairs", "test-crashes-later", "--num-seqs", "2", "--seq-len", "8:40",
                       "--gqa", "1,2", "--trials", "1")
    finally:
        del PAIRS[_CrashesLater.name]
    err = capsys.readouterr().err
    assert code == 130 and "--resume" not in err and "nothing finished was kept" in err
    assert not (tmp_path / "results").exists()


def test_non_finite_logprob_differences_are_shown_in_the_terminal():
    import io

    from rich.console import Console

    from samspec_bench.suites.op_equivalence.command import print_report

    row = {"positions": 16, "logprob_diff_max": float("nan"), "logprob_diff_non_finite": 3}
    buf = io.StringIO()
    print_report({"metrics": {"pairs": {"model/reference/float16": row}, "gate": None}, "run_dir": "x"},
                 Console(file=buf, width=300))
    assert ("model/reference/float16: 3 of 16 position(s) have a non-finite logprob difference"
            in buf.getvalue())


def test_a_data_dir_that_does_not_exist_is_refused_not_replaced_by_builtin_prompts(tmp_path):
    # it ran the 8 built-in math prompts, exit 0, recorded as --benchmark aime25 in config
    with pytest.raises(UserError, match=r"--data-dir .*nowhere: no such directory"):
        build_config(**_click_defaults(model="builtin:tiny-qwen3", data_dir=str(tmp_path / "nowhere"),
                                       benchmark="aime25"))


def test_builtin_prompts_in_place_of_the_benchmark_are_said_in_the_terminal():
    import io

    from rich.console import Console

    from samspec_bench.suites.op_equivalence.command import print_report

    buf = io.StringIO()
    note = "/tmp has no benchmarks/: 8 built-in math prompts, not --benchmark aime25"
    print_report({"metrics": {"pairs": {}, "gate": None}, "run_dir": "x",
                  "model_level": {"float32": {"prompts": {"builtin_prompts": True, "note": note}}}},
                 Console(file=buf, width=300))
    assert f"model level (float32) prompts: {note}" in buf.getvalue()
