"""Accuracy over predicted tokens: masked positions for BERT, next tokens for GPT."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from libai.registry import METRICS

from ..base_metric import nan_with_warning
from ._token import TokenMetric

__all__ = ["TokenAccuracy"]


@METRICS.register_module()
class TokenAccuracy(TokenMetric):
    """Share of target tokens whose highest-scored id is the target: ``{"accuracy": ...}``.

    Tokens are pooled over the whole set (a sequence with more targets weighs more). Only
    target positions count: the masked positions of a masked LM, the non-ignored labels of a
    causal LM. Two ways to feed it, as :class:`Perplexity`:

    - Per-sequence counts the model computed itself: when the outputs hold both
      ``"num_correct"`` and ``"num_tokens"`` (each of shape (B,)), they are used; no logits
      cross to the host. libai's BERT and GPT models return them in eval mode.
    - Logits (B, T, V) under ``pred_key`` and target ids (B, T) under ``label_key``; positions
      equal to ``ignore_index`` are skipped.

    Each sample's entry is ``(num_correct, num_tokens)``. With no target at all the value is
    NaN with a ``RuntimeWarning``.

    Args:
        pred_key: Key of the logits. Defaults to "logits".
        label_key: Key of the target ids, looked up in the outputs, then the batch.
            Defaults to "labels".
        ignore_index: Target id of positions to skip. Defaults to -100.
        prefix: See :class:`BaseMetric`. Defaults to None.
    """

    sum_key = "num_correct"
    sum_dtype = np.int64

    def sums_from_logits(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        hits = (logits.argmax(dim=-1) == labels) & (labels != self.ignore_index)  # (B, T)
        return hits.sum(dim=1)

    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        correct, tokens = self.totals(results)
        if tokens == 0:
            return {"accuracy": nan_with_warning("TokenAccuracy", "no target tokens")}
        return {"accuracy": correct / tokens}
