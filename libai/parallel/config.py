"""The ``parallel`` config key: how the processes split the work, checked against the world size.

    parallel = dict(data=None, fsdp=None, tensor=1, pipeline=1,
                    reshard_after_forward=True, cpu_offload=False, one_process_fsdp=False,
                    blocks=None, rank0_init=False,
                    pipeline_schedule="1f1b", microbatches=None, pipeline_stage_ids=None,
                    virtual_stages=None)

- ``data``: replicas that each see their own share of the batch. None (the default) means
  "whatever is left": world size / (fsdp x tensor). With ``fsdp=1`` the replicas are
  DistributedDataParallel, as without the key.
- ``fsdp``: processes that shard parameters, gradients and optimizer state between them
  (FSDP2, ``torch.distributed.fsdp.fully_shard``); they also split the batch. With ``data > 1``
  too, the model is sharded within each group of ``fsdp`` processes and replicated across groups
  (HSDP). None (the default): 1.
- ``tensor``: processes that split each layer's matrices (DTensor tensor parallel, the plan the
  model declares); they see the same batch.
- ``pipeline``: processes that each hold some of the model's blocks, in order (pipeline
  stages, :mod:`libai.parallel.pipeline`); a batch goes through them in ``microbatches`` pieces
  as ``pipeline_schedule`` orders them ("gpipe", "1f1b", "interleaved_1f1b", "looped_bfs"; the
  last two hold ``virtual_stages`` stages per process, 2 by default). ``microbatches`` None: the
  largest divisor of the batch up to 4 x the stages. ``pipeline_stage_ids``: the stage of each
  block, as LiBai's ``custom_pipeline_stage_id`` (None: balanced).
- ``reshard_after_forward``, ``cpu_offload``: FSDP2 options (free the gathered parameters after
  each block's forward; keep parameters and optimizer state on the CPU).
- ``one_process_fsdp``: FSDP2 over a mesh of this one process (one process only). Written
  ``fsdp=1, cpu_offload=True`` in one process, it is implied: one GPU trains a model larger
  than its memory, parameters and optimizer state on the host.
- ``blocks``: class names of the modules FSDP shards one by one (and activation checkpointing
  wraps with the "blocks" policy). None: the model's ``parallel_blocks`` declaration.
- ``rank0_init``: only rank 0 builds the whole model; the other processes build it on the meta
  device (no memory) and receive their part from rank 0 once it is split (HF accelerate's
  ``cpu_ram_efficient_loading``). Host memory then holds one whole model, not one per process.

The product ``pipeline x data x fsdp x tensor`` must equal the number of processes. Ranks are
laid out in that order, tensor innermost: tensor-parallel peers are neighbours (one node), and a
pipeline's stages are ``data x fsdp x tensor`` ranks apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from libai.utils.dist import DataParallel
from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["MULTI_STAGE_SCHEDULES", "SCHEDULES", "ParallelConfig", "parse_parallel"]

_SIZES = ("data", "fsdp", "tensor", "pipeline")
_OPTIONS = {"reshard_after_forward": bool, "cpu_offload": bool, "rank0_init": bool,
            "one_process_fsdp": bool}
_PIPELINE_KEYS = ("pipeline_schedule", "microbatches", "pipeline_stage_ids", "virtual_stages")
# the schedules of torch.distributed.pipelining; the interleaved ones hold several stages per rank
SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
             "interleaved_1f1b": "ScheduleInterleaved1F1B", "looped_bfs": "ScheduleLoopedBFS"}
MULTI_STAGE_SCHEDULES = ("interleaved_1f1b", "looped_bfs")
CPU_OFFLOAD_WITHOUT_FSDP = ("parallel.cpu_offload=True is an FSDP option: set parallel.fsdp too "
                            "(FSDP shards over several processes: torchrun --nproc_per_node N; "
                            "fsdp=1 in one process shards over a one-process mesh), or leave "
                            "cpu_offload out.")


@dataclass(frozen=True)
class ParallelConfig:
    """Validated sizes and options; ``pipeline * data * fsdp * tensor == world_size``."""

    world_size: int
    data: int
    fsdp: int = 1
    tensor: int = 1
    reshard_after_forward: bool = True
    cpu_offload: bool = False
    blocks: tuple[str, ...] | None = None
    rank0_init: bool = False
    one_process_fsdp: bool = False
    pipeline: int = 1
    pipeline_schedule: str = "1f1b"
    microbatches: int | None = None
    pipeline_stage_ids: tuple[int, ...] | None = None
    virtual_stages: int = 1

    @property
    def num_stages(self) -> int:
        """Pipeline stages in all: ``pipeline x virtual_stages``."""
        return self.pipeline * self.virtual_stages

    def pipeline_rank(self, rank: int) -> int:
        """The position of process ``rank`` along the pipeline (0: the first stage)."""
        return rank // (self.data * self.fsdp * self.tensor)

    @property
    def data_parallel_size(self) -> int:
        """Processes that see different data: ``data x fsdp`` (tensor-parallel peers share it)."""
        return self.data * self.fsdp

    def data_parallel(self, rank: int) -> DataParallel:
        """The share of the data process ``rank`` reads. Ranks are laid out (pipeline, data,
        fsdp, tensor), tensor innermost (:func:`~libai.parallel.build_mesh`): the ``tensor``
        neighbouring ranks of a tensor-parallel group read the same share, and so do the
        stages of a pipeline (every stage sees the batch; the last one's outputs are shared)."""
        inner = rank % (self.data * self.fsdp * self.tensor)
        return DataParallel(rank=inner // self.tensor, size=self.data_parallel_size,
                            replica=inner % self.tensor + self.tensor * self.pipeline_rank(rank),
                            replicas=self.tensor * self.pipeline)

    @property
    def splits_from_rank0(self) -> bool:
        """``rank0_init`` applies: several processes, of which only rank 0 builds the model."""
        return self.rank0_init and self.world_size > 1

    @property
    def sharded_by_fsdp(self) -> bool:
        """FSDP2 shards the model: over ``fsdp`` processes, or over a mesh of one process."""
        return self.fsdp > 1 or self.one_process_fsdp

    @property
    def strategy(self) -> str:
        """A short name for the log: "single", "ddp", "fsdp", "hsdp", "tp", "fsdp+tp", ..."""
        parts = []
        if self.sharded_by_fsdp:
            parts.append("hsdp" if self.data > 1 else "fsdp")
        elif self.data > 1:
            parts.append("ddp")
        if self.tensor > 1:
            parts.append("tp")
        if self.pipeline > 1:
            parts.append("pp")
        return "+".join(parts) or "single"

    def describe(self) -> str:
        sizes = ", ".join(f"{k}={getattr(self, k)}" for k in ("pipeline", "data", "fsdp", "tensor"))
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
        ConfigError: an unknown key, a size that is not a whole number >= 1, sizes whose
            product is not the world size, ``cpu_offload`` without ``fsdp``, an unknown pipeline
            schedule or a pipeline option without ``pipeline > 1``.
    """
    if value is None:
        return ParallelConfig(world_size=world_size, data=world_size)
    if not isinstance(value, Mapping):
        raise ConfigError(f"parallel must be a dict such as dict(fsdp={world_size}), "
                          f"got {type(value).__name__} {value!r}.")
    known = (*_SIZES, *_OPTIONS, "blocks", *_PIPELINE_KEYS)
    for key in value:
        if key not in known:
            raise ConfigError(f"parallel has an unknown key {key!r}.{did_you_mean(key, known)} "
                              f"Known keys: {', '.join(known)}.")
    pipeline = _size("pipeline", value.get("pipeline", 1))
    fsdp_given = value.get("fsdp") is not None  # None: the default, 1
    fsdp = _size("fsdp", value["fsdp"]) if fsdp_given else 1
    tensor = _size("tensor", value.get("tensor", 1))
    data = value.get("data")
    if data is None:
        if world_size % (pipeline * fsdp * tensor):
            raise ConfigError(
                f"parallel: pipeline={pipeline} x fsdp={fsdp} x tensor={tensor} = "
                f"{pipeline * fsdp * tensor} does not divide the {world_size} process(es) of this "
                f"run: choose sizes whose product divides the world size (torchrun "
                f"--nproc_per_node x --nnodes).")
        data = world_size // (pipeline * fsdp * tensor)
    data = _size("data", data)
    if pipeline * data * fsdp * tensor != world_size:
        raise ConfigError(
            f"parallel: pipeline={pipeline} x data={data} x fsdp={fsdp} x tensor={tensor} = "
            f"{pipeline * data * fsdp * tensor}, but this run has {world_size} process(es): the "
            f"product must equal the world size (torchrun --nproc_per_node x --nnodes), or leave "
            f"data=None to fill it in.")
    options = {}
    for key, kind in _OPTIONS.items():
        if key in value:
            if not isinstance(value[key], kind):
                raise ConfigError(f"parallel.{key}={value[key]!r}: expected True or False.")
            options[key] = value[key]
    if world_size == 1 and fsdp_given and options.get("cpu_offload"):
        options["one_process_fsdp"] = True  # fsdp=1, cpu_offload=True: one GPU, the host's memory
    if options.get("one_process_fsdp") and world_size > 1:
        raise ConfigError(f"parallel.one_process_fsdp=True shards over a mesh of one process, "
                          f"and this run has {world_size}: use parallel.fsdp={world_size} "
                          f"instead (or fsdp with data, tensor or pipeline).")
    if options.get("cpu_offload") and fsdp == 1 and not options.get("one_process_fsdp"):
        raise ConfigError(CPU_OFFLOAD_WITHOUT_FSDP)  # checked here: every run calls parse_parallel
    blocks = value.get("blocks")
    if blocks is not None:
        if isinstance(blocks, str):
            blocks = [blocks]
        if not all(isinstance(b, str) for b in blocks):
            raise ConfigError(f"parallel.blocks={blocks!r}: expected a list of class names.")
        blocks = tuple(blocks)
    return ParallelConfig(world_size=world_size, data=data, fsdp=fsdp, tensor=tensor,
                          blocks=blocks, pipeline=pipeline, **_pipeline_options(value, pipeline),
                          **options)


def _pipeline_options(value: Mapping, pipeline: int) -> dict[str, Any]:
    """The checked pipeline keys (``pipeline_schedule``, ``microbatches``,
    ``pipeline_stage_ids``, ``virtual_stages``); each needs ``pipeline > 1``."""
    given = [k for k in _PIPELINE_KEYS if value.get(k) is not None]
    if pipeline == 1:
        if given:
            raise ConfigError(f"parallel.{given[0]} is a pipeline option, and parallel.pipeline "
                              f"is 1: set parallel.pipeline=N (N stages, one process each), or "
                              f"leave {given[0]} out.")
        return {}
    schedule = value.get("pipeline_schedule") or "1f1b"
    if schedule not in SCHEDULES:
        raise ConfigError(f"parallel.pipeline_schedule={schedule!r} is unknown."
                          f"{did_you_mean(str(schedule), SCHEDULES)} Schedules: "
                          f"{', '.join(SCHEDULES)}.")
    multi = schedule in MULTI_STAGE_SCHEDULES
    virtual = value.get("virtual_stages")
    virtual = 2 if virtual is None and multi else _size("virtual_stages", virtual or 1)
    if multi and virtual < 2:
        raise ConfigError(f"parallel.pipeline_schedule={schedule!r} interleaves several stages "
                          f"per process: set parallel.virtual_stages to 2 or more (or leave it "
                          f"out: 2).")
    if not multi and virtual > 1:
        raise ConfigError(f"parallel.virtual_stages={virtual} needs an interleaved schedule: "
                          f"parallel.pipeline_schedule='interleaved_1f1b' or 'looped_bfs' "
                          f"('{schedule}' runs one stage per process).")
    microbatches = value.get("microbatches")
    if microbatches is not None:
        microbatches = _size("microbatches", microbatches)
    ids = value.get("pipeline_stage_ids")
    if ids is not None:
        if isinstance(ids, (str, bytes)) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ConfigError(f"parallel.pipeline_stage_ids={ids!r}: expected a list with the "
                              f"stage of each block, e.g. [0, 0, 1, 1].")
        ids = tuple(ids)
    return dict(pipeline_schedule=schedule, microbatches=microbatches, pipeline_stage_ids=ids,
                virtual_stages=virtual)
