"""One pipeline stage (:class:`StageModule`): what ``torch.distributed.pipelining`` runs of this
process's part of the model. :mod:`libai.parallel.pipeline` cuts the model and builds the stages;
:mod:`libai.parallel.pipeline_module` drives them."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["StageModule"]


class StageModule(nn.Module):
    """One pipeline stage, as ``torch.distributed.pipelining.PipelineStage`` runs it:
    ``forward(h, **microbatch)`` (the first stage: ``forward(**microbatch)``) runs the model's
    first part (first stage), its blocks, and the last part (last stage), which returns the
    microbatch's weighted loss in training; what it computed is kept in :attr:`records`.

    Args:
        model: The pruned model (it holds the parameters of this process's stages).
        index: The stage's position, 0 ... ``num_stages`` - 1.
        num_stages: Stages in the pipeline.
        blocks: The blocks this stage runs, in order.
    """

    def __init__(self, model: nn.Module, index: int, num_stages: int,
                 blocks: list[nn.Module]) -> None:
        super().__init__()
        self.model = model
        self.index, self.num_stages = index, num_stages
        self.is_first, self.is_last = index == 0, index == num_stages - 1
        self.blocks = blocks  # a plain list: the modules are registered under self.model
        self.records: list[Any] = []  # last stage: per microbatch, what the logs or outputs need
        self.weigh: Any = None  # last stage in training: outputs, microbatch -> (loss, logs)
        self.probing = False  # the next call is the schedule's shape probe (see forward)

    def forward(self, *args: torch.Tensor, **batch: Any) -> torch.Tensor:
        if self.probing:  # the schedule's first call runs a microbatch to learn the shapes it
            self.probing = False  # sends: it must draw no random numbers (dropout) and leave no
            with torch.random.fork_rng(devices=_rng_devices(batch)):  # record
                return self._run(args, batch, record=False)
        return self._run(args, batch, record=True)

    def _run(self, args: tuple, batch: dict, record: bool) -> torch.Tensor:
        model = self.model
        h = model.pipeline_first(batch) if self.is_first else args[0]  # (b, S, H)
        kwargs = model.pipeline_block_kwargs(h, batch)
        for block in self.blocks:
            h = block(h, **kwargs)
        if not self.is_last:
            return h
        outputs = model.pipeline_last(h, batch)
        if self.weigh is None:  # evaluation: the outputs, merged after the schedule
            if record:
                self.records.append(outputs)
            return h.new_zeros(())
        loss, logs = self.weigh(outputs, batch)
        if record:
            self.records.append(logs)
        return loss


def _rng_devices(batch: dict) -> list[int]:
    tensor = next((v for v in batch.values() if isinstance(v, torch.Tensor)), None)
    return [tensor.device.index or 0] if tensor is not None and tensor.is_cuda else []
