"""Architectures, each one file, registered in ``MODELS``."""

from .mlp import DigitsMLP, MLPClassifier

__all__ = ["DigitsMLP", "MLPClassifier"]
