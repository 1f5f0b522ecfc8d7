"""Gradient accumulation across processes: what the micro-batches of one optimizer step do with
the gradients and the gathered parameters, as the execution record's ``accumulate(last)`` and
``flush_grads()`` (libai.model.execution), which the optimizer wrapper's accumulation window
calls (``optim_context``).

- DDP: ``no_sync`` on every micro-batch but the window's last (one all-reduce per step).
- FSDP2 (parameters not offloaded): on every micro-batch of a window the blocks stay gathered
  after their forward, the micro-batches before the last neither reduce-scatter their gradients
  (each process sums its own, unsharded) nor free the gathered parameters after the backward,
  and the last one reduce-scatters the sum and frees them. So one optimizer step of k
  micro-batches all-gathers each FSDP unit once (the first forward) and reduce-scatters it once
  (the last backward), instead of 2k and k times; the price is the memory of the unsharded
  parameters and gradients for the length of the window (what DDP holds all the time).
- FSDP2 with ``cpu_offload``: as without accumulation (gather and reduce each micro-batch): the
  point of offload is that the whole model does not fit on the device.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from .config import ParallelConfig

__all__ = ["FSDPWindow", "accumulation_fields"]


def accumulation_fields(model: nn.Module, pc: ParallelConfig) -> dict[str, Any]:
    """The execution record's ``accumulate`` and ``flush_grads`` for ``model`` as
    :func:`~libai.parallel.parallelize` wrapped it (nothing for one plain process)."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        return dict(accumulate=lambda last: contextlib.nullcontext() if last else model.no_sync())
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not units or pc.cpu_offload:
        return {}
    window = FSDPWindow(units, pc.reshard_after_forward)
    return dict(accumulate=window, flush_grads=window.flush_grads)


class FSDPWindow:
    """``window(last)``: the context of one micro-batch's forward inside an accumulation window
    (see the module's docstring); ``units``: the FSDP modules, the root first
    (``model.modules()``'s order)."""

    def __init__(self, units: list[Any], reshard_after_forward: bool) -> None:
        self.units, self.root = units, units[0]
        # what apply._fully_shard set: the blocks as configured, the root never when there are
        # blocks (the backward needs it first)
        self.after_forward = [reshard_after_forward if unit is not self.root or len(units) == 1
                              else False for unit in units]

    @contextlib.contextmanager
    def _micro_batch(self, last: bool) -> Any:
        for unit in self.units:
            unit.set_reshard_after_forward(False, recurse=False)
        self.root.set_requires_gradient_sync(last)
        self.root.set_reshard_after_backward(last)
        try:
            yield
        finally:  # the forward is over: what follows the window (evaluation) reshards as set
            for unit, value in zip(self.units, self.after_forward, strict=True):
                unit.set_reshard_after_forward(value, recurse=False)

    def __call__(self, last: bool) -> AbstractContextManager:
        return self._micro_batch(last)

    def flush_grads(self) -> None:
        """Inside a window (a checkpoint is saved): reduce the gradients each process has summed
        unsharded so far into the sharded parameters' ``.grad`` (what the last micro-batch's
        reduce-scatter adds to), and free the gathered parameters, so that the saved gradients
        and parameters are the sharded ones. A run that saves at the same iteration does the
        same sums: a resume is bit-identical to it."""
        for unit in self.units:
            for group in unit._get_fsdp_state()._fsdp_param_groups:
                for param in group.fsdp_params:
                    _flush_one(param, getattr(param, "mesh_info", group.mesh_info))
        for unit in self.units:
            unit.reshard()


def _flush_one(param: Any, mesh_info: Any) -> None:
    """One FSDPParam's unreduced gradient: averaged over the data-parallel processes (FSDP2's
    reduction), this process's shard added to the sharded gradient."""
    import torch.distributed as dist

    if param.unsharded_accumulated_grad is not None:
        grad = param.unsharded_accumulated_grad_data
        param.unsharded_accumulated_grad = None
    elif getattr(param, "_unsharded_param", None) is not None and \
            param._unsharded_param.grad is not None:
        grad = param._get_grad_inner_tensor(param._unsharded_param.grad)
        param._unsharded_param.grad = None
    else:
        return
    sharded = param.sharded_param
    grad = grad.to(sharded.dtype, copy=True)
    shards = size = mesh_info.shard_mesh_size
    dist.all_reduce(grad, group=mesh_info.shard_process_group)
    replicas = getattr(mesh_info, "replicate_process_group", None)
    if replicas is not None:  # HSDP: the replicas' sums too
        dist.all_reduce(grad, group=replicas)
        size *= mesh_info.replicate_mesh_size
    grad /= size
    chunks = torch.chunk(grad, shards, dim=param.fsdp_placement.dim)
    rank = mesh_info.shard_mesh_rank
    local = chunks[rank] if rank < len(chunks) else grad.new_zeros(param.sharded_size)
    local = local.reshape(param.sharded_size).contiguous()
    if sharded.grad is None:
        sharded.grad = param.to_sharded_dtensor(local)
    else:
        sharded.grad._local_tensor.add_(local)

