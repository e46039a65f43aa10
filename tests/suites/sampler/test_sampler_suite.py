"""The exactness battery, the audit adapters and the `samspec-bench sampler` command
(the statistics alone: test_sampler_stats.py). Seeds are fixed: the verdicts below are
deterministic, not merely likely."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch

from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.bench.rejection import rejection_sample, samspec_logits_sampler, samspec_sampler
from samspec_bench.bench.rejection.loop import loop_sampler
from samspec_bench.suites.sampler.adapters import Audited, adapt, resolve_audit
from samspec_bench.suites.sampler.audit import analyse_case, audit, run_case
from samspec_bench.suites.sampler.battery import Case, Template, build_battery
from samspec_bench.suites.sampler.config import SamplerConfig, parse_vocab
from samspec_bench.suites.sampler.controls import block_verification, block_verify_demo, no_exclusion_demo
from samspec_bench.suites.sampler.speed import speed_benchmark

SMALL = dict(samples=1500, max_vocab=1000, seed=0, speed=False)


# ------------------------------------------------------------------------- verdicts


def _audit(fn, name="x", logits_fn=None, **cfg):
    c = SamplerConfig(**{**SMALL, **cfg})
    a = Audited(name, name, "test", fn, "contract", logits_fn)
    return audit(a, c, build_battery(c))


def test_exact_sampler_passes_every_check():
    rec = _audit(samspec_sampler, "samspec", logits_fn=samspec_logits_sampler)
    assert rec["verdict"] == "EXACT", rec.get("evidence")
    assert rec["acceptance_matches_token_rule"], rec["acceptance_evidence"]
    assert rec["greedy"]["mismatches"] == 0 and rec["seeded"]["reproducible"]
    assert [g["shape"] for g in rec["greedy"]["by_shape"]] == ["probs", "logits"]
    assert not rec["mutated_inputs"] and not rec["not_applicable"]
    kinds = {t["kind"] for t in rec["table"]}
    assert {"layout", "over-acceptance", "acceptance", "token", "bonus"} <= kinds
    assert any(t["case"].startswith("logits-path") for t in rec["table"])
    assert any(t["template"].endswith("/seeded") for t in rec["table"])
    # a probability-level sampler cannot be given temperatures: the logits cases are named as not applicable
    rec = _audit(samspec_sampler, "samspec")
    assert rec["verdict"] == "EXACT" and rec["not_applicable"][0].startswith("logits-path")


def test_block_verification_on_deterministic_drafts_is_flagged_lossy():
    rec = _audit(block_verify_demo, "block-verify-demo")
    assert rec["verdict"] == "LOSSY"
    ev = rec["evidence"][0]
    assert ev["p_value"] < rec["alpha_per_test"]
    # The early positions are over-accepted: more trials accept than any exact sampler can,
    # and so are the acceptance counts.
    assert any(e["kind"] == "over-acceptance" and e["excess"] > 0 for e in rec["evidence"])
    assert rec["acceptance_matches_token_rule"] is False
    assert rec["greedy"]["mismatches"] == 0   # greedy rows are untouched: only sampling is lossy


def test_recovering_without_removing_the_draft_is_flagged_lossy():
    rec = _audit(no_exclusion_demo, "no-exclusion")
    assert rec["verdict"] == "LOSSY"
    assert any(e["kind"] == "token" for e in rec["evidence"])


def test_wrong_greedy_and_bad_layout_are_flagged():
    def off_by_one_greedy(inp):
        out = samspec_sampler(inp)
        if inp.all_greedy:
            out[:, 0] = torch.where(out[:, 0] >= 0, (out[:, 0] + 1) % inp.vocab_size, out[:, 0])
        return out

    rec = _audit(off_by_one_greedy)
    assert rec["verdict"] == "LOSSY" and rec["greedy"]["mismatches"] > 0

    def no_placeholders(inp):
        out = samspec_sampler(inp)
        return torch.where(out == -1, torch.zeros_like(out), out)

    rec = _audit(no_placeholders)
    assert rec["verdict"] == "LOSSY"
    assert any(e["kind"] == "layout" for e in rec["evidence"])


def test_crashing_sampler_is_error():
    def boom(inp):
        raise RuntimeError("kernel not available on cpu")

    rec = _audit(boom)
    assert rec["verdict"] == "ERROR" and "kernel not available" in rec["error"]


# ------------------------------------------------------------------------- adapters


def _vllm_style(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_probs,
                bonus_token_ids, sampling_metadata):
    """A function with vLLM's rejection_sample signature (as vLLM <= 0.11 has it)."""
    greedy = None if sampling_metadata.all_greedy else sampling_metadata.temperature == 0
    if sampling_metadata.all_greedy:
        greedy = torch.ones(len(num_draft_tokens), dtype=torch.bool)
    return rejection_sample(draft_token_ids, num_draft_tokens, target_probs, max_spec_len=max_spec_len,
                            cu_num_draft_tokens=cu_num_draft_tokens, draft_probs=draft_probs,
                            bonus_token_ids=bonus_token_ids, is_greedy=greedy,
                            generators=sampling_metadata.generators).to(torch.int32)


