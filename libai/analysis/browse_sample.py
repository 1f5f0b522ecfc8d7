"""Sampling a split as training reads it: the data loader built from the config as the runner
builds it, and the first items its sampler yields (see :mod:`libai.analysis.browse`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from libai.config import Config
from libai.runner.batch_fit import loader_cfg, resolve
from libai.runner.build import build_loader
from libai.runner.env import seed_everything
from libai.runner.imports import import_custom_modules
from libai.utils.dist import DataParallel
from libai.utils.errors import ConfigError, DataError
from libai.utils.suggest import did_you_mean

__all__ = [
    "SPLITS",
    "key_index",
    "load_config",
    "loader_section",
    "metainfo",
    "sample_items",
    "sample_split",
]

SPLITS = ("train", "val", "test")


def load_config(path: str, cfg_options: Mapping[str, Any] | None = None) -> Config:
    """The config with its ``--cfg-options`` merged and its ``custom_imports`` imported."""
    cfg = Config.fromfile(path)
    import_custom_modules(cfg.get("custom_imports"), cfg.filename)  # the Runner does it too
    cfg.merge_from_options(dict(cfg_options or {}))
    return cfg


def loader_section(cfg: Any, split: str, set_name: str | None = None) -> tuple[Any, str]:
    """The data loader config of ``split`` (one set of several: ``set_name``, else the first)
    and its config key."""
    if split not in SPLITS:
        raise ConfigError(f"Unknown split '{split}': choose from {', '.join(SPLITS)}.")
    key = f"{split}_dataloader"
    section = cfg.get(key)
    if section is None:
        present = [s for s in SPLITS if cfg.get(f"{s}_dataloader") is not None]
        raise ConfigError(
            f"The config has no {key}; splits it has: {', '.join(present) or 'none'}.")
    several = (isinstance(section, Mapping) and "dataset" not in section and len(section) > 0
               and all(isinstance(v, Mapping) and "dataset" in v for v in section.values()))
    if not several:
        if set_name is not None:
            raise ConfigError(f"--set {set_name}: {key} is a single data loader, not named sets.")
        return section, key
    names = list(section)
    name = names[0] if set_name is None else set_name
    if name not in section:
        raise ConfigError(f"--set {set_name}: {key} has the sets {', '.join(names)}."
                          f"{did_you_mean(str(set_name), names)}")
    return section[name], f"{key}.{name}"


def sample_items(loader: Any, n: int) -> list[tuple[Any, Any]]:
    """The first ``n`` sampler keys of epoch 0 and the dataset's items for them."""
    sampler = getattr(loader, "sampler", None)
    if sampler is None:
        raise DataError("The data loader has no sampler to draw keys from.")
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(0)
    keys = list(itertools.islice(iter(sampler), n))
    if not keys:
        raise DataError(f"The sampler of {type(loader.dataset).__name__} yields no sample.")
    return [(key, loader.dataset[key]) for key in keys]


def key_index(key: Any) -> int:
    """The dataset index of a sampler key (an int or a SampleKey)."""
    return int(key[0]) if isinstance(key, tuple) else int(key)


def metainfo(dataset: Any) -> dict:
    meta = getattr(dataset, "metainfo", None)  # a SeededDataset passes it through
    return dict(meta) if isinstance(meta, Mapping) else {}



def sample_split(cfg: Any, split: str = "train", n: int = 16, set_name: str | None = None,
                 seed: int | None = None) -> tuple[Any, list[tuple[Any, Any]], str]:
    """Build ``split``'s data loader as the runner does and sample ``n`` items of it.

    Args:
        cfg: The config (see :func:`load_config`).
        split: "train", "val" or "test". Defaults to "train".
        n: Items to sample (fewer when the split is smaller). Defaults to 16.
        set_name: Which of several named sets of the split. Defaults to None: the first.
        seed: Seed of the sampler and the global RNGs. Defaults to None: the config's
            ``randomness.seed``, else 0.

    Returns:
        ``(dataset, [(sampler key, item), ...], config key of the loader)``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"-n must be a positive int, got {n!r}.")
    section, key = loader_section(cfg, split, set_name)
    if seed is None:
        seed = (cfg.get("randomness") or {}).get("seed")
        seed = 0 if seed is None else int(seed)
    seed_everything(dict(seed=seed))  # the global RNGs that random transforms draw from
    if isinstance(section, Mapping) and section.get("batch_size") == "auto":  # micro_batch=...
        section = loader_cfg(section, resolve(cfg, "cpu", 1))  # its CPU micro-batch
    loader = build_loader(section, key, seed, DataParallel(), diff_rank_seed=False)
    return loader.dataset, sample_items(loader, n), key
