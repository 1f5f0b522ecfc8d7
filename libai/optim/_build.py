"""Registry building for libai.optim, letting a constructor's ConfigError through unwrapped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from libai.registry import Registry
from libai.utils.errors import BuildError, ConfigError

__all__ = ["build_unwrapped"]


def build_unwrapped(registry: Registry, cfg: Any, default_args: Mapping | None, path: str) -> Any:
    """``registry.build``, but a ConfigError raised by the constructor reaches the caller as is.

    The registry wraps constructor errors in BuildError; a ConfigError already names the key
    and the fix, so the wrapping would only add noise.
    """
    try:
        return registry.build(cfg, default_args=default_args, path=path)
    except BuildError as e:
        if isinstance(e.__cause__, ConfigError):
            raise e.__cause__ from None
        raise
