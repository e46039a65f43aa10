"""The engine contracts of `bench/engines/base.py`: what each engine says it can do (the
capabilities suites ask instead of its name, answered before an engine or torch loads), and
the oracle drafter as the vLLM adapter hands it to SAM's proposer. No model, no vLLM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from samspec_bench.bench.engines.base import Request
from samspec_bench.bench.engines.factory import ENGINE_NAMES, engine_capabilities, engine_names, require_engine
from samspec_bench.bench.engines.oracle import OracleDrafter
from samspec_bench.bench.engines.replay import ReplayEngine
from samspec_bench.bench.engines.vllm.adapter import VllmEngine
from samspec_bench.bench.engines.vllm.arm import resolve_arm
from samspec_bench.bench.policies import make_policy
from samspec_bench.bench.vllm_proposer.proposer_options import EXTRA_KEY
from samspec_bench.errors import UserError
from samspec_bench.sam.drafters import SamDrafter

REPO = Path(__file__).resolve().parents[3]


def test_each_engine_class_carries_its_registry_entry():
    from samspec_bench.bench.engines.reference_engine import ReferenceEngine  # imports torch

    assert ReferenceEngine.capabilities is engine_capabilities("reference")
    assert VllmEngine.capabilities is engine_capabilities("vllm")
    assert ReplayEngine.capabilities is engine_capabilities("replay")


def test_engines_are_found_by_what_they_can_do():
    assert engine_names() == ("replay", "reference", "vllm")
    assert engine_names(generates=True) == ENGINE_NAMES == ("reference", "vllm")
    assert engine_names(needs_traces=True) == engine_names(exact_greedy_acceptance=True) == ("replay",)
    assert engine_names(teacher_forcing=True) == engine_names(kv_blocks_settable=True) == ("reference",)
    assert engine_names(mixed_oracle_widths=True) == ("reference",)
    assert engine_names(engine_args=True) == engine_names(method_at_build=True) == ("vllm",)
    assert engine_names(oracle_drafts=True) == ("reference", "vllm")
    assert engine_capabilities("reference").in_process_drafters
    assert not engine_capabilities("vllm").in_process_drafters
    assert "history" in engine_capabilities("replay").draft_sources
    assert "history" not in engine_capabilities("vllm").draft_sources


def test_an_unknown_engine_is_a_user_error_listing_the_engines():
    with pytest.raises(UserError, match=r"--engine 'sglang': use one of replay, reference, vllm"):
        engine_capabilities("sglang")
    require_engine("replay")   # the base install runs it: nothing to check


def test_capabilities_are_answered_without_torch_or_vllm():
    """Config validation asks before anything heavy loads: the factory imports with torch and
    vLLM unimportable."""
    code = ("import sys; sys.modules['torch'] = None; sys.modules['vllm'] = None\n"
            "from samspec_bench.bench.engines.factory import engine_capabilities\n"
            "print(engine_capabilities('reference').teacher_forcing, engine_capabilities('vllm').engine_args)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    got = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["True", "True"]


# --- the oracle through the vLLM adapter ------------------------------------------------------------

def _extra(arm, req_id, group=None):
    return arm.extra_args(Request(req_id, [1, 2, 3], group=group), f"key-{req_id}")[EXTRA_KEY]


def test_the_oracle_rides_sams_proposer_in_vllm():
    arm = resolve_arm(OracleDrafter({"a": [5, 6, 7], "b": [9]}), None, 4)
    assert (arm.method, arm.k, arm.label) == ("sam", 4, "sam (oracle)")
    assert _extra(arm, "a") == {"key": "key-a", "mode": "oracle", "k": 4, "oracle": [5, 6, 7]}
    assert _extra(arm, "c")["oracle"] == []            # no continuation: nothing to draft
    assert arm.drafter_record() == {"name": "oracle", "engine": "vllm"}


def test_oracle_widths_that_vary_and_policies_that_stop_drafting():
    with pytest.raises(UserError, match="mixed widths"):
        resolve_arm(OracleDrafter({"a": [5]}, mixed={"a": 1}), None, 3)
    off = resolve_arm(OracleDrafter({"a": [5]}), make_policy("off"), 3)
    assert off.method is None and off.oracle is None and _extra(off, "a") == {"key": "key-a", "mode": "none"}


def test_sam_drafter_options_reach_the_proposer():
    arm = resolve_arm(SamDrafter(group_sharing=True, l_threshold=2, length="fixed"), make_policy("threshold", 4), 3)
    ex = _extra(arm, "a", group="g1")
    assert ex == {"key": "key-a", "mode": "sam", "k": 3, "threshold": 4, "min_match": 2, "length": "fixed",
                  "group": "g1"}
    assert resolve_arm("ngram", None, 2).method == "ngram"
    with pytest.raises(UserError, match="'sam-python'"):
        resolve_arm("sam-python", None, 2)