def _vllm_logits_style(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                       target_logits, bonus_token_ids, sampling_metadata, synthetic_mode=False):
    """vLLM >= 0.2x: processed logits in, softmax inside."""
    probs = target_logits.softmax(-1, dtype=torch.float32)
    return _vllm_style(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, probs,
                       bonus_token_ids, sampling_metadata)


@pytest.mark.parametrize("fn", [_vllm_style, _vllm_logits_style])
def test_vllm_signature_is_adapted(fn):
    wrapped, shape, style = adapt(fn, "test:vllm")
    assert style == "vllm" and shape == "probs"
    rec = _audit(wrapped, max_vocab=200, samples=800)
    assert rec["verdict"] == "EXACT", rec.get("evidence")


def test_resolve_audit_errors_name_the_input():
    with pytest.raises(UserError, match="--audit nocolon"):
        resolve_audit("nocolon", True)
    with pytest.raises(UserError, match="cannot import"):
        resolve_audit("no_such_module_xyz:fn", True)
    with pytest.raises(UserError, match="no attribute"):
        resolve_audit("samspec_bench.bench.rejection:nope", True)
    with pytest.raises(UserError, match="not callable"):
        resolve_audit("samspec_bench.bench.rejection:PLACEHOLDER_TOKEN_ID", True)
    with pytest.raises(UserError, match="required arguments"):
        adapt(lambda a, b: None, "x:two")
    # one that cannot take the inputs at all: bad input (exit 2), not the sampler's ERROR verdict
    with pytest.raises(UserError, match="--audit x:none: takes no positional argument"):
        adapt(lambda: None, "x:none")
    with pytest.raises(UserError, match="--audit x:kw: requires keyword-only mode"):
        adapt(lambda inputs, *, mode: None, "x:kw")
    assert adapt(lambda *args: None, "x:var")[1:] == ("probs", "contract")


@pytest.mark.parametrize("builtin, module", [("vllm", "vllm"), ("vllm-ascend", "vllm_ascend")])
def test_a_builtin_third_party_sampler_is_skipped_where_it_does_not_import(builtin, module):
    rec = resolve_audit(builtin, False)
    if importlib.util.find_spec(module) is None:
        assert rec.fn is None and rec.skipped.startswith("not importable")
    else:
        assert rec.skipped is None and rec.fn is not None


@pytest.mark.parametrize("old, new, fn", [
    ("samspec_bench.sam.rejection:samspec_sampler", "samspec_bench.bench.rejection:samspec_sampler", samspec_sampler),
    ("samspec_bench.sam.rejection_loop:loop_sampler", "samspec_bench.bench.rejection.loop:loop_sampler", loop_sampler),
    ("samspec_bench.suites.sampler:no_exclusion_demo", "samspec_bench.suites.sampler.controls:no_exclusion_demo",
     no_exclusion_demo)])
def test_a_moved_modules_old_name_still_loads_its_sampler(old, new, fn):
    # earlier built-in targets (in older result.json files and command lines) load from the new module,
    # and the run keeps the name the user wrote
    rec = resolve_audit(old, True)
    assert rec.fn is fn and rec.name == old and rec.target == new
    with pytest.raises(UserError, match="no attribute"):
        resolve_audit(old.partition(":")[0] + ":nope", True)


def test_parse_vocab():
    assert parse_vocab("32k,151k,1000") == (32000, 151936, 1000) and parse_vocab("qwen3") == (151936,)
    for bad in ("foo", "1", ""):
        with pytest.raises(UserError):
            parse_vocab(bad)


# ------------------------------------------------------------------------- speed (not timed)


