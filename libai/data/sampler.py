"""The default sampler: a deterministic, rank-split, resumable order of dataset indices."""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import Sampler

from libai.registry import DATA_SAMPLERS
from libai.utils import dist
from libai.utils.errors import DataError

from .seeded import SampleKey, sample_seed

__all__ = ["DefaultSampler"]


@DATA_SAMPLERS.register_module()
class DefaultSampler(Sampler):
    """Yields this rank's share of a (shuffled) epoch order of dataset indices.

    What it guarantees:

    - **Deterministic.** The epoch order is ``torch.randperm(len(dataset))`` drawn from a private
      ``torch.Generator`` seeded with ``seed + epoch``; the global RNGs are never touched. The same
      (seed, epoch) gives the same order on every machine and every run. ``shuffle=False`` gives
      ``0, 1, 2, ...`` every epoch.
    - **Rank split.** With ``round_up=True`` the order is padded by repeating it from its start
      until its length is a multiple of ``world_size``; rank ``r`` then takes ``padded[r::world_size]``.
      Every rank gets ``ceil(len(dataset) / world_size)`` indices; the union over ranks is every
      index, the first few of the epoch order twice. With ``round_up=False`` nothing is added and
      the first ``len(dataset) % world_size`` ranks get one index more than the others (ranks
      that take different numbers of steps can hang a collective: use it for evaluation only).
    - **Resume.** :meth:`skip` starts the current epoch at its ``n``-th index of this rank; the
      skipped indices are never yielded, so their samples are never loaded.

    Use :meth:`set_epoch` before iterating each epoch. ``__len__`` is always the full per-rank
    epoch length, also while a :meth:`skip` is pending; a loader that was skipped yields fewer
    batches than ``len(loader)`` for that one epoch.

    Args:
        dataset: The dataset (only ``len(dataset)`` is used).
        shuffle: Shuffle the order each epoch. Defaults to True.
        seed: Seed of the shuffle. Defaults to None: rank 0 draws one (without touching the global
            RNGs) and broadcasts it, so that all ranks agree. It is kept in :meth:`state_dict`.
        round_up: Pad so that every rank gets the same number of indices. Defaults to True.
        rank: This process's share of the data (its data-parallel rank). Defaults to None: the
            process's rank (plain data parallel). The runner passes the data-parallel rank of its
            ``parallel`` layout: tensor-parallel peers share one.
        world_size: The number of shares (the data-parallel size). Defaults to None: the number
            of processes.
        seed_per_sample: Yield ``SampleKey(index, sample_seed(seed, epoch, index), epoch)``
            instead of indices, for :class:`~libai.data.SeededDataset` or a dataset that takes
            such keys itself (see ``libai/data/seeded.py``).
            Defaults to False.

    Example::

        sampler = DefaultSampler(dataset, seed=0)
        sampler.load_state_dict(ckpt["sampler"])  # epoch 3
        sampler.skip(iters_done_in_epoch * batch_size)
        for batch in DataLoader(dataset, batch_size, sampler=sampler):  # rest of epoch 3
            ...
    """

    def __init__(
        self,
        dataset: Sized,
        shuffle: bool = True,
        seed: int | None = None,
        round_up: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
        seed_per_sample: bool = False,
    ) -> None:
        self.dataset = dataset
        self.rank = dist.get_rank() if rank is None else int(rank)
        self.world_size = dist.get_world_size() if world_size is None else int(world_size)
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise DataError(
                f"DefaultSampler: rank must be in [0, world_size), got rank={self.rank}, "
                f"world_size={self.world_size}."
            )
        try:
            self.size = len(dataset)
        except TypeError as e:
            raise DataError(
                f"DefaultSampler needs a dataset with __len__, got {type(dataset).__name__}. "
                f"An iterable-style dataset must do its own sharding; use sampler=None for it."
            ) from e
        if self.size == 0:
            raise DataError(f"DefaultSampler: the dataset {type(dataset).__name__} is empty.")
        self.shuffle = bool(shuffle)
        self.round_up = bool(round_up)
        self.seed_per_sample = bool(seed_per_sample)
        if seed is None:
            # SystemRandom leaves the global RNGs alone, so building a sampler does not change
            # any other random stream of the run.
            seed = dist.broadcast_object(random.SystemRandom().randrange(2**31))
        self.seed = int(seed)
        self.epoch = 0
        self._skip = 0

    # ------------------------------------------------------------------------ order
    @property
    def total_size(self) -> int:
        """Length of the epoch order over all ranks, padding included."""
        if self.round_up:
            return math.ceil(self.size / self.world_size) * self.world_size
        return self.size

    def epoch_indices(self) -> list[int]:
        """The full order of the current epoch over all ranks, padding included."""
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=g).tolist()
        else:
            order = list(range(self.size))
        total = self.total_size
        if total > self.size:
            # Repeat from the start; more than once when world_size > len(dataset).
            order = (order * math.ceil(total / self.size))[:total]
        return order

    def rank_indices(self) -> list[int]:
        """This rank's indices of the current epoch, ignoring any pending :meth:`skip`."""
        return self.epoch_indices()[self.rank : self.total_size : self.world_size]

    def __iter__(self) -> Iterator[Any]:
        start, self._skip = self._skip, 0  # one-shot: the next iteration starts at 0
        indices = self.rank_indices()[start:]
        if self.seed_per_sample:
            seed, epoch = self.seed, self.epoch
            return (SampleKey(i, sample_seed(seed, epoch, i), epoch) for i in indices)
        return iter(indices)

    def __len__(self) -> int:
        return len(range(self.rank, self.total_size, self.world_size))

    # ----------------------------------------------------------------------- control
    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration yields.

        A pending :meth:`skip` survives ``set_epoch`` with the current epoch (a loop that calls
        ``set_epoch(runner.epoch)`` right after a resume keeps the skip) and is dropped when the
        epoch changes.

        Args:
            epoch: The epoch, from 0.
        """
        epoch = int(epoch)
        if epoch != self.epoch:
            self._skip = 0
        self.epoch = epoch

    def skip(self, n: int) -> None:
        """Start the next iteration of the current epoch at this rank's ``n``-th index.

        Counted in samples of this rank, not batches: after ``k`` iterations of batch size ``b``
        pass ``k * b``. The skipped indices are not yielded, so the dataset never loads them.
        Applies to one iteration only.

        Args:
            n: How many of this rank's indices to leave out, in ``[0, len(self)]``.

        Raises:
            DataError: ``n`` is negative or larger than the epoch.
        """
        n = int(n)
        if not 0 <= n <= len(self):
            raise DataError(
                f"DefaultSampler.skip({n}): this rank has {len(self)} indices per epoch; "
                f"n must be in [0, {len(self)}]. Pass samples (iterations * batch_size), "
                f"counted from the start of the current epoch."
            )
        self._skip = n

    # ------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """``{'epoch', 'seed', 'shuffle'}``: enough to reproduce the order on resume."""
        return {"epoch": self.epoch, "seed": self.seed, "shuffle": self.shuffle}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the epoch and the seed saved by :meth:`state_dict`.

        ``shuffle`` stays as configured; a different saved value only warns, because the
        configured one is what the user asked for now.

        Args:
            state: A dict from :meth:`state_dict`.

        Raises:
            DataError: a key is missing.
        """
        missing = [k for k in ("epoch", "seed") if k not in state]
        if missing:
            raise DataError(
                f"DefaultSampler.load_state_dict: missing key(s) {missing}; got keys "
                f"{sorted(state)}. Pass the dict saved by DefaultSampler.state_dict()."
            )
        if "shuffle" in state and bool(state["shuffle"]) != self.shuffle:
            warnings.warn(
                f"DefaultSampler: the checkpoint was saved with shuffle={state['shuffle']}, the "
                f"config says shuffle={self.shuffle}; using the config, so the resumed order "
                f"differs from the interrupted run.",
                stacklevel=2,
            )
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self._skip = 0

    def __repr__(self) -> str:
        return (
            f"DefaultSampler(size={self.size}, shuffle={self.shuffle}, seed={self.seed}, "
            f"epoch={self.epoch}, rank={self.rank}/{self.world_size}, round_up={self.round_up})"
        )
