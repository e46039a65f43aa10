"""Architecture shapes of the models RL users roll out, for analytic step-time models.

`CATALOGUE` (rl_models.py, re-exported here) holds, per Hugging Face id, the fields of that model's public config.json
(https://huggingface.co/<id>/blob/main/config.json) that decide how many bytes a forward
pass reads and how many FLOPs it does: hidden_size, num_hidden_layers, num_attention_heads,
num_key_value_heads, head_dim, intermediate_size, vocab_size, tie_word_embeddings, and for
mixture-of-experts models num_experts, num_experts_per_tok, moe_intermediate_size, the shared
expert's size and which layers are MoE (decoder_sparse_step / mlp_only_layers). No weights,
nothing fetched: the values were copied from those config.json files.

`ModelShape` derives parameter counts (total; active per token for MoE), weight bytes per
dtype and KV-cache bytes per token. Counted per layer: q/k/v/o projections (with the q/k/v
biases of Qwen2 and the per-head q/k norms of Qwen3), the two RMSNorms, the SwiGLU MLP
(gate, up, down) or the router plus experts (plus a shared expert and its gate where the
model has one); then the embedding, the LM head when it is not tied, and the final norm.
The counts reproduce the published sizes (Qwen3-8B 8.2 B, Qwen3-32B 32.8 B, Qwen3-235B-A22B
235 B total / 22 B active, ...; tests/models/test_model_catalog.py).

`load_shape(spec)`: a catalogue id or short alias (`Qwen3-8B` -> `Qwen/Qwen3-8B`, case does
not matter), a config.json path (or a directory holding one), or `builtin:<name>` (the
config.json of samspec_bench.models.checkpoints.resolve_model). `resolve_alias(name)` maps a short name
to its Hugging Face id and is shared with `--model` handling elsewhere. A config.json whose architecture
ModelShape does not price (MLA, DeepSeek-style routed experts, sliding-window attention shorter than the
context, ...) is refused by `check_modelled`, naming the file and the key, rather than priced as something else.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import resolve_model
from samspec_bench.models.rl_names import ALIASES, CATALOGUE, SAME_SHAPE, resolve_alias  # noqa: F401 - public here too

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
REQUIRED_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
QWEN2_ATTENTION_BIAS = ("qwen2", "qwen2_moe")      # Qwen2 attention has q/k/v biases (no config key)
QK_NORM_TYPES = ("qwen3", "qwen3_moe")              # Qwen3: RMSNorm over each q and k head


# tie_word_embeddings when config.json leaves it out: the model type's own config class default (installed
# transformers 5.x, models/<type>/configuration_<type>.py; its PreTrainedConfig base sets none, and the 4.x base's
# True is overridden by all of these). Another model type without the key is refused by load_shape.
TIE_DEFAULTS = {**dict.fromkeys(("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"), False),
                **dict.fromkeys(("gemma", "gemma2", "gemma3_text"), True)}
# Keys of architectures ModelShape does not price; set (not null/0/empty), load_shape refuses the config.
_MLA = "multi-head latent attention (DeepSeek-V2/V3 MLA: compressed KV, its own head dims)"
_ROUTED = "DeepSeek/Llama-4-style routed or shared experts"
UNMODELLED_KEYS = {**dict.fromkeys(("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                    "v_head_dim"), _MLA),
                   **dict.fromkeys(("n_routed_experts", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
                                    "moe_num_experts", "num_shared_experts", "interleave_moe_layer_step",
                                    "ffn_config"), _ROUTED),
                   "attention_chunk_size": "chunked (local) attention"}
# sliding_window when config.json leaves it out and the type applies it without use_sliding_window (transformers)
SLIDING_DEFAULTS = {"mistral": 4096, "gemma2": 4096, "gemma3_text": 4096}
USE_SLIDING_TYPES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")   # window only with use_sliding_window: true
SUPPORTED = ("dense or Qwen/Mixtral-style MoE (num_experts or num_local_experts, num_experts_per_tok, "
             "moe_intermediate_size, decoder_sparse_step, mlp_only_layers, shared_expert_intermediate_size) with "
             "full-context MHA/GQA attention")


def _hf(model_id: str) -> str:
    return f"{model_id} config.json (https://huggingface.co/{model_id}/blob/main/config.json)"


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal config's `text_config` (with the outer tie_word_embeddings), else the config itself."""
    if isinstance(cfg.get("text_config"), Mapping):
        return {**cfg["text_config"], **{k: v for k, v in cfg.items() if k == "tie_word_embeddings"}}
    return cfg


