"""op-equivalence: an option of a level that does not run is refused (nothing silent).

Model-level options with `--level kernel` (or without --model) and kernel-level options with
`--level model` used to be accepted and ignored (exit 0, identical results); they are a one-line
error naming them, exit 2, before any device, engine or model lookup. Options both levels read
(-k, --dtype, --device, --tolerance, --threads) are taken by either.
"""

from __future__ import annotations

import json

import pytest

from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.suites.op_equivalence import build_config, command

KERNEL = ["--level", "kernel", "--trials", "1", "--num-seqs", "1", "--seq-len", "16:32", "--gqa", "1",
          "--device", "cpu", "--no-progress"]
MODEL = ["--level", "model", "--model", "builtin:tiny-qwen3", "--device", "cpu", "--no-progress"]


def _config(argv: list[str]):
    ctx = command.make_context("op-equivalence", list(argv))
    return build_config(**{k: v for k, v in ctx.params.items() if k not in ("output", "json_path")})


def _exit2(argv: list[str], tmp_path, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(["op-equivalence", "--output", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())   # nothing ran
    return err


@pytest.mark.parametrize("extra, named", [
    (["--model", "builtin:tiny-qwen3"], "--model"),
    (["--benchmark", "math500"], "--benchmark"),
    (["--num-prompts", "3"], "--num-prompts"),
    (["--max-tokens", "5"], "--max-tokens"),
    (["--drafter", "ngram"], "--drafter"),
    (["--no-control"], "--no-control"),
    (["--chat-template", "never"], "--chat-template"),
    (["--prompts", "/no/such/prompts.txt"], "--prompts"),      # a missing file was not even looked at
    (["--data-dir", "/no/such/dir"], "--data-dir"),
    (["--engine", "vllm"], "--engine"),                         # uninstalled here: never checked
])
def test_model_level_options_with_level_kernel_are_refused(extra, named, tmp_path, capsys):
    err = _exit2(KERNEL + extra, tmp_path, capsys)
    assert err.startswith(f"error: {named}: model-level option") and "(--level kernel)" in err
    assert "add model to --level" in err


def test_several_are_named_together():
    with pytest.raises(UserError) as e:
        _config(KERNEL + ["--prompts", "/nope", "--engine", "vllm", "--num-prompts", "3"])
    assert str(e.value).startswith("--engine, --prompts, --num-prompts: model-level options, and the model level "
                                   "does not run (--level kernel)")


def test_model_level_options_without_model_are_refused():
    """The default levels without --model run the kernel level only: the model options are unused."""
    with pytest.raises(UserError, match=r"^--num-prompts: model-level option, and the model level does not run "
                                        r"\(no --model\); add --model"):
        _config(["--num-prompts", "3"])


@pytest.mark.parametrize("extra, named", [
    (["--trials", "1"], "--trials"), (["--num-seqs", "2"], "--num-seqs"), (["--seq-len", "16:32"], "--seq-len"),
    (["--block-size", "32"], "--block-size"), (["--num-heads", "4"], "--num-heads"), (["--gqa", "1"], "--gqa"),
    (["--head-dim", "32"], "--head-dim"), (["--pairs", "reference"], "--pairs"), (["--seed", "3"], "--seed"),
])
def test_kernel_level_options_with_level_model_are_refused(extra, named):
    with pytest.raises(UserError) as e:
        _config(MODEL + extra)
    assert str(e.value).startswith(f"{named}: kernel-level option, and the kernel level does not run "
                                   "(--level model); add kernel to --level")


def test_options_both_levels_read_are_taken_by_either():
    shared = ["-k", "2", "--dtype", "float32,bfloat16", "--tolerance", "0.1", "--tolerance-metric", "kl_max",
              "--threads", "2"]
    kernel = _config(KERNEL + shared)
    model = _config(MODEL + shared)
    for cfg in (kernel, model):
        assert (cfg.k, cfg.dtypes, cfg.tolerance, cfg.threads, cfg.device) == (2, ["float32", "bfloat16"], 0.1, 2, "cpu")
    # each level's own options with its level, and both with both
    assert _config(KERNEL + ["--pairs", "reference", "--seed", "4"]).pairs == ["reference"]
    cfg = _config(MODEL + ["--num-prompts", "3", "--no-control", "--drafter", "ngram"])
    assert (cfg.num_prompts, cfg.control, cfg.drafter) == (3, False, "ngram")
    cfg = _config(["--model", "builtin:tiny-qwen3", "--trials", "1", "--num-prompts", "3", "--device", "cpu"])
    assert (cfg.levels, cfg.trials, cfg.num_prompts) == (["kernel", "model"], 1, 3)


def test_the_base_kernel_command_still_runs(tmp_path, capsys):
    out = tmp_path / "r.json"
    main(["op-equivalence", *KERNEL, "--pairs", "reference", "--output", str(tmp_path / "res"), "--json", str(out)])
    res = json.loads(out.read_text())
    assert set(res["metrics"]["pairs"]) == {"kernel/reference/float32"} and res["config"]["model"] is None


@pytest.mark.parametrize("argv, needle", [
    (KERNEL + ["--tolerance-metric", "kl_max"], "--tolerance-metric kl_max without --tolerance: no gate runs"),
    (MODEL + ["--tolerance", "0", "--tolerance-metric", "output_diff_max"],
     "--tolerance-metric output_diff_max: measured at the kernel level only, and it does not run (--level model)"),
])
def test_a_gate_metric_that_nothing_would_check_is_refused(argv, needle, tmp_path, capsys):
    assert needle in _exit2(argv, tmp_path, capsys)
