"""What the metrics over target tokens share (:class:`Perplexity`, :class:`TokenAccuracy`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from libai.utils.errors import DataError

from ..base_metric import BaseMetric, to_numpy

__all__ = ["TokenMetric"]


class TokenMetric(BaseMetric):
    """One ``(sum, count)`` entry per sequence, pooled over the target tokens of the whole set.

    The sum comes from the model when its outputs hold both ``sum_key`` and ``count_key`` (one
    value per sequence each: nothing of size V crosses to the host), else from logits (B, T, V)
    under ``pred_key`` and target ids (B, T) under ``label_key`` through
    :meth:`sums_from_logits`; positions equal to ``ignore_index`` are not targets.

    Args:
        pred_key: Key of the logits in the outputs (or batch). Defaults to "logits".
        label_key: Key of the target ids, looked up in the outputs, then the batch.
            Defaults to "labels".
        ignore_index: Target id of positions to skip (padding, prompt). Defaults to -100.
        prefix: See :class:`BaseMetric`. Defaults to None.
    """

    #: Output key of the per-sequence sum the model may return (set by subclasses).
    sum_key: str = ""
    #: Output key of the per-sequence number of target tokens.
    count_key = "num_tokens"
    sum_dtype: Any = np.float64

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
        if isinstance(outputs, Mapping) and self.sum_key in outputs and self.count_key in outputs:
            sums = to_numpy(outputs[self.sum_key]).reshape(-1)
            count = to_numpy(outputs[self.count_key]).reshape(-1)
            if sums.shape != count.shape:
                raise DataError(
                    f"{self.name}: '{self.sum_key}' has {sums.shape[0]} values but "
                    f"'{self.count_key}' has {count.shape[0]}; both need one per sequence."
                )
        else:
            logits = torch.as_tensor(self.fetch_pred(self.pred_key, batch, outputs))
            labels = torch.as_tensor(self.fetch(self.label_key, batch, outputs, arg="label_key"))
            if logits.dim() != 3 or labels.shape != logits.shape[:2]:
                raise DataError(
                    f"{self.name}: expected logits (B, T, V) and labels (B, T), got logits of "
                    f"shape {tuple(logits.shape)} (key '{self.pred_key}') and labels of shape "
                    f"{tuple(labels.shape)} (key '{self.label_key}'). Without logits, return "
                    f"'{self.sum_key}' and '{self.count_key}' per sequence from the model."
                )
            labels = labels.to(logits.device).long()
            sums = to_numpy(self.sums_from_logits(logits, labels))
            count = to_numpy((labels != self.ignore_index).sum(dim=1))
        self.results.extend(
            zip(sums.astype(self.sum_dtype).tolist(), count.astype(np.int64).tolist())
        )

    @abstractmethod
    def sums_from_logits(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``(B,)`` per-sequence sums from logits (B, T, V) and long labels (B, T)."""

    @staticmethod
    def totals(results: list[Any]) -> tuple[float, int]:
        """The pooled sum and number of target tokens of ``results``."""
        arr = np.asarray(results, dtype=np.float64).reshape(-1, 2)
        return float(arr[:, 0].sum()), int(arr[:, 1].sum())
