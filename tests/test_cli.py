"""The command line: fast help without heavy imports, every listed command loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from samspec_bench.cli import group
from samspec_bench.commands import COMMANDS


def _help_and_heavy_modules(argv: list[str]) -> str:
    """What `samspec-bench <argv>` prints, then the heavy modules it left imported."""
    code = (f"import sys\nfrom samspec_bench.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'vllm', 'lm_eval', 'transformers') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_help_imports_no_torch_vllm_or_lm_eval():
    out = _help_and_heavy_modules(["--help"])
    assert "HEAVY []" in out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("command, option", [("sampler", "--audit"), ("run", "--config")])
def test_a_commands_help_imports_no_torch_vllm_or_lm_eval(command, option):
    # the sampler's audits and `run`'s steps run torch; their --help must not load it
    out = _help_and_heavy_modules([command, "--help"])
    assert option in out and "HEAVY []" in out


def test_every_listed_command_loads_and_has_help():
    runner = CliRunner()
    for name in COMMANDS:
        res = runner.invoke(group, [name, "--help"])
        assert res.exit_code == 0, (name, res.output)
        # the table points at this command (not another suite's): its usage line and name say so
        usage = res.output.splitlines()[0]
        assert usage.startswith("Usage: ") and f" {name} [OPTIONS]" in usage, (name, usage)
        assert group.get_command(None, name).name == name
        assert "--json" in res.output or "--output" in res.output, name


def test_unknown_command_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "samspec_bench.cli", "frobnicate"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "frobnicate" in proc.stderr


@pytest.mark.parametrize("argv, shown", [
    (["rollout", "--engine", "replay", "--traces", "a.jsonl", "--traces", "b.jsonl"], "--traces given 2 times"),
    (["rollout", "--draws", "2", "--draws=3"], "--draws given 2 times"),
    (["rollout", "--no-sensitivity", "--sensitivity"], "given 2 times"),
    (["accept", "-k", "3", "-k5"], "-k given 2 times"),
    (["rollout", "profile", "--engine", "torch", "--engine", "reference"], "--engine given 2 times"),
])
def test_an_option_of_one_value_given_twice_is_refused(argv, shown, tmp_path):
    # click would keep the last value and drop the first without a word
    proc = subprocess.run([sys.executable, "-m", "samspec_bench.cli", *argv], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and shown in proc.stderr
    assert not (tmp_path / "results").exists()


def test_repeatable_options_and_option_like_values_pass_the_repeat_check():
    from samspec_bench.cli import repeated_single_options
    accept = group.get_command(None, "accept")
    assert repeated_single_options(accept, ["--traces", "a", "--traces", "b", "--on-error", "skip"]) == []
    # a value that looks like an option is the option's value, not a second use of it
    assert repeated_single_options(accept, ["--output", "-k", "-k", "3"]) == []
    assert repeated_single_options(accept, ["-k", "3", "--", "-k", "4"]) == []


RESUMABLE = ["accept", "accuracy", "compare", "dominance", "drafters", "rollout", "run", "sampler"]


@pytest.mark.parametrize("name", RESUMABLE)
def test_output_elsewhere_than_the_resumed_folder_is_refused(name, tmp_path):
    # a resumed run writes into its own folder: another --output root was ignored without a word
    (tmp_path / "old" / "x").mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "samspec_bench.cli", name, "--output", "new",
                           "--resume", "old/x"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "--output new with --resume old/x" in proc.stderr
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("argv", [["--output", "old", "--resume", "old/x"], ["--resume", "old/x"]])
def test_output_holding_the_resumed_folder_or_left_out_passes_the_check(argv, tmp_path):
    (tmp_path / "old" / "x").mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "samspec_bench.cli", "rollout", *argv],
                          capture_output=True, text=True, cwd=tmp_path)
    # refused later for other reasons (no data, no run there), never for --output beside --resume
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "with --resume" not in proc.stderr


# --- --model through one resolution path, from any directory -----------------------------------------

REPO = Path(__file__).resolve().parents[1]


def _offline_env(tmp_path: Path) -> dict[str, str]:
    """This checkout importable from anywhere, an empty Hugging Face cache, the hub off."""
    env = {k: v for k, v in os.environ.items() if k not in ("SAMSPEC_DATA_DIR", "HF_HOME", "HF_HUB_CACHE")}
    return {**env, "PYTHONPATH": str(REPO), "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1",
            "SAMSPEC_CACHE": str(tmp_path / "cache")}


@pytest.mark.parametrize("argv", [
    ["accept", "--model", "Qwen3-8B"],
    ["accept", "--model", "Qwen3-8B", "--engine", "reference"],
    ["accuracy", "--model", "Qwen3-8B", "--limit", "1"],
    ["op-equivalence", "--model", "Qwen3-8B", "--level", "model"],
    ["rollout", "--engine", "reference", "--model", "Qwen3-8B"],
    ["rollout", "profile", "--model", "Qwen3-8B"],
    ["run", "--model", "Qwen3-8B"],
])
def test_short_model_name_offline_is_one_line_naming_the_id_and_the_download(argv, tmp_path):
    """From a directory with no shared data (a pip-installed harness in the user's home): each
    suite that takes --model looks the short name up in the alias table and the HF cache, and
    says in one line which id is missing and how to download it; nothing is left behind."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    proc = subprocess.run([sys.executable, "-m", "samspec_bench.cli", *argv], cwd=cwd, env=_offline_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    # the same words from every suite: one resolution path (models.resolve_model and the alias table)
    assert re.fullmatch(r"error: model ('Qwen3-8B' \()?Qwen/Qwen3-8B\)?: its weights are not in the Hugging Face cache "
                        r"\(.*\) and HF_HUB_OFFLINE is set: download it where the hub is reachable: "
                        r"hf download Qwen/Qwen3-8B", err), err
    assert "HF_HUB_OFFLINE" in err and str(tmp_path / "hub") in err
    assert not any(cwd.rglob("*")), "a run folder was left behind"


def test_accept_short_model_name_offline_without_the_flag(tmp_path):
    """HF_HUB_OFFLINE unset and no network (the hub download fails, here by a stand-in that
    cannot connect): the last line still names the id and the command; exit 2."""
    env = _offline_env(tmp_path)
    del env["HF_HUB_OFFLINE"]
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"   # nothing listens there: the download fails at once
    proc = subprocess.run([sys.executable, "-m", "samspec_bench.cli", "accept", "--model", "Qwen3-8B"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "Qwen/Qwen3-8B" in last and "downloading failed" in last and last.endswith("hf download Qwen/Qwen3-8B")


_SELF_TERM = """
import os, signal, sys
import click
from samspec_bench import cli
from samspec_bench.results import RunDir

@click.command("selfterm")
@click.option("--out")
@click.option("--work", is_flag=True)
def selfterm(out, work):
    run = RunDir(out, "accept")
    if work:
        (run.path / "responses.jsonl").write_text('{"k": 1}\\n')
    os.kill(os.getpid(), signal.SIGTERM)   # what timeout, Slurm or Kubernetes send
    for _ in range(10 ** 7):
        pass
    sys.exit(5)   # not reached: the signal ends the command

cli.COMMANDS["selfterm"] = ("__main__:selfterm", "a run that gets SIGTERM")
cli.main(sys.argv[1:])
"""


@pytest.mark.parametrize("work", [True, False])
def test_sigterm_ends_a_run_as_ctrl_c_naming_the_folder_to_resume(tmp_path, work):
    """SIGTERM gives exit 130 and one line: the folder holding finished work and --resume, or,
    where nothing was finished, that nothing was kept (and no empty folder is left)."""
    out = tmp_path / "runs"
    res = subprocess.run([sys.executable, "-c", _SELF_TERM, "selfterm", "--out", str(out), *(["--work"] if work else [])],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 130, res.stderr
    folders = list(out.iterdir()) if out.exists() else []
    if work:
        (run,) = folders
        assert f"continue with --resume {run}" in res.stderr and (run / "responses.jsonl").exists()
    else:
        assert folders == [] and "interrupted: nothing finished was kept" in res.stderr
