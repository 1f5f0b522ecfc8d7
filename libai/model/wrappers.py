"""Wrapping a model for DDP and graph mode (torch.compile): a config switch, never a second model."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from libai.utils.errors import ConfigError

__all__ = ["wrap_ddp", "compile_model"]


def wrap_ddp(model: nn.Module, device: torch.device, **ddp_kwargs: Any) -> nn.Module:
    """Wrap ``model`` in DistributedDataParallel for the current process group.

    A model without trainable parameters is returned as is (DDP refuses it).
    """
    if not any(p.requires_grad for p in model.parameters()):
        return model
    if device.type == "cuda":
        ddp_kwargs.setdefault("device_ids", [device.index])
        ddp_kwargs.setdefault("output_device", device.index)
    try:
        return nn.parallel.DistributedDataParallel(model, **ddp_kwargs)
    except TypeError as e:
        raise ConfigError(f"model_wrapper_cfg has an argument DistributedDataParallel rejects: {e}") from e


def compile_model(model: nn.Module, cfg: bool | dict) -> nn.Module:
    """Graph mode: ``torch.compile`` the model's forward when ``cfg`` is True or a dict of options.

    The parameters are shared with ``model``: checkpoints and optimizers see the same tensors.
    """
    if not cfg:
        return model
    options = {} if cfg is True else dict(cfg)
    try:
        return torch.compile(model, **options)
    except TypeError as e:
        raise ConfigError(f"compile={cfg!r}: torch.compile rejected an option: {e}") from e
