"""The model half of the reference engine: a Hugging Face Llama / Mistral / Qwen2 / Qwen3
decoder run with its own weights and modules but our paged attention (`attention.py`) over
the engine's KV cache, so that decode and verify can take different attention paths.
`batch_invariant=True` runs the linear layers one token at a time (same GEMV per row)."""

from __future__ import annotations

import torch

from samspec_bench.bench.engines.attention import PagedAttentionMetadata, paged_attention
from samspec_bench.bench.engines.kv_cache import PagedKVCache
from samspec_bench.errors import UserError

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")

def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class PagedDecoder:
    """The forward pass of a HF decoder-only model over a paged KV cache. Uses the model's
    modules for everything but attention; the attention math is `attention.py`'s."""

    def __init__(self, model: torch.nn.Module, batch_invariant: bool = False):
        config = model.config
        mtype = getattr(config, "model_type", None)
        if mtype not in SUPPORTED_MODEL_TYPES:
            raise UserError(f"model type {mtype!r} is not supported by the reference engine: use a model "
                            f"of the {', '.join(SUPPORTED_MODEL_TYPES)} families")
        for attr in ("final_logit_softcapping", "attn_logit_softcapping"):
            if getattr(config, attr, None):
                raise UserError(f"the model sets {attr}, which the reference engine does not implement")
        base = getattr(model, "model", None)
        needed = ("embed_tokens", "layers", "norm", "rotary_emb")
        if base is None or not all(hasattr(base, a) for a in needed) or not hasattr(model, "lm_head"):
            raise UserError(f"{type(model).__name__} does not have the decoder layout the reference engine "
                            "expects (model.embed_tokens / layers / norm / rotary_emb, lm_head)")
        self.model = model
        self.config = config
        self.embed = base.embed_tokens
        self.layers = list(base.layers)
        self.norm = base.norm
        self.rotary = base.rotary_emb
        self.lm_head = model.lm_head
        attn0 = self.layers[0].self_attn
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(getattr(config, "num_key_value_heads", None) or self.num_heads)
        self.scale = float(getattr(attn0, "scaling", self.head_dim ** -0.5))
        self.vocab_size = int(self.lm_head.weight.shape[0])
        self.windows: list[int | None] = []
        for layer in self.layers:
            attn = layer.self_attn
            for a in ("q_proj", "k_proj", "v_proj", "o_proj"):
                if not hasattr(attn, a):
                    raise UserError(f"{type(model).__name__}: attention without {a}: not supported")
            w = getattr(attn, "sliding_window", None)
            if mtype == "mistral":
                w = getattr(config, "sliding_window", None)
            self.windows.append(int(w) if w else None)
        self.batch_invariant = batch_invariant
        self.attention_impl = "fixed-order" if batch_invariant else "gemm"
        p = next(model.parameters())
        self.dtype, self.device = p.dtype, p.device

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def _linear(self, mod: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        if not self.batch_invariant or x.shape[0] <= 1:
            return mod(x)
        # One GEMV per token: the same kernel and reduction order for every row, whatever the batch.
        return torch.cat([mod(x[i:i + 1]) for i in range(x.shape[0])])

    def _mlp(self, mlp: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        if not self.batch_invariant:
            return mlp(x)
        return self._linear(mlp.down_proj, mlp.act_fn(self._linear(mlp.gate_proj, x)) * self._linear(mlp.up_proj, x))

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, slot_mapping: torch.Tensor,
                metadata: PagedAttentionMetadata, cache: PagedKVCache, path: str,
                logits_indices: torch.Tensor | None) -> torch.Tensor:
        """input_ids/positions/slot_mapping [T] (requests' tokens contiguous, in metadata order);
        writes the step's keys/values into the cache and returns float logits at
        `logits_indices` ([N, V]; all tokens when None)."""
        T = input_ids.shape[0]
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        h = self.embed(input_ids)                                          # [T, H]
        cos, sin = self.rotary(h[None], positions[None])                   # [1, T, D]
        cos, sin = cos[0][:, None, :], sin[0][:, None, :]                  # [T, 1, D]
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = self._linear(attn.q_proj, x).view(T, hq, d)
            k = self._linear(attn.k_proj, x).view(T, hkv, d)
            v = self._linear(attn.v_proj, x).view(T, hkv, d)
            if hasattr(attn, "q_norm"):
                q = attn.q_norm(q)
                k = attn.k_norm(k)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            cache.write(i, slot_mapping, k, v)
            o = paged_attention(q, cache.key_caches[i], cache.value_caches[i], metadata, path,
                                scale=self.scale, sliding_window=self.windows[i], impl=self.attention_impl)
            h = h + self._linear(attn.o_proj, o.reshape(T, hq * d))
            h = h + self._mlp(layer.mlp, layer.post_attention_layernorm(h))
        if logits_indices is not None:
            h = h.index_select(0, logits_indices)
        h = self.norm(h)
        return self._linear(self.lm_head, h).float()
