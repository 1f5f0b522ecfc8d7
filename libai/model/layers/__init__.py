"""Transformer building blocks: attention, MLP, embeddings, the block, heads and init helpers;
Llama's RMSNorm, rotary embeddings, SwiGLU and growing KV cache."""

from .attention import (
    KVCache,
    SelfAttention,
    causal_padding_mask,
    key_padding_mask,
    padding_position_ids,
)
from .block import TransformerBlock
from .embedding import TransformerEmbeddings
from .heads import (
    MaskedLMHead,
    Pooler,
    TiedLMHead,
    causal_lm_outputs,
    lm_token_stats,
    parallel_loss,
)
from .init import init_transformer_weights, scale_residual_projections
from .kv_cache import GrowingKVCache
from .mlp import ACTIVATIONS, MLP, SwiGLU, get_activation
from .norm import RMSNorm
from .parts import forward_in_parts, lm_items
from .rope import RotaryEmbedding, apply_rotary_emb, check_rope_scaling, rope_frequencies

__all__ = [
    "ACTIVATIONS",
    "GrowingKVCache",
    "KVCache",
    "MLP",
    "MaskedLMHead",
    "Pooler",
    "RMSNorm",
    "RotaryEmbedding",
    "SelfAttention",
    "SwiGLU",
    "TiedLMHead",
    "TransformerBlock",
    "TransformerEmbeddings",
    "apply_rotary_emb",
    "causal_lm_outputs",
    "causal_padding_mask",
    "forward_in_parts",
    "check_rope_scaling",
    "get_activation",
    "init_transformer_weights",
    "key_padding_mask",
    "lm_items",
    "lm_token_stats",
    "padding_position_ids",
    "parallel_loss",
    "rope_frequencies",
    "scale_residual_projections",
]
