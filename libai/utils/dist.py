"""Thin helpers over ``torch.distributed`` that are no-ops in a single process.

A run is distributed when it was launched by ``torchrun`` (``WORLD_SIZE`` > 1 in the environment)
and :func:`init_dist` was called, or when the caller set up the process group itself.
"""

from __future__ import annotations

import datetime
import gc
import importlib
import os
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "launched_by_torchrun",
    "init_dist",
    "is_distributed",
    "get_rank",
    "get_world_size",
    "get_local_rank",
    "is_main_process",
    "set_data_parallel",
    "get_data_parallel_rank",
    "get_data_parallel_world_size",
    "barrier",
    "all_reduce_mean",
    "all_gather_object",
    "broadcast_object",
    "destroy_dist",
]


def launched_by_torchrun() -> bool:
    """True when the environment variables of ``torchrun`` ask for more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def init_dist(backend: str | None = None, timeout_s: int = 1800) -> None:
    """Initialise the default process group from torchrun's environment variables.

    Args:
        backend: "gloo" or "nccl". Defaults to nccl when CUDA is available, gloo otherwise.
        timeout_s: Collective timeout. Defaults to 1800 seconds.
    """
    if is_distributed():
        return
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(get_local_rank())
    # torch.distributed.nn.functional takes ``group.WORLD`` as a default argument. Imported
    # after init (DDP imports it), it would hold the default group for good, so the group's
    # worker threads would outlive destroy_dist and could abort the interpreter's exit
    # ("terminate called without an active exception"). Imported now, the default is None.
    importlib.import_module("torch.distributed.nn.functional")

    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))


def destroy_dist() -> None:
    """Leave the process group; ranks first wait for each other, so none tears down the
    communication while another still uses it.

    Call it once the runner is released: a DistributedDataParallel model holds the group, and
    the group's worker threads are joined only when its last holder is gone. Threads left for
    the interpreter's exit can abort it while they release a finished collective.
    """
    if is_distributed():
        gc.collect()  # a released runner sits in reference cycles, and holds the group
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def get_local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


# Tensor-parallel peers see the same batch: the samplers and the metrics count "data-parallel"
# ranks, which are the world's ranks unless libai.parallel says otherwise (set_data_parallel).
_data_parallel: tuple[int, int] | None = None


def set_data_parallel(rank: int | None, world_size: int | None = None) -> None:
    """Set this process's data-parallel rank and size (None: back to the world's)."""
    global _data_parallel
    _data_parallel = None if rank is None else (int(rank), int(world_size))


def get_data_parallel_rank() -> int:
    """The index of this process's share of the batch (its rank without tensor parallel)."""
    return get_rank() if _data_parallel is None else _data_parallel[0]


def get_data_parallel_world_size() -> int:
    """How many shares the batch is split into (the world size without tensor parallel)."""
    return get_world_size() if _data_parallel is None else _data_parallel[1]


def is_main_process() -> bool:
    return get_rank() == 0


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def _comm_device() -> torch.device:
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_mean(values: dict[str, float]) -> dict[str, float]:
    """Average a dict of floats over all ranks (one collective for the whole dict)."""
    if not is_distributed() or not values:
        return dict(values)
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t)
    t /= get_world_size()
    return dict(zip(keys, t.tolist()))


def all_reduce_min(value: float) -> float:
    """The smallest of each rank's ``value`` (one collective)."""
    if not is_distributed():
        return value
    t = torch.tensor([float(value)], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return t.item()


def all_gather_object(obj: Any) -> list[Any]:
    """Gather a picklable object from every rank; returns a list indexed by rank."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Send ``obj`` from rank ``src`` to every rank and return it."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]
