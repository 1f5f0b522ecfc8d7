"""Regression error metrics."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from libai.registry import METRICS
from libai.utils.errors import DataError

from ..base_metric import BaseMetric, nan_with_warning, to_numpy

__all__ = ["MeanSquaredError"]


def _rows(x: np.ndarray) -> np.ndarray:
    """(N, ...) -> (N, values per sample); works for N = 0 too."""
    return x.reshape(x.shape[0], int(np.prod(x.shape[1:])))


@METRICS.register_module()
class MeanSquaredError(BaseMetric):
    """Mean squared error over all predicted values: ``{"mse": ..., "rmse": ...}``.

    Predictions and targets may be (N,) or (N, D, ...); each sample's values are flattened and
    the two must then have the same shape, so (N, 1) predictions against (N,) targets work and
    nothing is broadcast by accident. With D outputs per sample this is the mean over all N * D
    squared errors (equal to averaging the per-output MSEs). ``rmse`` is its square root.

    Args:
        pred_key: Key of the predictions in the outputs (or batch); ignored when the model
            returns a tensor. Defaults to "preds".
        label_key: Key of the targets, looked up in the outputs, then the batch.
            Defaults to "labels".
        prefix: See :class:`BaseMetric`. Defaults to None.
    """

    def __init__(
        self,
        pred_key: str = "preds",
        label_key: str = "labels",
        prefix: str | None = None,
    ) -> None:
        super().__init__(prefix=prefix)
        self.pred_key = pred_key
        self.label_key = label_key

    def process(self, batch: Any, outputs: Any) -> None:
        pred = to_numpy(self.fetch_pred(self.pred_key, batch, outputs)).astype(np.float64)
        target = to_numpy(self.fetch(self.label_key, batch, outputs, arg="label_key"))
        target = target.astype(np.float64)
        pred, target = np.atleast_1d(pred), np.atleast_1d(target)
        pred, target = _rows(pred), _rows(target)
        n = pred.shape[0]
        if pred.shape != target.shape:
            raise DataError(
                f"MeanSquaredError: predictions (key '{self.pred_key}') have {pred.shape[1]} "
                f"value(s) per sample for {pred.shape[0]} samples, targets (key "
                f"'{self.label_key}') have {target.shape[1]} for {target.shape[0]}."
            )
        sq_sum = np.square(pred - target).sum(axis=1)  # (N,) per-sample sum of squared errors
        self.results.extend(zip(sq_sum.tolist(), [pred.shape[1]] * n))

    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        arr = np.asarray(results, dtype=np.float64).reshape(-1, 2)
        total = arr[:, 1].sum()
        if total == 0:
            mse = nan_with_warning("MeanSquaredError", "no samples")
        else:
            mse = float(arr[:, 0].sum() / total)
        return {"mse": mse, "rmse": math.sqrt(mse)}
