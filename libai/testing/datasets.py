"""Tiny synthetic datasets for tests: built in microseconds, no files, fully seeded."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from libai.registry import DATASETS
from libai.utils.errors import DataError

__all__ = ["ToyDataset"]


@DATASETS.register_module()
class ToyDataset(Dataset):
    """Gaussian blobs around one random centre per class: easy to fit, never trivial.

    Items are ``{"inputs": float32 tensor (in_features,), "labels": int64 scalar tensor}``, like
    :class:`libai.data.DigitsDataset`, so a model or metric tested on one works on the other.
    Labels cycle ``0, 1, ..., num_classes - 1``, so every class is present from
    ``num_samples >= num_classes`` on. The data depend only on the arguments.

    Args:
        num_samples: Number of items. Defaults to 64.
        in_features: Length of each input vector. Defaults to 8.
        num_classes: Number of classes. Defaults to 2.
        seed: Seed of a private ``torch.Generator``; the global RNG is not touched.
            Defaults to 0.
    """

    def __init__(
        self, num_samples: int = 64, in_features: int = 8, num_classes: int = 2, seed: int = 0
    ) -> None:
        if num_samples < 1 or in_features < 1 or num_classes < 1:
            raise DataError(
                f"ToyDataset needs positive sizes, got num_samples={num_samples}, "
                f"in_features={in_features}, num_classes={num_classes}."
            )
        g = torch.Generator().manual_seed(seed)
        centres = torch.randn(num_classes, in_features, generator=g) * 2.0  # (C, F)
        self.labels = torch.arange(num_samples) % num_classes  # (N,)
        noise = torch.randn(num_samples, in_features, generator=g)  # (N, F)
        self.inputs = centres[self.labels] + noise
        self.num_classes = num_classes
        self.metainfo = {"classes": tuple(str(i) for i in range(num_classes))}

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"inputs": self.inputs[index].clone(), "labels": self.labels[index].clone()}

    def __repr__(self) -> str:
        n, f = self.inputs.shape
        return f"ToyDataset(num_samples={n}, in_features={f}, num_classes={self.num_classes})"
