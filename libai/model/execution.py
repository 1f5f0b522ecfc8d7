"""The execution record: how this process runs the model, decided once where the model is
prepared (``libai.runner.distribute.prepare_model``) and read by whoever needs it.

torchtitan hands its trainer ``model_parts`` (a list of one without a pipeline) so that no code
asks what the model is. libai does the same with one small frozen record: the runner keeps it
(``runner.execution``) and passes it to the optimizer wrapper (``optim_wrapper.bind``), the train
step and, through :class:`~libai.hooks.hook.RunnerView`, to the hooks. Nothing else tests the
model's type or attributes to find out (tests/test_execution_record.py holds that).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["COMPILED_FLOPS", "PIPELINE_FLOPS", "Execution", "unwrap_model"]

# why FlopCounterMode cannot count a step (Execution.flops_uncountable): under dynamo it would
# run the first step eagerly (another step than the compiled one), and graph mode's parity check
# adds an eager reference pass, so a count would be wrong either way
COMPILED_FLOPS = "graph mode: FlopCounterMode cannot count the compiled step"
PIPELINE_FLOPS = ("a pipeline: FlopCounterMode's module hooks cannot run inside the schedule's "
                  "backward")


@dataclass(frozen=True)
class Execution:
    """How this process runs the model.

    Attributes:
        model: What the runner trains and evaluates: the model, its DDP / FSDP / compiled form,
            or the pipeline (whose ``train_step`` the schedule runs).
        unwrapped: The model as built (its parameters are the ones trained): weights, summary,
            optimizer parameter groups.
        parts: The modules this process runs: ``(model,)``, or each pipeline stage it holds.
        schedule: The pipeline that runs forward and backward of a step itself
            (``schedule.train_step(batch, optim_wrapper)``), or None.
        graph: The :class:`~libai.model.graph.GraphMode` of a compiled run (its parity check,
            fallback, compiled update and report), or None (eager).
        compiled: Some part runs through ``torch.compile`` (graph mode, or a pipeline's blocks).
        sharded: Parameters are split over processes (FSDP, tensor parallel, pipeline stages):
            checkpoints are saved and loaded by shard.
        combine_norm: ``combine(norm, norm_type)``: the gradient norm of the whole model from
            this process's part (a pipeline's stages), or None when this process's is the whole.
        norm_skip: Parameters the gradient norm skips (a copy held twice, counted once).
        elsewhere: Paths of the model's modules that other processes hold (pipeline stages).
        stages: ``(the stages this process holds, of how many)`` under a pipeline, else None.
        flops_uncountable: Why ``FlopCounterMode`` cannot count a training step, or None when
            it can.
        accumulate: ``accumulate(last)``: the context of a micro-batch's forward inside a
            gradient accumulation window, ``last`` when it ends the window (DDP's ``no_sync``
            before the last; FSDP2's gathered-once window: libai.parallel.accumulate), or None.
        flush_grads: Brings the gradients summed so far in a window into the parameters'
            ``.grad`` (before a checkpoint inside the window), or None when they are there.
    """

    model: nn.Module
    unwrapped: nn.Module
    parts: tuple[nn.Module, ...]
    schedule: Any = None
    graph: Any = None
    compiled: bool = False
    sharded: bool = False
    combine_norm: Callable[[torch.Tensor, float], torch.Tensor] | None = None
    norm_skip: tuple[nn.Parameter, ...] = ()
    elsewhere: tuple[str, ...] = ()
    stages: tuple[tuple[int, ...], int] | None = None
    flops_uncountable: str | None = None
    accumulate: Callable[[bool], AbstractContextManager] | None = None
    flush_grads: Callable[[], None] | None = None

    @classmethod
    def eager(cls, model: nn.Module) -> Execution:
        """The record of a model run as it is, in one process."""
        return cls(model=model, unwrapped=model, parts=(model,))


def unwrap_model(model: nn.Module) -> nn.Module:
    """Strip DistributedDataParallel (``.module``) and torch.compile (``._orig_mod``) wrappers:
    for a model met outside a run (a run has ``runner.execution.unwrapped``)."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        else:
            return model
