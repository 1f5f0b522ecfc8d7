"""Per-sample seeding: random augmentation that depends only on (seed, epoch, index).

With ``num_workers > 0`` each worker draws augmentation randomness from its own RNG stream, so
what sample ``i`` receives depends on which worker loaded it and how many samples that worker had
loaded before. Resuming in the middle of an epoch (``DefaultSampler.skip``) shifts those streams,
and the resumed run sees different augmentations than the uninterrupted one would have.

Per-sample seeding removes that dependence. ``DefaultSampler(seed_per_sample=True)`` yields
:class:`SampleKey` ``(index, seed, epoch)`` tuples instead of plain indices, and
:class:`SeededDataset` loads the sample with python, numpy and torch's global RNGs seeded from
``seed`` (restoring them afterwards). A dataset that draws its randomness from a private generator
(the text datasets) takes the keys itself: it sets ``takes_sample_keys = True`` and
``build_dataloader`` does not wrap it. A sample's augmentation is then a pure function of (sampler seed, epoch, index),
whatever the number of workers, ranks or skipped samples. ``build_dataloader`` wraps the dataset
in :class:`SeededDataset` by itself when the sampler asks for it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import Dataset

from libai.registry import DATASETS

__all__ = ["SampleKey", "SeededDataset", "sample_seed"]


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 32-bit seed for dataset item ``index`` in ``epoch`` of a run seeded with ``seed``.

    The three integers go through :class:`numpy.random.SeedSequence`, so neighbouring indices or
    epochs get unrelated seeds (``seed + index`` would make epoch 1 of seed 0 equal epoch 0 of
    seed 1).

    Args:
        seed: The sampler's seed.
        epoch: The epoch.
        index: The dataset index.

    Returns:
        An int in ``[0, 2**32)``.
    """
    return int(np.random.SeedSequence([seed % 2**63, epoch, index]).generate_state(1)[0])


class SampleKey(NamedTuple):
    """What a per-sample-seeded sampler yields: the dataset index, its seed and the epoch.

    ``seed`` is ``sample_seed(sampler seed, epoch, index)``; ``epoch`` is there for datasets whose
    layout changes per epoch (the GPT dataset packs documents in a new order each epoch).
    """

    index: int
    seed: int
    epoch: int


class _RngScope:
    """Seed python, numpy and torch (CPU) global RNGs on entry; restore their states on exit."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __enter__(self) -> None:
        self._py = random.getstate()
        self._np = np.random.get_state()
        self._torch = torch.random.get_rng_state()
        random.seed(self.seed)
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)

    def __exit__(self, *exc: Any) -> None:
        random.setstate(self._py)
        np.random.set_state(self._np)
        torch.random.set_rng_state(self._torch)


@DATASETS.register_module()
class SeededDataset(Dataset):
    """Wraps a dataset so that a :class:`SampleKey` loads the item under the key's seed.

    A plain integer key passes straight through (no seeding), so the wrapper is harmless with
    samplers that yield indices. Attribute access falls through to the wrapped dataset
    (``seeded.metainfo`` is ``seeded.dataset.metainfo``).

    Only the global RNGs are seeded: a transform that owns a private ``torch.Generator`` or
    ``np.random.Generator`` is not affected.

    Args:
        dataset: The dataset to wrap: a map-style dataset with ``__len__``, or a config dict built
            with ``DATASETS``.
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = DATASETS.build(dataset) if isinstance(dataset, Mapping) else dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: int | SampleKey) -> Any:
        if isinstance(key, tuple):
            with _RngScope(key[1]):
                return self.dataset[key[0]]
        return self.dataset[key]

    def __getattr__(self, name: str) -> Any:
        # Called only when normal lookup fails; guard against recursion before __init__ ran
        # (for example while unpickling in a worker process).
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        return f"SeededDataset({self.dataset!r})"
