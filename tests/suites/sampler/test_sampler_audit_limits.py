"""Nothing an audited sampler does goes unsaid: a call that never returns, a worker that dies,
an exception, or an output that is not token ids is an ERROR verdict with one line naming the
case; the other audits go on; an interrupted run folder is resumed from its finished audits or
removed. The planted samplers are modules in tmp_path, imported by the audit's worker process.
Nothing here waits on a clock: a hanging sampler blocks on an event forever, and the tests
wait on pipes and process handles."""

from __future__ import annotations

import json
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from samspec_bench.bench.rejection import samspec_sampler
from samspec_bench.cli import main
from samspec_bench.suites.sampler.adapters import Audited, resolve_audit
from samspec_bench.suites.sampler.audit import audit
from samspec_bench.suites.sampler.battery import build_battery
from samspec_bench.suites.sampler.config import SamplerConfig
from samspec_bench.suites.sampler.output_check import checked_tokens

SMALL = ["--no-builtin", "--no-speed", "--samples", "100", "--max-vocab", "60"]
FIRST = "case power-v4-k5"     # the battery's first case at --max-vocab 60 (vocabulary 4, k 5)
# A correct sampler; one that blocks forever on the battery's only 6-token case (telling a
# waiting test its pid through a FIFO first, when one is named); one whose process exits there.
PLANTED = {
    "good_sampler": "from samspec_bench.bench.rejection import samspec_sampler as verify\n",
    "hang_sampler": """
        import os, threading
        from samspec_bench.bench.rejection import samspec_sampler

        def verify(inp):
            if inp.vocab_size == 6:
                fifo = os.environ.get("SAMSPEC_TEST_FIFO")
                if fifo:
                    with open(fifo, "w") as f:
                        f.write(f"{os.getpid()}\\n")
                threading.Event().wait()
            return samspec_sampler(inp)
        """,
    "exit_sampler": """
        import os
        from samspec_bench.bench.rejection import samspec_sampler

        def verify(inp):
            if inp.vocab_size == 6:
                os._exit(3)
            return samspec_sampler(inp)
        """,
}


def _plant(folder: Path) -> None:
    for name, text in PLANTED.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text))


def _run(args) -> int:
    try:
        main(args)
    except SystemExit as e:
        return 0 if e.code is None else e.code
    return 0


# ------------------------------------------------------------------------- what a sampler returns


def _audit_of(fn):
    cfg = SamplerConfig(samples=100, max_vocab=60, speed=False)
    return audit(Audited("planted", "planted", "test", fn), cfg, build_battery(cfg))


def _raises(inp):
    raise ValueError("no kernel for this shape\nsecond line")


def _short(inp):
    return samspec_sampler(inp)[:, :-1]


def _nan(inp):
    out = samspec_sampler(inp).float()
    out[0, 0] = float("nan")
    return out


def _out_of_vocab(inp):
    out = samspec_sampler(inp)
    out[0, 0] = inp.vocab_size
    return out


def _fractional(inp):
    return torch.full_like(samspec_sampler(inp), 0.5, dtype=torch.float32)


def _nothing(inp):
    return None


def _short_when_greedy(inp):
    out = samspec_sampler(inp)
    return out[:1] if inp.all_greedy else out


@pytest.mark.parametrize("fn, needle", [
    (_raises, f"{FIRST}: ValueError: no kernel for this shape; second line"),
    (_short, f"{FIRST}, call 1: returned shape (750, 5), expected (750, 6)"),
    (_nan, f"{FIRST}, call 1: returned a non-finite value (nan) at row 0, position 0"),
    (_out_of_vocab, f"{FIRST}, call 1: token id 4 at row 0, position 0 is outside the vocabulary [0, 4)"),
    (_fractional, f"{FIRST}, call 1: returned 0.5 at row 0, position 0; token ids are integers"),
    (_nothing, f"{FIRST}, call 1: returned a NoneType, not a tensor of token ids"),
    (_short_when_greedy, "greedy check (probs, vocab 1000), call 1: returned shape (1, "),
], ids=["raises", "shape", "nan", "out-of-vocab", "fractional", "none", "greedy-shape"])
def test_a_sampler_breaking_the_contract_is_error_with_one_line(fn, needle):
    rec = _audit_of(fn)
    assert rec["verdict"] == "ERROR"
    assert "\n" not in rec["error"] and rec["error"].startswith(needle), rec["error"]


# ------------------------------------------------------------------------- the time limit


