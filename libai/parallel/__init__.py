"""Splitting the work beyond data parallel: FSDP2, tensor parallel, activation checkpointing.

See docs/parallel.md. The config says how (``parallel=dict(fsdp=..., tensor=...)``); the model
says where (``parallel_blocks``, ``tp_plan``); the runner applies it.
"""

from .apply import (
    apply_activation_checkpointing,
    apply_tensor_parallel,
    build_mesh,
    build_on_rank0,
    find_blocks,
    in_loss_parallel,
    parallelize,
)
from .config import ParallelConfig, parse_parallel

__all__ = [
    "ParallelConfig",
    "parse_parallel",
    "build_mesh",
    "build_on_rank0",
    "find_blocks",
    "apply_activation_checkpointing",
    "apply_tensor_parallel",
    "parallelize",
    "in_loss_parallel",
]
