"""Pearson and Spearman correlation of a scalar regression output (STS-B style reports).

The coefficients come from ``scipy.stats``, imported in ``compute_metrics`` only (scipy is
installed with scikit-learn; ``import scipy.stats`` takes 2-4 s cold on a busy 2-core VM, about
two thirds of ``import sklearn.metrics``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from libai.registry import METRICS
from libai.utils.errors import DataError

from ..base_metric import BaseMetric, nan_with_warning, to_numpy
from ._names import check_choices

__all__ = ["Correlation"]

METHODS = ("pearson", "spearman")


def _column(x: np.ndarray, what: str, key: str) -> np.ndarray:
    """(N,) or (N, 1) -> (N,) float64."""
    x = np.atleast_1d(x)
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 1:
        raise DataError(
            f"Correlation: expected {what} of shape (N,) or (N, 1), got {x.shape} (key '{key}'). "
            f"Correlation compares one value per sample; for several outputs use one metric per "
            f"output or MeanSquaredError."
        )
    return x.astype(np.float64)


@METRICS.register_module()
class Correlation(BaseMetric):
    """Pearson and Spearman correlation: ``{"pearson": ..., "spearman": ...}``.

    The GLUE STS-B report. Predictions are (N,) or (N, 1) (a regression head's logits) against
    float targets (N,). Spearman ranks ties by their average rank, as ``scipy.stats.spearmanr``.
    Fewer than two samples, or predictions or targets that are all equal, have no correlation:
    NaN with a ``RuntimeWarning``.

    Args:
        methods: "pearson", "spearman" or both. Defaults to both.
        pred_key: Key of the predictions in the outputs (or batch); ignored when the model
            returns a tensor. Defaults to "logits".
        label_key: Key of the targets, looked up in the outputs, then the batch.
            Defaults to "labels".
        prefix: See :class:`BaseMetric`. Defaults to None.
    """

    def __init__(
        self,
        methods: str | Sequence[str] = METHODS,
        pred_key: str = "logits",
        label_key: str = "labels",
        prefix: str | None = None,
    ) -> None:
        super().__init__(prefix=prefix)
        self.methods = check_choices(
            methods, METHODS, "Correlation: methods must be 'pearson', 'spearman' or both"
        )
        self.pred_key = pred_key
        self.label_key = label_key

    def process(self, batch: Any, outputs: Any) -> None:
        pred = _column(to_numpy(self.fetch_pred(self.pred_key, batch, outputs)), "predictions",
                       self.pred_key)
        target = _column(to_numpy(self.fetch(self.label_key, batch, outputs, arg="label_key")),
                         "targets", self.label_key)
        if pred.shape != target.shape:
            raise DataError(
                f"Correlation: {pred.shape[0]} predictions (key '{self.pred_key}') but "
                f"{target.shape[0]} targets (key '{self.label_key}')."
            )
        self.results.extend(zip(pred.tolist(), target.tolist()))

    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        arr = np.asarray(results, dtype=np.float64).reshape(-1, 2)
        pred, target = arr[:, 0], arr[:, 1]
        why = None
        if len(arr) < 2:
            why = "no samples" if len(arr) == 0 else "only one sample"
        elif np.all(pred == pred[0]) or np.all(target == target[0]):
            which = "predictions" if np.all(pred == pred[0]) else "targets"
            why = f"all {len(arr)} {which} are equal"
        if why is not None:
            nan = nan_with_warning("Correlation", why)
            return {m: nan for m in self.methods}
        from scipy import stats  # lazily: seconds to import cold

        out = {}
        if "pearson" in self.methods:
            out["pearson"] = float(stats.pearsonr(pred, target)[0])
        if "spearman" in self.methods:
            out["spearman"] = float(stats.spearmanr(pred, target)[0])
        return out
