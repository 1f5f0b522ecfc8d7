"""Built-in metrics; importing this package registers them in ``METRICS``."""

from .accuracy import Accuracy
from .auc import AUC, GAUC, binary_auc, grouped_auc
from .classification import (
    ClassificationReport,
    F1Score,
    MatthewsCorrCoef,
    Precision,
    Recall,
)
from .correlation import Correlation
from .entity import EntityF1, TagScheme, extract_entities
from .perplexity import Perplexity
from .regression import MeanSquaredError
from .token_accuracy import TokenAccuracy

__all__ = [
    "Accuracy",
    "AUC",
    "GAUC",
    "ClassificationReport",
    "Correlation",
    "EntityF1",
    "F1Score",
    "MatthewsCorrCoef",
    "MeanSquaredError",
    "Perplexity",
    "Precision",
    "Recall",
    "TagScheme",
    "TokenAccuracy",
    "binary_auc",
    "extract_entities",
    "grouped_auc",
]
