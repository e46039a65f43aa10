"""The common RL models: their Hugging Face ids, short names and config.json shape fields.

`CATALOGUE` holds, per Hugging Face id, the fields of that model's public config.json
(https://huggingface.co/<id>/blob/main/config.json) that decide a forward pass's bytes and
FLOPs (model_catalog.py turns them into parameter counts and step costs). `ALIASES` maps the
short names (`Qwen3-8B`, the part after the organisation) to ids; `resolve_alias` is what
every `--model` goes through (models.resolve_model), so the table is here, below both
models.py and model_catalog.py. Copied from those config.json files; nothing is fetched.
"""

from __future__ import annotations

from typing import Any

def _dense(h, layers, heads, kv, inter, vocab, tie, model_type, head_dim=128):
    return {"model_type": model_type, "hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": head_dim, "intermediate_size": inter, "vocab_size": vocab,
            "tie_word_embeddings": tie}


# config.json fields (as published; head_dim of Qwen2 configs is hidden_size / heads = 128)
CATALOGUE: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-0.6B": _dense(1024, 28, 16, 8, 3072, 151936, True, "qwen3"),
    "Qwen/Qwen3-1.7B": _dense(2048, 28, 16, 8, 6144, 151936, True, "qwen3"),
    "Qwen/Qwen3-4B": _dense(2560, 36, 32, 8, 9728, 151936, True, "qwen3"),
    "Qwen/Qwen3-8B": _dense(4096, 36, 32, 8, 12288, 151936, False, "qwen3"),
    "Qwen/Qwen3-14B": _dense(5120, 40, 40, 8, 17408, 151936, False, "qwen3"),
    "Qwen/Qwen3-32B": _dense(5120, 64, 64, 8, 25600, 151936, False, "qwen3"),
    "Qwen/Qwen3-30B-A3B": {**_dense(2048, 48, 32, 4, 6144, 151936, False, "qwen3_moe"),
                           "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                           "decoder_sparse_step": 1, "mlp_only_layers": []},
    "Qwen/Qwen3-235B-A22B": {**_dense(4096, 94, 64, 4, 12288, 151936, False, "qwen3_moe"),
                             "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1536,
                             "decoder_sparse_step": 1, "mlp_only_layers": []},
    "Qwen/Qwen2.5-1.5B": _dense(1536, 28, 12, 2, 8960, 151936, True, "qwen2"),
    "Qwen/Qwen2.5-3B": _dense(2048, 36, 16, 2, 11008, 151936, True, "qwen2"),
    "Qwen/Qwen2.5-7B": _dense(3584, 28, 28, 4, 18944, 152064, False, "qwen2"),
    "Qwen/Qwen2.5-14B": _dense(5120, 48, 40, 8, 13824, 152064, False, "qwen2"),
    "Qwen/Qwen2.5-32B": _dense(5120, 64, 40, 8, 27648, 152064, False, "qwen2"),
    "Qwen/Qwen2.5-72B": _dense(8192, 80, 64, 8, 29568, 152064, False, "qwen2"),
    "Qwen/Qwen2.5-Math-1.5B": _dense(1536, 28, 12, 2, 8960, 151936, True, "qwen2"),
    "Qwen/Qwen2.5-Math-7B": _dense(3584, 28, 28, 4, 18944, 152064, False, "qwen2"),
    "Qwen/Qwen2.5-Math-72B": _dense(8192, 80, 64, 8, 29568, 152064, False, "qwen2"),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": _dense(1536, 28, 12, 2, 8960, 151936, False, "qwen2"),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": _dense(3584, 28, 28, 4, 18944, 152064, False, "qwen2"),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": _dense(5120, 48, 40, 8, 13824, 152064, False, "qwen2"),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": _dense(5120, 64, 40, 8, 27648, 152064, False, "qwen2"),
}

# Ids whose config.json has the same shape as a catalogue entry (instruct / base variants of one
# architecture): load_shape accepts them, resolve_alias keeps them as they are.
SAME_SHAPE: dict[str, str] = {
    **{f"Qwen/Qwen3-{s}-Base": f"Qwen/Qwen3-{s}" for s in ("0.6B", "1.7B", "4B", "8B", "14B", "30B-A3B")},
    **{f"Qwen/Qwen2.5-{s}-Instruct": f"Qwen/Qwen2.5-{s}" for s in ("1.5B", "3B", "7B", "14B", "32B", "72B")},
    **{f"Qwen/Qwen2.5-Math-{s}-Instruct": f"Qwen/Qwen2.5-Math-{s}" for s in ("1.5B", "7B", "72B")},
}

# short name (the part after the organisation) -> Hugging Face id; matched case-insensitively
ALIASES: dict[str, str] = {mid.split("/", 1)[1]: mid for mid in (*CATALOGUE, *SAME_SHAPE)}
_BY_LOWER = {**{k.lower(): v for k, v in ALIASES.items()}, **{m.lower(): m for m in (*CATALOGUE, *SAME_SHAPE)}}


def resolve_alias(name: str) -> str:
    """The Hugging Face id for a short name or id of the catalogue (`Qwen3-8B`, `qwen3-8b`,
    `Qwen/Qwen3-8B` -> `Qwen/Qwen3-8B`); any other name (a path, builtin:...) is returned as given."""
    return _BY_LOWER.get(str(name).strip().lower(), name)
