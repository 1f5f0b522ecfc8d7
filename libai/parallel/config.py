"""The ``parallel`` config key: how the processes split the work, checked against the world size.

    parallel = dict(data=None, fsdp=1, tensor=1, pipeline=1,
                    reshard_after_forward=True, cpu_offload=False, blocks=None, rank0_init=False)

- ``data``: replicas that each see their own share of the batch. None (the default) means
  "whatever is left": world size / (fsdp x tensor). With ``fsdp=1`` the replicas are
  DistributedDataParallel, as without the key.
- ``fsdp``: processes that shard parameters, gradients and optimizer state between them
  (FSDP2, ``torch.distributed.fsdp.fully_shard``); they also split the batch. With ``data > 1``
  too, the model is sharded within each group of ``fsdp`` processes and replicated across groups
  (HSDP).
- ``tensor``: processes that split each layer's matrices (DTensor tensor parallel, the plan the
  model declares); they see the same batch.
- ``pipeline``: only 1 (pipeline parallel is not supported yet).
- ``reshard_after_forward``, ``cpu_offload``: FSDP2 options (free the gathered parameters after
  each block's forward; keep parameters and optimizer state on the CPU).
- ``blocks``: class names of the modules FSDP shards one by one (and activation checkpointing
  wraps with the "blocks" policy). None: the model's ``parallel_blocks`` declaration.
- ``rank0_init``: only rank 0 builds the whole model; the other processes build it on the meta
  device (no memory) and receive their part from rank 0 once it is split (HF accelerate's
  ``cpu_ram_efficient_loading``). Host memory then holds one whole model, not one per process.

The product ``data x fsdp x tensor`` must equal the number of processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from libai.utils.dist import DataParallel
from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["ParallelConfig", "parse_parallel"]

_SIZES = ("data", "fsdp", "tensor", "pipeline")
_OPTIONS = {"reshard_after_forward": bool, "cpu_offload": bool, "rank0_init": bool}
CPU_OFFLOAD_WITHOUT_FSDP = ("parallel.cpu_offload=True is an FSDP option: set parallel.fsdp too "
                            "(FSDP shards over several processes: torchrun --nproc_per_node N), "
                            "or leave cpu_offload out.")


@dataclass(frozen=True)
class ParallelConfig:
    """Validated sizes and options; ``data * fsdp * tensor == world_size``."""

    world_size: int
    data: int
    fsdp: int = 1
    tensor: int = 1
    reshard_after_forward: bool = True
    cpu_offload: bool = False
    blocks: tuple[str, ...] | None = None
    rank0_init: bool = False

    @property
    def data_parallel_size(self) -> int:
        """Processes that see different data: ``data x fsdp`` (tensor-parallel peers share it)."""
        return self.data * self.fsdp

    def data_parallel(self, rank: int) -> DataParallel:
        """The share of the data process ``rank`` reads. Ranks are laid out (data, fsdp, tensor),
        tensor innermost (:func:`~libai.parallel.build_mesh`): the ``tensor`` neighbouring ranks
        of a tensor-parallel group read the same share."""
        return DataParallel(rank=rank // self.tensor, size=self.data_parallel_size,
                            replica=rank % self.tensor, replicas=self.tensor)

    @property
    def splits_from_rank0(self) -> bool:
        """``rank0_init`` applies: several processes, of which only rank 0 builds the model."""
        return self.rank0_init and self.world_size > 1

    @property
    def strategy(self) -> str:
        """A short name for the log: "single", "ddp", "fsdp", "hsdp", "tp", "fsdp+tp", ..."""
        parts = []
        if self.fsdp > 1:
            parts.append("hsdp" if self.data > 1 else "fsdp")
        elif self.data > 1:
            parts.append("ddp")
        if self.tensor > 1:
            parts.append("tp")
        return "+".join(parts) or "single"

    def describe(self) -> str:
        sizes = ", ".join(f"{k}={getattr(self, k)}" for k in ("data", "fsdp", "tensor"))
        return f"Parallel: {self.strategy} over {self.world_size} process(es) ({sizes})"


def _size(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"parallel.{key}={value!r}: expected a whole number >= 1.")
    return value


def parse_parallel(value: Mapping | None, world_size: int) -> ParallelConfig:
    """Check the ``parallel`` config value against ``world_size`` and fill in ``data``.

    Args:
        value: The config's ``parallel`` dict, or None (data parallel over every process).
        world_size: Processes in the run.

    Raises:
        ConfigError: an unknown key, a size that is not a whole number >= 1, ``pipeline > 1``,
            sizes whose product is not the world size, or ``cpu_offload`` without ``fsdp``.
    """
    if value is None:
        return ParallelConfig(world_size=world_size, data=world_size)
    if not isinstance(value, Mapping):
        raise ConfigError(f"parallel must be a dict such as dict(fsdp={world_size}), "
                          f"got {type(value).__name__} {value!r}.")
    known = (*_SIZES, *_OPTIONS, "blocks")
    for key in value:
        if key not in known:
            raise ConfigError(f"parallel has an unknown key {key!r}.{did_you_mean(key, known)} "
                              f"Known keys: {', '.join(known)}.")
    if _size("pipeline", value.get("pipeline", 1)) > 1:
        raise ConfigError("parallel.pipeline > 1: pipeline parallel is not supported yet; use "
                          "fsdp (sharded parameters) or tensor (split layers) instead.")
    fsdp, tensor = _size("fsdp", value.get("fsdp", 1)), _size("tensor", value.get("tensor", 1))
    data = value.get("data")
    if data is None:
        if world_size % (fsdp * tensor):
            raise ConfigError(
                f"parallel: fsdp={fsdp} x tensor={tensor} = {fsdp * tensor} does not divide the "
                f"{world_size} process(es) of this run: choose sizes whose product divides the "
                f"world size (torchrun --nproc_per_node x --nnodes).")
        data = world_size // (fsdp * tensor)
    data = _size("data", data)
    if data * fsdp * tensor != world_size:
        raise ConfigError(
            f"parallel: data={data} x fsdp={fsdp} x tensor={tensor} = {data * fsdp * tensor}, but "
            f"this run has {world_size} process(es): the product must equal the world size "
            f"(torchrun --nproc_per_node x --nnodes), or leave data=None to fill it in.")
    options = {}
    for key, kind in _OPTIONS.items():
        if key in value:
            if not isinstance(value[key], kind):
                raise ConfigError(f"parallel.{key}={value[key]!r}: expected True or False.")
            options[key] = value[key]
    if options.get("cpu_offload") and fsdp == 1:  # checked here: one process never parallelizes
        raise ConfigError(CPU_OFFLOAD_WITHOUT_FSDP)
    blocks = value.get("blocks")
    if blocks is not None:
        if isinstance(blocks, str):
            blocks = [blocks]
        if not all(isinstance(b, str) for b in blocks):
            raise ConfigError(f"parallel.blocks={blocks!r}: expected a list of class names.")
        blocks = tuple(blocks)
    return ParallelConfig(world_size=world_size, data=data, fsdp=fsdp, tensor=tensor,
                          blocks=blocks, **options)