def _sliding_window(cfg: Mapping[str, Any]) -> Any:
    """The attention window some layers use (None: every layer attends to the whole context), as transformers
    builds it: explicit layer_types, else sliding_window (Qwen types: only with use_sliding_window, and only on
    layers from max_window_layers, default 28)."""
    mtype = str(cfg.get("model_type", ""))
    window = cfg["sliding_window"] if "sliding_window" in cfg else SLIDING_DEFAULTS.get(mtype)
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list) and any(k != "full_attention" for k in kinds):
        return window or "per layer_types"
    if not cfg.get("use_sliding_window", mtype not in USE_SLIDING_TYPES):
        return None
    first = cfg.get("max_window_layers", 28)
    if mtype in USE_SLIDING_TYPES and isinstance(first, int) and first >= int(cfg["num_hidden_layers"]):
        return None
    return window


def check_modelled(cfg: Mapping[str, Any], where: str) -> None:
    """UserError (one line, naming `where` and the key) for a config whose architecture ModelShape would price
    wrongly: MLA, routed experts it does not read, sliding/chunked windows shorter than the context, or no
    tie_word_embeddings for a model type whose default is not known here."""
    cfg = _text_config(cfg)
    found: dict[str, list[str]] = {}
    for key, what in UNMODELLED_KEYS.items():
        if cfg.get(key) not in (None, 0, False, [], {}):
            found.setdefault(what, []).append(key)
    if found:
        said = "; ".join(f"{', '.join(keys)} ({what})" for what, keys in found.items())
        raise UserError(f"model config {where}: {said}: not modelled; the roofline prices {SUPPORTED}")
    if cfg.get("num_experts_per_tok") and not (cfg.get("num_experts") or cfg.get("num_local_experts")):
        raise UserError(f"model config {where}: num_experts_per_tok is set but neither num_experts nor "
                        f"num_local_experts (experts it would price as dense); the roofline prices {SUPPORTED}")
    window, context = _sliding_window(cfg), cfg.get("max_position_embeddings")
    if window is not None and not (isinstance(window, int) and isinstance(context, int) and window >= context):
        over = f"shorter than max_position_embeddings={context}" if context else "and no max_position_embeddings"
        raise UserError(f"model config {where}: sliding_window={window} (sliding-window attention, {over}): not "
                        f"modelled; the roofline prices {SUPPORTED}")
    mtype = str(cfg.get("model_type", ""))
    if "tie_word_embeddings" not in cfg and mtype not in TIE_DEFAULTS:
        raise UserError(f"model config {where}: no tie_word_embeddings and model_type {mtype!r} has no known "
                        f"default (known: {', '.join(TIE_DEFAULTS)}); add \"tie_word_embeddings\": true or false")


@dataclass(frozen=True)
class ModelShape:
    """What a forward pass of a decoder-only transformer reads and computes."""
    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int                # dense SwiGLU width (layers that are not MoE)
    vocab_size: int
    tie_word_embeddings: bool
    attention_bias: bool = False          # q/k/v projection biases
    qk_norm: bool = False                 # per-head RMSNorm on q and k
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    moe_layers: tuple[int, ...] = ()      # indices of the MoE layers
    source: str = ""

    # ---- per-layer parameter counts
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and len(self.moe_layers) > 0

    @property
    def attention_params_per_layer(self) -> int:
        h, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        n = h * q + 2 * h * kv + q * h
        if self.attention_bias:
            n += q + 2 * kv
        if self.qk_norm:
            n += 2 * self.head_dim
        return n + 2 * h                  # + the two RMSNorms of the layer

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_expert_params(self) -> int:    # + its sigmoid gate (hidden -> 1)
        s = self.shared_expert_intermediate_size
        return 3 * self.hidden_size * s + self.hidden_size if s else 0

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.num_experts

    @property
    def num_moe_layers(self) -> int:
        return len(self.moe_layers) if self.num_experts else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_hidden_layers - self.num_moe_layers

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """The output projection's parameters (the embedding matrix itself when tied)."""
        return self.vocab_size * self.hidden_size

    # ---- model totals
    @property
    def attention_params(self) -> int:
        return self.num_hidden_layers * self.attention_params_per_layer

    @property
    def moe_always_params(self) -> int:
        """MoE layers' parameters every token uses: router and shared expert."""
        return self.num_moe_layers * (self.router_params + self.shared_expert_params)

    @property
    def total_params(self) -> int:
        n = self.attention_params + self.num_dense_layers * self.dense_mlp_params
        n += self.moe_always_params + self.num_moe_layers * self.num_experts * self.expert_params
        n += self.embedding_params + (0 if self.tie_word_embeddings else self.lm_head_params) + self.hidden_size
        return n

    @property
    def active_params(self) -> int:
        """Parameters one token uses (MoE: num_experts_per_tok routed experts per MoE layer);
        includes the embedding and LM head, as published "activated" sizes do."""
        idle = self.num_moe_layers * (self.num_experts - self.num_experts_per_tok) * self.expert_params
        return self.total_params - idle

    @property
    def non_embedding_params(self) -> int:
        return self.total_params - self.embedding_params - (0 if self.tie_word_embeddings else self.lm_head_params)

    def weight_bytes(self, dtype: str = "bfloat16") -> int:
        return self.total_params * dtype_bytes(dtype)

    def kv_bytes_per_token(self, dtype: str = "bfloat16", kv_heads: int | None = None) -> int:
        """KV-cache bytes one token adds over all layers (keys and values); `kv_heads` overrides
        the number of KV heads (one tensor-parallel rank's share)."""
        heads = self.num_key_value_heads if kv_heads is None else kv_heads
        return 2 * self.num_hidden_layers * heads * self.head_dim * dtype_bytes(dtype)

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["moe_layers"] = f"{len(self.moe_layers)} of {self.num_hidden_layers}" if self.moe_layers else "none"
        d.update(total_params=self.total_params, active_params_per_token=self.active_params,
                 kv_bytes_per_token_bf16=self.kv_bytes_per_token("bfloat16"))
        return d


def dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise UserError(f"dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def shape_from_config(cfg: Mapping[str, Any], name: str = "config", source: str = "") -> ModelShape:
    """A ModelShape from a config.json dict (Hugging Face field names; a multimodal config's
    `text_config` is used when present). Missing fields -> UserError naming them."""
    cfg = _text_config(cfg)
    missing = [k for k in REQUIRED_KEYS if cfg.get(k) is None]
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    if not experts and cfg.get("intermediate_size") is None:
        missing.append("intermediate_size")
    if experts:
        if cfg.get("num_experts_per_tok") is None:
            missing.append("num_experts_per_tok")
        if cfg.get("moe_intermediate_size") is None and cfg.get("num_local_experts") is None:
            missing.append("moe_intermediate_size")
    if missing:
        raise UserError(f"model config {name}: missing {', '.join(missing)}; pass a Hugging Face config.json "
                        "with these fields, or a catalogue name (" + ", ".join(sorted(ALIASES)[:4]) + ", ...)")
    try:
        h, layers, heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
        kv = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or h // heads)
        mtype = str(cfg.get("model_type", ""))
        moe_layers: tuple[int, ...] = ()
        inter = int(cfg.get("intermediate_size") or 0)
        moe_inter = int(cfg.get("moe_intermediate_size") or 0)
        if experts:
            if cfg.get("num_local_experts"):          # Mixtral style: every layer MoE, experts of intermediate_size
                moe_inter, moe_layers = moe_inter or inter, tuple(range(layers))
            else:
                step = int(cfg.get("decoder_sparse_step") or 1)
                dense_only = set(int(i) for i in (cfg.get("mlp_only_layers") or []))
                moe_layers = tuple(i for i in range(layers) if (i + 1) % step == 0 and i not in dense_only)
        shape = ModelShape(
            name=name, hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
            head_dim=head_dim, intermediate_size=inter, vocab_size=int(cfg["vocab_size"]),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", TIE_DEFAULTS.get(mtype, False))),
            attention_bias=bool(cfg.get("attention_bias", mtype in QWEN2_ATTENTION_BIAS)),
            qk_norm=mtype in QK_NORM_TYPES, num_experts=int(experts),
            num_experts_per_tok=int(cfg.get("num_experts_per_tok") or 0), moe_intermediate_size=moe_inter,
            shared_expert_intermediate_size=int(cfg.get("shared_expert_intermediate_size") or 0),
            moe_layers=moe_layers, source=source)
    except (TypeError, ValueError) as e:
        raise UserError(f"model config {name}: a shape field is not a number ({e}); fix the config.json") from None
    bad = [k for k, v in (("hidden_size", h), ("num_hidden_layers", layers), ("num_attention_heads", heads),
                          ("num_key_value_heads", kv), ("head_dim", head_dim), ("vocab_size", shape.vocab_size))
           if v < 1]
    if bad:
        raise UserError(f"model config {name}: {', '.join(bad)} must be >= 1")
    return shape


def catalogue_shape(model_id: str) -> ModelShape:
    mid = SAME_SHAPE.get(model_id, model_id)
    return shape_from_config(CATALOGUE[mid], name=model_id, source=_hf(mid))


def load_shape(spec: str) -> ModelShape:
    """A ModelShape from a catalogue id or alias, `builtin:<name>`, or a config.json path (or
    a directory holding config.json)."""
    spec = str(spec).strip()
    mid = resolve_alias(spec)
    if mid in CATALOGUE or mid in SAME_SHAPE:
        return catalogue_shape(mid)
    if spec.startswith("builtin:"):
        path = resolve_model(spec) / "config.json"
    else:
        path = Path(spec).expanduser()
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise UserError(f"model {spec!r}: not in the catalogue and not a config.json path; use a catalogue name "
                            f"({', '.join(sorted(ALIASES, key=str.lower))}), builtin:smollm2-135m, or the path of a "
                            "Hugging Face config.json")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"model config {path}: cannot read it as JSON ({e}); pass a Hugging Face config.json") from None
    if not isinstance(cfg, dict):
        raise UserError(f"model config {path}: not a JSON object; pass a Hugging Face config.json")
    shape = shape_from_config(cfg, name=spec, source=f"{path}")
    check_modelled(cfg, str(path))
    return shape
