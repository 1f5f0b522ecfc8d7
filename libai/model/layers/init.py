"""Weight initialisation shared by the architectures (BERT and GPT-2 both follow this scheme).

Every weight matrix and embedding is drawn from N(0, std), biases are zero, LayerNorms are the
identity (weight 1, bias 0), an embedding's padding row is zero. GPT-2 additionally scales the
output projections of attention and MLP (the layers that write into the residual stream) by
1/sqrt(2 * num_layers), so the residual sum keeps its variance as depth grows.

These work on meta tensors too (they do nothing there), so a model built on the meta device runs
the same code and is initialised for real after ``to_empty``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

__all__ = ["init_transformer_weights", "scale_residual_projections"]


@torch.no_grad()
def init_transformer_weights(module: nn.Module, std: float = 0.02) -> None:
    """Initialise every Linear, Embedding and LayerNorm inside ``module`` (see module docstring).

    Parameters owned by other module types (e.g. the MLM head's bias) are left to the caller.
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            if m.weight is not None:
                nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


@torch.no_grad()
def scale_residual_projections(blocks: Iterable[nn.Module], std: float, num_layers: int) -> None:
    """GPT-2's scaled init: ``attn.out_proj`` and ``mlp.fc2`` of each block get
    N(0, std / sqrt(2 * num_layers))."""
    scaled = std / math.sqrt(2 * num_layers)
    for block in blocks:
        nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=scaled)
        nn.init.normal_(block.mlp.fc2.weight, mean=0.0, std=scaled)
