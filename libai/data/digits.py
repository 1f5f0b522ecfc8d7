"""The quick-start dataset: 1,797 handwritten digits, 8x8 pixels, 10 classes.

The data is the copy of the UCI "Optical Recognition of Handwritten Digits" test set that
scikit-learn ships inside its wheel (``sklearn/datasets/data/digits.csv.gz``), so it needs no
download. The file is located and parsed with numpy, without importing scikit-learn itself.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from libai.registry import DATASETS
from libai.utils.errors import DataError
from libai.utils.suggest import unknown

from .transforms import build_transform

__all__ = ["DigitsDataset", "load_digits_array"]

_SPLITS = ("train", "val", "test", "all")
_INSTALL = "pip install scikit-learn (or pip install 'libai[optional]')"


def _digits_file() -> Path | None:
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    return None


@functools.lru_cache(maxsize=1)
def load_digits_array() -> np.ndarray:
    """All 1,797 digits as one ``(1797, 65)`` int64 array: 64 pixels (0..16), then the label.

    Cached after the first call. Falls back to ``sklearn.datasets.load_digits`` if a future
    scikit-learn moves the file.

    Raises:
        DataError: scikit-learn is not installed, or the file cannot be read.
    """
    path = _digits_file()
    if path is None:
        if importlib.util.find_spec("sklearn") is None:
            raise DataError(f"DigitsDataset reads the digits that scikit-learn ships: {_INSTALL}.")
        try:
            from sklearn.datasets import load_digits  # slow import, only as a fallback
        except ImportError as e:
            raise DataError(
                f"DigitsDataset could not import scikit-learn ({e}): {_INSTALL}."
            ) from e
        bunch = load_digits()
        return np.concatenate([bunch.data, bunch.target[:, None]], axis=1).astype(np.int64)
    try:
        data = np.loadtxt(path, delimiter=",", dtype=np.int64)
    except (OSError, ValueError) as e:
        raise DataError(f"DigitsDataset cannot parse {path}: {e}. Reinstall: {_INSTALL}.") from e
    if data.ndim != 2 or data.shape[1] != 65:
        raise DataError(f"DigitsDataset: {path} has shape {data.shape}, expected (N, 65).")
    return data


def _split_indices(n: int, split: str, val_ratio: float, test_ratio: float) -> np.ndarray:
    # A fixed permutation (seed 0), independent of any run seed, so splits never leak.
    order = np.random.default_rng(0).permutation(n)
    n_val, n_test = round(n * val_ratio), round(n * test_ratio)
    parts = {
        "val": order[:n_val],
        "test": order[n_val : n_val + n_test],
        "train": order[n_val + n_test :],
        "all": np.arange(n),
    }
    return np.sort(parts[split])


@DATASETS.register_module()
class DigitsDataset(Dataset):
    """Handwritten digits (8x8 grey images, classes 0-9) as a map-style dataset.

    The 1,797 images are split once with a fixed permutation (numpy seed 0): the first
    ``val_ratio`` of it is ``val``, the next ``test_ratio`` is ``test``, the rest is ``train``.
    The same ratios always give the same split; ``"all"`` is every image in file order.

    Items are ``{"inputs": float32 tensor (64,), "labels": int64 scalar tensor}``; the image is
    flattened row by row. ``transform``, if given, is applied to the item dict.

    Args:
        split: "train", "val", "test" or "all". Defaults to "train".
        val_ratio: Fraction of the images in ``val``. Defaults to 0.2.
        test_ratio: Fraction of the images in ``test``. Defaults to 0.0 (no test split).
        normalize: Scale pixels from 0..16 to [0, 1]. Defaults to True.
        transform: A callable, a ``TRANSFORMS`` config dict or a list of them. Defaults to None.

    Raises:
        DataError: an unknown split, bad ratios, an empty split, or scikit-learn missing.
    """

    num_classes = 10
    metainfo = {"classes": tuple(str(i) for i in range(10)), "image_shape": (8, 8)}

    def __init__(
        self,
        split: str = "train",
        val_ratio: float = 0.2,
        test_ratio: float = 0.0,
        normalize: bool = True,
        transform: Any = None,
    ) -> None:
        if split not in _SPLITS:
            raise DataError(
                unknown(f"DigitsDataset: unknown split '{split}'", split, _SPLITS, "Choose from")
            )
        if not (0 <= val_ratio and 0 <= test_ratio and val_ratio + test_ratio < 1):
            raise DataError(
                f"DigitsDataset: need val_ratio >= 0, test_ratio >= 0 and val_ratio + test_ratio "
                f"< 1; got val_ratio={val_ratio}, test_ratio={test_ratio}."
            )
        self.split = split
        self.val_ratio, self.test_ratio = val_ratio, test_ratio
        self.normalize = normalize
        self.transform = build_transform(transform)
        data = load_digits_array()
        self.indices = _split_indices(len(data), split, val_ratio, test_ratio)  # rows of the file
        rows = data[self.indices]
        if len(rows) == 0:
            raise DataError(
                f"DigitsDataset: split '{split}' is empty with val_ratio={val_ratio}, "
                f"test_ratio={test_ratio}."
            )
        pixels = torch.from_numpy(rows[:, :64]).float()  # (N, 64) in 0..16
        self.inputs = pixels / 16.0 if normalize else pixels
        self.labels = torch.from_numpy(rows[:, 64]).long()  # (N,)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        # clone(): a transform that edits in place must not change the stored data.
        item = {"inputs": self.inputs[index].clone(), "labels": self.labels[index].clone()}
        return self.transform(item) if self.transform is not None else item

    def __repr__(self) -> str:
        return (
            f"DigitsDataset(split={self.split!r}, size={len(self)}, val_ratio={self.val_ratio}, "
            f"test_ratio={self.test_ratio}, transform={self.transform!r})"
        )
