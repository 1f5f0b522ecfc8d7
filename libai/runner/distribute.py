"""The model across processes: DDP (the default under torchrun), or what the ``parallel`` and
``activation_checkpointing`` keys ask for (libai.parallel: FSDP2, tensor parallel, HSDP)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from libai.parallel import ParallelConfig, build_mesh, parallelize, parse_parallel
from libai.utils import dist

__all__ = ["distribute_model"]

_AMP_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
               "fp16": torch.float16}


def _param_dtype(cfg: Any) -> torch.dtype | None:
    """FSDP2's compute dtype from the AMP settings (``optim_wrapper.dtype``)."""
    wrapper = cfg.get("optim_wrapper")
    dtype = wrapper.get("dtype") if isinstance(wrapper, Mapping) else None
    if isinstance(dtype, torch.dtype):
        return dtype
    return _AMP_DTYPES.get(str(dtype)) if dtype is not None else None


def distribute_model(cfg: Any, model: nn.Module, device: torch.device,
                     logger: Any) -> tuple[nn.Module, ParallelConfig]:
    """Wrap ``model`` for the processes of this run and log how.

    Args:
        cfg: The run's config (``parallel``, ``activation_checkpointing``, ``model_wrapper_cfg``,
            ``optim_wrapper.dtype``).
        model: The built model, on ``device``.
        device: This process's device.
        logger: The run's logger.

    Returns:
        The model to train and the checked ``parallel`` sizes.
    """
    pc = parse_parallel(cfg.get("parallel"), dist.get_world_size())
    dist.set_data_parallel(None)
    checkpointing = cfg.get("activation_checkpointing")
    if pc.strategy == "single" and not checkpointing:
        return model, pc
    sharded = pc.fsdp > 1 or pc.tensor > 1
    # ranks are laid out (data, fsdp, tensor), tensor innermost: neighbours share a batch
    dist.set_data_parallel(dist.get_rank() // pc.tensor if pc.tensor > 1 else None,
                           pc.data_parallel_size)
    mesh = build_mesh(pc, device.type) if sharded else None
    model, lines = parallelize(model, pc, mesh, device, param_dtype=_param_dtype(cfg),
                               activation_checkpointing=checkpointing,
                               ddp_kwargs=cfg.get("model_wrapper_cfg"))
    for line in lines:
        logger.info(line)
    return model, pc