def test_speed_benchmark_outputs_agree_and_resume_skips_done_rows():
    cfg = SamplerConfig(speed_batches=(1, 3), speed_ks=(1, 3), speed_vocabs=(64,), speed_reps=2,
                        speed_min_seconds=0.0)
    earlier = {"vocab": 64, "k": 3, "batch": 3, "note": "from the interrupted run"}
    timed = []
    rows = speed_benchmark(cfg, done={"64/3/3": earlier}, on_row=lambda key, row: timed.append(key))
    assert [(r["vocab"], r["k"], r["batch"]) for r in rows] == [(64, 1, 1), (64, 1, 3), (64, 3, 1), (64, 3, 3)]
    assert timed == ["64/1/1", "64/1/3", "64/3/1"] and rows[3]["note"] == "from the interrupted run"
    # the vectorised sampler, both loop references and the eager layout return the same tokens
    assert all(r["outputs_equal"] for r in rows[:3])
    assert all(r["calls"]["vectorised"] >= 5 and r["calls"]["loop"] >= 2 for r in rows[:3])
    if importlib.util.find_spec("vllm") is None:       # vLLM's own sampler: only where it imports
        assert all(r["vllm_ms"] is None and r["ratio_vs_vllm"] is None for r in rows[:3])


def test_a_speed_grid_too_large_for_memory_is_bad_input_naming_the_options(monkeypatch):
    def no_memory(*a, **k):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory")
    monkeypatch.setattr("samspec_bench.suites.sampler.speed._speed_table", no_memory)
    cfg = SamplerConfig(speed_batches=(1, 99999999), speed_ks=(2,), speed_vocabs=(1000,), speed_min_seconds=0.0)
    with pytest.raises(UserError, match=r"--speed-vocab 1000 with --speed-k 2 x --speed-batch 99999999: .*"
                                        r"do not fit in cpu's memory; lower --speed-batch"):
        speed_benchmark(cfg)


def test_resume_counts_damaged_records_and_redoes_them(tmp_path):
    from samspec_bench.results import RunDir
    from samspec_bench.suites.sampler.running import saved_records

    rd = RunDir(tmp_path, "sampler")
    good = {"vocab": 64, "k": 1, "batch": 1, "loop_ms": 1.0, "vectorised_ms": 0.5, "ratio": 2.0, "loop_lazy_ms": 1.0,
            "ratio_vs_loop_lazy": 2.0, "ratio_min": 2.0, "acceptance_rate": 0.7, "outputs_equal": True,
            "device": "cpu", "timer": "t"}
    for rec in ({"name": "samspec", "verdict": "EXACT"}, {"name": 5}, {"name": "x", "verdict": "MAYBE"}):
        rd.append_sample(rec, "audits.jsonl")
    for rec in ({"key": "64/1/1", "row": good}, {"key": "x"}, {"key": "64/1/3", "row": {**good, "ratio": "fast"}},
                {"key": "64/9/9", "row": good}):
        rd.append_sample(rec, "speed.jsonl")
    audits, speed, damaged = saved_records(rd, "cpu", "t")
    assert list(audits) == ["samspec"] and list(speed) == ["64/1/1"]
    assert damaged == {"audits.jsonl": 2, "speed.jsonl": 3}
    assert saved_records(rd, "cuda:0", "t")[1] == {}    # another device's rows are not this run's


