"""Checkpoints: the :class:`Checkpointer` that saves and restores a run from named stateful parts,
and under it the files: atomic saves with manifests, safe loads, the work dir, weight-load reports.

Nothing here knows the runner or a hook: the runner hands the checkpointer its parts and a
``call_hook`` function. See ``docs/checkpoint.md`` for the on-disk layout and the guarantees.
"""

from .async_saver import AsyncCheckpointSaver
from .checkpointer import Checkpointer
from .io import CHECKPOINT_SUFFIXES, load_checkpoint, save_checkpoint
from .manifest import is_complete, manifest_path, read_manifest, verify_checkpoint
from .model_state import (
    RemapRules,
    load_model_state,
    model_state_for_saving,
    strip_prefixes,
)
from .report import LoadReport, group_keys
from .rng import get_rng_state, set_rng_state
from .state import check_state, copy_state_to_host
from .weights import checkpoint_weights
from .workdir import (
    DAMAGED_SUFFIX,
    LATEST_NAME,
    damaged_checkpoints,
    find_resumable,
    list_checkpoints,
    move_aside,
    read_latest,
    remove_checkpoint,
    update_latest,
)

__all__ = [
    "AsyncCheckpointSaver",
    "Checkpointer",
    "CHECKPOINT_SUFFIXES",
    "DAMAGED_SUFFIX",
    "LATEST_NAME",
    "LoadReport",
    "RemapRules",
    "check_state",
    "checkpoint_weights",
    "copy_state_to_host",
    "damaged_checkpoints",
    "find_resumable",
    "get_rng_state",
    "group_keys",
    "is_complete",
    "list_checkpoints",
    "load_checkpoint",
    "load_model_state",
    "manifest_path",
    "model_state_for_saving",
    "move_aside",
    "read_latest",
    "read_manifest",
    "remove_checkpoint",
    "save_checkpoint",
    "set_rng_state",
    "strip_prefixes",
    "update_latest",
    "verify_checkpoint",
]
