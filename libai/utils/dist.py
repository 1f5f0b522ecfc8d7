"""Thin helpers over ``torch.distributed`` that are no-ops in a single process.

A run is distributed when it was launched by ``torchrun`` (``WORLD_SIZE`` > 1 in the environment)
and :func:`init_dist` was called, or when the caller set up the process group itself.
"""

from __future__ import annotations

import datetime
import gc
import importlib
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
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
    "DataParallel",
    "is_sharded",
    "barrier",
    "all_reduce_mean",
    "all_reduce_sum",
    "all_reduce_max",
    "all_gather_object",
    "broadcast_object",
    "collective_failure",
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

    global _timeout_s
    _timeout_s = timeout_s
    timeout = datetime.timedelta(seconds=timeout_s)
    store = _elastic_store(timeout)
    if store is None:
        dist.init_process_group(backend=backend, timeout=timeout)
    else:
        dist.init_process_group(backend=backend, timeout=timeout, store=store,
                                rank=int(os.environ["RANK"]), world_size=get_world_size_env())


def get_world_size_env() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


_timeout_s = 1800
# What gloo and NCCL say when a collective times out or a peer is gone (plain RuntimeErrors).
_COMM_FAILURES = ("Timed out waiting", "Connection closed by peer", "Connection reset by peer",
                  "Application timeout caused pair closure", "NCCL error",
                  "Watchdog caught collective operation timeout")


def collective_failure(error: BaseException) -> str | None:
    """One line for a collective that timed out or lost a peer, naming this rank; None when
    ``error`` is something else (or the run is not distributed)."""
    text = str(error)
    if not is_distributed() or not any(s in text for s in _COMM_FAILURES):
        return None
    detail = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    detail = detail.split("] ", 1)[-1] if detail.startswith("[") else detail  # drop the C++ path
    return (f"rank {get_rank()} of {get_world_size()}: a collective operation failed ({detail}). "
            f"Another rank probably died or hangs; its own log says why. Collectives wait at "
            f"most env_cfg.dist_timeout={_timeout_s} s. Under torchrun --max-restarts the group "
            f"restarts and --resume continues from the last complete checkpoint.")


def _elastic_store(timeout: datetime.timedelta) -> Any:
    """Under ``torchrun --max-restarts``, the launcher's key-value store, seen through a prefix
    that this launch of the workers shares and no earlier one used; None outside torchrun's
    shared store.

    torchrun keeps one store for all launches; without a prefix, a restarted group can read the
    addresses that the killed workers published ("Gloo connectFullMesh failed ... Connection
    refused"). ``TORCHELASTIC_RESTART_COUNT`` cannot name the launch: each node's agent counts
    its own restarts, and one that restarts its workers because another node rejoined does not
    count it, so two nodes may start the same group with different counts and wait for each
    other forever in init (:func:`_agree_on_launch`).
    """
    if (os.environ.get("TORCHELASTIC_RESTART_COUNT") is None
            or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"):
        return None
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=timeout)
    launch = _agree_on_launch(store, int(os.environ["RANK"]), get_world_size_env(), timeout)
    return dist.PrefixStore(f"libai/launch_{launch}", store)


def _agree_on_launch(store: Any, rank: int, world_size: int,
                     timeout: datetime.timedelta) -> str:
    """A name for this launch of the workers that every one of them reads from ``store``.

    Rank 0 names the launch (host, pid, a random part) under ``libai/launch``; every other rank
    answers under that name with a name of its own, and rank 0 lists the answers once all are
    in. A rank that read a name left by an earlier launch (its rank 0 is gone) does not find
    itself in that list, so it reads the name again until this launch's rank 0 has written it.
    The workers of one launch start only after the agents stopped the earlier launch's workers,
    so none of those can answer any more.
    """
    me = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if rank == 0:
        store.set("libai/launch", me)
        answers = [f"libai/launch/{me}/rank_{r}" for r in range(1, world_size)]
        if answers:
            store.wait(answers, timeout)
        store.set(f"libai/launch/{me}/ranks",
                  json.dumps([me, *(a.decode() for a in store.multi_get(answers))]))
        return me
    deadline = time.monotonic() + timeout.total_seconds()
    answered = None
    while True:
        launch = store.get("libai/launch").decode()
        if launch != answered:
            store.set(f"libai/launch/{launch}/rank_{rank}", me)
            answered = launch
        ranks = f"libai/launch/{launch}/ranks"
        if store.check([ranks]) and me in json.loads(store.get(ranks)):
            return launch
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"rank {rank} of {world_size}: rank 0 of this launch did not answer within "
                f"{timeout.total_seconds():.0f} s (env_cfg.dist_timeout): it died or hangs, and "
                "its own log says why.")
        time.sleep(0.05)


def destroy_dist(status: int = 0) -> None:
    """Leave the process group; after a success (``status`` 0, or a stop by signal, 128 + N:
    every rank stopped together) ranks first wait for each other, so none tears down the
    communication while another still uses it. After an error they do not: a peer may be
    waiting for this rank in a collective, and torchrun stops it once this one exits.

    Call it once the runner is released: a DistributedDataParallel model holds the group, and
    the group's worker threads are joined only when its last holder is gone. Threads left for
    the interpreter's exit can abort it while they release a finished collective.
    """
    if is_distributed():
        gc.collect()  # a released runner sits in reference cycles, and holds the group
        try:
            if status == 0 or status > 128:
                dist.barrier()
        except RuntimeError as e:  # a peer is gone: the run's own error has said so already
            if collective_failure(e) is None:
                raise
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


def is_sharded(module: torch.nn.Module) -> bool:
    """True when some parameter of ``module`` is a DTensor (FSDP2 or tensor parallel). A run
    knows more: ``runner.execution.sharded`` counts a pipeline process's stages too."""
    if not dist.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


@dataclass(frozen=True)
class DataParallel:
    """Which share of the data this process trains and evaluates on.

    The processes of a run split the data into ``size`` shares; this process reads share
    ``rank``. Processes that split one model (tensor parallel) read the same share:
    ``replicas`` processes per share, this one being number ``replica`` among them, and only
    replica 0's evaluation results are counted. The runner builds it from the ``parallel`` key
    (:meth:`libai.parallel.ParallelConfig.data_parallel`) and passes it to whoever needs it
    (samplers, metrics, the train step, throughput): nothing reads it from a global.

    Args:
        rank: This process's share, in ``[0, size)``. Defaults to 0.
        size: The number of shares. Defaults to 1.
        replica: This process's index among those reading the same share. Defaults to 0.
        replicas: The processes reading each share. Defaults to 1.
    """

    rank: int = 0
    size: int = 1
    replica: int = 0
    replicas: int = 1

    @classmethod
    def world(cls) -> DataParallel:
        """Plain data parallel: every process reads a share of its own (DDP's layout)."""
        return cls(rank=get_rank(), size=get_world_size())

    def __str__(self) -> str:
        extra = f", {self.replicas} processes per share" if self.replicas > 1 else ""
        return f"data-parallel rank {self.rank} of {self.size}{extra}"


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


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over all ranks, in place, and return it (unchanged in one process)."""
    if is_distributed():
        dist.all_reduce(tensor)
    return tensor


def all_reduce_max(value: int) -> int:
    """The largest of each rank's ``value`` (one collective)."""
    if not is_distributed():
        return value
    t = torch.tensor([int(value)], dtype=torch.int64, device=_comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


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
