"""load_shape on config.json files: architectures ModelShape does not price are refused (one line naming the
file and the key), the ones it prices still load, and tie_word_embeddings follows the model type's default."""

import json

import pytest

from samspec_bench.errors import UserError
from samspec_bench.models import shapes as mc

# Trimmed from the published config.json files (the architecture-defining keys kept as published)
DSV3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128,
        "num_key_value_heads": 128, "num_hidden_layers": 61, "vocab_size": 129280, "tie_word_embeddings": False,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "moe_layer_freq": 1, "max_position_embeddings": 163840}
GEMMA2 = {"model_type": "gemma2", "head_dim": 256, "hidden_size": 3584, "intermediate_size": 14336,
          "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "sliding_window": 4096,
          "vocab_size": 256000, "max_position_embeddings": 8192}
LLAMA31 = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False,
           "max_position_embeddings": 131072, "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}}
MIXTRAL = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
           "vocab_size": 32000, "tie_word_embeddings": False, "sliding_window": None,
           "max_position_embeddings": 32768}
QWEN3_MOE = {**mc.CATALOGUE["Qwen/Qwen3-235B-A22B"], "sliding_window": None, "use_sliding_window": False,
             "max_window_layers": 94, "max_position_embeddings": 40960, "norm_topk_prob": True}


def _write(tmp_path, cfg, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return str(p)


def test_deepseek_v3_mla_and_routed_experts_are_refused_naming_file_and_keys(tmp_path):
    path = _write(tmp_path, DSV3)
    with pytest.raises(UserError) as e:
        mc.load_shape(path)
    msg = str(e.value)
    assert path in msg and "kv_lora_rank" in msg and "n_routed_experts" in msg and "full-context" in msg
    assert "\n" not in msg
    only_routed = {k: v for k, v in DSV3.items() if k not in mc.UNMODELLED_KEYS or k == "n_routed_experts"}
    with pytest.raises(UserError, match="n_routed_experts"):
        mc.load_shape(_write(tmp_path, only_routed, "routed.json"))
    lite = {**DSV3, "q_lora_rank": None}       # DeepSeek-V2-Lite: q_lora_rank null, the other MLA keys set
    with pytest.raises(UserError, match="kv_lora_rank"):
        mc.load_shape(_write(tmp_path, lite, "lite.json"))
    # what the reader prices stays read: Qwen3-MoE, Llama-3.1 and Mixtral config.json files
    moe = mc.load_shape(_write(tmp_path, QWEN3_MOE, "moe.json"))
    assert moe.total_params == mc.load_shape("Qwen3-235B-A22B").total_params and moe.is_moe
    llama = mc.load_shape(_write(tmp_path, LLAMA31, "llama.json"))
    assert llama.head_dim == 128 and not llama.is_moe and not llama.tie_word_embeddings
    mixtral = mc.load_shape(_write(tmp_path, MIXTRAL, "mixtral.json"))
    assert mixtral.num_experts == 8 and mixtral.moe_intermediate_size == 14336


def test_experts_per_token_without_an_expert_count_is_refused(tmp_path):
    cfg = {**LLAMA31, "num_experts_per_tok": 2}
    with pytest.raises(UserError, match="num_experts_per_tok"):
        mc.load_shape(_write(tmp_path, cfg))


@pytest.mark.parametrize("refused, loads", [
    (GEMMA2, {**GEMMA2, "max_position_embeddings": 4096}),               # a window as long as the context
    ({k: v for k, v in GEMMA2.items() if k != "sliding_window"},            # gemma2's default window: 4096
     {**GEMMA2, "sliding_window": None, "layer_types": ["full_attention"] * 42}),
    ({**LLAMA31, "model_type": "mistral", "max_position_embeddings": 32768},  # mistral's default window: 4096
     {**LLAMA31, "model_type": "mistral", "sliding_window": None}),
    ({**QWEN3_MOE, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 28},
     {**QWEN3_MOE, "use_sliding_window": True, "sliding_window": 4096}),  # max_window_layers: all 94 layers
    ({**LLAMA31, "layer_types": ["sliding_attention", "full_attention"] * 16},
     {**mc.CATALOGUE["Qwen/Qwen2.5-7B"], "use_sliding_window": False, "sliding_window": 131072,
      "max_window_layers": 28, "max_position_embeddings": 32768}),
    ({**LLAMA31, "attention_chunk_size": 8192}, {**LLAMA31, "attention_chunk_size": None}),
])
def test_sliding_window_shorter_than_the_context_is_refused(tmp_path, refused, loads):
    path = _write(tmp_path, refused)
    with pytest.raises(UserError, match="not modelled") as e:
        mc.load_shape(path)
    assert path in str(e.value) and "\n" not in str(e.value)
    s = mc.load_shape(_write(tmp_path, loads, "full.json"))
    assert s.total_params == mc.shape_from_config(loads).total_params


def test_absent_tie_word_embeddings_follows_the_model_types_default(tmp_path):
    untied = {k: v for k, v in mc.CATALOGUE["Qwen/Qwen3-8B"].items() if k != "tie_word_embeddings"}
    assert mc.load_shape(_write(tmp_path, untied, "qwen3.json")).tie_word_embeddings is False
    gemma = {k: v for k, v in GEMMA2.items() if k != "sliding_window"} | {"model_type": "gemma"}
    s = mc.load_shape(_write(tmp_path, gemma, "gemma.json"))
    assert s.tie_word_embeddings is True
    assert s.total_params == mc.shape_from_config({**gemma, "tie_word_embeddings": False}).total_params - (
        256000 * 3584)
    unknown = {**untied, "model_type": "phoenix"}
    with pytest.raises(UserError, match="tie_word_embeddings") as e:
        mc.load_shape(_write(tmp_path, unknown, "unknown.json"))
    assert "unknown.json" in str(e.value) and "phoenix" in str(e.value)
