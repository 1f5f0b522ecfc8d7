"""``build_dataloader``: a ``torch.utils.data.DataLoader`` from a config dict.

The config keys, with their defaults::

    train_dataloader = dict(
        dataset=dict(type="DigitsDataset", split="train"),  # or a Dataset instance; required
        sampler=dict(type="DefaultSampler", shuffle=True),  # default; built with dataset and seed
        batch_size=32,                                      # required
        num_workers=0,
        collate_fn="default_collate",                       # a name, a dict with type, a callable
        pin_memory=False,
        persistent_workers=False,                           # needs num_workers > 0
        drop_last=False,
        prefetch_factor=None,                               # torch's default (2) when workers > 0
    )

Any other key is a ``ConfigError``. See docs/data.md.
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from libai.registry import COLLATE_FUNCTIONS, DATA_SAMPLERS, DATASETS
from libai.utils import dist
from libai.utils.errors import ConfigError, DataError
from libai.utils.suggest import refuse_unknown

from .seeded import SeededDataset

__all__ = ["build_dataloader", "dataloader_len", "seed_worker", "worker_seed"]

_KEYS = (
    "dataset",
    "sampler",
    "batch_size",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "persistent_workers",
    "drop_last",
    "prefetch_factor",
)


def worker_seed(seed: int, rank: int, worker_id: int) -> int:
    """The seed of data loader worker ``worker_id`` on ``rank``, for a run seeded with ``seed``.

    Mixed with :class:`numpy.random.SeedSequence`, so that no two (seed, rank, worker) triples
    share a stream (``seed + rank * num_workers + worker_id`` would let seed 1 replay seed 0's
    rank-1 workers).

    Args:
        seed: The run's seed.
        rank: The process rank.
        worker_id: The worker index, from 0.

    Returns:
        An int in ``[0, 2**32)``.
    """
    return int(np.random.SeedSequence([seed % 2**63, rank, worker_id]).generate_state(1)[0])


def seed_worker(worker_id: int, seed: int, rank: int) -> None:
    """``worker_init_fn``: seed python ``random``, numpy and torch in a worker process.

    The seed does not depend on the epoch: a worker's random stream restarts identically each
    time the workers start (each epoch unless ``persistent_workers``). Samples still get different
    augmentations across epochs because the sampler sends them to different workers, in a
    different order. Exact mid-epoch resume of random augmentation with ``num_workers > 0`` needs
    per-sample seeding (``DefaultSampler(seed_per_sample=True)``), see ``libai/data/seeded.py``.

    Args:
        worker_id: Given by the DataLoader.
        seed: The run's seed.
        rank: The process rank.
    """
    s = worker_seed(seed, rank, worker_id)
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)


def _accepts(obj: Any, name: str) -> bool:
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _check_keys(cfg: Mapping, path: str) -> None:
    refuse_unknown(cfg, _KEYS, lambda key: f"Unknown key '{path}.{key}' in a data loader config")
    if "dataset" not in cfg:
        raise ConfigError(f"'{path}.dataset' is required: a dataset config dict or a Dataset.")
    if "batch_size" not in cfg:
        raise ConfigError(f"'{path}.batch_size' is required (samples per rank per iteration).")
    for key, low in (("batch_size", 1), ("num_workers", 0)):
        value = cfg.get(key, low)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"'{path}.{key}' must be an int >= {low}, got {value!r}.")
    if cfg.get("num_workers", 0) == 0:
        for key in ("persistent_workers", "prefetch_factor"):
            if cfg.get(key) not in (None, False):
                raise ConfigError(
                    f"'{path}.{key}' = {cfg[key]!r} needs worker processes, but "
                    f"'{path}.num_workers' is 0. Set num_workers > 0 or remove {key}."
                )


def _check_collate(dataset: Any, spec: Any, path: str) -> None:
    """A dataset whose items differ in length names the collate function that pads them
    (``metainfo["collate_fn"]``); the default one, which stacks, cannot batch them."""
    meta = getattr(dataset, "metainfo", None)
    wanted = meta.get("collate_fn") if isinstance(meta, Mapping) else None
    if wanted and spec in (None, "default_collate"):
        raise ConfigError(f"'{path}.collate_fn' = {spec!r} stacks items of equal length, but "
                          f"{type(dataset).__name__}'s items differ in length: write "
                          f"collate_fn={wanted!r}, which pads each batch to its longest item.")


def _build_collate(spec: Any, path: str) -> Callable[[list[Any]], Any]:
    if spec is None:
        return COLLATE_FUNCTIONS.get("default_collate")
    if isinstance(spec, str):
        return COLLATE_FUNCTIONS.get(spec, path=f"{path}.collate_fn")
    if isinstance(spec, Mapping):
        kwargs = dict(spec)
        if "type" not in kwargs:
            raise ConfigError(f"'{path}.collate_fn' needs a 'type' key naming the function.")
        fn = COLLATE_FUNCTIONS.get(kwargs.pop("type"), path=f"{path}.collate_fn")
        return functools.partial(fn, **kwargs) if kwargs else fn
    if callable(spec):
        return spec
    raise ConfigError(
        f"'{path}.collate_fn' must be a registered name, a dict with 'type' or a callable, "
        f"got {type(spec).__name__} {spec!r}."
    )


def _build_sampler(
    spec: Any, dataset: Any, seed: int | None, rank: int, world_size: int, path: str,
    pad: bool = True, batch_size: int | None = None,
) -> Any:
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        return spec  # a Sampler instance, used as given
    cfg = {"type": "DefaultSampler", **spec}
    cls = DATA_SAMPLERS.get(cfg["type"], path=f"{path}.sampler")
    candidates = {"dataset": dataset, "seed": seed, "rank": rank, "world_size": world_size,
                  "batch_size": batch_size}
    if not pad:
        candidates["round_up"] = False
    defaults = {k: v for k, v in candidates.items() if _accepts(cls, k)}
    return DATA_SAMPLERS.build(cfg, default_args=defaults, path=f"{path}.sampler")


def build_dataloader(
    cfg: Mapping[str, Any],
    seed: int | None = None,
    world_size: int = 1,
    rank: int = 0,
    diff_rank_seed: bool = False,
    path: str = "dataloader",
    pad: bool = True,
) -> DataLoader:
    """Build a DataLoader, its dataset, sampler and collate function from ``cfg``.

    The sampler is built with ``dataset``, ``seed``, ``rank``, ``world_size`` and ``batch_size`` as default
    arguments (each one only if its class accepts it). When ``seed`` is given, workers are seeded
    with :func:`seed_worker` and the loader gets a private ``torch.Generator``, so iterating it never
    draws from the global torch RNG. Without a seed, torch's own worker seeding applies (it does
    not seed numpy).

    If the sampler has ``seed_per_sample=True``, the dataset is wrapped in
    :class:`~libai.data.SeededDataset`, unless it already is one or takes the sampler's
    :class:`~libai.data.SampleKey` itself (``dataset.takes_sample_keys``).

    Args:
        cfg: The data loader config; keys listed in this module's docstring.
        seed: The run's seed. Defaults to None (unseeded workers, sampler draws its own seed).
        world_size: Number of ranks the sampler splits over. Defaults to 1.
        rank: This process's rank. Defaults to 0.
        diff_rank_seed: ``seed`` already differs by rank (the runner offset it so that
            augmentation differs across ranks). Workers use it as given; the sampler takes rank
            0's value through a broadcast, because all ranks must agree on the epoch order.
            Defaults to False.
        path: The config key of ``cfg``, for error messages. Defaults to "dataloader".
        pad: Let the sampler pad the ranks' shares to one size (``round_up``, when it takes
            that argument and the config does not set it). Training wants equal shares; an
            evaluation passes False, so that no sample is seen twice (the ranks' shares then
            differ by one sample at most). Defaults to True.

    Returns:
        The DataLoader; ``loader.sampler`` is the built sampler and ``loader.dataset`` the dataset.

    Raises:
        ConfigError: an unknown, missing or invalid key.
        BuildError, RegistryError: the dataset, sampler or collate function cannot be built.
    """
    if isinstance(cfg, DataLoader):
        return cfg
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"'{path}' must be a dict, got {type(cfg).__name__}.")
    _check_keys(cfg, path)
    dataset = cfg["dataset"]
    if isinstance(dataset, Mapping):
        dataset = DATASETS.build(dataset, path=f"{path}.dataset")
    _check_collate(dataset, cfg.get("collate_fn"), path)
    sampler_seed = dist.broadcast_object(seed) if diff_rank_seed else seed
    sampler = _build_sampler(cfg.get("sampler"), dataset, sampler_seed, rank, world_size, path, pad,
                             cfg["batch_size"])
    if (
        getattr(sampler, "seed_per_sample", False)
        and not isinstance(dataset, SeededDataset)
        and not getattr(dataset, "takes_sample_keys", False)
    ):
        dataset = SeededDataset(dataset)

    num_workers = cfg.get("num_workers", 0)
    kwargs: dict[str, Any] = {}
    if seed is not None:
        # The DataLoader draws each iterator's base seed from this generator; without one it
        # would draw from the global torch RNG, so iterating a loader would shift model randomness.
        kwargs["generator"] = torch.Generator().manual_seed(worker_seed(seed, rank, 2**31))
        if num_workers > 0:
            kwargs["worker_init_fn"] = functools.partial(seed_worker, seed=seed, rank=rank)
    if cfg.get("prefetch_factor") is not None:
        kwargs["prefetch_factor"] = cfg["prefetch_factor"]
    return DataLoader(
        dataset,
        batch_size=cfg["batch_size"],
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=_build_collate(cfg.get("collate_fn"), path),
        pin_memory=bool(cfg.get("pin_memory", False)),
        drop_last=bool(cfg.get("drop_last", False)),
        persistent_workers=bool(cfg.get("persistent_workers", False)),
        **kwargs,
    )


def dataloader_len(loader: Any) -> int:
    """Batches per epoch of ``loader`` (``len(loader)``), as a clear error when it has none.

    Args:
        loader: A DataLoader or any iterable of batches.

    Raises:
        DataError: the loader has no length (an iterable-style dataset without ``__len__``).
    """
    try:
        return len(loader)
    except TypeError as e:
        raise DataError(
            f"The data loader over {type(getattr(loader, 'dataset', loader)).__name__} has no "
            f"length, so epochs cannot be counted. Give the dataset a __len__, or train by "
            f"iterations (IterBasedTrainLoop)."
        ) from e
