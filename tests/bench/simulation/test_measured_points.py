"""Points files as other tools write them (bench/simulation/measured_points.py): a byte-order
mark, a meta line after the points, a cut-off last line, `.ndjson`; the shape a meta names beyond
hidden size and layers (Qwen2.5-32B and Qwen3-32B share both); a variant of the row's GPU; the
torch profiler's meta (model name, layers, device dict) checked like the others."""

import json

import pytest

from samspec_bench.bench.simulation.measured_points import (device_check, device_warning, is_point_file, load_points,
                                                             shape_check, shape_warning)
from samspec_bench.errors import UserError
from samspec_bench.models.shapes import load_shape

META = {"meta": {"device": "NVIDIA H100 80GB HBM3"}}
ROWS = ['{"B": 1, "q": 1, "C": 1024, "ms": 7.2}', '{"B": 8, "q": 1, "C": 1024, "ms": 8.1}']


def test_a_byte_order_mark_is_not_data(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + "\n".join([json.dumps(META), *ROWS]).encode() + b"\r\n")
    rows, meta = load_points(p)
    assert len(rows) == 2 and meta["device"] == "NVIDIA H100 80GB HBM3"


def test_a_meta_line_after_point_rows_is_refused(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join([ROWS[0], json.dumps(META), ROWS[1]]) + "\n")
    with pytest.raises(UserError, match="line 2 is a meta line after point rows"):
        load_points(p)


def test_a_cut_off_last_line_is_named_as_such(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join([json.dumps(META), ROWS[0], ROWS[1][:15]]))
    with pytest.raises(UserError, match=r"line 3 is not JSON \(the last line, cut off"):
        load_points(p)


def test_ndjson_is_a_points_file():
    assert is_point_file("a.ndjson") and is_point_file("a.JSONL") and not is_point_file("a.json")


def test_heads_and_widths_of_the_meta_are_compared_not_only_hidden_and_layers():
    # tools/step_physics.py's info line of the Qwen3-32B shape, priced as Qwen2.5-32B (hidden 5120, 64 layers too)
    meta = {"device": "NVIDIA H100 80GB HBM3", "model": {"hidden": 5120, "layers": 64, "q_heads": 64, "kv_heads": 8,
                                                          "head_dim": 128, "inter": 25600, "vocab": 151936}}
    sc = shape_check(meta, load_shape("Qwen2.5-32B"))
    assert sc["same"] is False and sc["measured"] == sc["priced"]
    assert sc["differs"]["num_attention_heads"] == {"measured": 64, "priced": 40}
    assert "num_attention_heads 64 (priced 40)" in shape_warning(sc)
    assert shape_check(meta, load_shape("Qwen3-32B"))["same"] is True
    text = {"model_shape": "hidden 5120, 64 layers, 64 q heads, 8 kv heads, head_dim 128, intermediate 25600, vocab 151936"}
    assert shape_check(text, load_shape("Qwen2.5-32B"))["differs"]["intermediate_size"]["priced"] == 27648


@pytest.mark.parametrize("device, variant", [("NVIDIA H100 PCIe", "form factor PCIe (priced SXM)"),
                                             ("NVIDIA H100 NVL", "form factor NVL (priced SXM)"),
                                             ("NVIDIA H100 80GB HBM3", None)])
def test_a_variant_of_the_rows_gpu_is_not_the_same_device(device, variant):
    dc = device_check({"device": device}, "H100 SXM 80GB")
    assert dc["variant"] == variant and dc["same"] is (variant is None)
    assert (device_warning(dc) is None) is (variant is None)
    a100 = device_check({"device": "NVIDIA A100-SXM4-40GB"}, "A100 SXM 80GB")
    assert a100["same"] is False and a100["variant"] == "memory 40 GB (priced 80 GB)"


# the meta line `rollout profile --engine torch` writes: model as given, the layers it built, devices.device_info
TORCH_META = {"profiler": "torch", "model": "Qwen3-8B", "layers": 2, "dtype": "float32",
              "device": {"device": "cuda", "type": "cuda", "name": "NVIDIA H100 80GB HBM3"}}


def test_the_torch_profilers_meta_is_checked_for_shape_and_device():
    sc = shape_check(TORCH_META, load_shape("Qwen3-8B"))
    assert sc["same"] is False and sc["measured"] == {"hidden_size": 4096, "num_hidden_layers": 2}
    assert "hidden 4096, 2 layers" in shape_warning(sc) and "36 layers" in shape_warning(sc)
    assert shape_check({**TORCH_META, "layers": 36}, load_shape("Qwen3-8B"))["same"] is True
    assert shape_check({**TORCH_META, "layers": 36}, load_shape("Qwen3-14B"))["same"] is False
    dc = device_check(TORCH_META, "H200 SXM 141GB")
    assert dc["same"] is False and dc["measured_hardware"] == "H100" and "NVIDIA H100 80GB HBM3" in device_warning(dc)
    cpu = {**TORCH_META, "device": {"device": "cpu", "type": "cpu", "name": "AMD EPYC"}}
    assert device_check(cpu, "H100 SXM 80GB")["measured_hardware"] == "cpu"


def test_a_torch_profile_of_a_model_not_known_here_is_checked_on_its_layers():
    meta = {**TORCH_META, "model": "builtin:smollm2-135m"}   # not built for a check
    sc = shape_check(meta, load_shape("Qwen3-8B"))
    assert sc["same"] is False and sc["measured"] == {"num_hidden_layers": 2}
    assert "2 layers (hidden size not known here)" in shape_warning(sc)
    assert shape_check({**meta, "layers": 36}, load_shape("Qwen3-8B"))["same"] is True


def test_a_points_file_is_named_by_the_option_that_gave_it(tmp_path):
    with pytest.raises(UserError) as e:
        load_points(tmp_path / "missing.jsonl", "--also Qwen3-32B=")
    assert str(e.value).startswith(f"--also Qwen3-32B={tmp_path / 'missing.jsonl'}: cannot read it")
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join([json.dumps(META), ROWS[0], '{"B": 2, "q": 1, "C": 8, "ms": "slow"}']) + "\n")
    with pytest.raises(UserError, match=r"^--also Qwen3-32B=.*p\.jsonl: line 3: ms='slow'"):
        load_points(p, "--also Qwen3-32B=")


@pytest.mark.parametrize("written, same", [("torch.bfloat16", True), ("bf16", True), ("BFloat16", True),
                                           ("float32", False), ("torch.float32", False), ("fp16", False)])
def test_a_points_dtype_is_read_in_torchs_names_and_compared_with_the_priced_one(written, same):
    from samspec_bench.bench.simulation.measured_points import dtype_check, dtype_warning
    dc = dtype_check({"dtype": written}, "bfloat16")
    assert dc["same"] is same and dc["priced"] == "bfloat16"
    assert (dtype_warning(dc) is None) is same
    assert dtype_check({}, "bfloat16") is None and dtype_check({"dtype": written}, None) is None
