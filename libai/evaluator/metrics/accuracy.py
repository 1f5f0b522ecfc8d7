"""Top-k classification accuracy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from libai.registry import METRICS
from libai.utils.errors import ConfigError, DataError

from ..base_metric import BaseMetric, nan_with_warning

__all__ = ["Accuracy"]


@METRICS.register_module()
class Accuracy(BaseMetric):
    """Fraction of samples whose label is among the k highest-scored classes.

    Values are fractions in [0, 1], not percentages. With one k the result is
    ``{"accuracy": ...}``; with several it is ``{"accuracy/top1": ..., "accuracy/top5": ...}``.

    The prediction is either scores of shape (N, C) (logits or probabilities: only their order
    matters) or predicted class indices of shape (N,) (integer dtype, top-1 only). Labels are
    class indices of shape (N,).

    Args:
        topk: The k values to report. Defaults to (1,).
        pred_key: Key of the prediction in the outputs (or batch); ignored when the model
            returns a tensor. Defaults to "logits".
        label_key: Key of the labels, looked up in the outputs, then the batch.
            Defaults to "labels".
        prefix: See :class:`BaseMetric`. Defaults to None.
    """

    def __init__(
        self,
        topk: int | Sequence[int] = (1,),
        pred_key: str = "logits",
        label_key: str = "labels",
        prefix: str | None = None,
    ) -> None:
        super().__init__(prefix=prefix)
        ks = (topk,) if isinstance(topk, int) else tuple(topk)
        if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
            raise ConfigError(f"Accuracy: topk must be positive ints, got {topk!r}.")
        self.topk = ks
        self.pred_key = pred_key
        self.label_key = label_key

    def process(self, batch: Any, outputs: Any) -> None:
        pred = torch.as_tensor(self.fetch_pred(self.pred_key, batch, outputs))
        label = torch.as_tensor(self.fetch(self.label_key, batch, outputs, arg="label_key"))
        label = label.reshape(-1).to(pred.device)
        if pred.shape[0] != label.shape[0]:
            raise DataError(
                f"Accuracy: the prediction has {pred.shape[0]} rows (shape {tuple(pred.shape)}) "
                f"but there are {label.shape[0]} labels (key '{self.label_key}')."
            )
        if pred.dim() == 1 or (
            pred.dim() == 2 and pred.shape[1] == 1 and not pred.is_floating_point()
        ):
            hits = self._hits_from_indices(pred.reshape(-1), label)
        elif pred.dim() == 2:
            hits = self._hits_from_scores(pred, label)
        else:
            raise DataError(
                f"Accuracy: expected scores of shape (N, C) or class indices of shape (N,), got a "
                f"prediction of shape {tuple(pred.shape)} (key '{self.pred_key}')."
            )
        # hits: (N, len(topk)) bool -> one tuple of 0/1 per sample
        self.results.extend(map(tuple, hits.to(torch.uint8).cpu().tolist()))

    def _hits_from_indices(self, pred: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        if pred.is_floating_point():
            raise DataError(
                "Accuracy: a 1-D prediction must hold class indices (an integer tensor); for "
                "scores pass shape (N, C)."
            )
        if self.topk != (1,):
            raise ConfigError(
                f"Accuracy: topk={self.topk} needs class scores of shape (N, C), but the "
                f"prediction holds class indices of shape (N,). Use topk=(1,)."
            )
        return (pred == label).unsqueeze(1)

    def _hits_from_scores(self, pred: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        num_classes = pred.shape[1]
        maxk = max(self.topk)
        if maxk > num_classes:
            raise ConfigError(
                f"Accuracy: topk={self.topk} asks for top-{maxk} but the prediction has only "
                f"{num_classes} classes."
            )
        top = pred.topk(maxk, dim=1).indices  # (N, maxk)
        seen = (top == label.unsqueeze(1)).cumsum(dim=1) > 0  # seen[:, j]: label in top j+1
        return seen[:, [k - 1 for k in self.topk]]  # (N, len(topk))

    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        if not results:
            values = [nan_with_warning("Accuracy", "no samples")] * len(self.topk)
        else:
            values = np.asarray(results, dtype=np.float64).mean(axis=0).tolist()
        if len(self.topk) == 1:
            return {"accuracy": values[0]}
        return {f"accuracy/top{k}": v for k, v in zip(self.topk, values)}
