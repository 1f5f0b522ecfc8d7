"""Accuracy over predicted tokens: masked positions for BERT, next tokens for GPT."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from libai.registry import METRICS
from libai.utils.errors import ConfigError

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

    With ``exact_match=True`` it also gives ``"exact_match"``: the share of sequences (those
    with a target) whose every target token is the highest-scored. For a causal LM whose labels
    mark a response (instruction tuning), that is the share of responses greedy decoding writes
    exactly, ``<|endoftext|>`` included: the greedy output equals the response if and only if
    each of its tokens is the argmax given the response before it. With packing a row holds
    several examples and counts as one.

    Args:
        pred_key: Key of the logits. Defaults to "logits".
        label_key: Key of the target ids, looked up in the outputs, then the batch.
            Defaults to "labels".
        ignore_index: Target id of positions to skip. Defaults to -100.
        exact_match: Also report the share of sequences predicted whole. Defaults to False.
        prefix: See :class:`BaseMetric`. Defaults to None.
    """

    sum_key = "num_correct"
    sum_dtype = np.int64

    def __init__(self, pred_key: str = "logits", label_key: str = "labels",
                 ignore_index: int = -100, exact_match: bool = False,
                 prefix: str | None = None) -> None:
        super().__init__(pred_key, label_key, ignore_index, prefix)
        if not isinstance(exact_match, bool):
            raise ConfigError(f"TokenAccuracy: exact_match={exact_match!r}: expected True or False.")
        self.exact_match = exact_match

    def sums_from_logits(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        hits = (logits.argmax(dim=-1) == labels) & (labels != self.ignore_index)  # (B, T)
        return hits.sum(dim=1)

    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        correct, tokens = self.totals(results)
        if tokens == 0:
            return {"accuracy": nan_with_warning("TokenAccuracy", "no target tokens")}
        metrics = {"accuracy": correct / tokens}
        if self.exact_match:
            arr = np.asarray(results, dtype=np.int64).reshape(-1, 2)
            arr = arr[arr[:, 1] > 0]  # rows without a target say nothing
            metrics["exact_match"] = float((arr[:, 0] == arr[:, 1]).mean())
        return metrics
