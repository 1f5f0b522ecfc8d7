"""Which samples a limited evaluation (``limit_batches``) reads, and which classes they hold.

The first batches of a set are often one class: a file sorted by label (the genre set is sorted
by play, so by genre) gave an untrained classifier ``val/accuracy 1.0000`` on two batches of
comedy. A dataset that says the classes of its samples (``get_cat_ids(index)``, mmengine's
name: a list of class ids, as :class:`~libai.data.text.LabeledTextDataset` has) is sampled by
class instead: the first sample of every class, then each class in proportion to its share,
each class's samples taken evenly through the file. The choice is a pure function of the labels
(no seed), the same on every process and every run; the chosen samples are evaluated in file
order. A dataset without ``get_cat_ids`` keeps its first batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.utils.data import DataLoader, Subset

from libai.data.sampler import DefaultSampler

__all__ = ["class_coverage", "sample_by_class", "spread_loader"]


def _cat_ids(dataset: Any) -> list[list[int]] | None:
    get = getattr(dataset, "get_cat_ids", None)  # optional: a dataset may say its classes
    if get is None:
        return None
    cats = [list(get(i)) for i in range(len(dataset))]
    return cats if any(cats) else None


def sample_by_class(cat_ids: Sequence[Sequence[int]], count: int) -> list[int]:
    """``count`` indices of ``cat_ids`` (the classes of each sample), sorted: every class once
    first (while ``count`` allows), then each class in proportion to its share of the set.

    A sample's class is its first id (one with none forms a class of its own). Within a class
    the ``j``-th of ``n`` samples has the rank ``j / n``: taking ranks in order spreads each
    class's picks evenly through the file and keeps the shares of the set.
    """
    by_class: dict[int, list[int]] = {}
    for index, cats in enumerate(cat_ids):
        by_class.setdefault(cats[0] if cats else -1, []).append(index)
    ranked = sorted((j / len(members), cat, index) for cat, members in by_class.items()
                    for j, index in enumerate(members))
    return sorted(index for _, _, index in ranked[:count])


def spread_loader(loader: Any, count: int, data_parallel: Any) -> Any:
    """A loader over ``count`` samples of ``loader``'s dataset chosen by :func:`sample_by_class`,
    batched and split over the processes as ``loader``; None when the dataset does not say its
    classes, ``count`` covers it, or a batch sampler makes the batches (the loader's own first
    batches are then read)."""
    dataset = getattr(loader, "dataset", None)
    if (not isinstance(loader, DataLoader) or loader.batch_size is None  # a batch sampler's
            or dataset is None or count >= len(dataset)):
        return None
    cats = _cat_ids(dataset)
    if cats is None:
        return None
    subset = Subset(dataset, sample_by_class(cats, count))
    subset.metainfo = getattr(dataset, "metainfo", None)  # what the evaluator and hooks read
    sampler = DefaultSampler(subset, shuffle=False, seed=0, round_up=False,
                             rank=data_parallel.rank, world_size=data_parallel.size)
    return DataLoader(subset, batch_size=loader.batch_size, sampler=sampler,
                      num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                      pin_memory=loader.pin_memory)


def class_coverage(dataset: Any) -> tuple[list[str], list[str]] | None:
    """``(classes held, classes missing)`` of the samples of ``dataset`` (a Subset too), by the
    names of ``metainfo["classes"]``; None when the dataset does not say them."""
    names = (getattr(dataset, "metainfo", None) or {}).get("classes")
    base, indices = dataset, None
    if isinstance(dataset, Subset):
        base, indices = dataset.dataset, dataset.indices
    get = getattr(base, "get_cat_ids", None)
    if not names or get is None:
        return None
    held = {c for i in (indices if indices is not None else range(len(base))) for c in get(i)}
    return ([n for i, n in enumerate(names) if i in held],
            [n for i, n in enumerate(names) if i not in held])
