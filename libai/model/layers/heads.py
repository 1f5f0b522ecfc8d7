"""Output heads. An LM head tied to the word embeddings reads the embedding weight when it runs
(``F.linear(h, embedding.weight)``) instead of holding the same Parameter: the model then has one
weight tensor under one name, whatever builds it (meta device + ``to_empty``, FSDP, state dicts).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .mlp import get_activation

__all__ = ["MaskedLMHead", "Pooler", "TiedLMHead", "lm_token_stats"]


class MaskedLMHead(nn.Module):
    """BERT's masked-LM head: dense -> activation -> LayerNorm -> tied decoder + its own bias.

    Args:
        hidden_size: Model width H.
        vocab_size: Output classes V (rows of the tied embedding).
        activation: Activation name. Defaults to "gelu".
        layer_norm_eps: LayerNorm epsilon. Defaults to 1e-12.
    """

    def __init__(self, hidden_size: int, vocab_size: int, activation: str = "gelu",
                 layer_norm_eps: float = 1e-12) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act = get_activation(activation)
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, h: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        """(..., H) hidden states and the (V, H) embedding weight -> (..., V) logits."""
        return F.linear(self.norm(self.act(self.dense(h))), word_embeddings, self.bias)


class TiedLMHead(nn.Module):
    """GPT's LM head: the (V, H) word embedding used as the output projection, no bias."""

    def forward(self, h: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(h, word_embeddings)  # (B, S, V)


class Pooler(nn.Module):
    """BERT's pooler: ``tanh(dense(h[:, 0]))``, the [CLS] position, for sentence-level heads."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(h[:, 0]))  # (B, H)


def lm_token_stats(logits: torch.Tensor, labels: torch.Tensor,
                   ignore_index: int = -100) -> dict[str, torch.Tensor]:
    """Per-sequence sums that language-model metrics read (perplexity, token accuracy).

    Args:
        logits: (B, T, V) scores.
        labels: (B, T) target ids, ``ignore_index`` where there is nothing to predict.

    Returns:
        ``nll_sum`` (B,) float32 summed negative log-likelihood, ``num_tokens`` (B,) long
        predicted tokens, ``num_correct`` (B,) long argmax hits.
    """
    valid = labels != ignore_index  # (B, T)
    nll = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(),
                          ignore_index=ignore_index, reduction="none")  # (B*T,), 0 if ignored
    correct = (logits.argmax(-1) == labels) & valid  # (B, T)
    return {"nll_sum": nll.view_as(labels).sum(1), "num_tokens": valid.sum(1),
            "num_correct": correct.sum(1)}
