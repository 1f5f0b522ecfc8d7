"""Root-mean-square layer normalization (Zhang & Sennrich 2019), Llama's only norm."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["RMSNorm"]


class RMSNorm(nn.RMSNorm):
    """``x / sqrt(mean(x^2) + eps) * weight``: no centring, no bias.

    The statistic and the division run in float32 and the result is cast back to the input's
    dtype before the scale, the order of Meta's Llama and Hugging Face's ``LlamaRMSNorm``, so
    that bf16 runs round as theirs do. A subclass of :class:`torch.nn.RMSNorm`: the optimizer's
    ``norm_decay_mult`` finds it (``libai/optim/constructor.py``), and its weight starts at 1.

    Args:
        hidden_size: Width of the last dimension.
        eps: Added to the mean square. Defaults to 1e-6.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__(hidden_size, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)
