"""Logging's own parts, which know nothing of the loop: the scalar backends (JSON lines,
TensorBoard, Weights & Biases, MLflow), the TensorBoard event writer, the end-of-run plots and
the progress bar. LoggerHook and HistogramHook (libai/hooks) decide when to call them.

Importing this package registers every backend in ``LOG_BACKENDS``, so that a config's
``dict(type="WandbBackend")`` builds without importing anything first. See docs/hooks.md.
"""

from __future__ import annotations

from .backends import BaseLogBackend, Histogram, JsonlBackend, TensorboardBackend, flatten_config
from .mlflow_backend import MLflowBackend
from .progress import ProgressBar
from .wandb_backend import WandbBackend

__all__ = [
    "BaseLogBackend",
    "Histogram",
    "JsonlBackend",
    "MLflowBackend",
    "ProgressBar",
    "TensorboardBackend",
    "WandbBackend",
    "flatten_config",
]
