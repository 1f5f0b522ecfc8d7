"""The model across processes: DDP (the default under torchrun), or what the ``parallel`` and
``activation_checkpointing`` keys ask for (libai.parallel: FSDP2, tensor parallel, HSDP); then
compiled, when graph mode or ``compile`` asks for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from libai.parallel import ParallelConfig, build_mesh, build_on_rank0, parallelize
from libai.utils import dist

__all__ = ["build_model", "distribute_model", "wrap_model"]

_AMP_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
               "fp16": torch.float16}


def _param_dtype(cfg: Any) -> torch.dtype | None:
    """FSDP2's compute dtype from the AMP settings (``optim_wrapper.dtype``)."""
    wrapper = cfg.get("optim_wrapper")
    dtype = wrapper.get("dtype") if isinstance(wrapper, Mapping) else None
    if isinstance(dtype, torch.dtype):
        return dtype
    return _AMP_DTYPES.get(str(dtype)) if dtype is not None else None


def build_model(cfg: Any, pc: ParallelConfig, device: torch.device,
                same_seed: bool, model_cfg: Any = None) -> nn.Module:
    """Build ``cfg.model`` on ``device``; with ``parallel.rank0_init``, ranks > 0 build it on the
    meta device instead (:func:`~libai.parallel.build_on_rank0`), and :func:`distribute_model`
    fills it from rank 0. ``model_cfg`` replaces ``cfg.model`` (with derived values such as a
    classifier's ``num_classes``: libai.runner.data_check).

    Building on meta draws no random numbers. When every rank has the same seed (the default),
    ranks > 0 then take rank 0's RNG state, which is what building would have left them with,
    so the run draws the same numbers as without ``rank0_init``.
    """
    from libai.checkpoint import get_rng_state, set_rng_state

    from .build import build_model as build

    model = build_on_rank0(lambda: build(cfg.model if model_cfg is None else model_cfg), pc)
    if not pc.splits_from_rank0:
        return model.to(device)
    if same_seed:
        set_rng_state(dist.broadcast_object(get_rng_state()))
    return model  # rank 0's stays on the host: the whole model never reaches the device


def distribute_model(cfg: Any, model: nn.Module, pc: ParallelConfig, device: torch.device,
                     logger: Any) -> nn.Module:
    """Wrap ``model`` for the processes of this run, as ``pc`` (the checked ``parallel`` key)
    says, and log how.

    Args:
        cfg: The run's config (``activation_checkpointing``, ``model_wrapper_cfg``,
            ``optim_wrapper.dtype``).
        model: The built model (:func:`build_model`).
        pc: ``parse_parallel(cfg.parallel, world_size)``.
        device: This process's device.
        logger: The run's logger.

    Returns:
        The model to train.
    """
    checkpointing = cfg.get("activation_checkpointing")
    if pc.strategy == "single" and not checkpointing:
        return model
    if pc.pipeline > 1:
        from libai.parallel.pipeline import build_pipeline

        rank = dist.get_rank()
        model, lines = build_pipeline(model, pc, build_mesh(pc, device.type), device, rank,
                                      pc.data_parallel(rank), param_dtype=_param_dtype(cfg),
                                      activation_checkpointing=checkpointing)
        for line in lines:
            logger.info(line)
        return model
    sharded = pc.fsdp > 1 or pc.tensor > 1
    mesh = build_mesh(pc, device.type) if sharded else None
    model, lines = parallelize(model, pc, mesh, device, param_dtype=_param_dtype(cfg),
                               activation_checkpointing=checkpointing,
                               ddp_kwargs=cfg.get("model_wrapper_cfg"))
    for line in lines:
        logger.info(line)
    return model


def wrap_model(cfg: Any, model: nn.Module, pc: ParallelConfig, device: torch.device,
               logger: Any) -> nn.Module:
    """The model as trained: distributed (:func:`distribute_model`), then in graph mode a
    :class:`~libai.model.graph.GraphModule` (a sharded model compiled block by block, as torch
    advises), or compiled as ``cfg.compile`` says."""
    from libai.model import compile_model
    from libai.model.graph import GraphModule, graph_options
    from libai.parallel import find_blocks

    graph = graph_options(cfg)  # graph mode decides whether the config asks for it
    model = distribute_model(cfg, model, pc, device, logger)
    if pc.pipeline > 1:  # the schedule calls the stages: graph mode compiles their blocks
        options = graph["compile"] if graph is not None else cfg.get("compile")
        if options:
            from libai.parallel.pipeline import compile_blocks

            n = compile_blocks(model, {} if options is True else dict(options))
            logger.info(f"Graph mode: the {n} blocks of this process's stages compiled one by "
                        f"one (torch.compile); the schedule and the losses run eager")
        return model
    if graph is not None:
        blocks = find_blocks(model, pc.blocks) if dist.is_sharded(model) else None
        return GraphModule(model, **graph, blocks=blocks or None)
    return compile_model(model, cfg.get("compile") or False)
