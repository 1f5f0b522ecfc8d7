"""Importing a module by its dotted name from folders that may not be on ``sys.path``.

Two places import what a user names: the registry (``type="my_pkg.models.Net"``) and
``custom_imports`` (libai.runner.imports). Both look in folders the interpreter may not search
(the working directory under ``python tools/train.py``, the config's folder), put them on
``sys.path`` only while importing, and tell a module that does not exist from one whose own
imports fail. That logic lives here once.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType

__all__ = ["import_module", "module_missing", "not_on_sys_path", "on_sys_path"]


def not_on_sys_path(folders: Iterable[str]) -> list[str]:
    """The folders of ``folders`` that ``sys.path`` does not hold, each once (compared as
    absolute paths; ``""`` on ``sys.path`` is the working directory)."""
    present = {os.path.abspath(p or os.curdir) for p in sys.path if isinstance(p, str)}
    return [f for f in dict.fromkeys(folders) if os.path.abspath(f) not in present]


@contextmanager
def on_sys_path(folders: Iterable[str]) -> Iterator[None]:
    """Put ``folders`` first on ``sys.path`` (those not already on it), and take them off after."""
    added = not_on_sys_path(folders)
    sys.path[:0] = added
    try:
        yield
    finally:
        for folder in added:
            if folder in sys.path:
                sys.path.remove(folder)


def module_missing(name: str, error: BaseException) -> bool:
    """True when ``error`` says that module ``name`` itself (or a package above it) does not
    exist, False when the module exists but something it imports fails."""
    return (
        isinstance(error, ModuleNotFoundError)
        and error.name is not None
        and (name == error.name or name.startswith(error.name + "."))
    )


def import_module(name: str, folders: Iterable[str] = ()) -> ModuleType:
    """``importlib.import_module(name)`` with ``folders`` first on ``sys.path`` while it imports
    (modules written since the interpreter started are found too).

    Raises:
        ImportError: as ``importlib.import_module``.
    """
    with on_sys_path(folders):
        importlib.invalidate_caches()
        return importlib.import_module(name)
