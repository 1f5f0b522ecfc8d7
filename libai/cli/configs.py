"""Config arguments of the commands: a file, or a shipped config by name from anywhere, with the
command line's ``--cfg-options`` applied (:func:`load_config`).

>>> resolve_config("configs/digits_mlp.py")   # a file that exists: as given
>>> resolve_config("bert_tiny")               # no such file here: <package configs>/bert_tiny.py
>>> resolve_config("libai::bert_tiny.py")     # the loader reads libai:: itself
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from libai.config import Config, add_cfg_options_argument
from libai.config.loader import PACKAGE_PREFIX, SUFFIXES, package_config_root
from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = [
    "add_config_arguments",
    "load_config",
    "load_run_config",
    "resolve_config",
    "shipped_configs",
]


def load_config(ref: str, options: Mapping[str, Any] | None = None) -> Config:
    """The config ``ref`` names (:func:`resolve_config`) with ``options`` (``--cfg-options``)
    applied. A default hook the run uses is a key one may set or switch off without ``+``
    (``default_hooks.throughput=None``), whether or not the config file lists it."""
    from libai.hooks import default_hook_options

    cfg = Config.fromfile(resolve_config(ref))
    cfg.merge_from_options(default_hook_options(cfg, options))
    return cfg


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """The last options of a command that reads a config: ``--debug`` and ``--cfg-options``."""
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    add_cfg_options_argument(parser)


def load_run_config(args: argparse.Namespace) -> Config:
    """The config of ``args.config`` with ``--cfg-options`` applied, and ``--work-dir`` as its
    ``work_dir`` where the command has that option and it is given."""
    cfg = load_config(args.config, args.cfg_options)
    if getattr(args, "work_dir", None):
        cfg.work_dir = args.work_dir
    return cfg


def shipped_configs() -> list[str]:
    """The names of the shipped configs, relative to the package config folder
    (``bert_tiny.py``, ``sweeps/digits_lr.py``); ``_base_`` parts are left out."""
    root = package_config_root()
    return sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*")
        if p.suffix in SUFFIXES and p.is_file() and "_base_" not in p.relative_to(root).parts
        and p.name != "__init__.py"
    )


def resolve_config(ref: str) -> str:
    """The config file that ``ref`` names.

    A file that exists (relative to the working directory) wins, then a shipped config of that
    name (``bert_tiny``, ``bert_tiny.py``, ``configs/bert_tiny.py`` or ``sweeps/digits_lr``).
    ``libai::...`` is returned as it is (the loader reads it).

    Raises:
        ConfigError: ``ref`` is a bare name (no folder, not ``.``-relative) that is neither a file
            here nor a shipped config; the message suggests the closest shipped configs. A path
            with a folder is returned as given, so the loader's own error explains it.
    """
    if ref.startswith(PACKAGE_PREFIX) or os.path.exists(os.path.expanduser(ref)):
        return ref
    shipped = _shipped_path(ref)
    if shipped is not None:
        return str(shipped)
    names = shipped_configs()
    stems = [n.rsplit(".", 1)[0] for n in names]
    stem = ref.rsplit(".", 1)[0] if Path(ref).suffix in SUFFIXES else ref
    shipped_folders = {s.split("/", 1)[0] for s in stems if "/" in s}
    if os.sep in ref or "/" in ref or os.path.isabs(ref):
        if ref.replace(os.sep, "/").split("/", 1)[0] not in shipped_folders:
            return ref  # a path: the loader's message names the folder and close file names
        stem = stem.replace(os.sep, "/")  # sweeps/digits_rl: a shipped folder, a misspelled name
    hint = did_you_mean(stem, stems) or f" Shipped configs: {', '.join(stems)}."
    raise ConfigError(
        f"config '{ref}' not found: no such file in {os.getcwd()} and no shipped config of that "
        f"name.{hint}")


def _shipped_path(ref: str) -> Path | None:
    rel = ref.replace(os.sep, "/")
    if rel.startswith("./") or os.path.isabs(ref):
        return None
    if rel.startswith("configs/"):
        rel = rel[len("configs/"):]
    root = package_config_root()
    tries = [rel] if Path(rel).suffix in SUFFIXES else [rel + s for s in SUFFIXES]
    for name in tries:
        path = root / name
        if path.is_file():
            return path
    return None
