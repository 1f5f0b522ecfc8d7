"""Optuna studies for tools/sweep.py and OptunaPruningHook: the storage and the pruner.

Imports neither torch nor Optuna at import time (the sweep process does not need torch; a
trial process imports Optuna only when its hook starts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["build_pruner", "open_storage"]


def open_storage(url: str) -> Any:
    """An Optuna RDBStorage for ``url``; SQLite waits up to a minute for a lock, since the
    sweep and its trial processes write to the same file."""
    import optuna

    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)


def build_pruner(cfg: Mapping[str, Any] | None) -> Any:
    """An ``optuna.pruners`` instance from ``dict(type='MedianPruner', ...)``; None: NopPruner."""
    import optuna

    if cfg is None:
        return optuna.pruners.NopPruner()
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"pruner must be a dict such as dict(type='MedianPruner', "
                          f"n_warmup_steps=1), got {cfg!r}.")
    args = dict(cfg)
    name = args.pop("type", None)
    names = [n for n in dir(optuna.pruners) if n.endswith("Pruner") and n != "BasePruner"]
    cls = getattr(optuna.pruners, str(name), None) if name in names else None
    if cls is None:
        raise ConfigError(f"pruner type {name!r} is not a class of optuna.pruners."
                          f"{did_you_mean(str(name), names)} Pruners: {', '.join(names)}.")
    try:
        return cls(**args)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"pruner {name}: {e}") from None
