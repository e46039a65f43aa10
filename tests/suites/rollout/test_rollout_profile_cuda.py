"""`samspec-bench rollout profile --device cuda`: a step profile measured on the device, labelled
with the device and its timer (device time), and a trace replay priced by it."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from device_cli import run_cli
from samspec_bench.cli import group

pytestmark = pytest.mark.cuda

QWEN = "qwen25math_math_100x8.jsonl"


@pytest.fixture(scope="module")
def profile(small_qwen3, tmp_path_factory, accel_device):
    path = tmp_path_factory.mktemp("profile") / "profile.json"
    args = ["rollout", "profile", "--model", str(small_qwen3), "--device", accel_device, "--batch-sizes", "1,4",
            "--tokens", "16", "-k", "3", "--prompt-pad", "0,64", "--output", str(path)]
    res = CliRunner().invoke(group, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return path, json.loads(path.read_text())


def test_the_profile_names_the_device_and_its_timer(profile, accel_kind, on_accelerator):
    _, doc = profile
    assert doc["format"] == 3 and doc["kind"] == "step-profile"
    assert doc["device"]["type"] == accel_kind and doc["engine"]["device"].startswith(accel_kind)
    if on_accelerator:
        assert doc["timer"].startswith("cuda device time"), doc["timer"]
        assert doc["device"]["name"] and doc["device"]["cuda"], doc["device"]
    steps = doc["measured_steps"]["time_s"]
    assert steps and all(t > 0 for t in steps)
    assert doc["model"]["fit"]["verify_widths"].get("3", 0) >= 3   # enough k=3 verify steps to price k=3


def test_a_replay_is_priced_by_the_device_profile(profile, traces_dir, qwen3_tokenizer_dir, tmp_path, accel_kind):
    path, _ = profile
    result = run_cli(["rollout", "--traces", traces_dir / QWEN, "--tokenizer", qwen3_tokenizer_dir,
                      "--step-model", path, "--max-num-seqs", 16, "--output", tmp_path / "runs"],
                     tmp_path / "rollout.json")
    m = result["metrics"]
    assert m["priced_by"]["source"] == str(path) and m["priced_by"]["engine"]["device"].startswith(accel_kind)
    assert m["units"] == "s" and "modelled" in m["time_basis"]
    for arm, a in m["arms"].items():
        assert math.isfinite(a["completion"]["makespan_s"]) and a["completion"]["makespan_s"] > 0, arm
