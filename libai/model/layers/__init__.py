"""Transformer building blocks: attention, MLP, embeddings, the block, heads and init helpers."""

from .attention import (
    KVCache,
    SelfAttention,
    causal_padding_mask,
    key_padding_mask,
    padding_position_ids,
)
from .block import TransformerBlock
from .embedding import TransformerEmbeddings
from .heads import MaskedLMHead, Pooler, TiedLMHead, lm_token_stats, parallel_loss
from .init import init_transformer_weights, scale_residual_projections
from .mlp import ACTIVATIONS, MLP, get_activation

__all__ = [
    "ACTIVATIONS",
    "KVCache",
    "MLP",
    "MaskedLMHead",
    "Pooler",
    "SelfAttention",
    "TiedLMHead",
    "TransformerBlock",
    "TransformerEmbeddings",
    "causal_padding_mask",
    "get_activation",
    "init_transformer_weights",
    "key_padding_mask",
    "lm_token_stats",
    "padding_position_ids",
    "parallel_loss",
    "scale_residual_projections",
]
