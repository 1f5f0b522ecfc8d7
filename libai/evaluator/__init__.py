"""Evaluation: metrics that collect per-sample results and an evaluator that runs them.

See docs/metrics.md for the metric contract and the built-in metrics.
"""

from .base_metric import BaseMetric, lookup_key, nan_with_warning, to_numpy
from .evaluator import Evaluator, build_evaluator
from .metrics import (
    AUC,
    GAUC,
    Accuracy,
    MeanSquaredError,
    Perplexity,
    TokenAccuracy,
    binary_auc,
    grouped_auc,
)

__all__ = [
    "AUC",
    "GAUC",
    "Accuracy",
    "BaseMetric",
    "Evaluator",
    "MeanSquaredError",
    "Perplexity",
    "TokenAccuracy",
    "binary_auc",
    "build_evaluator",
    "grouped_auc",
    "lookup_key",
    "nan_with_warning",
    "to_numpy",
]
