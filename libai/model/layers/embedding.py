"""Token embeddings: word + learned position (+ token type), then optional LayerNorm and dropout."""

from __future__ import annotations

import torch
from torch import nn

from libai.utils.errors import DataError

__all__ = ["TransformerEmbeddings"]


class TransformerEmbeddings(nn.Module):
    """Sum of word, absolute position and (optionally) token type embeddings.

    Args:
        vocab_size: Rows of the word embedding.
        hidden_size: Embedding width H.
        max_position_embeddings: Longest sequence the model takes.
        type_vocab_size: Token types (segments); 0 for none (GPT-2). Defaults to 0.
        layer_norm_eps: Epsilon of a LayerNorm after the sum; None for no LayerNorm (GPT-2).
            Defaults to None.
        dropout: Dropout on the output. Defaults to 0.
        padding_idx: Word row that gets no gradient and starts at zero (Hugging Face BERT's
            ``pad_token_id``). Defaults to None.
    """

    # tensor parallel (libai.parallel): the word embedding split by vocabulary rows
    tp_plan = {"word_embeddings": "vocab"}

    def __init__(self, vocab_size: int, hidden_size: int, max_position_embeddings: int,
                 type_vocab_size: int = 0, layer_norm_eps: float | None = None,
                 dropout: float = 0.0, padding_idx: int | None = None) -> None:
        super().__init__()
        self.max_position_embeddings = max_position_embeddings
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=padding_idx)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = (
            nn.Embedding(type_vocab_size, hidden_size) if type_vocab_size else None)
        self.norm = (
            nn.LayerNorm(hidden_size, eps=layer_norm_eps) if layer_norm_eps is not None else None)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                start_pos: int = 0, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Embed ``input_ids`` (B, S) at positions ``start_pos ... start_pos + S - 1``, or at
        ``position_ids`` (B, S) when given (left-padded batches, RoBERTa's offset positions).

        Raises:
            DataError: The sequence runs past ``max_position_embeddings``.
        """
        if position_ids is None:
            end = start_pos + input_ids.shape[1]
            positions = torch.arange(start_pos, end, device=input_ids.device)  # (S,)
        else:  # a Python int only when checked below: no sync for the common path above
            end, positions = None, position_ids  # (B, S)
        if end is not None and end > self.max_position_embeddings:
            raise DataError(
                f"sequence length {end} > max_position_embeddings {self.max_position_embeddings}: "
                f"shorten the data's max_seq_length or raise model.max_position_embeddings")
        h = self.word_embeddings(input_ids) + self.position_embeddings(positions)  # (B, S, H)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:  # all type 0: one row, broadcast
                h = h + self.token_type_embeddings.weight[0]
            else:
                h = h + self.token_type_embeddings(token_type_ids)
        if self.norm is not None:
            h = self.norm(h)
        return self.dropout(h)
