"""The position-wise feed-forward networks: :class:`MLP` with its activation chosen by name, and
Llama's gated :class:`SwiGLU`."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["ACTIVATIONS", "MLP", "SwiGLU", "get_activation"]

#: Activation name -> module factory. "gelu" is the exact (erf) GELU of BERT; "gelu_tanh" is the
#: tanh approximation GPT-2 was trained with (Hugging Face's "gelu_new").
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": nn.ReLU,
}


def get_activation(name: str) -> nn.Module:
    """A fresh activation module for ``name`` (a key of :data:`ACTIVATIONS`).

    Raises:
        ConfigError: Unknown name (with a did-you-mean suggestion).
    """
    if name not in ACTIVATIONS:
        raise ConfigError(
            f"model.activation={name!r} is unknown; choose one of {sorted(ACTIVATIONS)}."
            + did_you_mean(str(name), ACTIVATIONS))
    return ACTIVATIONS[name]()


class MLP(nn.Module):
    """``fc1 -> activation -> fc2 -> dropout``.

    Args:
        hidden_size: Input and output width H.
        ffn_hidden_size: Inner width (usually 4H).
        activation: A name from :data:`ACTIVATIONS`. Defaults to "gelu".
        dropout: Dropout on the output. Defaults to 0.
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, activation: str = "gelu",
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, ffn_hidden_size)
        self.act = get_activation(activation)
        self.fc2 = nn.Linear(ffn_hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(self.act(self.fc1(x))))  # (B, S, H)


class SwiGLU(nn.Module):
    """The gated feed-forward network of PaLM and Llama (Shazeer 2020):
    ``down_proj(silu(gate_proj(x)) * up_proj(x))``, no biases.

    Three matrices instead of two: an inner width of ``8H / 3`` has the parameters of a 4H
    :class:`MLP`. Tensor parallel splits ``gate_proj`` and ``up_proj`` column-wise (each process
    gates its own slice) and ``down_proj`` row-wise.

    Args:
        hidden_size: Input and output width H.
        ffn_hidden_size: Inner width F.
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, ffn_hidden_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, ffn_hidden_size, bias=False)
        self.down_proj = nn.Linear(ffn_hidden_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated = F.silu(self.gate_proj(x)) * self.up_proj(x)  # (B, S, F)
        return self.down_proj(gated)  # (B, S, H)
