"""Every ``torch.optim`` optimizer, registered in OPTIMIZERS under its class name.

Importing this module (which ``import libai.optim`` does) is what registers them, so that
``optimizer=dict(type="AdamW", lr=1e-3)`` works in a config. A custom optimizer is added with
``@OPTIMIZERS.register_module()`` on its class.
"""

from __future__ import annotations

import torch

from libai.registry import OPTIMIZERS

__all__ = ["TORCH_OPTIMIZERS", "register_torch_optimizers"]


def register_torch_optimizers() -> list[str]:
    """Register every public subclass of ``torch.optim.Optimizer`` found in ``torch.optim``.

    Registering is idempotent: a name that already maps to the same class is left alone.

    Returns:
        The names registered, sorted.
    """
    names = []
    for name in dir(torch.optim):
        obj = getattr(torch.optim, name)
        if (
            not name.startswith("_")
            and isinstance(obj, type)
            and issubclass(obj, torch.optim.Optimizer)
            and obj is not torch.optim.Optimizer
        ):
            OPTIMIZERS.register_module(name=name, module=obj)
            names.append(name)
    return sorted(names)


TORCH_OPTIMIZERS: list[str] = register_torch_optimizers()
