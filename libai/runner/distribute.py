"""Preparing the model: built (:func:`build_model`), across processes (:func:`distribute_model`:
DDP, the default under torchrun, or what the ``parallel`` and ``activation_checkpointing`` keys
ask for: FSDP2, tensor parallel, HSDP, pipeline stages), then compiled when the compile switch
asks for it (:func:`compile_step`). :func:`prepare_model` returns the
:class:`~libai.model.execution.Execution` record that says what it did."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from libai.model.blocks import find_blocks
from libai.model.execution import COMPILED_FLOPS, Execution
from libai.parallel import ParallelConfig, build_mesh, build_on_rank0, parallelize
from libai.parallel.accumulate import accumulation_fields
from libai.utils import dist

__all__ = ["build_model", "compile_step", "distribute_model", "prepare_model"]

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
    sharded = pc.sharded_by_fsdp or pc.tensor > 1
    mesh = build_mesh(pc, device.type) if sharded else None
    model, lines = parallelize(model, pc, mesh, device, param_dtype=_param_dtype(cfg),
                               activation_checkpointing=checkpointing,
                               ddp_kwargs=cfg.get("model_wrapper_cfg"))
    for line in lines:
        logger.info(line)
    return model


def prepare_model(cfg: Any, model: nn.Module, pc: ParallelConfig, device: torch.device,
                  logger: Any) -> Execution:
    """The model as this process runs it, and the record that says how: distributed
    (:func:`distribute_model`: activation checkpointing, then tensor parallel, FSDP or DDP, or
    this process's pipeline stages), then compiled when the compile switch is on
    (:func:`compile_step`). The one place that knows what the model became: everything else
    reads the returned :class:`~libai.model.execution.Execution`."""
    from libai.model.graph import compile_regions, graph_options

    switch = graph_options(cfg)  # graph mode: compile=... or a GraphOptimWrapper config
    regions = switch is not None and compile_regions(cfg)
    forward = distribute_model(cfg, model, pc, device, logger)
    if pc.pipeline > 1:
        from libai.parallel.pipeline import execution_fields

        fields = execution_fields(forward)
        blocks = [block for stage in fields["parts"] for block in stage.blocks]
    else:
        fields = dict(parts=(forward,), sharded=dist.is_sharded(model),
                      **accumulation_fields(forward, pc))
        blocks = find_blocks(model, pc.blocks) if fields["sharded"] or regions else []
    graph = None
    if switch is not None:
        forward, graph = compile_step(forward, model, switch, blocks, fields.get("schedule"),
                                       logger)
        fields.update(compiled=True, flops_uncountable=COMPILED_FLOPS)
        if fields.get("schedule") is None:
            fields["parts"] = (forward,)
    return Execution(model=forward, unwrapped=model, graph=graph, **fields)


def compile_step(forward: nn.Module, model: nn.Module, switch: dict, blocks: list[nn.Module],
                  schedule: Any, logger: Any) -> tuple[nn.Module, Any]:
    """Graph mode, as one step of preparing the model, after activation checkpointing (which
    the compiled blocks then include) and after FSDP / tensor parallel / DDP have wrapped it
    (their hooks run on the block modules' calls, outside the compiled forwards: eager).

    ``blocks`` (a transformer's under ``compile.regions``, the default; a sharded model's; the
    blocks of this process's pipeline stages) are compiled, not the model: regional
    compilation, one graph per block class reused by every block of the class, the rest of the
    model and the loss eager. A model without blocks compiles whole. Returns what to run (a
    :class:`~libai.model.graph.GraphModule`, or the pipeline whose schedule calls the compiled
    blocks) and its :class:`~libai.model.graph.GraphMode`.
    """
    from libai.model.graph import GraphMode, GraphModule

    if schedule is None:
        forward = GraphModule(forward, compile=switch["compile"], on_failure=switch["on_failure"],
                              blocks=blocks or None, unwrapped=model)
        if blocks:
            classes = sorted({type(block).__name__ for block in blocks})
            logger.info(f"Graph mode: the model's {len(blocks)} blocks ({', '.join(classes)}) "
                        f"compiled, once per class (regional compilation); the rest of the "
                        f"model and its loss run eager. compile=dict(regions=False) compiles "
                        f"an unsharded model whole.")
        return forward, forward.graph_mode
    graph = GraphMode(switch["compile"], switch["on_failure"])
    graph.compile_model(forward, blocks, model)
    logger.info(f"Graph mode: the {len(blocks)} blocks of this process's stages compiled one by "
                f"one (torch.compile); the schedule and the losses run eager")
    return forward, graph