def test_a_hanging_sampler_is_error_naming_the_case_and_the_others_go_on(tmp_path, monkeypatch, capsys):
    _plant(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))     # the workers are spawned with this sys.path
    out = tmp_path / "res"
    code = _run(["sampler", "--output", str(out), *SMALL, "--audit-timeout", "2", "--audit", "hang_sampler:verify",
                 "--audit", "good_sampler:verify", "--audit", "exit_sampler:verify"])
    assert code == 1
    (run,) = out.glob("sampler-*")
    res = json.loads((run / "result.json").read_text())
    assert res["metrics"]["verdicts"] == {"hang_sampler:verify": "ERROR", "good_sampler:verify": "EXACT",
                                         "exit_sampler:verify": "ERROR"}
    errors = {a["name"]: a.get("error") for a in res["audits"]}
    assert errors["hang_sampler:verify"] == ("case flat-v6-k3, call 1: no result after 2 s (--audit-timeout 2); "
                                            "the sampler was stopped")
    assert errors["exit_sampler:verify"] == ("case flat-v6-k3, call 1: the worker process running the sampler "
                                            "ended (exit status 3)")
    assert not multiprocessing.active_children()   # every worker stopped
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("Error:")]
    assert len(err) == 1 and "hang_sampler:verify is ERROR (case flat-v6-k3" in err[0]


