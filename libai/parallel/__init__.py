"""Splitting the work beyond data parallel: FSDP2, tensor parallel, activation checkpointing.

See docs/parallel.md. The config says how (``parallel=dict(fsdp=..., tensor=...)``); the model
says where (``parallel_blocks``, ``tensor_parallel_plan``); the runner applies it.
"""

from .apply import (
    apply_activation_checkpointing,
    apply_tensor_parallel,
    build_mesh,
    find_blocks,
    in_loss_parallel,
    parallelize,
)
from .config import ParallelConfig, parse_parallel

__all__ = [
    "ParallelConfig",
    "parse_parallel",
    "build_mesh",
    "find_blocks",
    "apply_activation_checkpointing",
    "apply_tensor_parallel",
    "parallelize",
    "in_loss_parallel",
]
