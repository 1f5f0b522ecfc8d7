"""Accuracy over predicted tokens: masked positions for BERT, next tokens for GPT."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from libai.registry import METRICS
from libai.utils.errors import DataError

from ..base_metric import BaseMetric, nan_with_warning, to_numpy

__all__ = ["TokenAccuracy"]


@METRICS.register_module()
class TokenAccuracy(BaseMetric):
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

    correct_key = "num_correct"
    count_key = "num_tokens"

    def __init__(
        self,
        pred_key: str = "logits",
        label_key: str = "labels",
        ignore_index: int = -100,
        prefix: str | None = None,
    ) -> None:
        super().__init__(prefix=prefix)
        self.pred_key = pred_key
        self.label_key = label_key
        self.ignore_index = ignore_index

    def process(self, batch: Any, outputs: Any) -> None:
        if isinstance(outputs, Mapping) and self.correct_key in outputs and self.count_key in outputs:
            correct = to_numpy(outputs[self.correct_key]).reshape(-1)
            count = to_numpy(outputs[self.count_key]).reshape(-1)
            if correct.shape != count.shape:
                raise DataError(
                    f"TokenAccuracy: '{self.correct_key}' has {correct.shape[0]} values but "
                    f"'{self.count_key}' has {count.shape[0]}; both need one per sequence."
                )
        else:
            correct, count = self._from_logits(batch, outputs)
        self.results.extend(zip(correct.astype(np.int64).tolist(), count.astype(np.int64).tolist()))

    def _from_logits(self, batch: Any, outputs: Any) -> tuple[np.ndarray, np.ndarray]:
        logits = torch.as_tensor(self.fetch_pred(self.pred_key, batch, outputs))
        labels = torch.as_tensor(self.fetch(self.label_key, batch, outputs, arg="label_key"))
        if logits.dim() != 3 or labels.shape != logits.shape[:2]:
            raise DataError(
                f"TokenAccuracy: expected logits (B, T, V) and labels (B, T), got logits of shape "
                f"{tuple(logits.shape)} (key '{self.pred_key}') and labels of shape "
                f"{tuple(labels.shape)} (key '{self.label_key}'). Without logits, return "
                f"'{self.correct_key}' and '{self.count_key}' per sequence from the model."
            )
        labels = labels.to(logits.device).long()
        valid = labels != self.ignore_index  # (B, T)
        hits = (logits.argmax(dim=-1) == labels) & valid  # (B, T)
        return to_numpy(hits.sum(dim=1)), to_numpy(valid.sum(dim=1))

    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        arr = np.asarray(results, dtype=np.int64).reshape(-1, 2)
        tokens = int(arr[:, 1].sum())
        if tokens == 0:
            return {"accuracy": nan_with_warning("TokenAccuracy", "no target tokens")}
        return {"accuracy": float(arr[:, 0].sum()) / tokens}