def test_a_max_vocab_below_every_case_is_refused_and_skipped_cases_are_counted(tmp_path, capsys):
    # --max-vocab 2 left no battery case: samspec read EXACT on its 2 greedy checks, exit 0
    base = ["sampler", "--output", str(tmp_path / "r"), "--no-speed", "--samples", "100", "--builtins", "samspec",
            "--large-vocab", "1024"]
    assert _run([*base, "--max-vocab", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --max-vocab 2: every battery case has a larger vocabulary")
    assert not (tmp_path / "r").exists()
    assert _run([*base, "--max-vocab", "50", "--json", str(tmp_path / "r.json")]) == 0
    assert "--max-vocab 50: 5 battery case(s) with a larger vocabulary skipped" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["config"]["battery_skipped_by_max_vocab"] == 5


# ------------------------------------------------------------------------- command


def _run(args) -> int:
    try:
        main(args)
    except SystemExit as e:
        return 0 if e.code is None else e.code
    return 0


def test_command_writes_result_table_and_figures(tmp_path, capsys):
    out = tmp_path / "res"
    js = tmp_path / "r.json"
    code = _run(["sampler", "--output", str(out), "--json", str(js), "--samples", "400", "--max-vocab", "60",
                 "--builtins", "samspec,token-rule,vllm,block-verify-demo",
                 "--speed-batch", "1,2", "--speed-k", "1,3", "--speed-vocab", "64", "--speed-reps", "1", "--speed-min-time", "0"])
    assert code == 0
    runs = list(out.glob("sampler-*"))
    assert len(runs) == 1
    res = json.loads((runs[0] / "result.json").read_text())
    assert res["suite"] == "sampler"
    v = res["metrics"]["verdicts"]
    assert v["samspec"] == "EXACT" and v["token-rule"] == "EXACT" and v["block-verify-demo"] == "LOSSY"
    assert (v["vllm"] == "SKIPPED") == (importlib.util.find_spec("vllm") is None)
    assert res["metrics"]["negative_controls_flagged"] and res["metrics"]["speed_outputs_equal"]
    assert set(res["figures"]) == {"tv_vs_samples.png", "speed_ratio.png"}
    for f in res["figures"]:
        assert (runs[0] / f).stat().st_size > 1000
    assert json.loads(js.read_text())["metrics"]["verdicts"] == v
    assert res["power"]["templates"] and "power_detects_1pct_loss_at_every_position" in res["metrics"]
    printed = capsys.readouterr()
    assert "EXACT" in printed.out + printed.err
    assert "NOT detected" in printed.out + printed.err     # 400 samples: the power statement says so


def test_command_json_to_stdout_and_lossy_audit_exit_code(tmp_path, capsys):
    # the negative control under its older spelling (the package used to re-export it)
    code = _run(["sampler", "--output", str(tmp_path), "--json", "-", "--no-builtin", "--no-speed", "--samples", "400",
                 "--max-vocab", "60", "--audit", "samspec_bench.suites.sampler:no_exclusion_demo"])
    assert code == 1
    cap = capsys.readouterr()
    res = json.loads(cap.out)
    assert res["metrics"]["verdicts"] == {"samspec_bench.suites.sampler:no_exclusion_demo": "LOSSY"}
    assert "LOSSY" in cap.err


@pytest.mark.parametrize("args, needle", [
    (["--speed-vocab", "foo"], "--speed-vocab"),
    (["--speed-k", "0"], "--speed-k"),
    (["--audit", "no_such_module_xyz:fn"], "--audit"),
    (["--samples", "5"], "--samples"),
    (["--no-builtin", "--no-speed"], "nothing to do"),
    (["--builtins", "samspec,nope"], "--builtins"),
    (["--large-vocab", "500"], "--large-vocab"),
    (["--seed", "-1"], "--seed -1: give an integer in 0.."),
    (["--seed", str(2 ** 64)], f"--seed {2 ** 64}: give an integer in 0.."),
    (["--speed-reps", "0"], "--speed-reps 0: give an integer >= 1"),
    (["--speed-min-time", "-1"], "--speed-min-time -1.0: give a number >= 0"),
    (["--speed-min-time", "nan"], "--speed-min-time nan: give a finite number >= 0"),
])
def test_command_bad_input_exits_2(tmp_path, capsys, args, needle):
    code = _run(["sampler", "--output", str(tmp_path), "--no-speed", *args] if "--no-speed" not in args
                else ["sampler", "--output", str(tmp_path), *args])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0]


# ------------------------------------------------------------------------- block verification


def test_correct_block_verification_is_exact_with_a_different_acceptance_law():
    # On a case built so that the block rule accepts much more (an unlikely first draft
    # compensated by a likely second one), exact per position while the acceptance law differs.
    tgt = np.array([[0.3, 0.7, 0.0], [0.9, 0.1, 0.0], [0.2, 0.3, 0.5]])
    q = np.array([[0.9, 0.1, 0.0], [0.3, 0.7, 0.0]])
    case = Case("block-gain-v3-k2", 3, [Template("gain", tgt, q=q)])
    run = run_case(block_verification, case, 4000, seed=3, device="cpu")
    tests = analyse_case(case, run, 1e-5, seed=3)
    assert all(t["passed"] for t in tests if not t.get("informational")), [t for t in tests if not t["passed"]]
    acc = [t for t in tests if t["kind"] == "acceptance"][0]
    assert not acc["passed"] and acc["observed_mean_accepted"] > acc["expected_mean_accepted"] + 0.1
