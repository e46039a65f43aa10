"""`samspec-bench op-equivalence`: the comparison metrics, the kernel level, the model level on
the tiny Qwen3, the --tolerance gate and the output files."""

from __future__ import annotations

import json
import math

import pytest
import torch

from samspec_bench.bench.engines.attention import paged_attention_decode, paged_attention_splitfuse
from samspec_bench.bench.engines.kernels import PAIRS, KernelPair, register_pair
from samspec_bench.cli import main
from samspec_bench.suites.op_equivalence import Accumulator, OpEqConfig, apply_gate, histogram


def _lp(x):
    return torch.log_softmax(x, -1)


def test_identical_paths_give_zero_everywhere():
    torch.manual_seed(0)
    a = _lp(torch.randn(20, 50))
    acc = Accumulator()
    acc.add(a, a.clone(), torch.randint(0, 50, (20,)))
    s = acc.summary()
    assert s["positions"] == 20
    for k in ("logprob_diff_max", "logprob_diff_mean", "logprob_diff_p99", "argmax_flip_rate", "kl_mean", "kl_max",
              "full_logprob_diff_max", "rollout_probs_diff_max", "rollout_probs_diff_mean", "rollout_probs_diff_std"):
        assert s[k] == 0, k
    assert s["exact_zero_fraction"] == 1 and s["full_exact_zero_fraction"] == 1
    assert s["rollout_actor_probs_pearson_corr"] == pytest.approx(1.0)
    assert s["histogram"]["zero"] == 20 and sum(s["histogram"]["counts"]) == 0


def test_metrics_against_hand_computed_values():
    la = _lp(torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 3.0]], dtype=torch.float64)).float()
    lb = _lp(torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]], dtype=torch.float64)).float()
    toks = torch.tensor([0, 2])
    acc = Accumulator()
    acc.add(la, lb, toks)
    s = acc.summary()
    d0 = abs(float(la[0, 0]) - float(lb[0, 0]))
    assert s["logprob_diff_max"] == pytest.approx(d0)
    assert s["exact_zero_fraction"] == 0.5
    assert s["argmax_flip_rate"] == 0.5
    pa, pb = la.double().exp(), lb.double().exp()
    kl0 = float((pa[0] * (pa[0].log() - pb[0].log())).sum())
    assert s["kl_max"] == pytest.approx(kl0, rel=1e-6)
    assert s["kl_mean"] == pytest.approx(kl0 / 2, rel=1e-6)
    pdiff = abs(float(pa[0, 0] - pb[0, 0]))
    assert s["rollout_probs_diff_max"] == pytest.approx(pdiff)
    assert s["rollout_probs_diff_mean"] == pytest.approx(pdiff / 2)
    assert s["rollout_probs_diff_std"] == pytest.approx(float(torch.tensor([pdiff, 0.0]).std()))


def test_kl_is_infinite_where_b_rules_out_a_token_a_allows():
    la = _lp(torch.tensor([[0.0, 0.0]]))
    lb = torch.tensor([[0.0, -math.inf]])
    acc = Accumulator()
    acc.add(la, lb, torch.tensor([0]))
    s = acc.summary()
    assert math.isinf(s["kl_max"]) and s["kl_infinite_positions"] == 1


def test_histogram_bins():
    h = histogram([0.0, 0.0, 1e-12, 3e-7, 5e-3, 2.0])
    assert h["zero"] == 2
    edges = h["log10_edges"]
    assert sum(h["counts"]) == 4
    assert h["counts"][0] == 1                          # below 1e-10 lands in the first bin
    assert h["counts"][edges.index(-7)] == 1            # 3e-7 in [1e-7, 1e-6)
    assert h["counts"][edges.index(-3)] == 1
    assert h["counts"][-1] == 1                         # 2.0 clipped into the last bin


def test_gate():
    rows = {"kernel/a/float32": {"logprob_diff_max": 0.0}, "model/b/float32": {"logprob_diff_max": 1e-3}}
    assert apply_gate(OpEqConfig(), rows) is None
    g = apply_gate(OpEqConfig(tolerance=1e-4), rows)
    assert not g["passed"] and [f["row"] for f in g["failed"]] == ["model/b/float32"]
    assert apply_gate(OpEqConfig(tolerance=1e-2), rows)["passed"]


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


def test_bad_options_are_one_line_errors(tmp_path, capsys):
    for args, words in ((["--dtype", "float64"], "--dtype"), (["--pairs", "nope"], "unknown kernel pair"),
                        (["--level", "model"], "--model"), (["-k", "0"], "-k"), (["--seq-len", "9:3"], "--seq-len")):
        with pytest.raises(SystemExit) as e:
            main(["op-equivalence", "--output", str(tmp_path), "--no-progress", *args])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err


def test_model_level_on_the_tiny_qwen3(tmp_path):
    code, res = _run(tmp_path, "--model", "builtin:tiny-qwen3", "--level", "model", "--num-prompts", "2",
                     "--max-tokens", "12", "-k", "2", "--prompts", str(_prompts_file(tmp_path)))
    assert code == 0
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
