"""Evaluation: metrics that collect per-sample results and an evaluator that runs them.

See docs/metrics.md for the metric contract and the built-in metrics.
"""

from .base_metric import BaseMetric, lookup_key, nan_with_warning, to_numpy
from .evaluator import Evaluator, build_evaluator
from .metrics import *  # noqa: F403  (the built-in metrics, listed once in metrics/__init__.py)
from .metrics import __all__ as _METRICS

__all__ = [
    "BaseMetric",
    "Evaluator",
    "build_evaluator",
    "lookup_key",
    "nan_with_warning",
    "to_numpy",
    *_METRICS,
]
