"""Evaluation: metrics that collect per-sample results and an evaluator that runs them.

See docs/metrics.md for the metric contract and the built-in metrics.
"""

from .base_metric import BaseMetric, lookup_key, nan_with_warning, to_numpy
from .evaluator import Evaluator, build_evaluator
from .metrics import (
    AUC,
    GAUC,
    Accuracy,
    ClassificationReport,
    Correlation,
    EntityF1,
    F1Score,
    MatthewsCorrCoef,
    MeanSquaredError,
    Perplexity,
    Precision,
    Recall,
    TagScheme,
    TokenAccuracy,
    binary_auc,
    extract_entities,
    grouped_auc,
)

__all__ = [
    "AUC",
    "GAUC",
    "Accuracy",
    "BaseMetric",
    "ClassificationReport",
    "Correlation",
    "EntityF1",
    "Evaluator",
    "F1Score",
    "MatthewsCorrCoef",
    "MeanSquaredError",
    "Perplexity",
    "Precision",
    "Recall",
    "TagScheme",
    "TokenAccuracy",
    "binary_auc",
    "build_evaluator",
    "extract_entities",
    "grouped_auc",
    "lookup_key",
    "nan_with_warning",
    "to_numpy",
]
