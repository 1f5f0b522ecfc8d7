"""The toy model for tests: a plain ``nn.Module`` following the model contract (docs/models.md#the-model-contract)."""

from __future__ import annotations

from torch import nn

from libai.model.zoo.mlp import MLPClassifier
from libai.registry import MODELS

__all__ = ["ToyModel"]


@MODELS.register_module()
class ToyModel(MLPClassifier):
    """A two-layer MLP for :class:`~libai.testing.ToyDataset`.

    Args:
        in_features: Input vector length. Defaults to 8.
        num_classes: Number of classes. Defaults to 2.
        hidden: Hidden width. Defaults to 16.
    """

    def __init__(self, in_features: int = 8, num_classes: int = 2, hidden: int = 16) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )


