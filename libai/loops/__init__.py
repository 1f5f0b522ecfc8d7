"""Loops drive the work: training by iterations or epochs, validation and test."""

from .base import BaseLoop
from .evaluate import TestLoop, ValLoop
from .train import EpochBasedTrainLoop, IterBasedTrainLoop

__all__ = ["BaseLoop", "EpochBasedTrainLoop", "IterBasedTrainLoop", "TestLoop", "ValLoop"]