@pytest.mark.parametrize("args, needle", [
    (["--audit", "samspec", "--audit-timeout", "-1"], "--audit-timeout -1.0: give a number >= 0"),
    (["--audit", "samspec", "--audit-timeout", "nan"], "--audit-timeout nan: give a finite number >= 0"),
    (["--audit", "nocolon"], "--audit nocolon: expected module:function"),
    (["--audit", "planted_broken:verify"], "--audit planted_broken:verify: cannot import 'planted_broken' (ZeroDivisionError"),
])
def test_a_bad_limit_or_a_module_that_does_not_load_exits_2(tmp_path, monkeypatch, capsys, args, needle):
    (tmp_path / "planted_broken.py").write_text("x = 1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "res"
    assert _run(["sampler", "--output", str(out), *SMALL, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not out.exists() or not list(out.iterdir())    # no run folder left
    assert not multiprocessing.active_children()


# ------------------------------------------------------------------------- interrupted runs


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, int]:
    """The command in a new process whose hang_sampler tells the FIFO when it hangs; (process,
    the pidfd that reads ready when it ends)."""
    path = [str(tmp_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path),
               SAMSPEC_TEST_FIFO=str(tmp_path / "hung"))
    log = open(tmp_path / "log.txt", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "samspec_bench.cli", "sampler", *args], env=env,
                            stdout=log, stderr=log)
    log.close()
    return proc, os.pidfd_open(proc.pid)


def _hung_worker(tmp_path: Path, pidfd: int) -> int:
    """Wait until the sampler hangs (it writes its pid to the FIFO); the worker's pid."""
    fifo = os.open(tmp_path / "hung", os.O_RDONLY | os.O_NONBLOCK)
    try:
        ready, _, _ = select.select([fifo, pidfd], [], [], 600)
        assert fifo in ready, (tmp_path / "log.txt").read_text(errors="replace")[-2000:]
        return int(os.read(fifo, 64).decode().strip())
    finally:
        os.close(fifo)


def _ends(pid: int) -> bool:
    """Whether the process (not a child of this one) is gone or ends within a minute."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], 60)[0])
    finally:
        os.close(fd)


needs_pidfd = pytest.mark.skipif(not hasattr(os, "pidfd_open") or sys.platform != "linux",
                                 reason="waits on Linux process handles (pidfd)")


@needs_pidfd
def test_a_run_killed_mid_audit_resumes_from_its_finished_audits(tmp_path):
    _plant(tmp_path)
    os.mkfifo(tmp_path / "hung")
    out = tmp_path / "res"
    audits = ["--audit", "good_sampler:verify", "--audit", "hang_sampler:verify"]
    proc, pidfd = _start(tmp_path, "--output", str(out), *SMALL, *audits, "--audit-timeout", "600")
    worker = _hung_worker(tmp_path, pidfd)
    proc.kill()                                   # kill -9: nothing of the run can clean up
    proc.wait()
    os.close(pidfd)
    assert _ends(worker)                          # the worker does not outlive its parent
    (run,) = out.glob("sampler-*")
    assert [json.loads(line)["name"] for line in (run / "audits.jsonl").read_text().splitlines()] == \
        ["good_sampler:verify"]
    (tmp_path / "good_sampler.py").unlink()       # a resumed run that re-audited it would not load it
    proc, pidfd = _start(tmp_path, "--output", str(out), "--resume", str(run), *SMALL, *audits, "--audit-timeout", "2")
    assert proc.wait() == 1, (tmp_path / "log.txt").read_text(errors="replace")[-2000:]
    os.close(pidfd)
    res = json.loads((run / "result.json").read_text())
    assert res["metrics"]["verdicts"] == {"good_sampler:verify": "EXACT", "hang_sampler:verify": "ERROR"}
    assert len((run / "audits.jsonl").read_text().splitlines()) == 2


@needs_pidfd
def test_a_run_stopped_before_any_audit_finished_leaves_no_folder(tmp_path):
    _plant(tmp_path)
    os.mkfifo(tmp_path / "hung")
    out = tmp_path / "res"
    proc, pidfd = _start(tmp_path, "--output", str(out), *SMALL, "--audit", "hang_sampler:verify")
    worker = _hung_worker(tmp_path, pidfd)
    proc.send_signal(signal.SIGTERM)              # what `timeout` sends
    assert proc.wait() == 130
    os.close(pidfd)
    assert _ends(worker)
    assert not list(out.glob("sampler-*"))
    assert "interrupted before any audit finished" in (tmp_path / "log.txt").read_text(errors="replace")


def test_resume_refuses_other_audit_settings(tmp_path, capsys):
    out = tmp_path / "res"
    assert _run(["sampler", "--output", str(out), *SMALL, "--audit", "samspec"]) == 0
    (run,) = out.glob("sampler-*")
    capsys.readouterr()
    assert _run(["sampler", "--output", str(out), "--resume", str(run), *SMALL[:-2], "--max-vocab", "40",
                 "--audit", "samspec"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the run used max_vocab = 60, this call 40" in err[0]


def test_ids_as_a_list_or_integral_floats_are_token_ids():
    for given in ([[1, -1]], torch.tensor([[1.0, -1.0]])):
        t = checked_tokens(given, 1, 2, 5, "x")
        assert t.dtype == torch.int64 and t.tolist() == [[1, -1]]


# ------------------------------------------------------------------------- where a sampler lives, what it prints


def test_a_sampler_module_in_the_working_directory_loads_as_the_readme_runs_it(tmp_path, monkeypatch):
    (tmp_path / "cwd_planted_sampler.py").write_text(PLANTED["good_sampler"])
    monkeypatch.chdir(tmp_path)
    # a console script's sys.path: its own folder, not the working directory
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_planted_sampler", raising=False)
    a = resolve_audit("cwd_planted_sampler:verify", True)
    assert a.fn is not None and a.skipped is None


def test_an_in_process_sampler_that_prints_leaves_json_on_stdout_clean(tmp_path, monkeypatch, capsys):
    (tmp_path / "printing_sampler.py").write_text(textwrap.dedent("""
        from samspec_bench.bench.rejection import samspec_sampler
        print("loaded")

        def verify(inp):
            print("called")
            return samspec_sampler(inp)
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    code = _run(["sampler", "--output", str(tmp_path / "res"), *SMALL, "--audit-timeout", "0",
                 "--audit", "printing_sampler:verify", "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0
    assert json.loads(out)["metrics"]["verdicts"] == {"printing_sampler:verify": "EXACT"}
    assert "loaded" in err and "called" in err


def test_a_sampler_writing_into_its_inputs_is_said_in_the_terminal_and_the_table(tmp_path, monkeypatch, capsys):
    (tmp_path / "clamping_sampler.py").write_text(textwrap.dedent("""
        from samspec_bench.bench.rejection import samspec_sampler

        def verify(inp):
            out = samspec_sampler(inp)
            inp.target_probs.clamp_(min=1e-12)     # zeros become 1e-12 in the caller's tensor
            return out
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "res"
    assert _run(["sampler", "--output", str(out), *SMALL, "--audit-timeout", "0",
                 "--audit", "clamping_sampler:verify"]) == 0
    (row,) = json.loads(next(out.glob("sampler-*/result.json")).read_text())["tables"]["audits"]
    assert row["verdict"] == "EXACT" and "mixed-layout-v20" in row["mutated_inputs"]
    text = " ".join(capsys.readouterr().out.split())
    assert "clamping_sampler:verify wrote into its input tensors (case(s) mixed-layout-v20" in text
