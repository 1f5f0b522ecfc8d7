"""Output heads. An LM head tied to the word embeddings reads the embedding weight when it runs
(``F.linear(h, embedding.weight)``) instead of holding the same Parameter: the model then has one
weight tensor under one name, whatever builds it (meta device + ``to_empty``, FSDP, state dicts).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from libai.utils.errors import DataError

from .mlp import get_activation

__all__ = ["MaskedLMHead", "Pooler", "TiedLMHead", "causal_lm_outputs", "lm_token_stats",
           "parallel_loss"]


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
        """(..., H) hidden states and the (V, H) embedding weight -> (..., V) logits.

        Under tensor parallel (a vocabulary-split embedding) the logits are split as in
        :class:`TiedLMHead`; the bias stays whole on every process and each uses its slice.
        """
        x = self.norm(self.act(self.dense(h)))
        if not _is_dtensor(word_embeddings):
            return F.linear(x, word_embeddings, self.bias)
        from torch.distributed.tensor import DTensor, Replicate, Shard

        mesh = word_embeddings.device_mesh
        x = DTensor.from_local(x, mesh, [Replicate()], run_check=False)
        bias = DTensor.from_local(self.bias, mesh, [Replicate()], run_check=False)
        logits = F.linear(x, word_embeddings, bias.redistribute(mesh, [Shard(0)]))
        return logits if self.training else logits.full_tensor()


class TiedLMHead(nn.Module):
    """GPT's LM head: the (V, H) word embedding used as the output projection, no bias.

    Under tensor parallel the embedding is split by vocabulary rows (a DTensor): in training the
    logits stay split the same way (each process holds V / T columns) for a parallel
    cross-entropy (:func:`parallel_loss`); in eval mode they are gathered whole.
    """

    def forward(self, h: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        if not _is_dtensor(word_embeddings):
            return F.linear(h, word_embeddings)  # (B, S, V)
        from torch.distributed.tensor import DTensor, Replicate

        h = DTensor.from_local(h, word_embeddings.device_mesh, [Replicate()], run_check=False)
        logits = F.linear(h, word_embeddings)  # (B, S, V) split by vocabulary
        return logits if self.training else logits.full_tensor()


def _is_dtensor(t: torch.Tensor) -> bool:
    return type(t).__name__ == "DTensor"  # without importing torch.distributed for a plain model


def parallel_loss(loss: torch.Tensor) -> torch.Tensor:
    """A loss computed on vocabulary-split logits (a replicated DTensor) as a plain tensor, so the
    engine logs and steps it as any loss; its gradient still flows into the split logits."""
    return loss.full_tensor() if _is_dtensor(loss) else loss


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


def causal_lm_outputs(logits: torch.Tensor, labels: torch.Tensor | None, training: bool,
                      owner: str) -> dict[str, torch.Tensor]:
    """What a causal LM's ``forward(batch)`` returns, from its logits and the dataset's labels.

    Args:
        logits: (B, S, V) next-token scores (a vocabulary-split DTensor under tensor parallel).
        labels: (B, S) the next token of each position (already shifted), -100 where nothing is
            predicted; None in a batch to predict only.
        training: Train mode: the loss only.
        owner: The model's class name, for the message.

    Returns:
        Train mode: ``{"loss", "num_items"}`` (the mean cross-entropy over the predicted tokens,
        and their count). Eval mode: ``{"loss", "nll_sum", "num_tokens", "num_correct",
        "num_items"}`` (see :func:`lm_token_stats`), or ``{"logits"}`` without labels.

    Raises:
        DataError: A training batch without labels.
    """
    if training:
        if labels is None:
            raise DataError(f"{owner} needs 'labels' (B, S) in a training batch: the next token "
                            f"of each position, -100 where nothing is predicted")
        return {"loss": parallel_loss(F.cross_entropy(logits.flatten(0, 1), labels.flatten())),
                "num_items": {"loss": (labels != -100).sum()}}  # tokens predicted
    if labels is None:
        return {"logits": logits}
    out = lm_token_stats(logits, labels)
    out["loss"] = out["nll_sum"].sum() / out["num_tokens"].sum().clamp(min=1)
    out["num_items"] = {"loss": out["num_tokens"].sum()}
    return out
