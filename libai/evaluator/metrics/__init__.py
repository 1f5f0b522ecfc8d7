"""Built-in metrics; importing this package registers them in ``METRICS``."""

from .accuracy import Accuracy
from .auc import AUC, GAUC, binary_auc, grouped_auc
from .perplexity import Perplexity
from .regression import MeanSquaredError
from .token_accuracy import TokenAccuracy

__all__ = [
    "Accuracy",
    "AUC",
    "GAUC",
    "MeanSquaredError",
    "Perplexity",
    "TokenAccuracy",
    "binary_auc",
    "grouped_auc",
]
