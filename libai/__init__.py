"""libai: a config-driven training engine for PyTorch.

Importing ``libai`` is cheap: subpackages (and torch) load when first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from .version import __version__

__all__ = ["__version__", "Config", "Runner"]

_LAZY = {"Config": "libai.config", "Runner": "libai.runner"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'libai' has no attribute '{name}'")
