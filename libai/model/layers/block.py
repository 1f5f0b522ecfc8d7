"""The repeated transformer layer: attention and MLP sub-layers around residual connections."""

from __future__ import annotations

import torch
from torch import nn

from .attention import KVCache, SelfAttention
from .mlp import MLP

__all__ = ["TransformerBlock"]


class TransformerBlock(nn.Module):
    """One transformer layer, post-LN or pre-LN.

    - post-LN (BERT, Vaswani et al.): ``x = LN(x + attn(x)); x = LN(x + mlp(x))``.
    - pre-LN (GPT-2, Xiong et al. 2020): ``x = x + attn(LN(x)); x = x + mlp(LN(x))``; the model
      then needs a final LayerNorm after the last block.

    The norms are named by the sub-layer they belong to (``attn_norm``, ``mlp_norm``) in both
    orders. ``tp_plan`` says how the block shards for tensor parallelism: q/k/v and fc1
    column-wise, the two output projections row-wise; ``tp_divisible`` that the tensor size
    must divide the heads.

    Args:
        hidden_size: Model width H.
        num_heads: Attention heads.
        ffn_hidden_size: Inner width of the MLP.
        hidden_dropout: Dropout on each sub-layer's output. Defaults to 0.
        attention_dropout: Dropout on attention probabilities. Defaults to 0.
        activation: MLP activation name. Defaults to "gelu".
        layer_norm_eps: LayerNorm epsilon. Defaults to 1e-5.
        pre_norm: Pre-LN instead of post-LN. Defaults to False.
    """

    tp_plan = {"attn.q_proj": "colwise", "attn.k_proj": "colwise", "attn.v_proj": "colwise",
               "attn.out_proj": "rowwise", "mlp.fc1": "colwise", "mlp.fc2": "rowwise"}

    def __init__(self, hidden_size: int, num_heads: int, ffn_hidden_size: int,
                 hidden_dropout: float = 0.0, attention_dropout: float = 0.0,
                 activation: str = "gelu", layer_norm_eps: float = 1e-5,
                 pre_norm: bool = False) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.tp_divisible = {"model.num_heads": num_heads}  # whole heads per tensor-parallel rank
        self.attn = SelfAttention(hidden_size, num_heads, attention_dropout, hidden_dropout)
        self.attn_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.mlp = MLP(hidden_size, ffn_hidden_size, activation, hidden_dropout)
        self.mlp_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                is_causal: bool = False, kv_cache: KVCache | None = None) -> torch.Tensor:
        """(B, S, H) -> (B, S, H); the arguments after ``x`` go to :class:`SelfAttention`."""
        if self.pre_norm:
            x = x + self.attn(self.attn_norm(x), attn_mask, is_causal, kv_cache)
            return x + self.mlp(self.mlp_norm(x))
        x = self.attn_norm(x + self.attn(x, attn_mask, is_causal, kv_cache))
        return self.mlp_norm(x + self.mlp(x))
